/**
 * The bench report: JSON shape and the printed table.
 */
import { isL7Path, type AIMS, type BenchSettings, type PathName } from './config.ts';
import { PART } from './proc.ts';
import type { RemoteMemory } from './inspector.ts';
import type { RateResult, SaturateResult, WarmResult } from './protocol.ts';
import type { ScenarioReport } from './scenarios.ts';

type CpuByProcess = Record<string, { cpuS: number; cores: number; usPerReq: number | null }>;

export interface IdleReport {
  /** Memory after closing the tunnels, per open/close round (BENCH_IDLE_ROUNDS). */
  readonly rounds: readonly { round: number; heapUsedAfterCloseKiB: number | null; rssAfterCloseKiB: number; gcHeapUsedAfterCloseKiB: number | null }[];
  readonly requested: number;
  readonly opened: number;
  readonly failed: number;
  readonly stillOpenAtMeasure: number;
  readonly closedEarly: number;
  readonly openMs: number;
  readonly errorSamples: string[];
  readonly rssBeforeKiB: number;
  readonly rssAfterKiB: number;
  readonly rssAfterCloseKiB: number;
  /** (RSS after − before) ÷ tunnels still open; each reading after a forced GC unless `gc` is null. */
  readonly kibPerTunnel: number;
  readonly heapUsedBeforeKiB: number | null;
  readonly heapUsedAfterKiB: number | null;
  readonly heapUsedAfterCloseKiB: number | null;
  readonly heapKibPerTunnel: number | null;
  readonly externalKibPerTunnel: number | null;
  readonly waypointFdsBefore: number;
  readonly waypointFdsAfter: number;
  /** The tunnel role's side (fixture process), for orientation. */
  readonly fixtureKibPerTunnel: number;
  /**
   * Memory after a forced full GC (inspector) before, with and after the tunnels (null when
   * BENCH_IDLE_GC=0 or the inspector failed). `rssWithGarbageKibPerTunnel`: the RSS with the
   * tunnels just before its GC, over the GC'd baseline (what the opening's garbage adds).
   */
  readonly gc: {
    readonly before: RemoteMemory;
    readonly after: RemoteMemory;
    readonly afterClose: RemoteMemory | null;
    readonly heapKibPerTunnel: number;
    readonly externalKibPerTunnel: number;
    readonly rssKibPerTunnel: number;
    readonly rssWithGarbageKibPerTunnel: number | null;
  } | null;
}

export interface PathReport {
  target: string;
  waypointPid: number | null;
  warm: WarmResult | undefined;
  idle: IdleReport | null;
  rate:
    | (RateResult & {
        cpu: CpuByProcess;
        waypointCores: number | null;
        waypointUsPerReq: number | null;
        vcpuPer1000: number | null;
        /** The waypoint's cores in each second of the run from the start of its warm-up (null on `direct`). */
        waypointCoresPerSecond?: number[] | null;
      })
    | undefined;
  saturation: (SaturateResult & { cpu: CpuByProcess; waypointUsPerReq: number | null; waypointCores: number | null }) | undefined;
  /** Waypoint RSS when it first answered ready, after the 500-request warm-up, and after the saturation run. */
  waypointRssAtReadyKiB?: number;
  waypointRssAfterWarmKiB?: number;
  waypointRssEndKiB?: number;
  /** BENCH_GC=1: memory after a forced GC once the saturation run is over. */
  waypointAfterLoadGc?: RemoteMemory;
  /** How long the bench waited for other processes to calm down before each run, and their CPU then. */
  quiet: { rate?: { waitedMs: number; otherCores: number }; saturation?: { waitedMs: number; otherCores: number } };
}

export interface BenchReport {
  /** Anything that makes figures doubtful: errors, failed tunnels, other load on the machine. */
  warnings: string[];
  startedAt: string;
  wallS: number;
  host: { cpus: number; cpuModel: string; node: string; clkTck: number; loadavg: number[]; commit: string | null };
  settings: BenchSettings;
  aims: typeof AIMS;
  paths: Partial<Record<PathName, PathReport>>;
  ratios: Record<string, number | null>;
  /** The closed-loop scenarios (h1 sizes, tunnels, gRPC), in run order. */
  scenarios: ScenarioReport[];
  logs: Record<string, { warnings: number; errors: number; other: number; samples: string[]; exitedEarly: boolean; exitCode?: number }>;
}

const NA = 'n/a';

function f(v: number | null | undefined, digits = 0): string {
  if (v === null || v === undefined || !Number.isFinite(v)) return NA;
  return v.toLocaleString('en-US', { minimumFractionDigits: digits, maximumFractionDigits: digits });
}

function verdict(ok: boolean | null): string {
  return ok === null ? '' : ok ? '  ok' : '  MISSED';
}

/** Per idle tunnel after the forced GC: JS heap used, external (Buffers), and the rest of the RSS (native: nghttp2, OpenSSL, libuv, malloc; V8 pages beyond the used heap). */
function idleSplit(idle: IdleReport | null | undefined): string {
  if (!idle) return NA;
  if (!idle.gc) return `${f(idle.heapKibPerTunnel, 1)} / n/a / n/a (no GC)`;
  const g = idle.gc;
  return `${f(g.heapKibPerTunnel, 1)} / ${f(g.externalKibPerTunnel, 1)} / ${f(g.rssKibPerTunnel - g.heapKibPerTunnel - g.externalKibPerTunnel, 1)}`;
}

/** `primary / worker1 / ...` cores of a waypoint run with workers (proc.ts keeps each process of the tree). */
function perProcess(cpu: CpuByProcess | undefined): string {
  if (!cpu) return NA;
  const parts = Object.entries(cpu).filter(([k]) => k.startsWith(`waypoint${PART}`));
  return parts.length === 0 ? NA : parts.map(([, v]) => f(v.cores, 2)).join(' / ');
}

/**
 * The issue's aims that come from the scenarios and the fixed rate, for the JSON's `ratios` and
 * the aims table: waypoint CPU/req ÷ the l4-relay's per case, the h2c one-tunnel µs/req ÷ the
 * HTTP/1.1 many-tunnels µs/req, and p99 at the fixed rate ÷ the l4-relay's. When the floor ran
 * (`--floor`), the same figures for it, prefixed `floor` (`floorH2OneTunnelCpuPerReqVsL4`, ...).
 */
export function aimRatios(scenarios: readonly ScenarioReport[], paths: Partial<Record<PathName, PathReport>>): Record<string, number | null> {
  const byId = new Map(scenarios.map((sc) => [sc.case.id, sc]));
  const div = (a: number | null | undefined, b: number | null | undefined) => (a != null && b != null && b > 0 ? Math.round((a / b) * 1000) / 1000 : null);
  const p99 = (p: PathName) => paths[p]?.rate?.latencyUs.p99 ?? null;
  /** The waypoint process's CPU µs/req of path `p` in case `id`, when that run is ok. */
  const us = (id: string, p: PathName) => {
    const run = byId.get(id)?.runs[p];
    return run?.status === 'ok' ? run.waypointUsPerReq : null;
  };
  const of = (p: PathName) => {
    const cpu = (id: string) => div(us(id, p), us(id, 'l4-relay'));
    return {
      h2OneTunnelCpuPerReqVsL4: cpu('h2-one'),
      h2ManyTunnelsCpuPerReqVsL4: cpu('h2-many'),
      grpcUnaryCpuPerReqVsL4: cpu('grpc-unary'),
      h1LargeCpuPerReqVsL4: cpu('h1-64k'),
      h2OneTunnelUsPerReqVsH1: div(us('h2-one', p), us(byId.has('h1-many') ? 'h1-many' : 'h1-1k', p)),
      P99VsL4AtRate: div(p99(p), p99('l4-relay')),
    };
  };
  const { P99VsL4AtRate, ...wp } = of('waypoint');
  const out: Record<string, number | null> = { ...wp, waypointP99VsL4AtRate: P99VsL4AtRate };
  if (paths.floor || scenarios.some((sc) => sc.runs.floor)) {
    for (const [k, v] of Object.entries(of('floor'))) out[`floor${k[0].toUpperCase()}${k.slice(1)}`] = v;
  }
  return out;
}

export function printReport(r: BenchReport): void {
  // `waypoint-stats` (the waypoint with istio.stats) and `waypoint-workers` get a column only when they ran.
  const cols: PathName[] = ['direct', 'l4-relay', 'waypoint', ...(['waypoint-stats', 'waypoint-workers', 'floor'] as const).filter((p) => r.paths[p])];
  const P = (p: PathName) => r.paths[p];
  const s = r.settings;
  const withWorkers = s.concurrency > 1 || r.paths['waypoint-workers'] !== undefined;
  const rows: [string, (p: PathName) => string][] = [
    [`saturation req/s (closed loop, ${s.connections} connections, ${s.durationS} s)`, (p) => f(P(p)?.saturation?.reqPerSec)],
    ['  errors / timeouts / non-2xx', (p) => (P(p)?.saturation ? `${P(p)!.saturation!.errors} / ${P(p)!.saturation!.timeouts} / ${P(p)!.saturation!.non2xx}` : NA)],
    ['  waypoint CPU µs/req', (p) => f(P(p)?.saturation?.waypointUsPerReq, 1)],
    ['  waypoint cores busy', (p) => f(P(p)?.saturation?.waypointCores, 2)],
    ...(withWorkers ? ([['  waypoint cores per process (primary, workers)', (p: PathName) => perProcess(P(p)?.saturation?.cpu)]] as [string, (p: PathName) => string][]) : []),
    ['  fixture CPU µs/req (tunnel+inbound+backend)', (p) => f(P(p)?.saturation?.cpu.fixture?.usPerReq, 1)],
    ['  load generator CPU µs/req', (p) => f(P(p)?.saturation?.cpu.load?.usPerReq, 1)],
    ['  machine busy cores / not ours (others, softirq)', (p) => (P(p)?.saturation ? `${f(P(p)!.saturation!.cpu.machine?.cores, 2)} / ${f(P(p)!.saturation!.cpu.other?.cores, 2)}` : NA)],
    [`fixed rate ${f(s.rate)} req/s, ${s.bodyBytes} B POST: achieved`, (p) => f(P(p)?.rate?.achievedRps)],
    ['  errors / bad responses', (p) => (P(p)?.rate ? `${P(p)!.rate!.errors} / ${P(p)!.rate!.badResponses}` : NA)],
    ['  p50 latency µs', (p) => f(P(p)?.rate?.latencyUs.p50)],
    ['  p90 latency µs', (p) => f(P(p)?.rate?.latencyUs.p90)],
    ['  p99 latency µs', (p) => f(P(p)?.rate?.latencyUs.p99)],
    ['  p50 / p99 µs from when due (corrected)', (p) => (P(p)?.rate ? `${f(P(p)!.rate!.latencyCorrectedUs.p50)} / ${f(P(p)!.rate!.latencyCorrectedUs.p99)}` : NA)],
    ['  requests over 1 ms / over 10 ms', (p) => (P(p)?.rate ? `${f(P(p)!.rate!.over1ms)} / ${f(P(p)!.rate!.over10ms)}` : NA)],
    ['  waypoint CPU µs/req', (p) => f(P(p)?.rate?.waypointUsPerReq, 1)],
    ['  waypoint vCPU (cores)', (p) => f(P(p)?.rate?.waypointCores, 3)],
    ['  waypoint vCPU per 1000 req/s', (p) => f(P(p)?.rate?.vcpuPer1000, 3)],
    ...(withWorkers ? ([['  waypoint cores per process (primary, workers)', (p: PathName) => perProcess(P(p)?.rate?.cpu)]] as [string, (p: PathName) => string][]) : []),
    ['  fixture CPU µs/req', (p) => f(P(p)?.rate?.cpu.fixture?.usPerReq, 1)],
    ['  machine busy cores / not ours (others, softirq)', (p) => (P(p)?.rate ? `${f(P(p)!.rate!.cpu.machine?.cores, 2)} / ${f(P(p)!.rate!.cpu.other?.cores, 2)}` : NA)],
    [`idle tunnels (${s.idleTunnels}, one GET each): still open`, (p) => (P(p)?.idle ? `${P(p)!.idle!.stillOpenAtMeasure}` : NA)],
    ['  waypoint RSS KiB per idle tunnel', (p) => (P(p)?.idle ? `${f(P(p)!.idle!.kibPerTunnel, 1)}${P(p)!.idle!.gc ? ' (after GC)' : ' (no GC)'}` : NA)],
    ['  of it JS heap / external / the rest (native; < 0: malloc reused freed memory)', (p) => idleSplit(P(p)?.idle)],
    ['  RSS KiB per tunnel before the GC (with garbage)', (p) => f(P(p)?.idle?.gc?.rssWithGarbageKibPerTunnel, 1)],
    ...(s.idleRounds > 1
      ? ([
          [
            `  heap-used MiB after closing, rounds 1..${s.idleRounds}${s.gc ? ' (GC)' : ''}`,
            (p: PathName) => (P(p)?.idle ? P(p)!.idle!.rounds.map((r) => f(((s.gc ? r.gcHeapUsedAfterCloseKiB : r.heapUsedAfterCloseKiB) ?? NaN) / 1024, 1)).join(' ') : NA),
          ],
        ] as [string, (p: PathName) => string][])
      : []),
    ['  waypoint RSS MiB before → with tunnels → closed', (p) => (P(p)?.idle ? `${f(P(p)!.idle!.rssBeforeKiB / 1024, 1)} → ${f(P(p)!.idle!.rssAfterKiB / 1024, 1)} → ${f(P(p)!.idle!.rssAfterCloseKiB / 1024, 1)}` : NA)],
    ...(s.gc
      ? ([
          ['waypoint heap-used MiB after all load (GC)', (p: PathName) => (P(p)?.waypointAfterLoadGc ? f(P(p)!.waypointAfterLoadGc!.heapUsedKiB / 1024, 1) : NA)],
        ] as [string, (p: PathName) => string][])
      : []),
    ['waypoint RSS MiB: ready → warmed → after saturation', (p) => (P(p)?.waypointRssEndKiB ? `${f((P(p)!.waypointRssAtReadyKiB ?? NaN) / 1024, 1)} → ${f((P(p)!.waypointRssAfterWarmKiB ?? NaN) / 1024, 1)} → ${f(P(p)!.waypointRssEndKiB! / 1024, 1)}` : NA)],
  ];
  const w0 = Math.max(...rows.map(([l]) => l.length)) + 2;
  const cw = 24;
  const line = (label: string, cells: string[]) => `${label.padEnd(w0)}${cells.map((c) => c.padStart(cw)).join('')}`;
  const out: string[] = [];
  out.push('');
  out.push(`node-waypoint bench  ${r.startedAt}  (${r.host.cpus} × ${r.host.cpuModel}, Node ${r.host.node}${r.host.commit ? `, ${r.host.commit}` : ''}, ${r.wallS} s)`);
  if (Object.keys(r.paths).length > 0) out.push(...coreTable(r, rows, line, w0, cw, cols));
  if (r.scenarios.length > 0) out.push(...scenarioTable(r));
  const findings = Object.entries(r.logs).filter(([, l]) => l.warnings + l.errors + l.other > 0 || l.exitedEarly);
  if (findings.length > 0) {
    out.push('');
    out.push('Process logs (warnings, errors, unexpected output)');
    for (const [name, l] of findings) {
      out.push(`  ${name}: ${l.errors} errors, ${l.warnings} warnings, ${l.other} other lines${l.exitedEarly ? ', EXITED EARLY' : ''}${l.exitCode !== undefined ? `, exit code ${l.exitCode}` : ''}`);
      for (const sm of l.samples) out.push(`    ${sm}`);
    }
  }
  if (r.warnings.length > 0) {
    out.push('');
    out.push('WARNINGS');
    for (const w of r.warnings) out.push(`  ! ${w}`);
  }
  out.push('');
  out.push('CPU figures are per process from /proc (utime+stime over the measured window); 2 cores are shared by');
  out.push('load generator, fixture and waypoint, so compare ratios within one run, not absolute req/s across runs.');
  out.push('');
  process.stdout.write(out.join('\n'));
}

/** The core flows' table (one column per path) and the aims. */
function coreTable(
  r: BenchReport,
  rows: [string, (p: PathName) => string][],
  line: (label: string, cells: string[]) => string,
  w0: number,
  cw: number,
  cols: PathName[],
): string[] {
  const s = r.settings;
  const out: string[] = [];
  out.push('');
  out.push(line('', cols));
  out.push('-'.repeat(w0 + cw * cols.length));
  for (const [label, fn] of rows) out.push(line(label, cols.map((c) => (r.paths[c] ? fn(c) : '(skipped)'))));
  // The fixed-rate run's warm-up: a flat series means the measured window is past the JIT's warm-up.
  const series = cols.flatMap((c) => {
    const ps = r.paths[c]?.rate?.waypointCoresPerSecond;
    if (!ps || ps.length === 0) return [];
    const w: string[] = [];
    for (let i = 0; i < ps.length; i += 5) w.push(f(ps.slice(i, i + 5).reduce((x, y) => x + y, 0) / ps.slice(i, i + 5).length, 2));
    return [`${c} ${w.join(' ')}`];
  });
  if (series.length > 0) {
    out.push('');
    out.push(`fixed rate: waypoint cores per 5 s from the start of the ${s.rateWarmupS} s warm-up (measured from ${s.rateWarmupS} s on)`);
    for (const x of series) out.push(`  ${x}`);
  }
  out.push('');
  const q = r.ratios;
  const a = r.aims;
  // One row per aim: the waypoint's figure, the aim and whether it is met, and with `--floor` the
  // floor's figure for the same aim (what bare Node needs for the job: "met", or "floor is X, we are Y").
  const fl = r.paths.floor !== undefined || r.scenarios.some((sc) => sc.runs.floor);
  const labelW = 52;
  out.push(`${'Ratios and aims'.padEnd(labelW)}${'waypoint'.padStart(10)}  ${'aim'.padEnd(10)}${''.padEnd(8)}${fl ? 'floor'.padStart(10) : ''}`);
  const aim = (label: string, v: number | null | undefined, digits: number, unit: string, aimText: string, ok: boolean | null, floor?: number | null, note = '') => {
    const cell = (x: number | null | undefined) => (x == null ? NA : `${f(x, digits)}${unit}`);
    out.push(`  ${label.padEnd(labelW - 2)}${cell(v).padStart(10)}  ${aimText.padEnd(10)}${verdict(ok).padEnd(8)}${fl ? (floor === undefined ? '' : cell(floor)).padStart(10) : ''}${note ? `  ${note}` : ''}`);
  };
  const max = (v: number | null | undefined, m: number) => (v == null ? null : v <= m);
  const min = (v: number | null | undefined, m: number) => (v == null ? null : v >= m);
  const F = r.paths.floor;
  const vcpu = r.paths.waypoint?.rate?.vcpuPer1000 ?? null;
  aim('vCPU per 1000 req/s (fixed rate)', vcpu, 3, '', `≤ ${a.vcpuPer1000}`, max(vcpu, a.vcpuPer1000), F?.rate?.vcpuPer1000 ?? null, `waypoint ÷ Envoy waypoint (≈ ${a.envoyVcpuPer1000}): ${f(q.waypointVcpuPer1000VsEnvoy, 2)}×`);
  aim('CPU/req ÷ l4-relay CPU/req, saturation', q.waypointCpuPerReqVsL4Saturation, 2, '×', `≤ ${a.cpuRatioVsL4}×`, max(q.waypointCpuPerReqVsL4Saturation, a.cpuRatioVsL4), q.floorCpuPerReqVsL4Saturation);
  aim(`CPU/req ÷ l4-relay CPU/req, at ${f(s.rate)}/s`, q.waypointCpuPerReqVsL4AtRate, 2, '×', `≤ ${a.cpuRatioVsL4AtRate}×`, max(q.waypointCpuPerReqVsL4AtRate, a.cpuRatioVsL4AtRate), q.floorCpuPerReqVsL4AtRate);
  aim('req/s ÷ l4-relay, saturation', q.waypointReqPerSecVsL4, 2, '', `≥ ${a.reqPerSecVsL4}`, min(q.waypointReqPerSecVsL4, a.reqPerSecVsL4), q.floorReqPerSecVsL4);
  aim(`p99 at ${f(s.rate)}/s ÷ l4-relay`, q.waypointP99VsL4AtRate, 2, '×', `≤ ${a.p99VsL4AtRate}×`, max(q.waypointP99VsL4AtRate, a.p99VsL4AtRate), q.floorP99VsL4AtRate);
  if (r.scenarios.length > 0) {
    aim('h2c 1 tunnel × N streams: CPU/req ÷ l4', q.h2OneTunnelCpuPerReqVsL4, 2, '×', `≤ ${a.h2CpuRatioVsL4}×`, max(q.h2OneTunnelCpuPerReqVsL4, a.h2CpuRatioVsL4), q.floorH2OneTunnelCpuPerReqVsL4);
    aim('  its µs/req ÷ HTTP/1.1 many tunnels µs/req', q.h2OneTunnelUsPerReqVsH1, 2, '×', '≤ 1×', max(q.h2OneTunnelUsPerReqVsH1, 1), q.floorH2OneTunnelUsPerReqVsH1);
    aim('h2c N tunnels × 1 stream: CPU/req ÷ l4', q.h2ManyTunnelsCpuPerReqVsL4, 2, '×', `≤ ${a.h2CpuRatioVsL4}×`, max(q.h2ManyTunnelsCpuPerReqVsL4, a.h2CpuRatioVsL4), q.floorH2ManyTunnelsCpuPerReqVsL4);
    aim('gRPC unary: CPU/req ÷ l4', q.grpcUnaryCpuPerReqVsL4, 2, '×', `≤ ${a.h2CpuRatioVsL4}×`, max(q.grpcUnaryCpuPerReqVsL4, a.h2CpuRatioVsL4), q.floorGrpcUnaryCpuPerReqVsL4);
    aim('HTTP/1.1 64 KiB GET: CPU/req ÷ l4', q.h1LargeCpuPerReqVsL4, 2, '×', `≤ ${a.h1LargeCpuRatioVsL4}×`, max(q.h1LargeCpuPerReqVsL4, a.h1LargeCpuRatioVsL4), q.floorH1LargeCpuPerReqVsL4);
  }
  const kib = r.paths.waypoint?.idle?.kibPerTunnel ?? null;
  aim('KiB per idle tunnel (RSS)', kib, 2, '', `≤ ${a.kibPerIdleTunnel}`, max(kib, a.kibPerIdleTunnel), F?.idle?.kibPerTunnel ?? null);
  if (r.paths['waypoint-workers']) {
    const w = q.workersReqPerSecVsWaypoint;
    aim(`req/s ${s.workers} workers ÷ 1 worker, saturation (contended)`, w, 2, '', `≥ ${a.workersReqPerSecRatio}`, min(w, a.workersReqPerSecRatio), fl ? null : undefined, `${r.host.cpus} cores shared with load generator and fixture`);
    out.push(`    waypoint CPU/req ${s.workers} workers ÷ 1 worker ${f(q.workersCpuPerReqVsWaypoint, 2)}×; tunnel roles spread over ${s.hboneConnections} HBONE connections each (BENCH_HBONE_CONNECTIONS)`);
    out.push(`    ceiling on this machine: ${r.host.cpus} cores ÷ (waypoint + fixture + load generator CPU/req of the 1-worker run) = ${f(q.workersCeilingVsWaypoint, 2)}× the 1-worker req/s (no number of workers can show more here)`);
  }
  const l4vcpu = r.paths['l4-relay']?.rate?.vcpuPer1000 ?? null;
  out.push(`  l4-relay vCPU per 1000 req/s                      ${f(l4vcpu, 3)}  (lab: Node HBONE passthrough ≈ 0.09)`);
  out.push(`  req/s waypoint ÷ direct, l4-relay ÷ direct        ${f(q.waypointReqPerSecVsDirect, 2)}, ${f(q.l4ReqPerSecVsDirect, 2)}`);
  out.push(`  added p50 µs: l4-relay vs direct, waypoint vs l4  ${f(q.addedP50UsL4VsDirect)}, ${f(q.addedP50UsWaypointVsL4)}`);
  if (F) out.push(`  waypoint CPU/req ÷ floor CPU/req                  ${f(q.waypointCpuPerReqVsFloorSaturation, 2)}× saturation, ${f(q.waypointCpuPerReqVsFloorAtRate, 2)}× at ${f(s.rate)}/s (what the waypoint spends over bare Node)`);
  if (s.concurrency > 1) out.push(`  waypoint processes: a primary and ${s.concurrency} workers (--concurrency ${s.concurrency}); the CPU figures are their sum`);
  if (r.paths['waypoint-stats']) {
    out.push(`  istio.stats: waypoint-stats ÷ waypoint CPU/req      ${f(q.statsCpuPerReqVsWaypointSaturation, 3)}× saturation (${f(q.statsAddedUsPerReqSaturation, 1)} µs/req), ${f(q.statsCpuPerReqVsWaypointAtRate, 3)}× at ${f(s.rate)}/s (${f(q.statsAddedUsPerReqAtRate, 1)} µs/req)`);
    out.push(`  istio.stats: req/s waypoint-stats ÷ waypoint       ${f(q.statsReqPerSecVsWaypoint, 3)}`);
  }
  return out;
}

/** How HTTP/2 reached the backend in an h2c/gRPC run (backend-wire.ts). */
function http2Cell(mode: string | null): string {
  if (mode === 'relayed') return 'client h2 (relayed)';
  if (mode === 'terminated') return 'proxy h2 (L7)';
  if (mode === 'unknown') return 'unknown';
  return '';
}

/** `get(a) ÷ get(b)` for two paths' runs of one case when both are ok. */
function vsOk(sc: ScenarioReport, a: PathName, b: PathName, get: (run: NonNullable<ScenarioReport['runs'][PathName]>) => number | null | undefined): number | null {
  const x = sc.runs[a];
  const y = sc.runs[b];
  if (x?.status !== 'ok' || y?.status !== 'ok') return null;
  const va = get(x);
  const vb = get(y);
  return va != null && vb != null && vb > 0 ? va / vb : null;
}

/** The closed-loop scenarios: one block per case, one row per path, then many-vs-one summaries. */
function scenarioTable(r: BenchReport): string[] {
  const s = r.settings;
  const out: string[] = [];
  const heads = ['req/s', 'p50 µs', 'p99 µs', 'waypoint µs/req', 'fixture µs/req', 'req/s ÷ l4', 'req/s ÷ direct', 'wp CPU ÷ l4', 'HTTP/2 at backend'];
  const widths = [9, 9, 9, 17, 16, 12, 16, 13, 21];
  const labelW = Math.max(40, ...r.scenarios.map((c) => c.case.label.length + 2));
  const row = (label: string, cells: string[]) => `${label.padEnd(labelW)}${cells.map((c, i) => c.padStart(widths[i])).join('')}`;
  out.push('');
  out.push(`Scenarios: closed loop (each worker sends its next request when the last one is done), ${s.scenarioWarmupS} s warm-up + ${s.scenarioDurationS} s measured per run;`);
  out.push('latency from our own µs histogram; "wp CPU ÷ l4" = waypoint CPU/req here ÷ the l4-relay waypoint\'s CPU/req (what L7 costs)');
  out.push('');
  out.push(row('', heads));
  out.push('-'.repeat(labelW + widths.reduce((a, b) => a + b, 0)));
  for (const sc of r.scenarios) {
    out.push(sc.case.label);
    const q = sc.ratios;
    const notes: string[] = [];
    for (const p of ['direct', 'l4-relay', 'waypoint', 'waypoint-stats', 'waypoint-workers', 'floor'] as const) {
      const run = sc.runs[p];
      if (!run) continue;
      if (run.status === 'skipped') {
        out.push(`  ${p.padEnd(labelW - 2)}${run.reason}`);
        continue;
      }
      const res = run.result!;
      const errs = res.errors + res.badResponses;
      out.push(
        row(`  ${p}`, [
          f(res.reqPerSec),
          f(res.latencyUs.p50),
          f(res.latencyUs.p99),
          f(run.waypointUsPerReq, 1),
          f(run.fixtureUsPerReq, 1),
          p === 'waypoint' ? f(q.reqPerSecWaypointVsL4, 2) : isL7Path(p) ? f(vsOk(sc, p, 'l4-relay', (x) => x.result?.reqPerSec), 2) : '',
          p === 'waypoint' ? f(q.reqPerSecWaypointVsDirect, 2) : p === 'l4-relay' ? f(q.reqPerSecL4VsDirect, 2) : isL7Path(p) ? f(vsOk(sc, p, 'direct', (x) => x.result?.reqPerSec), 2) : '',
          p === 'waypoint' ? f(q.waypointCpuPerReqVsL4, 2) : isL7Path(p) ? f(vsOk(sc, p, 'l4-relay', (x) => x.waypointUsPerReq), 2) : '',
          http2Cell(run.http2),
        ]) + (errs > 0 ? `  (${errs} errors)` : ''),
      );
      if (isL7Path(p) && run.http2 === 'relayed') notes.push('the waypoint relayed these HTTP/2 bytes without terminating them: L4 figures, not L7');
      if ((s.concurrency > 1 || p === 'waypoint-workers') && p !== 'direct') out.push(`    waypoint cores per process (primary, workers): ${perProcess(run.cpu)}`);
    }
    for (const n of notes) out.push(`  note: ${n}`);
  }
  // Many tunnels vs one tunnel.
  const byId = new Map(r.scenarios.map((sc) => [sc.case.id, sc]));
  const h1k = byId.get('h1-1k');
  if (!byId.has('h1-many') && h1k && h1k.case.connections === s.manyTunnels) byId.set('h1-many', h1k);
  const pairs = [['HTTP/1.1', 'h1-many', 'h1-one'], ['h2c', 'h2-many', 'h2-one']] as const;
  const lines: string[] = [];
  for (const [name, manyId, oneId] of pairs) {
    const many = byId.get(manyId);
    const one = byId.get(oneId);
    if (!many || !one) continue;
    const cells: string[] = [];
    for (const p of ['direct', 'l4-relay', 'waypoint', 'floor'] as const) {
      const m = many.runs[p];
      const o = one.runs[p];
      if (!m || !o) continue;
      if (m.status !== 'ok' || o.status !== 'ok') {
        cells.push(`${p} n/a`);
        continue;
      }
      const rps = m.result!.reqPerSec > 0 ? o.result!.reqPerSec / m.result!.reqPerSec : NaN;
      cells.push(`${p} ${f(rps, 2)}${p === 'direct' ? '' : ` (waypoint µs/req ${f(m.waypointUsPerReq, 1)} → ${f(o.waypointUsPerReq, 1)})`}`);
    }
    lines.push(`  ${name.padEnd(9)} req/s one ÷ many: ${cells.join('; ')}`);
  }
  if (lines.length > 0) {
    out.push('');
    out.push(`Many tunnels (${s.manyTunnels}) vs one tunnel`);
    out.push(...lines);
  }
  return out;
}
