/**
 * The runtime state of one cluster that a DestinationRule shapes (a served service port): its
 * current {@link ClusterTrafficPolicy}, Envoy's circuit-breaker resources (source/common/upstream/
 * resource_manager_impl.h: active requests, pending requests, active retries, TCP connections),
 * its outlier detector, its round-robin cursor and its hash tables. It outlives mesh snapshots
 * (kept by the cluster table, cluster-table.ts, under the policy's `key`), so in-flight counts,
 * ejections and round-robin positions carry over a reload; a new policy only changes the limits
 * applied from then on.
 */
import type { Dispatcher } from 'undici';
import { WaypointError, log } from '../util/index.ts';
import type { Endpoint } from '../state/index.ts';
import type { UpstreamHandler } from './h2-upstream.ts';
import type { BufferHolder } from '../pipeline/index.ts';
import type { LoadBalancer } from './load-balancer.ts';
import type { ClusterStats } from './cluster-stats.ts';
import { MaglevTable } from './maglev.ts';
import { OutlierDetector, type OutlierEvents } from './outlier-detector.ts';
import { RingHash } from './ring-hash.ts';
import { poolSignature, type ClusterTrafficPolicy, type ConsistentHashPolicy } from '../routing/index.ts';

/**
 * A circuit breaker refused the request (Envoy's connection-pool failure reason `Overflow`): answered
 * 503 with flag `UO` and details `upstream_reset_before_response_started{overflow}`; never retried.
 */
export class UpstreamOverflowError extends WaypointError {
  /** The breaker that tripped: `max_requests`, `max_pending_requests`, `max_connections`. */
  readonly resource: string;
  constructor(cluster: string, resource: string, limit: number) {
    super('WP_ERR_UPSTREAM_OVERFLOW', `circuit breaker ${resource} (${limit}) of ${cluster} is full`);
    this.name = 'UpstreamOverflowError';
    this.resource = resource;
  }
}

/** Envoy's `host_selection_retry_max_attempts` as Istio sets it: how far a retry walks a hash table for another host. */
const HOST_SELECTION_ATTEMPTS = 5;
/** Hash tables kept per cluster for endpoint lists seen lately (by authority list). */
const TABLES_KEPT = 8;

/** A consistent-hash table over a list of endpoints. */
export type HashTable = RingHash | MaglevTable;

/** The ring-hash or maglev table of `endpoints` under `ch`. */
export function hashTableOf(endpoints: readonly Endpoint[], ch: ConsistentHashPolicy): HashTable {
  return ch.algorithm === 'MAGLEV' ? new MaglevTable(endpoints, ch.tableSize) : new RingHash(endpoints, ch.minimumRingSize);
}

export class ClusterState {
  readonly key: string;
  /** Envoy's cluster name (`inbound-vip|<port>|<http|tcp>|<hostname>`): stats tag and log field. */
  readonly name: string;
  policy: ClusterTrafficPolicy;
  /** `poolSignature` of the policy's connection pool ('' = the shared endpoint pools). */
  poolSignature: string;
  outlier: OutlierDetector | undefined;
  /** Envoy resource counts. */
  activeRequests = 0;
  pendingRequests = 0;
  activeRetries = 0;
  activeConnections = 0;
  /** Round-robin position (see LoadBalancer.pick). */
  rr = 0;
  /** Hosts of the cluster in the current snapshot (outlier detection's max ejection percent is of these). */
  hostCount = 0;
  private tablesByList = new WeakMap<readonly Endpoint[], HashTable>();
  private readonly tablesByKey = new Map<string, HashTable>();
  private readonly stats: ClusterStats | undefined;
  private readonly events: OutlierEvents;

  /** `name`: Envoy's cluster name (defaults to the key); `stats`: where its Envoy stats go. */
  constructor(policy: ClusterTrafficPolicy, name: string = policy.key, stats?: ClusterStats) {
    this.key = policy.key;
    this.name = name;
    this.policy = policy;
    this.stats = stats;
    this.poolSignature = poolSignature(policy.connectionPool);
    // Envoy logs ejections to its outlier event log (`outlier_detection.event_log_path`); here at info.
    this.events = {
      ejected: (host, reason, ejectionMs, active) => {
        stats?.ejected(name, reason);
        log.info({ cluster: name, host, reason, ejectionMs, ejectedHosts: active }, 'outlier detection: host ejected');
      },
      returned: (host, ejectedForMs, active) => {
        log.info({ cluster: name, host, ejectedForMs, ejectedHosts: active }, 'outlier detection: host returned to service');
      },
    };
    this.outlier = policy.outlierDetection ? new OutlierDetector(policy.outlierDetection, undefined, this.events) : undefined;
    stats?.added(name, this);
  }

  /** Take the policy of a newer snapshot (limits, algorithm, outlier settings); counts and ejections stay. */
  update(policy: ClusterTrafficPolicy): void {
    if (policy === this.policy) return;
    const hashChanged = !sameHash(policy.loadBalancer.consistentHash, this.policy.loadBalancer.consistentHash);
    this.policy = policy;
    this.poolSignature = poolSignature(policy.connectionPool);
    if (hashChanged) {
      this.tablesByList = new WeakMap();
      this.tablesByKey.clear();
    }
    if (!policy.outlierDetection) {
      this.outlier?.close();
      this.outlier = undefined;
    } else if (this.outlier) this.outlier.update(policy.outlierDetection);
    else this.outlier = new OutlierDetector(policy.outlierDetection, undefined, this.events);
  }

  /**
   * Take the hash table of the cluster's endpoint list of a new snapshot (built when the snapshot
   * was compiled), so no request builds one; lists filtered at run time (ejected hosts, admission)
   * still get theirs on first use.
   */
  adopt(endpoints: readonly Endpoint[], table: HashTable): void {
    this.tablesByList.set(endpoints, table);
    this.remember(endpoints.map((ep) => ep.authority).join(','), table);
  }

  /** Forget outlier state of hosts that left the cluster; stop timers when the cluster is gone (`authorities` empty). */
  retain(authorities: ReadonlySet<string>): void {
    this.outlier?.retain(authorities);
  }

  close(): void {
    this.outlier?.close();
    this.stats?.removed(this.name);
  }

  /**
   * Choose among `endpoints` (healthy ones of the cluster, already admitted by the caller):
   * ejected hosts are skipped (unless in panic), then the request `hash` picks on the ring or
   * maglev table when the policy hashes (no hash: random), else the policy's simple algorithm.
   * `avoid`: authorities tried already; a retry goes elsewhere when possible.
   */
  pick(endpoints: readonly Endpoint[], lb: LoadBalancer, hash: bigint | undefined, avoid: readonly string[] | undefined): Endpoint | undefined {
    let list = this.outlier ? this.outlier.filter(endpoints) : endpoints;
    if (list.length === 0) return undefined;
    const retry = avoid !== undefined && avoid.length > 0 && list.length > 1;
    const ch = this.policy.loadBalancer.consistentHash;
    if (ch && hash !== undefined) {
      const table = this.table(list, ch);
      let ep = table.pick(hash);
      for (let attempt = 1; retry && avoid.includes(ep.authority) && attempt <= HOST_SELECTION_ATTEMPTS; attempt++) ep = table.pick(hash, attempt);
      return ep;
    }
    if (retry) {
      const others = list.filter((ep) => !avoid.includes(ep.authority));
      if (others.length > 0) list = others;
    }
    if (ch) return lb.pick(list, 'RANDOM');
    return lb.pick(list, this.policy.loadBalancer.simple, this);
  }

  /** The hash table of `list` (built once per distinct endpoint set). */
  private table(list: readonly Endpoint[], ch: ConsistentHashPolicy): HashTable {
    let t = this.tablesByList.get(list);
    if (t) return t;
    const key = list.map((ep) => ep.authority).join(',');
    t = this.tablesByKey.get(key);
    if (!t) this.remember(key, (t = hashTableOf(list, ch)));
    this.tablesByList.set(list, t);
    return t;
  }

  private remember(key: string, table: HashTable): void {
    if (this.tablesByKey.has(key)) return;
    if (this.tablesByKey.size >= TABLES_KEPT) this.tablesByKey.delete(this.tablesByKey.keys().next().value!);
    this.tablesByKey.set(key, table);
  }

  /** Why a new request must be refused now (`max_requests`, `max_pending_requests`), or undefined. */
  requestOverflow(): UpstreamOverflowError | undefined {
    const p = this.policy.connectionPool;
    // Envoy counts both as `upstream_rq_pending_overflow` (its `max_requests` breaker fails the pending request).
    if (this.activeRequests >= p.maxRequests) {
      this.stats?.overflow(this.name, 'rq_pending');
      return new UpstreamOverflowError(this.key, 'max_requests', p.maxRequests);
    }
    if (this.pendingRequests >= p.maxPendingRequests) {
      this.stats?.overflow(this.name, 'rq_pending');
      return new UpstreamOverflowError(this.key, 'max_pending_requests', p.maxPendingRequests);
    }
    return undefined;
  }

  /** Count a TCP connection under `tcp.maxConnections`; false (nothing counted) when full. Pair with {@link releaseConnection}. */
  admitConnection(): boolean {
    if (this.activeConnections >= this.policy.connectionPool.maxConnections) {
      this.stats?.overflow(this.name, 'cx');
      return false;
    }
    this.activeConnections++;
    return true;
  }

  releaseConnection(): void {
    if (this.activeConnections > 0) this.activeConnections--;
  }

  /** Whether one more retry fits under `max_retries`. */
  retryAllowed(): boolean {
    if (this.activeRetries < this.policy.connectionPool.maxRetries) return true;
    this.stats?.overflow(this.name, 'rq_retry');
    return false;
  }
}

/** Whether two consistent-hash settings build the same tables. */
export function sameHash(a: ConsistentHashPolicy | undefined, b: ConsistentHashPolicy | undefined): boolean {
  if (!a || !b) return a === b;
  return a.algorithm === b.algorithm && a.minimumRingSize === b.minimumRingSize && a.tableSize === b.tableSize;
}

/**
 * One attempt's accounting around the router's handler: counts the request as active (and as a
 * retry when `retry`) until it ends, as pending until it gets a connection (`onConnect`), and
 * reports the outcome to the outlier detector.
 */
export class TrackedAttempt implements UpstreamHandler, Dispatcher.DispatchHandler {
  private readonly cluster: ClusterState;
  private readonly inner: UpstreamHandler;
  private readonly authority: string;
  private readonly retry: boolean;
  private pending = true;
  private done = false;
  private answered = false;

  constructor(cluster: ClusterState, ep: Endpoint, inner: UpstreamHandler, retry: boolean) {
    this.cluster = cluster;
    this.inner = inner;
    this.authority = ep.authority;
    this.retry = retry;
    cluster.activeRequests++;
    cluster.pendingRequests++;
    if (retry) cluster.activeRetries++;
  }

  onConnect(abort: (err?: Error) => void): void {
    this.connected();
    this.inner.onConnect(abort);
  }

  onInformational(status: number): void {
    this.inner.onInformational?.(status);
  }

  onCarrier(carrier: BufferHolder): void {
    this.inner.onCarrier?.(carrier);
  }

  onHeaders(status: number, rawHeaders: (Buffer | string)[], resume: () => void, statusText: string): boolean {
    if (status >= 200 && !this.answered) {
      this.answered = true;
      this.cluster.outlier?.reportStatus(this.authority, status, this.cluster.hostCount);
    }
    return this.inner.onHeaders(status, rawHeaders, resume, statusText);
  }

  onData(chunk: Buffer): boolean {
    return this.inner.onData(chunk);
  }

  onComplete(trailers: string[] | null): void {
    this.end();
    this.inner.onComplete(trailers);
  }

  onError(err: Error & { code?: string }): void {
    // Failures of our own making (the downstream went away, a timeout aborted it) say nothing about the host.
    // A route timeout is Envoy's LocalOriginTimeout, which counts as a 504.
    if (!this.answered && !this.done && this.cluster.outlier) {
      if (err.message === 'request timeout' || err.message === 'per try timeout') this.cluster.outlier.reportStatus(this.authority, 504, this.cluster.hostCount);
      else if (err.code !== 'UND_ERR_ABORTED' && err.name !== 'AbortError' && !isCancellation(err)) this.cluster.outlier.reportLocalFailure(this.authority, this.cluster.hostCount);
    }
    this.end();
    this.inner.onError(err);
  }

  private connected(): void {
    if (!this.pending) return;
    this.pending = false;
    this.cluster.pendingRequests--;
  }

  private end(): void {
    if (this.done) return;
    this.done = true;
    this.connected();
    this.cluster.activeRequests--;
    if (this.retry) this.cluster.activeRetries--;
  }
}

/** Errors the router raises itself when it abandons an attempt because the downstream went away (request-forwarder.ts `cancel`). */
function isCancellation(err: Error): boolean {
  return err.message === 'downstream disconnected' || err.message === 'request cancelled' || err.message === 'cancelled';
}
