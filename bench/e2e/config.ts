/**
 * Addresses and knobs of the end-to-end bench. Everything lives on 127.0.200.x so it collides
 * neither with the tests nor with `npm start` (the demo uses 127.0.10.x, 15001, 15020, 15021).
 */
import type { TopologyOptions } from '../../src/demo/topology.ts';

/**
 * The paths the bench compares, in run order. `waypoint-stats` is the waypoint path with the
 * `istio.stats` filter in its chain (its own topology and waypoint process); it runs only when
 * asked for (`--stats`, BENCH_STATS=1, or named in BENCH_PATHS). `waypoint-workers` is the waypoint
 * path again with a waypoint of BENCH_WORKERS (2) workers (`--workers`, or named in BENCH_PATHS).
 * `floor` is the same chain with bare Node in the waypoint's place (bench/micro/floor-relay.ts: the
 * least Node needs for the waypoint's job; `--floor`, BENCH_FLOOR=1, or named in BENCH_PATHS).
 */
export const PATHS = ['direct', 'l4-relay', 'waypoint', 'waypoint-stats', 'waypoint-workers', 'floor'] as const;
export type PathName = (typeof PATHS)[number];
/** The paths run by default. */
export const DEFAULT_PATHS: readonly PathName[] = ['direct', 'l4-relay', 'waypoint'];

/** The waypoint paths (L7 filter chain), for the columns and ratios that concern them. */
export function isWaypointPath(p: PathName): boolean {
  return p === 'waypoint' || p === 'waypoint-stats' || p === 'waypoint-workers';
}

/** The paths that terminate HTTP between the tunnels (the waypoints and the floor), for the L7 ratios. */
export function isL7Path(p: PathName): boolean {
  return isWaypointPath(p) || p === 'floor';
}

/**
 * The bench-only backends of the scenarios (bench/e2e/backends.ts), on every pod IP next to the
 * demo's echo backend (:8080): `h1` answers `GET /bytes/N` with N bytes over HTTP/1.1, `h2` the
 * same over h2c, `grpc` is a grpc-js unary echo.
 */
export const BACKEND_KINDS = ['h1', 'h2', 'grpc'] as const;
export type BackendKind = (typeof BACKEND_KINDS)[number];

/** Port of each bench backend on the pod IPs. */
export const BACKEND_PORTS: Readonly<Record<BackendKind, number>> = { h1: 8081, h2: 8082, grpc: 8083 };

/** One extra Service of a topology for a bench backend, and the tunnel role in front of it. */
export interface BenchService {
  /** Service name in the mesh (selector `app: echo`, so the same pods). */
  readonly name: string;
  readonly vip: string;
  /** Service port name: sets the protocol the waypoint sees (`http`, `http2`, `grpc`, or `tcp…`). */
  readonly portName: string;
  /** Plain-TCP entry of a `tunnel` role whose CONNECT authority is `vip:80`. */
  readonly tunnelListen: string;
}

/**
 * The meshed topologies: one HTTP service port (full filter chain), one TCP port (L4 relay), and
 * the HTTP one again for a waypoint whose chain also has `istio.stats` (only started when the
 * `waypoint-stats` path runs), once more for a waypoint running workers (`waypoint-workers`), and
 * once more with the floor relay in the waypoint's place (`floor`).
 */
export interface TopologySpec {
  readonly key: TopologyKey;
  /** Topology options without `dir` (the orchestrator picks a temporary directory). */
  readonly options: Omit<TopologyOptions, 'dir'>;
  /** The scenarios' extra Services (port 80 → the bench backend's port), appended to the mesh. */
  readonly bench: Readonly<Record<BackendKind, BenchService>>;
  /** Filters before the router in the waypoint's chain (default: the bootstrap default, router only). */
  readonly filters?: readonly string[];
}

export type TopologyKey = 'http' | 'tcp' | 'http-stats' | 'http-workers' | 'http-floor';

const HBONE_PORT = 15008;

/**
 * BENCH_NET: the third octet of every bench address (default 200), so that two benches can run side
 * by side (e.g. before/after worktrees) without sharing a listener.
 */
export const BENCH_NET = benchNet(process.env.BENCH_NET);
function benchNet(raw: string | undefined): number {
  if (raw === undefined || raw === '') return 200;
  const n = Number(raw);
  if (!Number.isInteger(n) || n < 1 || n > 254) {
    // Read when the module loads, before run.ts can catch it: the same one line and exit 2 as any bad knob.
    process.stderr.write(`bench: BENCH_NET: "${raw}" is not an octet 1-254\n`);
    process.exit(2);
  }
  return n;
}
const ip = (host: number): string => `127.0.${BENCH_NET}.${host}`;

/**
 * One meshed topology: its waypoint (`.w`), one pod (`.pod`), the tunnel roles' client IP (`.client`),
 * the echo Service's VIP and the scenarios' VIPs (`.bench`, `.bench+1`, `.bench+2`). `tcp`: the
 * Service ports are `tcp…` (the L4 relay), else named for their protocol (`http`, `http2`, `grpc`).
 */
function topology(key: TopologyKey, h: { w: number; pod: number; client: number; vip: number; bench: number }, tcp = false, filters?: readonly string[]): TopologySpec {
  const entry = (port: number) => `${ip(h.client)}:${port}`;
  return {
    key,
    options: {
      waypointIp: ip(h.w),
      hbonePort: HBONE_PORT,
      vip: ip(h.vip),
      servicePort: 80,
      podIps: [ip(h.pod)],
      targetPort: 8080,
      clientIp: ip(h.client),
      tunnelListen: entry(18080),
      admin: `${ip(h.w)}:15920`,
      readiness: '',
      startWaypoint: false,
      portName: tcp ? 'tcp' : 'http',
    },
    bench: {
      h1: { name: 'bench-h1', vip: ip(h.bench), portName: tcp ? 'tcp' : 'http', tunnelListen: entry(18081) },
      h2: { name: 'bench-h2', vip: ip(h.bench + 1), portName: tcp ? 'tcp-h2' : 'http2', tunnelListen: entry(18082) },
      grpc: { name: 'bench-grpc', vip: ip(h.bench + 2), portName: tcp ? 'tcp-grpc' : 'grpc', tunnelListen: entry(18083) },
    },
    ...(filters ? { filters } : {}),
  };
}

export const TOPOLOGIES: readonly TopologySpec[] = [
  topology('http', { w: 1, pod: 11, client: 50, vip: 100, bench: 102 }),
  topology('tcp', { w: 2, pod: 21, client: 51, vip: 101, bench: 112 }, true),
  topology('http-stats', { w: 3, pod: 31, client: 52, vip: 120, bench: 122 }, false, ['istio.stats']),
  topology('http-workers', { w: 4, pod: 41, client: 53, vip: 130, bench: 132 }),
  // The floor (bench/micro/floor-relay.ts) as this topology's waypoint: the same Services, ports named as the waypoint's.
  topology('http-floor', { w: 5, pod: 61, client: 54, vip: 140, bench: 142 }),
];

/** The program a topology's waypoint process runs instead of bin/waypoint.js (same arguments), if any. */
export const WAYPOINT_STAND_INS: Readonly<Partial<Record<TopologyKey, string>>> = { 'http-floor': 'bench/micro/floor-relay.ts' };

const TOPOLOGY_OF: Readonly<Record<Exclude<PathName, 'direct'>, TopologyKey>> = {
  'l4-relay': 'tcp',
  waypoint: 'http',
  'waypoint-stats': 'http-stats',
  'waypoint-workers': 'http-workers',
  floor: 'http-floor',
};

/** The topology (and so the waypoint process) a path goes through; undefined for `direct`. */
export function topologyOf(path: PathName): TopologyKey | undefined {
  if (path === 'direct') return undefined;
  return TOPOLOGY_OF[path];
}

function spec(key: TopologyKey): TopologySpec {
  return TOPOLOGIES.find((t) => t.key === key)!;
}


/** Where each path's load goes, and which waypoint (if any) serves it. */
export function pathTarget(path: PathName): { url: string; host: string; port: number; topology: TopologyKey | undefined } {
  const http = TOPOLOGIES[0].options;
  const split = (hp: string) => {
    const i = hp.lastIndexOf(':');
    return { host: hp.slice(0, i), port: Number(hp.slice(i + 1)) };
  };
  if (path === 'direct') {
    const host = http.podIps[0];
    const port = http.targetPort ?? 8080;
    return { url: `http://${host}:${port}`, host, port, topology: undefined };
  }
  const topology = topologyOf(path)!;
  const t = split(spec(topology).options.tunnelListen);
  return { url: `http://${t.host}:${t.port}`, ...t, topology };
}

/** Where a scenario's load goes for one path and backend kind (host, port of a plain-TCP entry). */
export function scenarioTarget(path: PathName, kind: BackendKind): { host: string; port: number; topology: TopologyKey | undefined } {
  if (path === 'direct') return { host: TOPOLOGIES[0].options.podIps[0], port: BACKEND_PORTS[kind], topology: undefined };
  const s = spec(topologyOf(path)!);
  const hp = s.bench[kind].tunnelListen;
  const i = hp.lastIndexOf(':');
  return { host: hp.slice(0, i), port: Number(hp.slice(i + 1)), topology: s.key };
}

/**
 * Scenario groups `--only` / BENCH_ONLY can pick: `core` is the original flows per path (warm-up,
 * idle tunnels, fixed rate, saturation: the aims table); `h1` HTTP/1.1 response sizes; `tunnels`
 * many tunnels vs one tunnel (HTTP/1.1 and h2c); `grpc` gRPC unary.
 */
export const SCENARIOS = ['core', 'h1', 'tunnels', 'grpc'] as const;
export type ScenarioName = (typeof SCENARIOS)[number];

function num(name: string, dflt: number): number {
  const raw = process.env[name];
  if (raw === undefined || raw === '') return dflt;
  const v = Number(raw);
  if (!Number.isFinite(v) || v < 0) throw new Error(`${name}=${raw}: expected a non-negative number`);
  return v;
}

export interface BenchSettings {
  /** BENCH_NET: the third octet of every bench address. */
  readonly net: number;
  /** Saturation (closed loop): duration and warm-up (s), connections. */
  readonly durationS: number;
  readonly warmupS: number;
  readonly connections: number;
  /** Fixed-rate run: req/s, duration and warm-up (s), keep-alive connections, POST body bytes. */
  readonly rate: number;
  readonly rateDurationS: number;
  readonly rateWarmupS: number;
  readonly rateConnections: number;
  readonly bodyBytes: number;
  /** Idle tunnels to open per meshed path (0 skips the memory flow); settle time (ms). */
  readonly idleTunnels: number;
  readonly idleSettleMs: number;
  /** Open/close the idle tunnels this many times (memory left after each close: a leak check; best with BENCH_GC=1). */
  readonly idleRounds: number;
  readonly paths: readonly PathName[];
  /** BENCH_GC=1: waypoints run with --inspect from the start, and each path ends with a forced GC too. */
  readonly gc: boolean;
  /** The idle flow forces a GC before each reading (BENCH_IDLE_GC, default 1; 0: raw RSS with garbage). */
  readonly idleGc: boolean;
  /** BENCH_HEAP_SNAPSHOTS=<dir>: the idle flow writes heap snapshots before and with the tunnels there. */
  readonly heapSnapshotDir: string | undefined;
  /** Before each measured run, wait up to this long (s) for other processes to use < 0.15 cores (0: don't). */
  readonly quietWaitS: number;
  /** Scenario groups to run (`--only a,b` or BENCH_ONLY; default all). */
  readonly only: readonly ScenarioName[];
  /** Closed-loop scenario runs: measured and warm-up seconds. */
  readonly scenarioDurationS: number;
  readonly scenarioWarmupS: number;
  /** Before each scenario run, wait up to this long (s) for a quiet machine (shorter than the core's: there are many runs). */
  readonly scenarioQuietWaitS: number;
  /** Connections of the HTTP/1.1 response-size runs (one request in flight on each). */
  readonly scenarioConnections: number;
  /** The `tunnels` scenario: tunnels of the many-tunnels runs, streams of the one-tunnel h2c run. */
  readonly manyTunnels: number;
  /** gRPC unary: channels (one connection each) and calls in flight on each. */
  readonly grpcChannels: number;
  readonly grpcConcurrency: number;
  /** gRPC unary request (and echoed response) payload bytes. */
  readonly grpcBytes: number;
  /**
   * `waypoint run --concurrency` of the waypoint processes (`--concurrency N` or BENCH_CONCURRENCY;
   * default 1, one process, so figures compare across runs and machines).
   */
  readonly concurrency: number;
  /** Workers of the `waypoint-workers` path's waypoint (BENCH_WORKERS, default 2). */
  readonly workers: number;
  /**
   * HBONE connections each tunnel role of the fixture spreads its CONNECTs over
   * (BENCH_HBONE_CONNECTIONS). Default 1 (up to 100 streams on one connection, as ztunnel packs
   * them), or twice the most workers a waypoint of the run has: node:cluster hands connections,
   * not streams, to the workers, so one connection would load one worker (istio/istio#51305).
   */
  readonly hboneConnections: number;
}

const USAGE = `npm run bench [-- --only ${SCENARIOS.join(',')}] [--stats] [--workers] [--floor] [--concurrency N]`;

/** The value of `--name V` / `--name=V` in argv (the last one), else undefined. */
function argValue(argv: readonly string[], name: string): string | undefined {
  let v: string | undefined;
  for (let i = 0; i < argv.length; i++) {
    if (argv[i] === name) v = argv[i + 1] ?? '';
    else if (argv[i].startsWith(`${name}=`)) v = argv[i].slice(name.length + 1);
  }
  return v;
}

/** `--only a,b` / `--only=a,b` from argv, else BENCH_ONLY, else every scenario group. */
function onlyScenarios(argv: readonly string[]): ScenarioName[] {
  const raw = argValue(argv, '--only') ?? process.env.BENCH_ONLY ?? '';
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    if (a === '--only' || a === '--concurrency') i++;
    else if (a.startsWith('--only=') || a.startsWith('--concurrency=') || a === '--stats' || a === '--workers' || a === '--floor') continue;
    else if (a === '--help' || a === '-h') {
      process.stdout.write(`usage: ${USAGE}   (knobs: bench/README.md)\n`);
      process.exit(0);
    } else throw new Error(`unknown argument "${a}" (usage: ${USAGE})`);
  }
  const names = raw.split(',').map((x) => x.trim()).filter(Boolean);
  for (const n of names) if (!(SCENARIOS as readonly string[]).includes(n)) throw new Error(`--only: unknown scenario "${n}" (known: ${SCENARIOS.join(', ')})`);
  return names.length === 0 ? [...SCENARIOS] : SCENARIOS.filter((n) => names.includes(n));
}

/** A 0/1 knob: unset, empty or `0` is off, `1` is on; anything else is an error rather than silently off. */
function onOff(name: string): boolean {
  const v = process.env[name];
  if (v === undefined || v === '' || v === '0') return false;
  if (v === '1') return true;
  throw new Error(`${name}: "${v}" must be 1 or 0`);
}

export function loadSettings(argv: readonly string[] = process.argv.slice(2)): BenchSettings {
  const paths = (process.env.BENCH_PATHS ?? DEFAULT_PATHS.join(','))
    .split(',')
    .map((s) => s.trim())
    .filter(Boolean);
  // `--stats` / BENCH_STATS=1: the waypoint path once more with istio.stats, for the with/without figures.
  if ((argv.includes('--stats') || onOff('BENCH_STATS')) && paths.includes('waypoint') && !paths.includes('waypoint-stats')) paths.push('waypoint-stats');
  // `--workers`: the waypoint path once more with a waypoint running workers, for the workers ratio.
  if (argv.includes('--workers') && paths.includes('waypoint') && !paths.includes('waypoint-workers')) paths.push('waypoint-workers');
  // `--floor` / BENCH_FLOOR=1: the floor relay in the waypoint's place, for the floor column of every aim.
  if ((argv.includes('--floor') || onOff('BENCH_FLOOR')) && !paths.includes('floor')) paths.push('floor');
  for (const p of paths) if (!(PATHS as readonly string[]).includes(p)) throw new Error(`BENCH_PATHS: unknown path "${p}" (known: ${PATHS.join(', ')})`);
  const concurrency = concurrencyOf(argv);
  const workers = Math.max(2, num('BENCH_WORKERS', 2));
  const withWorkers = Math.max(concurrency, paths.includes('waypoint-workers') ? workers : 1);
  return {
    net: BENCH_NET,
    durationS: num('BENCH_DURATION_S', 8),
    warmupS: num('BENCH_WARMUP_S', 2),
    connections: num('BENCH_CONNECTIONS', 50),
    rate: num('BENCH_RATE', 1000),
    rateDurationS: num('BENCH_RATE_DURATION_S', 8),
    // V8 is still compiling for the first 15-20 s at 1000 req/s (bench/README.md, the fixed-rate flow).
    rateWarmupS: num('BENCH_RATE_WARMUP_S', 20),
    rateConnections: num('BENCH_RATE_CONNECTIONS', 16),
    bodyBytes: num('BENCH_BODY_BYTES', 1024),
    idleTunnels: num('BENCH_IDLE_TUNNELS', 1000),
    idleSettleMs: num('BENCH_IDLE_SETTLE_MS', 2000),
    idleRounds: Math.max(1, num('BENCH_IDLE_ROUNDS', 1)),
    paths: PATHS.filter((p) => paths.includes(p)),
    gc: process.env.BENCH_GC === '1',
    idleGc: process.env.BENCH_IDLE_GC !== '0',
    heapSnapshotDir: process.env.BENCH_HEAP_SNAPSHOTS || undefined,
    quietWaitS: num('BENCH_QUIET_WAIT_S', 10),
    only: onlyScenarios(argv),
    scenarioDurationS: num('BENCH_SCENARIO_DURATION_S', 3),
    scenarioWarmupS: num('BENCH_SCENARIO_WARMUP_S', 1),
    scenarioQuietWaitS: num('BENCH_SCENARIO_QUIET_WAIT_S', Math.min(1, num('BENCH_QUIET_WAIT_S', 10))),
    scenarioConnections: Math.max(1, num('BENCH_SCENARIO_CONNECTIONS', 64)),
    manyTunnels: Math.max(1, num('BENCH_MANY_TUNNELS', 64)),
    grpcChannels: Math.max(1, num('BENCH_GRPC_CHANNELS', 1)),
    grpcConcurrency: Math.max(1, num('BENCH_GRPC_CONCURRENCY', 32)),
    grpcBytes: num('BENCH_GRPC_BYTES', 1024),
    concurrency,
    workers,
    hboneConnections: Math.max(1, num('BENCH_HBONE_CONNECTIONS', withWorkers > 1 ? 2 * withWorkers : 1)),
  };
}

/** `--concurrency N` / BENCH_CONCURRENCY: a whole number ≥ 1 (default 1). */
function concurrencyOf(argv: readonly string[]): number {
  const raw = argValue(argv, '--concurrency') ?? process.env.BENCH_CONCURRENCY ?? '1';
  const n = Number(raw);
  if (!/^\d+$/.test(raw) || n < 1) throw new Error(`--concurrency ${JSON.stringify(raw)}: expected a whole number of waypoint workers, at least 1`);
  return n;
}

/** The aims the report compares against. */
export const AIMS = {
  /** Waypoint CPU per request ÷ L4 relay CPU per request. */
  cpuRatioVsL4: 2,
  /** vCPU per 1000 req/s at 1 KiB. */
  vcpuPer1000: 0.2,
  /** Envoy waypoint, Istio 1.24 published figure. */
  envoyVcpuPer1000: 0.25,
  /** KiB of waypoint memory per idle tunnel. */
  kibPerIdleTunnel: 20,
  /** Waypoint CPU per request ÷ L4 relay's at the fixed rate (issue 15). */
  cpuRatioVsL4AtRate: 1.6,
  /** req/s waypoint ÷ l4-relay, saturation. */
  reqPerSecVsL4: 0.75,
  /** p99 latency at the fixed rate, waypoint ÷ l4-relay. */
  p99VsL4AtRate: 1.25,
  /** Scenarios: waypoint CPU per request ÷ the l4-relay's, h2c (both tunnel shapes) and gRPC unary; HTTP/1.1 64 KiB. */
  h2CpuRatioVsL4: 4,
  h1LargeCpuRatioVsL4: 2,
  /** Saturation req/s of a waypoint with 2 workers ÷ with 1 (`--workers`; on this 2-core box the load generator and fixture share the cores). */
  workersReqPerSecRatio: 1.5,
} as const;
