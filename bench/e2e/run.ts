/**
 * `npm run bench`: the end-to-end bench. Compares three loopback paths in one run:
 *
 *  - direct:   load → echo backend
 *  - l4-relay: load → tunnel → waypoint (TCP port: HBONE in, bytes relayed, HBONE out) → inbound → backend
 *  - waypoint: load → tunnel → waypoint (HTTP port: inner HTTP/1.1, filter chain, router) → inbound → backend
 *
 * Processes: this orchestrator; one fixture process (tunnel + inbound roles + echo backends of
 * both topologies, fixture.ts); one `waypoint run` process per topology (bin/waypoint.js, so its
 * CPU and RSS can be read alone from /proc); one load generator process (load.ts). For each path:
 * a short warm-up, idle-tunnel memory, a fixed-rate run (1 KiB POSTs, µs histogram, waypoint vCPU)
 * and a saturation run (closed loop) — the `core` scenario group. Every load run is
 * `waypoint loadtest`'s engine (src/loadtest) in the load process. Then the other groups
 * (scenarios.ts: HTTP/1.1 response sizes, many tunnels vs one, gRPC unary), closed loop on every
 * path. `--only core,h1,tunnels,grpc` (or BENCH_ONLY) picks groups. Prints a table and writes
 * bench/results/<timestamp>.json and bench/results/latest.json. Knobs: see config.ts and bench/README.md.
 */
import { execFileSync, fork, spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { stringify } from 'yaml';
import { topologyBootstrap } from '../../src/demo/topology.ts';
import { AIMS, TOPOLOGIES, WAYPOINT_STAND_INS, loadSettings, pathTarget, type BenchSettings, type PathName, type TopologyKey } from './config.ts';
import { clockTicks, cpuBetween, fdCount, round, rssKiB, snapshot, type CpuSnapshot } from './proc.ts';
import type { ClosedResult, IdleCloseResult, IdleOpenResult, LoadCommand, LoadMessage, RateResult, SaturateResult, WarmResult } from './protocol.ts';
import { runScenarios, scenarioCases, scenarioPortsNote, scenarioWarnings, type ScenarioReport } from './scenarios.ts';
import { closeInspectors, gcAndMeasure, gcAndMeasureAll, heapSnapshot, inspectorAddresses, openInspectors, type RemoteMemory } from './inspector.ts';
import { aimRatios, printReport, type BenchReport, type PathReport } from './report.ts';

const ROOT = path.resolve(import.meta.dirname, '../..');
const RESULTS = path.join(ROOT, 'bench', 'results');

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

// ---------------------------------------------------------------------------------------------
// Child process bookkeeping: everything we start is stopped in `stopAll`, also on SIGINT/SIGTERM.

interface Child {
  readonly name: string;
  readonly proc: ChildProcess;
  readonly logFile: string;
  exited: { code: number | null; signal: NodeJS.Signals | null } | undefined;
  expectExit: boolean;
}

const children: Child[] = [];

function track(name: string, proc: ChildProcess, logFile: string): Child {
  const c: Child = { name, proc, logFile, exited: undefined, expectExit: false };
  proc.once('exit', (code, signal) => {
    c.exited = { code, signal };
    if (!c.expectExit) process.stderr.write(`bench: ${name} (pid ${proc.pid}) exited unexpectedly (code ${code}, signal ${signal}); see ${logFile}\n`);
  });
  children.push(c);
  return c;
}

async function stopAll(): Promise<void> {
  const alive = children.filter((c) => !c.exited && c.proc.pid !== undefined);
  for (const c of alive) {
    c.expectExit = true;
    if (c.proc.connected) c.proc.send({ type: 'stop' }, () => {});
    c.proc.kill('SIGTERM');
  }
  const deadline = Date.now() + 4_000;
  while (Date.now() < deadline && alive.some((c) => !c.exited)) await sleep(50);
  for (const c of alive) if (!c.exited) c.proc.kill('SIGKILL');
}

/** The temporary directory of this run (removed on the way out unless BENCH_KEEP_DIR=1). */
let workDir: string | undefined;

function removeWorkDir(): void {
  if (workDir && process.env.BENCH_KEEP_DIR !== '1') fs.rmSync(workDir, { recursive: true, force: true });
}

let interrupted = false;
for (const sig of ['SIGINT', 'SIGTERM'] as const) {
  process.on(sig, () => {
    if (interrupted) process.exit(130);
    interrupted = true;
    process.stderr.write(`\nbench: ${sig}: stopping children\n`);
    void stopAll().finally(() => {
      removeWorkDir();
      process.exit(130);
    });
  });
}

function openLog(dir: string, name: string): { fd: number; file: string } {
  const file = path.join(dir, `${name}.log`);
  return { fd: fs.openSync(file, 'a'), file };
}

function waitFor<T>(proc: ChildProcess, pred: (m: unknown) => T | undefined, what: string, timeoutMs: number): Promise<T> {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => done(new Error(`timed out after ${timeoutMs} ms waiting for ${what}`)), timeoutMs);
    const onMessage = (m: unknown) => {
      try {
        const v = pred(m);
        if (v !== undefined) done(undefined, v);
      } catch (err) {
        done(err as Error);
      }
    };
    const onExit = (code: number | null) => done(new Error(`${what}: process exited (code ${code})`));
    const done = (err?: Error, v?: T) => {
      clearTimeout(timer);
      proc.off('message', onMessage);
      proc.off('exit', onExit);
      if (err) reject(err);
      else resolve(v as T);
    };
    proc.on('message', onMessage);
    proc.once('exit', onExit);
  });
}

// ---------------------------------------------------------------------------------------------
// Load process RPC with /proc snapshots at the `start` / `end` marks.

interface WaypointProc {
  readonly child: Child;
  readonly admin: string;
  /** Inspector address when BENCH_GC=1. */
  readonly inspect: string | undefined;
  rssAtReadyKiB?: number;
}

type WithoutId<T> = T extends unknown ? Omit<T, 'id'> : never;

class LoadClient {
  private nextId = 1;
  private readonly pending = new Map<number, { resolve(v: unknown): void; reject(e: Error): void; marks: Record<string, CpuSnapshot> }>();
  private readonly proc: ChildProcess;
  pids: Record<string, number> = {};

  constructor(proc: ChildProcess) {
    this.proc = proc;
    proc.on('message', (m: LoadMessage) => {
      if (m.type === 'ready') return;
      const p = this.pending.get(m.id);
      if (!p) return;
      if (m.type === 'mark') p.marks[m.name] = snapshot(this.pids);
      else if (m.type === 'result') {
        this.pending.delete(m.id);
        p.resolve(m.result);
      } else if (m.type === 'error') {
        this.pending.delete(m.id);
        p.reject(new Error(`load generator: ${m.message}`));
      }
    });
    proc.once('exit', (code) => {
      for (const p of this.pending.values()) p.reject(new Error(`load generator exited (code ${code})`));
      this.pending.clear();
    });
  }

  call<R>(cmd: WithoutId<LoadCommand>, timeoutMs: number): Promise<{ result: R; marks: Record<string, CpuSnapshot> }> {
    const id = this.nextId++;
    return new Promise((resolve, reject) => {
      const marks: Record<string, CpuSnapshot> = {};
      const timer = setTimeout(() => {
        this.pending.delete(id);
        reject(new Error(`load command ${cmd.type} timed out after ${timeoutMs} ms`));
      }, timeoutMs);
      this.pending.set(id, {
        resolve: (v) => {
          clearTimeout(timer);
          resolve({ result: v as R, marks });
        },
        reject: (e) => {
          clearTimeout(timer);
          reject(e);
        },
        marks,
      });
      this.proc.send({ ...cmd, id });
    });
  }
}

// ---------------------------------------------------------------------------------------------
// Waypoint admin helpers

async function adminGet(admin: string, p: string): Promise<{ status: number; text: string }> {
  const res = await fetch(`http://${admin}${p}`, { signal: AbortSignal.timeout(2_000) });
  return { status: res.status, text: await res.text() };
}

async function waitReady(admin: string, child: Child, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  let last = '';
  while (Date.now() < deadline) {
    if (child.exited) throw new Error(`${child.name} exited (code ${child.exited.code}) before it was ready; see ${child.logFile}:\n${tail(child.logFile, 20)}`);
    try {
      const r = await adminGet(admin, '/healthz/ready');
      if (r.status === 200) return;
      last = `status ${r.status}`;
    } catch (err) {
      last = (err as Error).message;
    }
    await sleep(100);
  }
  throw new Error(`${child.name} not ready at http://${admin}/healthz/ready within ${timeoutMs} ms (${last})`);
}

/** `nodejs_heap_size_used_bytes` etc. from the waypoint's Prometheus endpoint (KiB). */
async function heapKiB(admin: string): Promise<{ heapUsedKiB: number; externalKiB: number } | undefined> {
  try {
    const { text } = await adminGet(admin, '/stats/prometheus');
    const val = (name: string) => {
      const m = new RegExp(`^${name}(?:\\{[^}]*\\})? ([0-9.e+]+)$`, 'm').exec(text);
      return m ? Number(m[1]) / 1024 : NaN;
    };
    return { heapUsedKiB: Math.round(val('nodejs_heap_size_used_bytes')), externalKiB: Math.round(val('nodejs_external_memory_bytes')) };
  } catch {
    return undefined;
  }
}

function tail(file: string, lines: number): string {
  try {
    return fs.readFileSync(file, 'utf8').split('\n').slice(-lines - 1).join('\n');
  } catch {
    return '';
  }
}

/** Warnings, errors and non-JSON output (stack traces) a process wrote to its log. */
function logFindings(file: string): { warnings: number; errors: number; other: number; samples: string[] } {
  let text = '';
  try {
    text = fs.readFileSync(file, 'utf8');
  } catch {
    return { warnings: 0, errors: 0, other: 0, samples: [] };
  }
  let warnings = 0;
  let errors = 0;
  let other = 0;
  const samples: string[] = [];
  const seen = new Set<string>();
  for (const line of text.split('\n')) {
    if (!line.trim()) continue;
    let level = 0;
    let msg = line;
    if (line.startsWith('{')) {
      try {
        const j = JSON.parse(line) as { level?: number; msg?: string; err?: { message?: string } | string };
        level = j.level ?? 0;
        const err = typeof j.err === 'string' ? j.err : j.err?.message;
        msg = `[${level >= 50 ? 'error' : level >= 40 ? 'warn' : 'info'}] ${j.msg ?? ''}${err ? `: ${err}` : ''}`;
      } catch {
        // not JSON after all
      }
    } else if (/^(waypoint |  CA:|  HBONE:|  admin:|  readiness:|  mesh:|floor-relay: HBONE)/.test(line) || /ExperimentalWarning|--trace-warnings|Debugger listening|Debugger ending|For help, see|Debugger attached|Waiting for the debugger/.test(line)) {
      continue; // `waypoint run` and floor-relay banners, Node's experimental notices
    } else {
      other++;
    }
    if (level >= 50) errors++;
    else if (level >= 40) warnings++;
    else if (level > 0) continue;
    const key = msg.slice(0, 160);
    if (!seen.has(key) && samples.length < 8) {
      seen.add(key);
      samples.push(key);
    }
  }
  return { warnings, errors, other, samples };
}

// ---------------------------------------------------------------------------------------------

async function main(): Promise<void> {
  const major = Number(process.versions.node.split('.')[0]);
  if (major < 24) throw new Error(`Node ${process.versions.node}: run through npm (npm run bench) so the project's Node 24 is used`);
  let settings: BenchSettings;
  try {
    settings = loadSettings();
  } catch (err) {
    // A bad flag or knob: one line, no stack.
    process.stderr.write(`bench: ${(err as Error).message}\n`);
    process.exit(2);
  }
  const t0 = Date.now();
  const startedAt = new Date();
  const work = fs.mkdtempSync(path.join(os.tmpdir(), 'node-waypoint-bench-'));
  workDir = work;
  const logs = path.join(work, 'logs');
  fs.mkdirSync(logs);
  const keep = process.env.BENCH_KEEP_DIR === '1';
  let report: BenchReport | undefined;

  const nofile = fdLimit();
  if (settings.idleTunnels > 0 && nofile !== undefined && nofile < settings.idleTunnels * 2 + 256) {
    process.stderr.write(`bench: ulimit -n is ${nofile}; ${settings.idleTunnels} idle tunnels need about ${settings.idleTunnels * 2 + 256}. Lowering BENCH_IDLE_TUNNELS.\n`);
    (settings as { idleTunnels: number }).idleTunnels = Math.max(0, Math.floor((nofile - 256) / 2));
  }

  const cases = scenarioCases(settings);
  log(`scenario groups: ${settings.only.join(', ')}${cases.length > 0 ? ` (${cases.length} closed-loop cases × ${settings.paths.length} paths, ${settings.scenarioWarmupS}+${settings.scenarioDurationS} s each; ${scenarioPortsNote()})` : ''}`);
  log(`work dir ${work}; paths: ${settings.paths.join(', ')}; saturation ${settings.warmupS}+${settings.durationS} s c=${settings.connections}; rate ${settings.rate}/s ${settings.rateWarmupS}+${settings.rateDurationS} s, ${settings.bodyBytes} B bodies, ${settings.rateConnections} connections; ${settings.idleTunnels} idle tunnels`);
  try {
    // Fixture: tunnel + inbound + backends for the http and tcp topologies (and http-stats, http-workers, http-floor when their paths run).
    const needed = new Set(settings.paths.map((p) => pathTarget(p).topology).filter((t) => t !== undefined));
    const fixtureTopologies = ['http', 'tcp', ...(['http-stats', 'http-workers', 'http-floor'] as const).filter((k) => needed.has(k))];
    const fx = openLog(logs, 'fixture');
    const fixtureProc = fork(path.join(ROOT, 'bench/e2e/fixture.ts'), [work, fixtureTopologies.join(',')], {
      cwd: ROOT,
      stdio: ['ignore', fx.fd, fx.fd, 'ipc'],
      env: { ...process.env, WAYPOINT_LOG_LEVEL: process.env.WAYPOINT_LOG_LEVEL ?? 'warn', BENCH_HBONE_CONNECTIONS: String(settings.hboneConnections) },
    });
    const fixture = track('fixture', fixtureProc, fx.file);
    const ready = await waitFor(
      fixtureProc,
      (m) => {
        const msg = m as { type?: string; message?: string; topologies?: Record<string, { meshFile: string; caDir: string }> };
        if (msg.type === 'error') throw new Error(`fixture failed: ${msg.message}`);
        return msg.type === 'ready' ? msg.topologies : undefined;
      },
      'the fixture',
      30_000,
    );

    const waypoints: Record<string, WaypointProc> = {};
    for (const spec of TOPOLOGIES) {
      // One waypoint process per topology a selected path needs.
      if (!needed.has(spec.key)) continue;
      const t = ready[spec.key];
      // A spec with its own filters runs them before the router; the others run the default chain
      // (Istio waypoint's: istio.peer_metadata, istio.stats, router).
      const filters = spec.filters ? { filters: [...spec.filters.map((name) => ({ name })), { name: 'envoy.filters.http.router' }] } : {};
      const bootstrap = topologyBootstrap({ ...spec.options, dir: path.dirname(t.meshFile), bootstrap: { drain: { timeoutMs: 1_000 }, ...filters } });
      const cfgFile = path.join(work, `waypoint-${spec.key}.yaml`);
      fs.writeFileSync(cfgFile, `# bench: waypoint bootstrap for the ${spec.key} topology\n${stringify(bootstrap)}`);
      const wl = openLog(logs, `waypoint-${spec.key}`);
      const nodeFlags = (process.env.BENCH_WAYPOINT_NODE_FLAGS ?? '').split(/\s+/).filter(Boolean);
      // The inspector: on from the start with BENCH_GC=1, else only configured (the idle flow opens it).
      const inspect = settings.gc ? `${spec.options.waypointIp}:9229` : undefined;
      nodeFlags.push(inspect ? `--inspect=${inspect}` : `--inspect-port=${spec.options.waypointIp}:9229`);
      const concurrency = spec.key === 'http-workers' ? settings.workers : settings.concurrency;
      const args = ['run', '--mesh', t.meshFile, '--ca-dir', t.caDir, '--config', cfgFile, '--concurrency', String(concurrency)];
      const proc = spawn(process.execPath, [...nodeFlags, waypointScript(spec.key), '--log-level', process.env.WAYPOINT_LOG_LEVEL ?? 'warn', ...args], {
        cwd: ROOT,
        stdio: ['ignore', wl.fd, wl.fd],
      });
      const child = track(`waypoint-${spec.key}`, proc, wl.file);
      waypoints[spec.key] = { child, admin: bootstrap.listeners.admin, inspect };
    }
    for (const w of Object.values(waypoints)) {
      await waitReady(w.admin, w.child, 20_000);
      w.rssAtReadyKiB = rssKiB(w.child.proc.pid!);
    }

    // Load generator.
    const ll = openLog(logs, 'load');
    const loadProc = fork(path.join(ROOT, 'bench/e2e/load.ts'), [], { cwd: ROOT, stdio: ['ignore', ll.fd, ll.fd, 'ipc'] });
    const loadChild = track('load', loadProc, ll.file);
    await waitFor(loadProc, (m) => ((m as { type?: string }).type === 'ready' ? true : undefined), 'the load generator', 15_000);
    const load = new LoadClient(loadProc);

    log(`fixture pid ${fixtureProc.pid}, load pid ${loadProc.pid}, ${Object.entries(waypoints).map(([k, w]) => `waypoint-${k} pid ${w.child.proc.pid}`).join(', ')}`);

    const pidsFor = (p: PathName): Record<string, number> => {
      const topology = pathTarget(p).topology;
      const wp = topology ? waypoints[topology] : undefined;
      const pids: Record<string, number> = { fixture: fixtureProc.pid!, load: loadProc.pid! };
      if (wp) pids.waypoint = wp.child.proc.pid!;
      return pids;
    };
    const check = (p: PathName, during: string) => {
      const topology = pathTarget(p).topology;
      const wp = topology ? waypoints[topology] : undefined;
      if (wp?.child.exited) throw new Error(`waypoint-${topology} died during ${during}; see ${wp.child.logFile}:\n${tail(wp.child.logFile, 30)}`);
      if (fixture.exited) throw new Error(`the fixture died during ${during}; see ${fixture.logFile}:\n${tail(fixture.logFile, 30)}`);
      if (loadChild.exited) throw new Error(`the load generator died during ${during}; see ${loadChild.logFile}:\n${tail(loadChild.logFile, 30)}`);
    };

    const paths: Partial<Record<PathName, PathReport>> = {};
    if (settings.only.includes('core')) {
      for (const p of settings.paths) {
        const target = pathTarget(p);
        const wp = target.topology ? waypoints[target.topology] : undefined;
        load.pids = pidsFor(p);
        paths[p] = await runPath(p, target, settings, load, wp, fixture);
        check(p, `the ${p} path`);
      }
    }
    if (loadChild.exited) throw new Error('the load generator died');

    const scenarios: ScenarioReport[] = await runScenarios({
      settings,
      pidsFor,
      closed: (cmd, pids, timeoutMs) => {
        load.pids = pids;
        return load.call<ClosedResult>({ type: 'closed', ...cmd }, timeoutMs);
      },
      waitQuiet: (pids, what) => waitQuiet(pids, settings.scenarioQuietWaitS, what),
      check: (p) => check(p, `a ${p} scenario run`),
      log,
    });

    const logFindingsAll: BenchReport['logs'] = {};
    for (const c of children) logFindingsAll[c.name] = { ...logFindings(c.logFile), exitedEarly: c.exited !== undefined };

    report = buildReport(settings, startedAt, (Date.now() - t0) / 1000, paths, scenarios, logFindingsAll);
  } finally {
    await stopAll();
    if (report) {
      // Findings after the stop too (a crash on shutdown would show here).
      for (const c of children) {
        if (c.exited && c.exited.code !== 0 && c.exited.code !== null && c.exited.signal !== 'SIGKILL') {
          report.logs[c.name] = { ...logFindings(c.logFile), exitedEarly: report.logs[c.name]?.exitedEarly ?? false, exitCode: c.exited.code };
        }
      }
    }
    if (keep || !report) {
      process.stderr.write(`bench: logs and certificates kept in ${work}\n`);
      workDir = undefined;
    } else removeWorkDir();
  }

  printReport(report);
  fs.mkdirSync(RESULTS, { recursive: true });
  const stamp = startedAt.toISOString().replace(/:/g, '-').replace(/\.\d+Z$/, 'Z');
  const json = `${JSON.stringify(report, null, 2)}\n`;
  fs.writeFileSync(path.join(RESULTS, `${stamp}.json`), json);
  fs.writeFileSync(path.join(RESULTS, 'latest.json'), json);
  log(`wrote bench/results/${stamp}.json and bench/results/latest.json (${report.wallS} s)`);
}

/** Other processes' CPU below this (cores) counts as a quiet machine. */
const QUIET_CORES = 0.15;

/**
 * Wait (up to `maxS`) until processes outside the bench use less than {@link QUIET_CORES}: the
 * machine is shared (other sessions run tests and type checks) and 2 cores leave no headroom.
 */
async function waitQuiet(pids: Record<string, number>, maxS: number, what: string): Promise<{ waitedMs: number; otherCores: number }> {
  const start = Date.now();
  let other = 0;
  if (maxS <= 0) return { waitedMs: 0, otherCores: NaN };
  for (;;) {
    const a = snapshot(pids);
    await sleep(500);
    other = cpuBetween(a, snapshot(pids), 0).other?.cores ?? 0;
    const waited = Date.now() - start;
    if (other < QUIET_CORES || waited >= maxS * 1000) {
      if (other >= QUIET_CORES) log(`${what}: other processes still use ${other.toFixed(2)} cores after ${(waited / 1000).toFixed(1)} s; measuring anyway`);
      else if (waited > 1_000) log(`${what}: waited ${(waited / 1000).toFixed(1)} s for a quiet machine`);
      return { waitedMs: waited, otherCores: round(other, 3) };
    }
  }
}

async function runPath(
  p: PathName,
  target: ReturnType<typeof pathTarget>,
  s: BenchSettings,
  load: LoadClient,
  wp: WaypointProc | undefined,
  fixture: Child,
): Promise<PathReport> {
  const out: PathReport = { target: target.url, waypointPid: wp?.child.proc.pid ?? null, warm: undefined, idle: null, rate: undefined, saturation: undefined, quiet: {} };
  const wpPid = wp?.child.proc.pid;
  log(`[${p}] warm-up`);
  out.warm = (await load.call<WarmResult>({ type: 'warm', url: target.url, requests: 500, concurrency: 10 }, 30_000)).result;
  if (out.warm.ok === 0) throw new Error(`[${p}] every warm-up request failed: ${out.warm.errorSamples.join('; ')}`);
  if (wpPid) {
    out.waypointRssAtReadyKiB = wp?.rssAtReadyKiB;
    out.waypointRssAfterWarmKiB = rssKiB(wpPid);
  }

  // (iii) Idle tunnels: waypoint memory per idle keep-alive connection (fresh process, light warm-up).
  if (wp && wpPid && s.idleTunnels > 0) {
    log(`[${p}] idle tunnels: ${s.idleTunnels}`);
    await sleep(1_000);
    // A forced GC (through each waypoint process's inspector) before each reading, so that the
    // figures are what the tunnels hold, not garbage the opening left (BENCH_IDLE_GC=0: no GC).
    let inspectors: string[] = [];
    if (s.idleGc) {
      try {
        inspectors = s.gc ? inspectorAddresses(wpPid) : await openInspectors(wpPid);
      } catch (err) {
        log(`[${p}] inspector: ${(err as Error).message}; idle figures without a forced GC`);
      }
    }
    const gc = async (): Promise<RemoteMemory | undefined> => {
      if (inspectors.length === 0) return undefined;
      try {
        return await gcAndMeasureAll(inspectors);
      } catch (err) {
        log(`[${p}] inspector GC failed: ${(err as Error).message}`);
        return undefined;
      }
    };
    // Heap snapshots (BENCH_HEAP_SNAPSHOTS): taken after each reading, as writing one grows the RSS.
    const snapshot = async (when: string): Promise<void> => {
      if (!s.heapSnapshotDir) return;
      for (const [i, a] of inspectors.entries()) {
        const file = path.join(s.heapSnapshotDir, `${p}-idle-${when}${i > 0 ? `-${i}` : ''}.heapsnapshot`);
        await heapSnapshot(a, file).then(
          () => log(`[${p}] heap snapshot ${file}`),
          (err: Error) => log(`[${p}] heap snapshot failed: ${err.message}`),
        );
      }
    };
    const gcBefore = await gc();
    const rssBefore = rssKiB(wpPid);
    const heapBefore = await heapKiB(wp.admin);
    const fdsBefore = fdCount(wpPid);
    const fixtureRssBefore = rssKiB(fixture.proc.pid!);
    await snapshot('before');
    const opened = (await load.call<IdleOpenResult>({ type: 'idle-open', host: target.host, port: target.port, count: s.idleTunnels, concurrency: 32 }, 120_000)).result;
    await sleep(s.idleSettleMs);
    const gcAfter = await gc();
    const rssAfter = rssKiB(wpPid);
    const heapAfter = await heapKiB(wp.admin);
    const fdsAfter = fdCount(wpPid);
    const fixtureRssAfter = rssKiB(fixture.proc.pid!);
    await snapshot('with');
    const closed = (await load.call<IdleCloseResult>({ type: 'idle-close' }, 10_000)).result;
    await sleep(1_500);
    const gcAfterClose = await gc();
    const rssAfterClose = rssKiB(wpPid);
    const heapAfterClose = await heapKiB(wp.admin);
    // Extra open/close rounds (BENCH_IDLE_ROUNDS): memory left behind after each close shows leaks.
    const rounds: { round: number; heapUsedAfterCloseKiB: number | null; rssAfterCloseKiB: number; gcHeapUsedAfterCloseKiB: number | null }[] = [
      { round: 1, heapUsedAfterCloseKiB: heapAfterClose?.heapUsedKiB ?? null, rssAfterCloseKiB: rssAfterClose, gcHeapUsedAfterCloseKiB: gcAfterClose?.heapUsedKiB ?? null },
    ];
    for (let r = 2; r <= s.idleRounds; r++) {
      await load.call<IdleOpenResult>({ type: 'idle-open', host: target.host, port: target.port, count: s.idleTunnels, concurrency: 32 }, 120_000);
      await sleep(500);
      await load.call<IdleCloseResult>({ type: 'idle-close' }, 10_000);
      await sleep(1_500);
      const g = await gc();
      rounds.push({ round: r, heapUsedAfterCloseKiB: (await heapKiB(wp.admin))?.heapUsedKiB ?? null, rssAfterCloseKiB: rssKiB(wpPid), gcHeapUsedAfterCloseKiB: g?.heapUsedKiB ?? null });
    }
    if (!s.gc && inspectors.length > 0) await closeInspectors(inspectors).catch((err: Error) => log(`[${p}] closing the inspectors failed: ${err.message}`));
    const n = Math.max(1, closed.stillOpen);
    out.idle = {
      rounds,
      requested: s.idleTunnels,
      opened: opened.opened,
      failed: opened.failed,
      stillOpenAtMeasure: closed.stillOpen,
      closedEarly: closed.closedEarly,
      openMs: opened.openMs,
      errorSamples: opened.errorSamples,
      rssBeforeKiB: rssBefore,
      rssAfterKiB: rssAfter,
      rssAfterCloseKiB: rssAfterClose,
      kibPerTunnel: round((rssAfter - rssBefore) / n, 2),
      heapUsedBeforeKiB: heapBefore?.heapUsedKiB ?? null,
      heapUsedAfterKiB: heapAfter?.heapUsedKiB ?? null,
      heapUsedAfterCloseKiB: heapAfterClose?.heapUsedKiB ?? null,
      heapKibPerTunnel: heapBefore && heapAfter ? round((heapAfter.heapUsedKiB - heapBefore.heapUsedKiB) / n, 2) : null,
      externalKibPerTunnel: heapBefore && heapAfter ? round((heapAfter.externalKiB - heapBefore.externalKiB) / n, 2) : null,
      waypointFdsBefore: fdsBefore,
      waypointFdsAfter: fdsAfter,
      fixtureKibPerTunnel: round((fixtureRssAfter - fixtureRssBefore) / n, 2),
      gc:
        gcBefore && gcAfter
          ? {
              before: gcBefore,
              after: gcAfter,
              afterClose: gcAfterClose ?? null,
              heapKibPerTunnel: round((gcAfter.heapUsedKiB - gcBefore.heapUsedKiB) / n, 2),
              externalKibPerTunnel: round((gcAfter.externalKiB - gcBefore.externalKiB) / n, 2),
              rssKibPerTunnel: round((gcAfter.rssKiB - gcBefore.rssKiB) / n, 2),
              rssWithGarbageKibPerTunnel: gcAfter.beforeGc ? round((gcAfter.beforeGc.rssKiB - gcBefore.rssKiB) / n, 2) : null,
            }
          : null,
    };
  }

  // (ii) Fixed rate, 1 KiB POSTs, µs latency, waypoint vCPU.
  out.quiet.rate = await waitQuiet(load.pids, s.quietWaitS, `[${p}] fixed rate`);
  log(`[${p}] fixed rate: ${s.rate} req/s for ${s.rateWarmupS}+${s.rateDurationS} s`);
  // The waypoint's cores in each second of the run, warm-up included: shows whether the measured window is past the JIT's warm-up.
  const perSecond: number[] = [];
  let prev = wpPid ? snapshot({ waypoint: wpPid }) : undefined;
  const sampler = prev
    ? setInterval(() => {
        const now = snapshot({ waypoint: wpPid! });
        perSecond.push(round(cpuBetween(prev!, now, 0).waypoint?.cores ?? NaN, 3));
        prev = now;
      }, 1_000)
    : undefined;
  const rate = await load
    .call<RateResult>(
      { type: 'rate', url: target.url, rate: s.rate, connections: s.rateConnections, warmupS: s.rateWarmupS, durationS: s.rateDurationS, bodyBytes: s.bodyBytes },
      (s.rateWarmupS + s.rateDurationS) * 1000 + 60_000,
    )
    .finally(() => clearInterval(sampler));
  const rateCpu = rate.marks.start && rate.marks.end ? cpuBetween(rate.marks.start, rate.marks.end, rate.result.completed) : {};
  const wpRate = rateCpu.waypoint;
  out.rate = {
    ...rate.result,
    cpu: rateCpu,
    waypointCores: wpRate ? wpRate.cores : null,
    waypointUsPerReq: wpRate ? wpRate.usPerReq : null,
    vcpuPer1000: wpRate && rate.result.achievedRps > 0 ? round(wpRate.cores / (rate.result.achievedRps / 1000), 4) : null,
    waypointCoresPerSecond: wpPid ? perSecond : null,
  };

  // (i) Saturation (closed loop).
  out.quiet.saturation = await waitQuiet(load.pids, s.quietWaitS, `[${p}] saturation`);
  log(`[${p}] saturation: closed loop, ${s.connections} connections, ${s.warmupS}+${s.durationS} s`);
  const sat = await load.call<SaturateResult>(
    { type: 'saturate', url: target.url, connections: s.connections, warmupS: s.warmupS, durationS: s.durationS },
    (s.warmupS + s.durationS) * 1000 + 60_000,
  );
  const satCpu = sat.marks.start && sat.marks.end ? cpuBetween(sat.marks.start, sat.marks.end, sat.result.requests) : {};
  out.saturation = { ...sat.result, cpu: satCpu, waypointUsPerReq: satCpu.waypoint?.usPerReq ?? null, waypointCores: satCpu.waypoint?.cores ?? null };
  if (wpPid) out.waypointRssEndKiB = rssKiB(wpPid);
  if (wp?.inspect) {
    // Live heap once the load is gone (BENCH_GC=1): compare with the idle flow's figures for leaks.
    await sleep(1_500);
    out.waypointAfterLoadGc = await gcAndMeasure(wp.inspect).catch((err: Error) => {
      log(`[${p}] inspector GC failed: ${err.message}`);
      return undefined;
    });
  }
  return out;
}

function buildReport(
  settings: BenchSettings,
  startedAt: Date,
  wallS: number,
  paths: Partial<Record<PathName, PathReport>>,
  scenarios: ScenarioReport[],
  logs: BenchReport['logs'],
): BenchReport {
  const wp = paths.waypoint;
  const wpStats = paths['waypoint-stats'];
  const wpWorkers = paths['waypoint-workers'];
  const floor = paths.floor;
  const l4 = paths['l4-relay'];
  const direct = paths.direct;
  const ratio = (a: number | null | undefined, b: number | null | undefined) => (a != null && b != null && b > 0 ? round(a / b, 3) : null);
  const diff = (a: number | null | undefined, b: number | null | undefined) => (a != null && b != null ? a - b : null);
  const warnings: string[] = [];
  for (const [name, pr] of Object.entries(paths)) {
    for (const [run, cpu] of [['fixed-rate', pr.rate?.cpu], ['saturation', pr.saturation?.cpu]] as const) {
      const other = cpu?.other?.cores;
      if (other !== undefined && other > 0.25) warnings.push(`${name} ${run}: processes outside the bench (and softirq) used ${other.toFixed(2)} cores meanwhile; its figures are contaminated`);
    }
    const sat = pr.saturation;
    if (sat && sat.errors + sat.timeouts + sat.non2xx > 0) warnings.push(`${name} saturation: ${sat.errors} errors, ${sat.timeouts} timeouts, ${sat.non2xx} non-2xx (${JSON.stringify(sat.statusCodes)})`);
    const rate = pr.rate;
    if (rate && rate.errors + rate.badResponses > 0) warnings.push(`${name} fixed-rate: ${rate.errors} errors, ${rate.badResponses} bad responses: ${rate.errorSamples.join('; ')}`);
    if (rate && rate.achievedRps < rate.targetRps * 0.95) warnings.push(`${name} fixed-rate: achieved ${rate.achievedRps} of ${rate.targetRps} req/s`);
    const idle = pr.idle;
    if (idle && (idle.failed > 0 || idle.closedEarly > 0)) warnings.push(`${name} idle: ${idle.failed} tunnels failed to open, ${idle.closedEarly} closed before the measurement: ${idle.errorSamples.join('; ')}`);
  }
  warnings.push(...scenarioWarnings(scenarios));
  for (const [name, l] of Object.entries(logs)) {
    if (l.errors + l.warnings + l.other > 0 || l.exitedEarly) warnings.push(`${name} logged ${l.errors} errors, ${l.warnings} warnings, ${l.other} other lines${l.exitedEarly ? ' and exited early' : ''}`);
  }
  return {
    warnings,
    startedAt: startedAt.toISOString(),
    wallS: round(wallS, 1),
    host: {
      cpus: os.cpus().length,
      cpuModel: os.cpus()[0]?.model ?? 'unknown',
      node: process.versions.node,
      clkTck: clockTicks(),
      loadavg: os.loadavg().map((v) => round(v, 2)),
      commit: gitCommit(),
    },
    settings,
    aims: AIMS,
    paths,
    ratios: {
      waypointCpuPerReqVsL4Saturation: ratio(wp?.saturation?.waypointUsPerReq, l4?.saturation?.waypointUsPerReq),
      waypointCpuPerReqVsL4AtRate: ratio(wp?.rate?.waypointUsPerReq, l4?.rate?.waypointUsPerReq),
      waypointReqPerSecVsL4: ratio(wp?.saturation?.reqPerSec, l4?.saturation?.reqPerSec),
      waypointReqPerSecVsDirect: ratio(wp?.saturation?.reqPerSec, direct?.saturation?.reqPerSec),
      l4ReqPerSecVsDirect: ratio(l4?.saturation?.reqPerSec, direct?.saturation?.reqPerSec),
      waypointVcpuPer1000VsAim: ratio(wp?.rate?.vcpuPer1000, AIMS.vcpuPer1000),
      waypointVcpuPer1000VsEnvoy: ratio(wp?.rate?.vcpuPer1000, AIMS.envoyVcpuPer1000),
      waypointKibPerIdleTunnelVsAim: ratio(wp?.idle?.kibPerTunnel, AIMS.kibPerIdleTunnel),
      addedP50UsWaypointVsDirect: diff(wp?.rate?.latencyUs.p50, direct?.rate?.latencyUs.p50),
      addedP50UsL4VsDirect: diff(l4?.rate?.latencyUs.p50, direct?.rate?.latencyUs.p50),
      addedP50UsWaypointVsL4: diff(wp?.rate?.latencyUs.p50, l4?.rate?.latencyUs.p50),
      // With vs without istio.stats (only when the waypoint-stats path ran).
      statsCpuPerReqVsWaypointSaturation: ratio(wpStats?.saturation?.waypointUsPerReq, wp?.saturation?.waypointUsPerReq),
      statsCpuPerReqVsWaypointAtRate: ratio(wpStats?.rate?.waypointUsPerReq, wp?.rate?.waypointUsPerReq),
      statsAddedUsPerReqSaturation: diff(wpStats?.saturation?.waypointUsPerReq, wp?.saturation?.waypointUsPerReq),
      statsAddedUsPerReqAtRate: diff(wpStats?.rate?.waypointUsPerReq, wp?.rate?.waypointUsPerReq),
      statsReqPerSecVsWaypoint: ratio(wpStats?.saturation?.reqPerSec, wp?.saturation?.reqPerSec),
      // Workers vs one process (only when the waypoint-workers path ran): contended, as everything shares the machine's cores.
      workersReqPerSecVsWaypoint: ratio(wpWorkers?.saturation?.reqPerSec, wp?.saturation?.reqPerSec),
      workersCpuPerReqVsWaypoint: ratio(wpWorkers?.saturation?.waypointUsPerReq, wp?.saturation?.waypointUsPerReq),
      // The most any number of workers could show here: the machine's cores divided by what one request
      // costs the waypoint, the fixture and the load generator together, ÷ the one-process req/s.
      workersCeilingVsWaypoint: wpWorkers ? ratio(ceilingReqPerSec(wp?.saturation?.cpu, os.cpus().length), wp?.saturation?.reqPerSec) : null,
      // The floor (only when the floor path ran): bare Node doing the same job (bench/micro/floor-relay.ts).
      ...(floor
        ? {
            floorCpuPerReqVsL4Saturation: ratio(floor.saturation?.waypointUsPerReq, l4?.saturation?.waypointUsPerReq),
            floorCpuPerReqVsL4AtRate: ratio(floor.rate?.waypointUsPerReq, l4?.rate?.waypointUsPerReq),
            floorReqPerSecVsL4: ratio(floor.saturation?.reqPerSec, l4?.saturation?.reqPerSec),
            waypointCpuPerReqVsFloorSaturation: ratio(wp?.saturation?.waypointUsPerReq, floor.saturation?.waypointUsPerReq),
            waypointCpuPerReqVsFloorAtRate: ratio(wp?.rate?.waypointUsPerReq, floor.rate?.waypointUsPerReq),
          }
        : {}),
      ...aimRatios(scenarios, paths),
    },
    scenarios,
    logs,
  };
}

/** cores × 10⁶ ÷ (waypoint + fixture + load generator CPU µs per request): req/s if every core were busy. */
function ceilingReqPerSec(cpu: { [k: string]: { usPerReq?: number | null } | undefined } | undefined, cores: number): number | null {
  const w = cpu?.waypoint?.usPerReq;
  const f = cpu?.fixture?.usPerReq;
  const l = cpu?.load?.usPerReq;
  if (!(w! > 0 && f! > 0 && l! > 0)) return null;
  return (cores * 1e6) / (w! + f! + l!);
}

function gitCommit(): string | null {
  try {
    return execFileSync('git', ['rev-parse', '--short', 'HEAD'], { cwd: ROOT, encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] }).trim();
  } catch {
    return null;
  }
}

function fdLimit(): number | undefined {
  try {
    const v = execFileSync('sh', ['-c', 'ulimit -n'], { encoding: 'utf8' }).trim();
    return v === 'unlimited' ? undefined : Number(v);
  } catch {
    return undefined;
  }
}

/**
 * The program run as the waypoint of topology `key`: bin/waypoint.js, the topology's stand-in (the
 * floor relay for `http-floor`), or for the `http` topology BENCH_WAYPOINT_SCRIPT (a stand-in
 * taking the same arguments, e.g. bench/micro/floor-relay.ts).
 */
function waypointScript(key: TopologyKey): string {
  const alt = key === 'http' ? process.env.BENCH_WAYPOINT_SCRIPT : WAYPOINT_STAND_INS[key];
  return alt ? path.resolve(ROOT, alt) : path.join(ROOT, 'bin/waypoint.js');
}

function log(msg: string): void {
  process.stderr.write(`bench: ${msg}\n`);
}

main().catch(async (err: unknown) => {
  process.stderr.write(`bench: FAILED: ${(err as Error).stack ?? String(err)}\n`);
  await stopAll();
  process.exit(1);
});
