/**
 * The settings of one load test and the checks that keep it bounded: a load test always has an
 * end (a request count or a duration), its rate and concurrency stay under hard caps unless the
 * caller raises them explicitly, and it only goes to loopback unless remote targets are allowed.
 * Whatever is wrong is a {@link LoadtestUsageError} (the CLI exits 2 on it) that names the flag.
 */
import dns from 'node:dns/promises';
import net from 'node:net';
import { normalizeIp, parseHostPort } from '../state/index.ts';
import { parseListenAddress } from '../util/index.ts';

/** What runs inside each connection (a CONNECT tunnel, or a plain TCP connection with `--target`). */
export const PROTOCOLS = ['http1', 'h2c', 'grpc'] as const;
export type Protocol = (typeof PROTOCOLS)[number];

/** Default hard caps: raised only by `maxRate` / `maxConnections` (`--max-rate`, `--max-connections`). */
export const DEFAULT_CAPS = Object.freeze({
  /** Requests per second of an open-loop run. */
  rate: 10_000,
  /** Connections (tunnels), and requests in flight (connections × streams). */
  connections: 1_000,
});

/** A bad flag or combination: the CLI prints the message and exits 2 (a usage error). */
export class LoadtestUsageError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'LoadtestUsageError';
  }
}

export interface HostPort {
  readonly host: string;
  readonly port: number;
}

/** Through an HBONE waypoint: mTLS + HTTP/2 CONNECT to `waypoint` with `:authority` = `authority`. */
export interface HboneVia {
  readonly kind: 'hbone';
  readonly waypoint: HostPort;
  /** The CONNECT `:authority`: the service `VIP:PORT` (or a pod `IP:PORT`). */
  readonly authority: string;
  /** SPIFFE URI the waypoint must present; default: any identity of the client's trust domain. */
  readonly expectSan?: string;
  /** Source IP to bind (and to name in the `forwarded` header, as ztunnel does for its pod). */
  readonly bind?: string;
  /** CONNECT streams per HBONE connection before another one is opened (ztunnel's pool: 100). */
  readonly tunnelsPerConnection: number;
  /** Extra CONNECT headers (e.g. `baggage`). */
  readonly connectHeaders: Readonly<Record<string, string>>;
}

/** Straight to a TCP address: the non-HBONE baseline (an app, or a ztunnel-less path). */
export interface TcpVia {
  readonly kind: 'tcp';
  readonly target: HostPort;
}

/** One load test, checked and resolved (durations in ms). */
export interface LoadtestSettings {
  readonly protocol: Protocol;
  readonly via: HboneVia | TcpVia;
  /** Open loop at this many requests per second; null: closed loop (saturation). */
  readonly rate: number | null;
  readonly connections: number;
  /** Requests in flight per connection (h2c, gRPC); HTTP/1.1 has one. */
  readonly streams: number;
  /** Exactly one of `requests` and `durationMs` is set. */
  readonly requests: number | null;
  readonly durationMs: number | null;
  readonly warmupMs: number;
  readonly method: string;
  readonly path: string;
  /** Host header / `:authority` inside the tunnel. */
  readonly host: string;
  readonly headers: Readonly<Record<string, string>>;
  readonly bodyBytes: number;
  /** gRPC: the method called (`/package.Service/Method`). */
  readonly grpcMethod: string;
  readonly timeoutMs: number;
  /** Resolution of the time series (progress, charts). */
  readonly intervalMs: number;
  readonly label: string;
}

/** The flags as given (strings from the command line, or numbers from code). */
export interface LoadtestFlags {
  protocol?: string;
  waypoint?: string;
  authority?: string;
  target?: string;
  expectSan?: string;
  bind?: string;
  tunnelsPerConnection?: string | number;
  connectHeader?: readonly string[];
  rate?: string | number;
  connections?: string | number;
  streams?: string | number;
  requests?: string | number;
  duration?: string;
  warmup?: string;
  method?: string;
  path?: string;
  host?: string;
  header?: readonly string[];
  bodySize?: string | number;
  grpcMethod?: string;
  timeout?: string;
  interval?: string;
  label?: string;
  maxRate?: string | number;
  maxConnections?: string | number;
  allowRemote?: boolean;
}

/** `10s`, `500ms`, `2m`, `1h` (also fractions: `1.5s`) → ms. */
export function parseDuration(flag: string, text: string): number {
  const m = /^(\d+(?:\.\d+)?)(ms|s|m|h)$/.exec(text.trim());
  if (!m) throw new LoadtestUsageError(`${flag} ${JSON.stringify(text)}: expected a duration such as 10s, 500ms, 2m`);
  const unit = { ms: 1, s: 1_000, m: 60_000, h: 3_600_000 }[m[2] as 'ms' | 's' | 'm' | 'h'];
  return Math.round(Number(m[1]) * unit);
}

/** A duration of at least `minMs` (a zero timeout or interval would fail every request or spin). */
function durationAtLeast(flag: string, text: string, minMs: number): number {
  const ms = parseDuration(flag, text);
  if (ms < minMs) throw new LoadtestUsageError(`${flag} ${text}: expected at least ${minMs < 1000 ? `${minMs}ms` : `${minMs / 1000}s`}`);
  return ms;
}

function count(flag: string, v: string | number, min: number): number {
  const n = typeof v === 'number' ? v : /^\d+(\.\d+)?$/.test(v.trim()) ? Number(v) : NaN;
  if (!Number.isFinite(n) || n < min) throw new LoadtestUsageError(`${flag} ${v}: expected a number ≥ ${min}`);
  return n;
}

const integer = (flag: string, v: string | number, min: number): number => {
  const n = count(flag, v, min);
  if (!Number.isInteger(n)) throw new LoadtestUsageError(`${flag} ${v}: expected a whole number`);
  return n;
};

function hostPort(flag: string, text: string): HostPort {
  try {
    return parseListenAddress(text);
  } catch {
    throw new LoadtestUsageError(`${flag} ${JSON.stringify(text)}: expected HOST:PORT or [IPv6]:PORT`);
  }
}

function headerList(flag: string, list: readonly string[] | undefined): Record<string, string> {
  const out: Record<string, string> = {};
  for (const h of list ?? []) {
    const i = h.indexOf(':');
    const name = i > 0 ? h.slice(0, i).trim().toLowerCase() : '';
    if (!/^[a-z0-9!#$%&'*+.^_`|~-]+$/.test(name)) throw new LoadtestUsageError(`${flag} ${JSON.stringify(h)}: expected NAME: VALUE`);
    out[name] = h.slice(i + 1).trim();
  }
  return out;
}

/**
 * Check the flags and resolve them into {@link LoadtestSettings}. Synchronous checks only: the
 * loopback rule (it may need DNS) is {@link checkLoopback}. @throws LoadtestUsageError
 */
export function resolveSettings(f: LoadtestFlags): LoadtestSettings {
  const protocol = (f.protocol ?? 'http1') as Protocol;
  if (!PROTOCOLS.includes(protocol)) throw new LoadtestUsageError(`--protocol ${f.protocol}: expected one of ${PROTOCOLS.join(', ')}`);
  const via = resolveVia(f);

  // A load test always ends: by a request count or by a duration, never by Ctrl-C alone.
  if ((f.requests === undefined) === (f.duration === undefined)) {
    throw new LoadtestUsageError(
      f.requests === undefined
        ? 'a load test needs an end: give --requests N or --duration D (e.g. --duration 30s)'
        : 'give either --requests or --duration, not both',
    );
  }
  const requests = f.requests === undefined ? null : integer('--requests', f.requests, 1);
  const durationMs = f.duration === undefined ? null : durationAtLeast('--duration', f.duration, 1);
  if (durationMs !== null && durationMs <= 0) throw new LoadtestUsageError('--duration must be longer than 0');

  const maxRate = f.maxRate === undefined ? DEFAULT_CAPS.rate : count('--max-rate', f.maxRate, 1);
  const maxConnections = f.maxConnections === undefined ? DEFAULT_CAPS.connections : integer('--max-connections', f.maxConnections, 1);
  const rate = f.rate === undefined ? null : count('--rate', f.rate, 0);
  if (rate !== null && rate <= 0) throw new LoadtestUsageError('--rate must be above 0 (leave it out for a closed-loop saturation run)');
  if (rate !== null && rate > maxRate) {
    throw new LoadtestUsageError(`--rate ${rate} is above the cap of ${maxRate} req/s; pass --max-rate ${rate} to raise the cap`);
  }
  const connections = f.connections === undefined ? (rate === null ? 16 : Math.min(64, Math.max(1, Math.ceil(rate / 100)))) : integer('--connections', f.connections, 1);
  const streams = f.streams === undefined ? (protocol === 'http1' ? 1 : 8) : integer('--streams', f.streams, 1);
  if (protocol === 'http1' && streams !== 1) throw new LoadtestUsageError('--streams: HTTP/1.1 carries one request at a time per connection (no pipelining); use --protocol h2c or grpc for streams');
  if (connections > maxConnections) {
    throw new LoadtestUsageError(`--connections ${connections} is above the cap of ${maxConnections}; pass --max-connections ${connections} to raise the cap`);
  }
  if (connections * streams > maxConnections) {
    throw new LoadtestUsageError(
      `--connections ${connections} × --streams ${streams} = ${connections * streams} requests in flight, above the cap of ${maxConnections}; pass --max-connections ${connections * streams} to raise the cap`,
    );
  }

  const path = f.path ?? '/';
  if (!path.startsWith('/')) throw new LoadtestUsageError(`--path ${JSON.stringify(path)}: expected an absolute path (/...)`);
  const grpcMethod = f.grpcMethod ?? '/grpc.health.v1.Health/Check';
  if (!/^\/[^/]+\/[^/]+$/.test(grpcMethod)) throw new LoadtestUsageError(`--grpc-method ${JSON.stringify(grpcMethod)}: expected /package.Service/Method`);
  const method = (f.method ?? 'GET').toUpperCase();
  if (!/^[A-Z]+$/.test(method)) throw new LoadtestUsageError(`--method ${JSON.stringify(f.method)}: expected an HTTP method`);
  return {
    protocol,
    via,
    rate,
    connections,
    streams,
    requests,
    durationMs,
    warmupMs: f.warmup === undefined ? 0 : parseDuration('--warmup', f.warmup),
    method,
    path,
    host: f.host ?? (via.kind === 'hbone' ? via.authority : `${via.target.host}:${via.target.port}`),
    headers: headerList('--header', f.header),
    bodyBytes: f.bodySize === undefined ? 0 : integer('--body-size', f.bodySize, 0),
    grpcMethod,
    timeoutMs: f.timeout === undefined ? 10_000 : durationAtLeast('--timeout', f.timeout, 1),
    intervalMs: f.interval === undefined ? 1_000 : durationAtLeast('--interval', f.interval, 50),
    label: f.label ?? '',
  };
}

function resolveVia(f: LoadtestFlags): HboneVia | TcpVia {
  if (f.target !== undefined) {
    for (const [flag, v] of [['--waypoint', f.waypoint], ['--authority', f.authority], ['--expect-san', f.expectSan]] as const) {
      if (v !== undefined) throw new LoadtestUsageError(`${flag} goes with an HBONE run; --target is plain TCP without HBONE`);
    }
    return { kind: 'tcp', target: hostPort('--target', f.target) };
  }
  if (f.waypoint === undefined) throw new LoadtestUsageError('give --waypoint HOST:15008 with --authority VIP:PORT (HBONE), or --target HOST:PORT (plain TCP)');
  if (f.authority === undefined) throw new LoadtestUsageError('--waypoint needs --authority VIP:PORT (the CONNECT :authority: the service address the waypoint routes to)');
  if (!parseHostPort(f.authority)) throw new LoadtestUsageError(`--authority ${JSON.stringify(f.authority)}: expected IP:PORT or [IPv6]:PORT (HBONE authorities are addresses)`);
  if (f.bind !== undefined && !normalizeIp(f.bind)) throw new LoadtestUsageError(`--bind ${JSON.stringify(f.bind)}: expected an IP address`);
  return {
    kind: 'hbone',
    waypoint: hostPort('--waypoint', f.waypoint),
    authority: f.authority,
    expectSan: f.expectSan,
    bind: f.bind,
    tunnelsPerConnection: f.tunnelsPerConnection === undefined ? 100 : integer('--tunnels-per-connection', f.tunnelsPerConnection, 1),
    connectHeaders: headerList('--connect-header', f.connectHeader),
  };
}

function isLoopback(ip: string): boolean {
  const n = normalizeIp(ip);
  return n !== undefined && (n === '::1' || (net.isIPv4(n) && n.startsWith('127.')));
}

/**
 * Refuse a destination that is not on this machine unless `allowRemote`: a typo must not flood a
 * network. A host name counts as loopback only when every address it resolves to is.
 * @throws LoadtestUsageError
 */
export async function checkLoopback(s: LoadtestSettings, allowRemote: boolean): Promise<void> {
  if (allowRemote) return;
  const [flag, hp] = s.via.kind === 'hbone' ? ['--waypoint', s.via.waypoint] : ['--target', s.via.target];
  let addresses: string[];
  if (net.isIP(hp.host)) addresses = [hp.host];
  else {
    try {
      addresses = (await dns.lookup(hp.host, { all: true })).map((a) => a.address);
    } catch (err) {
      throw new LoadtestUsageError(`${flag} ${hp.host}: cannot resolve it (${(err as NodeJS.ErrnoException).code ?? (err as Error).message})`);
    }
  }
  const remote = addresses.filter((a) => !isLoopback(a));
  if (remote.length > 0) {
    const shown = hp.host === remote[0] ? hp.host : `${hp.host} (${remote.join(', ')})`;
    throw new LoadtestUsageError(`${flag} ${shown} is not a loopback address; pass --allow-remote to load a destination off this machine`);
  }
}
