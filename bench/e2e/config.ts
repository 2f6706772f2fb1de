/**
 * Addresses and knobs of the end-to-end bench. Everything lives on 127.0.200.x so it collides
 * neither with the tests nor with `npm start` (the demo uses 127.0.10.x, 15001, 15020, 15021).
 */
import type { TopologyOptions } from '../../src/demo/topology.ts';

/** The paths the bench compares, in run order. */
export const PATHS = ['direct', 'l4-relay', 'waypoint'] as const;
export type PathName = (typeof PATHS)[number];

/** The two meshed topologies: one HTTP service port (full filter chain), one TCP port (L4 relay). */
export interface TopologySpec {
  readonly key: 'http' | 'tcp';
  /** Topology options without `dir` (the orchestrator picks a temporary directory). */
  readonly options: Omit<TopologyOptions, 'dir'>;
}

const HBONE_PORT = 15008;

export const TOPOLOGIES: readonly TopologySpec[] = [
  {
    key: 'http',
    options: {
      waypointIp: '127.0.200.1',
      hbonePort: HBONE_PORT,
      vip: '127.0.200.100',
      servicePort: 80,
      podIps: ['127.0.200.11'],
      targetPort: 8080,
      clientIp: '127.0.200.50',
      tunnelListen: '127.0.200.50:18080',
      admin: '127.0.200.1:15920',
      readiness: '',
      startWaypoint: false,
      portName: 'http',
    },
  },
  {
    key: 'tcp',
    options: {
      waypointIp: '127.0.200.2',
      hbonePort: HBONE_PORT,
      vip: '127.0.200.101',
      servicePort: 80,
      podIps: ['127.0.200.21'],
      targetPort: 8080,
      clientIp: '127.0.200.51',
      tunnelListen: '127.0.200.51:18080',
      admin: '127.0.200.2:15920',
      readiness: '',
      startWaypoint: false,
      portName: 'tcp',
    },
  },
];

/** Where each path's load goes, and which waypoint (if any) serves it. */
export function pathTarget(path: PathName): { url: string; host: string; port: number; topology: 'http' | 'tcp' | undefined } {
  const http = TOPOLOGIES[0].options;
  const tcp = TOPOLOGIES[1].options;
  const split = (hp: string) => {
    const i = hp.lastIndexOf(':');
    return { host: hp.slice(0, i), port: Number(hp.slice(i + 1)) };
  };
  if (path === 'direct') {
    const host = http.podIps[0];
    const port = http.targetPort ?? 8080;
    return { url: `http://${host}:${port}`, host, port, topology: undefined };
  }
  const t = split(path === 'waypoint' ? http.tunnelListen : tcp.tunnelListen);
  return { url: `http://${t.host}:${t.port}`, ...t, topology: path === 'waypoint' ? 'http' : 'tcp' };
}

function num(name: string, dflt: number): number {
  const raw = process.env[name];
  if (raw === undefined || raw === '') return dflt;
  const v = Number(raw);
  if (!Number.isFinite(v) || v < 0) throw new Error(`${name}=${raw}: expected a non-negative number`);
  return v;
}

export interface BenchSettings {
  /** Saturation: autocannon duration and warm-up (s), connections. */
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
  /** BENCH_GC=1: waypoints run with --inspect so the idle flow can force a GC and read process.memoryUsage(). */
  readonly gc: boolean;
  /** Before each measured run, wait up to this long (s) for other processes to use < 0.15 cores (0: don't). */
  readonly quietWaitS: number;
}

export function loadSettings(): BenchSettings {
  const paths = (process.env.BENCH_PATHS ?? PATHS.join(','))
    .split(',')
    .map((s) => s.trim())
    .filter(Boolean);
  for (const p of paths) if (!(PATHS as readonly string[]).includes(p)) throw new Error(`BENCH_PATHS: unknown path "${p}" (known: ${PATHS.join(', ')})`);
  return {
    durationS: num('BENCH_DURATION_S', 8),
    warmupS: num('BENCH_WARMUP_S', 2),
    connections: num('BENCH_CONNECTIONS', 50),
    rate: num('BENCH_RATE', 1000),
    rateDurationS: num('BENCH_RATE_DURATION_S', 8),
    rateWarmupS: num('BENCH_RATE_WARMUP_S', 2),
    rateConnections: num('BENCH_RATE_CONNECTIONS', 16),
    bodyBytes: num('BENCH_BODY_BYTES', 1024),
    idleTunnels: num('BENCH_IDLE_TUNNELS', 1000),
    idleSettleMs: num('BENCH_IDLE_SETTLE_MS', 2000),
    idleRounds: Math.max(1, num('BENCH_IDLE_ROUNDS', 1)),
    paths: PATHS.filter((p) => paths.includes(p)),
    gc: process.env.BENCH_GC === '1',
    quietWaitS: num('BENCH_QUIET_WAIT_S', 10),
  };
}

/** The aims the report compares against (docs: ../shared/reference/performance.md). */
export const AIMS = {
  /** Waypoint CPU per request ÷ L4 relay CPU per request. */
  cpuRatioVsL4: 2,
  /** vCPU per 1000 req/s at 1 KiB. */
  vcpuPer1000: 0.2,
  /** Envoy waypoint, Istio 1.24 published figure. */
  envoyVcpuPer1000: 0.25,
  /** KiB of waypoint memory per idle tunnel. */
  kibPerIdleTunnel: 20,
} as const;
