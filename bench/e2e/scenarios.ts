/**
 * The scenarios of `npm run bench` beyond the core flows (issue 3 "Bench"), run by the
 * orchestrator once the core flows are done, each case on every selected path back to back:
 *
 *  - h1:      HTTP/1.1 `GET /bytes/<n>` of 13 B, 1 KiB and 64 KiB over BENCH_SCENARIO_CONNECTIONS;
 *  - tunnels: many tunnels (BENCH_MANY_TUNNELS connections, each its own CONNECT) against one
 *             tunnel carrying many requests: HTTP/1.1 (one connection, no pipelining: one request
 *             at a time) and h2c (one h2c connection inside one tunnel, BENCH_MANY_TUNNELS streams);
 *  - grpc:    gRPC unary echo (the loadtest engine's gRPC client, a grpc-js server) over BENCH_GRPC_CHANNELS connections with
 *             BENCH_GRPC_CONCURRENCY calls in flight on each.
 *
 * Each run is closed loop (the loadtest engine, src/loadtest): req/s, µs latency, and from /proc the waypoint's CPU µs
 * per request; ratios against the l4-relay and direct paths of the same case.
 */
import { BACKEND_PORTS, isWaypointPath, scenarioTarget, type BackendKind, type BenchSettings, type PathName, type ScenarioName } from './config.ts';
import { bytesPath, http2Mode, type Http2Mode } from './backend-wire.ts';
import { cpuBetween, round, type CpuSnapshot } from './proc.ts';
import type { ClosedCommand, ClosedResult } from './protocol.ts';

type CpuByProcess = Record<string, { cpuS: number; cores: number; usPerReq: number | null }>;

/** One scenario case: the same load on every path. */
export interface ScenarioCase {
  readonly scenario: Exclude<ScenarioName, 'core'>;
  /**
   * Stable id (JSON key, summary lookups): `h1-13b`, `h1-1k`, `h1-64k`, `h1-many`, `h1-one`, `h2-many`,
   * `h2-one`, `grpc-unary`. `h1-many` is not run when `h1-1k` has the same connections (it is the same load).
   */
  readonly id: string;
  readonly label: string;
  readonly kind: BackendKind;
  readonly proto: ClosedCommand['proto'];
  readonly connections: number;
  readonly streams: number;
  readonly path: string;
  readonly expectBytes: number;
  readonly bodyBytes: number;
}

/** One path's run of a case. */
export interface ScenarioRun {
  readonly target: string;
  /** `skipped`: the probe request failed (or nothing completed); `reason` says why. */
  readonly status: 'ok' | 'skipped';
  readonly reason: string | null;
  readonly result: ClosedResult | null;
  readonly cpu: CpuByProcess;
  readonly waypointUsPerReq: number | null;
  readonly waypointCores: number | null;
  readonly fixtureUsPerReq: number | null;
  /** h2c/gRPC: whether HTTP/2 reached the backend end to end (`relayed`) or was terminated on the way. */
  readonly http2: Http2Mode | null;
  readonly quiet: { waitedMs: number; otherCores: number };
}

export interface ScenarioReport {
  readonly case: ScenarioCase;
  readonly runs: Partial<Record<PathName, ScenarioRun>>;
  readonly ratios: {
    readonly reqPerSecWaypointVsL4: number | null;
    readonly reqPerSecWaypointVsDirect: number | null;
    readonly reqPerSecL4VsDirect: number | null;
    /** Waypoint CPU per request on the waypoint path ÷ on the l4-relay path (what L7 costs). */
    readonly waypointCpuPerReqVsL4: number | null;
    readonly addedP50UsWaypointVsDirect: number | null;
    readonly addedP50UsL4VsDirect: number | null;
  };
}

/** The cases of the selected scenario groups, in run order. */
export function scenarioCases(s: BenchSettings): ScenarioCase[] {
  const cases: ScenarioCase[] = [];
  const c = s.scenarioConnections;
  const m = s.manyTunnels;
  const get = (bytes: number) => ({ path: bytesPath(bytes), expectBytes: bytes, bodyBytes: 0 });
  // With the default settings the h1 group's 1 KiB case is also the many-tunnels HTTP/1.1 case
  // (each connection is its own tunnel): it runs once.
  const h1Many = s.only.includes('h1') && c === m;
  if (s.only.includes('h1')) {
    for (const [id, bytes, size] of [['h1-13b', 13, '13 B'], ['h1-1k', 1024, '1 KiB'], ['h1-64k', 65536, '64 KiB']] as const) {
      const label = `HTTP/1.1 GET ${size}, ${c} connections${id === 'h1-1k' && h1Many && s.only.includes('tunnels') ? ` (= ${m} tunnels × 1 request)` : ''}`;
      cases.push({ scenario: 'h1', id, label, kind: 'h1', proto: 'h1', connections: c, streams: 1, ...get(bytes) });
    }
  }
  if (s.only.includes('tunnels')) {
    if (!h1Many) cases.push({ scenario: 'tunnels', id: 'h1-many', label: `HTTP/1.1 GET 1 KiB, ${m} tunnels × 1 request`, kind: 'h1', proto: 'h1', connections: m, streams: 1, ...get(1024) });
    cases.push({ scenario: 'tunnels', id: 'h1-one', label: 'HTTP/1.1 GET 1 KiB, 1 tunnel × 1 request (no pipelining)', kind: 'h1', proto: 'h1', connections: 1, streams: 1, ...get(1024) });
    cases.push({ scenario: 'tunnels', id: 'h2-many', label: `h2c GET 1 KiB, ${m} tunnels × 1 stream`, kind: 'h2', proto: 'h2', connections: m, streams: 1, ...get(1024) });
    cases.push({ scenario: 'tunnels', id: 'h2-one', label: `h2c GET 1 KiB, 1 tunnel × ${m} streams`, kind: 'h2', proto: 'h2', connections: 1, streams: m, ...get(1024) });
  }
  if (s.only.includes('grpc')) {
    const ch = s.grpcChannels;
    cases.push({
      scenario: 'grpc',
      id: 'grpc-unary',
      label: `gRPC unary echo ${s.grpcBytes} B, ${ch} channel${ch === 1 ? '' : 's'} × ${s.grpcConcurrency} calls`,
      kind: 'grpc',
      proto: 'grpc',
      connections: ch,
      streams: s.grpcConcurrency,
      path: '/bench.Echo/Unary',
      expectBytes: s.grpcBytes,
      bodyBytes: s.grpcBytes,
    });
  }
  return cases;
}

/** What the orchestrator lends the scenarios: the load process, /proc pids, the quiet wait. */
export interface ScenarioDeps {
  readonly settings: BenchSettings;
  /** Pids to read /proc for on a path (`fixture`, `load`, and `waypoint` on meshed paths). */
  pidsFor(path: PathName): Record<string, number>;
  /** Run a closed-loop command in the load process with /proc snapshots at its marks. */
  closed(cmd: Omit<ClosedCommand, 'id' | 'type'>, pids: Record<string, number>, timeoutMs: number): Promise<{ result: ClosedResult; marks: Record<string, CpuSnapshot> }>;
  waitQuiet(pids: Record<string, number>, what: string): Promise<{ waitedMs: number; otherCores: number }>;
  /** Throws when a process the path needs has died. */
  check(path: PathName): void;
  log(msg: string): void;
}

function skipReason(c: ScenarioCase, path: PathName, err: string): string {
  if (isWaypointPath(path) && c.proto === 'h2') return `skipped: h2c inside tunnels not available (${err})`;
  if (isWaypointPath(path) && c.proto === 'grpc') return `skipped: gRPC through the waypoint not available (${err})`;
  return `skipped: ${err}`;
}

export async function runScenarios(deps: ScenarioDeps): Promise<ScenarioReport[]> {
  const s = deps.settings;
  const out: ScenarioReport[] = [];
  for (const c of scenarioCases(s)) {
    const runs: Partial<Record<PathName, ScenarioRun>> = {};
    for (const p of s.paths) {
      const t = scenarioTarget(p, c.kind);
      const pids = deps.pidsFor(p);
      const quiet = await deps.waitQuiet(pids, `[${c.id} ${p}]`);
      deps.log(`[${c.id} ${p}] ${c.label}: ${s.scenarioWarmupS}+${s.scenarioDurationS} s`);
      const { result, marks } = await deps.closed(
        {
          proto: c.proto,
          host: t.host,
          port: t.port,
          connections: c.connections,
          streams: c.streams,
          path: c.path,
          expectBytes: c.expectBytes,
          bodyBytes: c.bodyBytes,
          warmupS: s.scenarioWarmupS,
          durationS: s.scenarioDurationS,
        },
        pids,
        (s.scenarioWarmupS + s.scenarioDurationS) * 1000 + 60_000,
      );
      deps.check(p);
      const target = `${c.proto === 'grpc' ? 'grpc' : 'http'}://${t.host}:${t.port}${c.proto === 'grpc' ? c.path : ''}`;
      const http2 = c.proto === 'h1' ? null : http2Mode(result.peerWindow);
      if (result.probeError !== null || result.requests === 0) {
        const reason = skipReason(c, p, result.probeError ?? 'no request completed in the measured window');
        deps.log(`[${c.id} ${p}] ${reason}`);
        runs[p] = { target, status: 'skipped', reason, result, cpu: {}, waypointUsPerReq: null, waypointCores: null, fixtureUsPerReq: null, http2, quiet };
        continue;
      }
      const cpu = marks.start && marks.end ? cpuBetween(marks.start, marks.end, result.requests) : {};
      runs[p] = {
        target,
        status: 'ok',
        reason: null,
        result,
        cpu,
        waypointUsPerReq: cpu.waypoint?.usPerReq ?? null,
        waypointCores: cpu.waypoint?.cores ?? null,
        fixtureUsPerReq: cpu.fixture?.usPerReq ?? null,
        http2,
        quiet,
      };
    }
    out.push({ case: c, runs, ratios: caseRatios(runs) });
  }
  return out;
}

function caseRatios(runs: Partial<Record<PathName, ScenarioRun>>): ScenarioReport['ratios'] {
  const ok = (p: PathName) => (runs[p]?.status === 'ok' ? runs[p] : undefined);
  const wp = ok('waypoint');
  const l4 = ok('l4-relay');
  const direct = ok('direct');
  const ratio = (a: number | null | undefined, b: number | null | undefined) => (a != null && b != null && b > 0 ? round(a / b, 3) : null);
  const diff = (a: number | null | undefined, b: number | null | undefined) => (a != null && b != null ? a - b : null);
  return {
    reqPerSecWaypointVsL4: ratio(wp?.result?.reqPerSec, l4?.result?.reqPerSec),
    reqPerSecWaypointVsDirect: ratio(wp?.result?.reqPerSec, direct?.result?.reqPerSec),
    reqPerSecL4VsDirect: ratio(l4?.result?.reqPerSec, direct?.result?.reqPerSec),
    waypointCpuPerReqVsL4: ratio(wp?.waypointUsPerReq, l4?.waypointUsPerReq),
    addedP50UsWaypointVsDirect: diff(wp?.result?.latencyUs.p50, direct?.result?.latencyUs.p50),
    addedP50UsL4VsDirect: diff(l4?.result?.latencyUs.p50, direct?.result?.latencyUs.p50),
  };
}

/** Problems worth a WARNINGS line: errors, skipped runs, other load on the machine. */
export function scenarioWarnings(reports: readonly ScenarioReport[]): string[] {
  const w: string[] = [];
  for (const r of reports) {
    for (const [p, run] of Object.entries(r.runs)) {
      const name = `${r.case.id} ${p}`;
      if (run.status === 'skipped') {
        w.push(`${name}: ${run.reason}`);
        continue;
      }
      const res = run.result!;
      if (res.errors + res.badResponses > 0) w.push(`${name}: ${res.errors} errors, ${res.badResponses} bad responses of ${res.requests}: ${res.errorSamples.join('; ')}`);
      const other = run.cpu.other?.cores;
      if (other !== undefined && other > 0.25) w.push(`${name}: processes outside the bench (and softirq) used ${other.toFixed(2)} cores meanwhile; its figures are contaminated`);
    }
  }
  return w;
}

/** Ports the scenarios use, for the log line at start. */
export function scenarioPortsNote(): string {
  return `backends on pod IPs :${BACKEND_PORTS.h1} (h1) :${BACKEND_PORTS.h2} (h2c) :${BACKEND_PORTS.grpc} (gRPC)`;
}
