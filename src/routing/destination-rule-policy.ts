/**
 * Validate a DestinationRule `trafficPolicy` (or a subset's, or one port's) as Istio's admission
 * validation does (istio/istio pkg/config/validation/validation.go `validateTrafficPolicy`,
 * `validateConnectionPool`, `validateOutlierDetection`, `validateLoadBalancer`,
 * `validatePortTrafficPolicies`) and turn it into the upstream's {@link ClusterTrafficPolicy} parts
 * as Istio's cluster builder maps it to Envoy (istio/istio
 * pilot/pkg/networking/core/cluster_traffic_policy.go): unset limits are unlimited, outlier
 * detection only when `outlierDetection` is present, a port's `portLevelSettings` entry replacing
 * the four policy fields wholesale (`MergeTrafficPolicy`: "port level policies do not inherit and
 * instead go to defaults if not provided").
 */
import type { FieldPath } from '../state/index.ts';
import {
  DEFAULT_MAGLEV_TABLE_SIZE,
  MAX_RING_SIZE,
  UNLIMITED_POOL,
  type ConnectionPoolPolicy,
  type ConsistentHashPolicy,
  type HashKey,
  type LbAlgorithm,
  type LoadBalancerSettings,
  type OutlierDetectionPolicy,
} from './traffic-policy.ts';
import type { ConnectionPoolDoc, LoadBalancerDoc, OutlierDetectionDoc, PortTrafficPolicyDoc, TrafficPolicyDoc } from './destination-rule-schema.ts';

/** Reports a validation failure at `path` (relative to the DestinationRule object); never returns. */
export type Fail = (path: FieldPath, message: string) => never;

/** The policy fields that apply to one port (the top level, or that port's `portLevelSettings` entry). */
export interface PortPolicyDoc {
  readonly loadBalancer?: LoadBalancerDoc | null;
  readonly connectionPool?: ConnectionPoolDoc | null;
  readonly outlierDetection?: OutlierDetectionDoc | null;
}

/** Envoy's/Istio's outlier detection defaults (ms, counts, percent). */
const OUTLIER_DEFAULTS = { consecutive5xx: 5, intervalMs: 10_000, baseEjectionTimeMs: 30_000, maxEjectionPercent: 10 };
/** Envoy's `minimum_ring_size` default, which Istio sets explicitly. */
const DEFAULT_MIN_RING_SIZE = 1024;
/** Istio refuses maglev tables this large or larger. */
const MAX_MAGLEV_TABLE_SIZE = 5000011;

const GO_DURATION = /^(?:(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h))+$/;
const UNIT_NS: Readonly<Record<string, number>> = { ns: 1, us: 1e3, µs: 1e3, ms: 1e6, s: 1e9, m: 60e9, h: 3600e9 };

/**
 * Milliseconds of a duration as Istio accepts them in YAML (Go syntax: `10s`, `1m30s`, `250ms`,
 * `0.5s`), validated as Istio's `ValidateDuration`: at least 1 ms and a whole number of ms.
 * `allowZero`: `0s` is accepted (and returned as 0). Fails with Istio's messages.
 */
export function durationMs(text: string, path: FieldPath, fail: Fail, allowZero = false): number {
  const t = text.trim();
  if (t === '0' && allowZero) return 0;
  if (!GO_DURATION.test(t)) return fail(path, `must be a duration such as "10s", "250ms" or "1m30s", got ${JSON.stringify(text)}`);
  let ns = 0;
  for (const [, n, unit] of t.matchAll(/(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h)/g)) ns += Number(n) * UNIT_NS[unit];
  ns = Math.round(ns);
  if (ns === 0 && allowZero) return 0;
  if (ns < 1e6) return fail(path, 'duration must be greater than 1ms');
  if (ns % 1e6 !== 0) return fail(path, 'only durations to ms precision are supported');
  return ns / 1e6;
}

/** Validate a whole `trafficPolicy` at `at` (top level, or a subset's), port-level entries included. */
export function validateTrafficPolicy(tp: TrafficPolicyDoc | null | undefined, at: FieldPath, fail: Fail): void {
  if (!tp) return;
  const known = ['loadBalancer', 'connectionPool', 'outlierDetection', 'tls', 'portLevelSettings', 'tunnel', 'proxyProtocol'] as const;
  if (!known.some((k) => (tp as Record<string, unknown>)[k] !== undefined && (tp as Record<string, unknown>)[k] !== null)) {
    fail(at, 'traffic policy must have at least one field');
  }
  validatePortPolicy(tp, at, fail);
  (tp.portLevelSettings ?? []).forEach((p: PortTrafficPolicyDoc, i: number) => {
    const here = [...at, 'portLevelSettings', i];
    if (!p.port || p.port.number === undefined || p.port.number === null) fail([...here, 'port'], 'portTrafficPolicy must have valid port');
    const n = p.port!.number!;
    if (n < 1 || n > 65535) fail([...here, 'port', 'number'], `port number ${n} must be in the range 1..65535`);
    const r = p as Record<string, unknown>;
    if (!['loadBalancer', 'connectionPool', 'outlierDetection', 'tls'].some((k) => r[k] !== undefined && r[k] !== null)) {
      fail(here, 'port traffic policy must have at least one field');
    }
    validatePortPolicy(p, here, fail);
  });
}

function validatePortPolicy(p: PortPolicyDoc, at: FieldPath, fail: Fail): void {
  if (p.connectionPool) compileConnectionPool(p.connectionPool, [...at, 'connectionPool'], fail);
  if (p.outlierDetection) compileOutlierDetection(p.outlierDetection, [...at, 'outlierDetection'], fail);
  if (p.loadBalancer) compileLoadBalancer(p.loadBalancer, 'LEAST_REQUEST', [...at, 'loadBalancer'], fail);
}

/** The policy fields for service port `port`: its `portLevelSettings` entry when there is one, else the top level. */
export function policyForPort(tp: TrafficPolicyDoc | null | undefined, port: number): { doc: PortPolicyDoc; at: FieldPath } {
  if (!tp) return { doc: {}, at: ['spec', 'trafficPolicy'] };
  const i = (tp.portLevelSettings ?? []).findIndex((p) => p.port?.number === port);
  if (i >= 0) return { doc: tp.portLevelSettings![i], at: ['spec', 'trafficPolicy', 'portLevelSettings', i] };
  return { doc: tp, at: ['spec', 'trafficPolicy'] };
}

const nonNegative = (v: number | null | undefined, path: FieldPath, message: string, fail: Fail): number => {
  if (v === undefined || v === null) return 0;
  if (v < 0) fail(path, message);
  return v;
};

/** `connectionPool` → circuit breakers and HTTP protocol options (IS `applyConnectionPool`). */
export function compileConnectionPool(cp: ConnectionPoolDoc | null | undefined, at: FieldPath, fail: Fail): ConnectionPoolPolicy {
  if (!cp) return UNLIMITED_POOL;
  if (!cp.http && !cp.tcp) fail(at, 'connection pool must have at least one field');
  const http = cp.http;
  const tcp = cp.tcp;
  const h = [...at, 'http'];
  const t = [...at, 'tcp'];
  const pending = nonNegative(http?.http1MaxPendingRequests, [...h, 'http1MaxPendingRequests'], 'http1 max pending requests must be non-negative', fail);
  const requests = nonNegative(http?.http2MaxRequests, [...h, 'http2MaxRequests'], 'http2 max requests must be non-negative', fail);
  const perConnection = nonNegative(http?.maxRequestsPerConnection, [...h, 'maxRequestsPerConnection'], 'max requests per connection must be non-negative', fail);
  const retries = nonNegative(http?.maxRetries, [...h, 'maxRetries'], 'max retries must be non-negative', fail);
  if (http?.h2UpgradePolicy === 'UPGRADE' && http.useClientProtocol) fail([...h, 'useClientProtocol'], 'use client protocol must not be true when H2UpgradePolicy is UPGRADE');
  nonNegative(http?.maxConcurrentStreams, [...h, 'maxConcurrentStreams'], 'max concurrent streams must be non-negative', fail);
  const connections = nonNegative(tcp?.maxConnections, [...t, 'maxConnections'], 'max connections must be non-negative', fail);
  const httpIdle = http?.idleTimeout ? durationMs(http.idleTimeout, [...h, 'idleTimeout'], fail) : undefined;
  const tcpIdle = tcp?.idleTimeout ? durationMs(tcp.idleTimeout, [...t, 'idleTimeout'], fail, true) : undefined;
  const connectTimeout = tcp?.connectTimeout ? durationMs(tcp.connectTimeout, [...t, 'connectTimeout'], fail) : undefined;
  if (tcp?.maxConnectionDuration) durationMs(tcp.maxConnectionDuration, [...t, 'maxConnectionDuration'], fail);
  const idle = httpIdle ?? tcpIdle;
  return Object.freeze({
    maxConnections: connections > 0 ? connections : Infinity,
    connectTimeoutMs: connectTimeout,
    maxPendingRequests: pending > 0 ? pending : Infinity,
    maxRequests: requests > 0 ? requests : Infinity,
    maxRetries: retries > 0 ? retries : Infinity,
    maxRequestsPerConnection: perConnection,
    // 0 turns Envoy's idle timeout off: keep the waypoint's own keep-alive then.
    idleTimeoutMs: idle !== undefined && idle > 0 ? idle : undefined,
  });
}

/** `outlierDetection` → Envoy outlier detection (IS `applyOutlierDetection`); undefined when absent. */
export function compileOutlierDetection(od: OutlierDetectionDoc | null | undefined, at: FieldPath, fail: Fail): OutlierDetectionPolicy | undefined {
  if (!od) return undefined;
  const percent = (v: number | null | undefined, field: string): number | undefined => {
    if (v === undefined || v === null) return undefined;
    if (v < 0 || v > 100) fail([...at, field], `percentage ${v} is not in range 0..100`);
    return v;
  };
  if (!od.splitExternalLocalOriginErrors && (od.consecutiveLocalOriginFailures ?? 0) > 0) {
    fail([...at, 'consecutiveLocalOriginFailures'], 'outlier detection consecutive local origin failures is specified, but split external local origin errors is set to false');
  }
  const count = (v: number | null | undefined, field: string): number | undefined => {
    if (v === undefined || v === null) return undefined;
    if (v < 0) fail([...at, field], `${field} must be non-negative`);
    return v;
  };
  const maxEjection = percent(od.maxEjectionPercent, 'maxEjectionPercent');
  const minHealth = percent(od.minHealthPercent, 'minHealthPercent');
  return Object.freeze({
    consecutive5xx: count(od.consecutive5xxErrors, 'consecutive5xxErrors') ?? OUTLIER_DEFAULTS.consecutive5xx,
    consecutiveGatewayFailure: count(od.consecutiveGatewayErrors, 'consecutiveGatewayErrors') ?? 0,
    intervalMs: od.interval ? durationMs(od.interval, [...at, 'interval'], fail) : OUTLIER_DEFAULTS.intervalMs,
    baseEjectionTimeMs: od.baseEjectionTime ? durationMs(od.baseEjectionTime, [...at, 'baseEjectionTime'], fail) : OUTLIER_DEFAULTS.baseEjectionTimeMs,
    maxEjectionPercent: maxEjection !== undefined && maxEjection > 0 ? maxEjection : OUTLIER_DEFAULTS.maxEjectionPercent,
    minHealthPercent: minHealth ?? 0,
  });
}

/**
 * `loadBalancer` → the balancing algorithm (IS `applyLoadBalancer`, `ApplyRingHashLoadBalancer`).
 * `simple` and `consistentHash` are one protobuf oneof, and so are the hash keys: two of them is an
 * error. PASSTHROUGH (Envoy's original-destination cluster) is refused: the original destination of
 * waypoint traffic is the service VIP itself, which this waypoint never dials.
 */
export function compileLoadBalancer(lb: LoadBalancerDoc | null | undefined, fallback: LbAlgorithm, at: FieldPath, fail: Fail): LoadBalancerSettings {
  if (!lb) return Object.freeze({ simple: fallback, consistentHash: undefined });
  const simple = lb.simple ?? 'UNSPECIFIED';
  if (lb.consistentHash && simple !== 'UNSPECIFIED') fail(at, 'only one of simple or consistentHash can be set (they are a protobuf oneof)');
  if (simple === 'PASSTHROUGH') {
    fail([...at, 'simple'], 'PASSTHROUGH (original destination) is not supported by this waypoint: its original destination is the service VIP it serves; use ROUND_ROBIN, LEAST_REQUEST, RANDOM or consistentHash');
  }
  const algorithm: LbAlgorithm = simple === 'ROUND_ROBIN' ? 'ROUND_ROBIN' : simple === 'RANDOM' ? 'RANDOM' : simple === 'UNSPECIFIED' ? fallback : 'LEAST_REQUEST';
  return Object.freeze({ simple: algorithm, consistentHash: lb.consistentHash ? compileConsistentHash(lb.consistentHash, [...at, 'consistentHash'], fail) : undefined });
}

function compileConsistentHash(ch: NonNullable<LoadBalancerDoc['consistentHash']>, at: FieldPath, fail: Fail): ConsistentHashPolicy {
  const keys: HashKey[] = [];
  if (ch.httpHeaderName !== undefined && ch.httpHeaderName !== null) keys.push({ kind: 'header', name: ch.httpHeaderName.toLowerCase() });
  if (ch.httpCookie) {
    if (!ch.httpCookie.name) fail([...at, 'httpCookie', 'name'], 'name required for HttpCookie');
    const ttl = ch.httpCookie.ttl ? durationMs(ch.httpCookie.ttl, [...at, 'httpCookie', 'ttl'], fail, true) : undefined;
    keys.push(Object.freeze({ kind: 'cookie', name: ch.httpCookie.name!, path: ch.httpCookie.path ?? '', ttlMs: ttl }));
  }
  if (ch.useSourceIp) keys.push({ kind: 'sourceIp' });
  if (ch.httpQueryParameterName !== undefined && ch.httpQueryParameterName !== null) keys.push({ kind: 'queryParameter', name: ch.httpQueryParameterName });
  if (keys.length > 1) fail(at, 'only one of httpHeaderName, httpCookie, useSourceIp or httpQueryParameterName can be set (they are a protobuf oneof)');
  if (ch.ringHash && ch.maglev) fail(at, 'only one of ringHash or maglev can be set (they are a protobuf oneof)');
  const legacy = ch.minimumRingSize ?? 0;
  if (legacy !== 0 && (ch.ringHash || ch.maglev)) fail([...at, 'minimumRingSize'], 'only one of MinimumRingSize or Maglev/Ringhash can be set');
  let tableSize = DEFAULT_MAGLEV_TABLE_SIZE;
  if (ch.maglev) {
    tableSize = ch.maglev.tableSize ?? 0;
    const p = [...at, 'maglev', 'tableSize'];
    if (tableSize === 0) fail(p, 'tableSize must be set for maglev');
    if (tableSize >= MAX_MAGLEV_TABLE_SIZE) fail(p, `tableSize must be less than ${MAX_MAGLEV_TABLE_SIZE} for maglev`);
    if (!isPrime(tableSize)) fail(p, 'tableSize must be a prime number for maglev');
  }
  const minRing = (ch.ringHash?.minimumRingSize ?? 0) || legacy || DEFAULT_MIN_RING_SIZE;
  if (minRing > MAX_RING_SIZE) fail([...at, ch.ringHash ? 'ringHash' : 'minimumRingSize'], `minimum ring size must be at most ${MAX_RING_SIZE} (Envoy's maximum_ring_size)`);
  return Object.freeze({
    key: Object.freeze(keys[0] ?? { kind: 'none' }),
    algorithm: ch.maglev ? 'MAGLEV' : 'RING_HASH',
    minimumRingSize: minRing,
    tableSize,
  });
}

/** Envoy's (and Istio's copy of) `isPrime`. */
function isPrime(x: number): boolean {
  if (x !== 0 && x < 4) return true;
  if (x % 2 === 0) return false;
  const limit = Math.floor(Math.sqrt(x));
  for (let f = 3; f <= limit; f += 2) if (x % f === 0) return false;
  return true;
}
