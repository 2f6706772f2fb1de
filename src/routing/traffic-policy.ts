/**
 * The compiled traffic policy of one cluster (a served service port, Envoy's `inbound-vip|…`
 * cluster): load balancing, connection-pool limits (circuit breakers) and outlier detection, as
 * Istio's waypoint derives them from a DestinationRule (istio/istio
 * pilot/pkg/networking/core/cluster_traffic_policy.go `applyConnectionPool`,
 * `applyOutlierDetection`, `applyLoadBalancer`, `ApplyRingHashLoadBalancer`; istio/istio
 * pilot/pkg/networking/core/cluster_waypoint.go `buildWaypointInboundVIPCluster`). Built once per
 * mesh snapshot by `destination-rule.ts`; frozen; the upstream's cluster states
 * (src/upstream/cluster-table.ts) apply it.
 *
 * Limits are `Infinity` when unset: Istio sets every circuit breaker threshold to 2^32-1
 * (`getDefaultCircuitBreakerThresholds`), i.e. no limit.
 */

/** `loadBalancer.simple`, as this waypoint runs it (LEAST_CONN is LEAST_REQUEST, as in Istio). */
export type LbAlgorithm = 'LEAST_REQUEST' | 'ROUND_ROBIN' | 'RANDOM';

/** What a consistent hash is computed from (Istio `ConsistentHashLB.hash_key`). */
export type HashKey =
  | { readonly kind: 'header'; readonly name: string }
  | {
      readonly kind: 'cookie';
      readonly name: string;
      readonly path: string;
      /** Lifetime (ms) of the cookie generated when the request has none; undefined: never generate. 0: a session cookie. */
      readonly ttlMs: number | undefined;
    }
  | { readonly kind: 'sourceIp' }
  | { readonly kind: 'queryParameter'; readonly name: string }
  /** `consistentHash` without a key: Envoy computes no hash and picks a random host. */
  | { readonly kind: 'none' };

/** Envoy's default Maglev `table_size` (a prime). */
export const DEFAULT_MAGLEV_TABLE_SIZE = 65537;
/** Envoy's default ring hash `maximum_ring_size` (8M entries). */
export const MAX_RING_SIZE = 8 * 1024 * 1024;

/** `loadBalancer.consistentHash` (Envoy RING_HASH, or MAGLEV when `maglev` is set). */
export interface ConsistentHashPolicy {
  readonly key: HashKey;
  readonly algorithm: 'RING_HASH' | 'MAGLEV';
  /** Ring hash: `ringHash.minimumRingSize` (or the deprecated `minimumRingSize`), default 1024. */
  readonly minimumRingSize: number;
  /** Maglev: `maglev.tableSize` (a prime), default 65537. */
  readonly tableSize: number;
}

export interface LoadBalancerSettings {
  readonly simple: LbAlgorithm;
  /** Set: endpoints are chosen by the request's hash instead of `simple`. */
  readonly consistentHash: ConsistentHashPolicy | undefined;
}

/** `connectionPool`, as Envoy circuit breakers and HTTP protocol options (counts; ms). */
export interface ConnectionPoolPolicy {
  /** `tcp.maxConnections` → `max_connections`: HTTP/1.1 connections per endpoint pool, TCP tunnels per cluster. */
  readonly maxConnections: number;
  /** `tcp.connectTimeout` (ms); undefined: the bootstrap's `upstream.connectTimeoutMs`. */
  readonly connectTimeoutMs: number | undefined;
  /** `http.http1MaxPendingRequests` → `max_pending_requests`: requests waiting for a connection. */
  readonly maxPendingRequests: number;
  /** `http.http2MaxRequests` → `max_requests`: active requests to the cluster (HTTP/1.1 and HTTP/2). */
  readonly maxRequests: number;
  /** `http.maxRetries` → `max_retries`: retries in progress to the cluster. */
  readonly maxRetries: number;
  /** `http.maxRequestsPerConnection`; 0: unlimited. */
  readonly maxRequestsPerConnection: number;
  /** `http.idleTimeout` (or `tcp.idleTimeout`) (ms); undefined: the bootstrap's keep-alive. */
  readonly idleTimeoutMs: number | undefined;
}

/** `outlierDetection` (Envoy outlier detection with Istio's defaults; ms, counts, percent). */
export interface OutlierDetectionPolicy {
  /** `consecutive5xxErrors`; 0 disables (Envoy's default 5 applies when unset). */
  readonly consecutive5xx: number;
  /** `consecutiveGatewayErrors`; 0 (the default) disables. */
  readonly consecutiveGatewayFailure: number;
  /** `interval` between ejection sweeps (default 10 s). */
  readonly intervalMs: number;
  /** `baseEjectionTime` (default 30 s); a host stays out for base × its ejection count (capped at 300 s). */
  readonly baseEjectionTimeMs: number;
  /** `maxEjectionPercent` (default 10). */
  readonly maxEjectionPercent: number;
  /** `minHealthPercent` → healthy panic threshold (Istio's default 0: never panic). */
  readonly minHealthPercent: number;
}

/** Everything the upstream needs to know about one cluster. */
export interface ClusterTrafficPolicy {
  /** `namespace/hostname|port`: identifies the cluster's runtime state across snapshots; '' for the default policy. */
  readonly key: string;
  /** `DestinationRule/<ns>/<name>` the policy came from, or '' when none applies. */
  readonly source: string;
  readonly loadBalancer: LoadBalancerSettings;
  readonly connectionPool: ConnectionPoolPolicy;
  readonly outlierDetection: OutlierDetectionPolicy | undefined;
}

/** Connection-pool settings with every limit off (Istio's defaults). */
export const UNLIMITED_POOL: ConnectionPoolPolicy = Object.freeze({
  maxConnections: Infinity,
  connectTimeoutMs: undefined,
  maxPendingRequests: Infinity,
  maxRequests: Infinity,
  maxRetries: Infinity,
  maxRequestsPerConnection: 0,
  idleTimeoutMs: undefined,
});

/** The policy of a cluster no DestinationRule applies to, with `simple` the bootstrap's algorithm. */
export function defaultTrafficPolicy(simple: LbAlgorithm): ClusterTrafficPolicy {
  return Object.freeze({
    key: '',
    source: '',
    loadBalancer: Object.freeze({ simple, consistentHash: undefined }),
    connectionPool: UNLIMITED_POOL,
    outlierDetection: undefined,
  });
}

/**
 * Pool options that change how upstream connections are made (they select the connection pool);
 * '' when none differs from the defaults, so such clusters share the endpoint pools.
 */
export function poolSignature(p: ConnectionPoolPolicy): string {
  if (p.maxConnections === Infinity && p.maxRequestsPerConnection === 0 && p.idleTimeoutMs === undefined && p.connectTimeoutMs === undefined) return '';
  return `c=${p.maxConnections},r=${p.maxRequestsPerConnection},i=${p.idleTimeoutMs ?? ''},t=${p.connectTimeoutMs ?? ''}`;
}
