/**
 * Envoy's per-cluster upstream stats for DestinationRule-shaped clusters, with Envoy's Prometheus
 * names (Envoy's `/stats/prometheus` turns `cluster.<name>.<stat>` into `envoy_cluster_<stat>`
 * with tag `envoy_cluster_name="<name>"`; counters keep their name, no `_total` is added):
 * - outlier detection (envoy docs: arch_overview/upstream/outlier, "Statistics";
 *   source/common/upstream/outlier_detection_impl.h `ALL_OUTLIER_DETECTION_STATS`):
 *   `ejections_active` (gauge), `ejections_enforced_total`, `ejections_enforced_consecutive_5xx`,
 *   `ejections_enforced_consecutive_gateway_failure` (counters);
 * - circuit breakers (envoy docs: cluster_manager/cluster_stats, "General" and "Circuit breakers
 *   statistics"): `upstream_rq_pending_overflow` (a request refused by `max_pending_requests` or
 *   `max_requests`), `upstream_cx_overflow` (`max_connections`), `upstream_rq_retry_overflow`
 *   (`max_retries`), and the `circuit_breakers.default.{cx,rq,rq_pending,rq_retry}_open` gauges
 *   (1 while the resource is at its limit; read at scrape time).
 * Instruments are created once per registry (the waypoint's, served at `/stats/prometheus`); a
 * cluster's series appear when its state is created.
 */
import { Counter, Gauge, type Registry } from 'prom-client';
import type { EjectionReason } from './outlier-detector.ts';
import type { ConnectionPoolPolicy } from '../routing/index.ts';

/** What the gauges read from a live cluster at scrape time (its `ClusterState`). */
export interface ClusterGauges {
  readonly outlier: { readonly ejectedCount: number } | undefined;
  readonly policy: { readonly connectionPool: ConnectionPoolPolicy };
  readonly activeRequests: number;
  readonly pendingRequests: number;
  readonly activeRetries: number;
  readonly activeConnections: number;
}

const LABEL = ['envoy_cluster_name'] as const;

export class ClusterStats {
  private readonly ejectionsTotal: Counter<'envoy_cluster_name'>;
  private readonly ejections5xx: Counter<'envoy_cluster_name'>;
  private readonly ejectionsGateway: Counter<'envoy_cluster_name'>;
  private readonly rqPendingOverflow: Counter<'envoy_cluster_name'>;
  private readonly cxOverflow: Counter<'envoy_cluster_name'>;
  private readonly rqRetryOverflow: Counter<'envoy_cluster_name'>;
  /** Live cluster states by Envoy cluster name (read by the `*_open` gauges at scrape time). */
  private readonly live = new Map<string, ClusterGauges>();

  constructor(registry: Registry) {
    const registers = [registry];
    const counter = (name: string, help: string) => new Counter({ name, help, labelNames: LABEL, registers });
    this.ejectionsTotal = counter('envoy_cluster_outlier_detection_ejections_enforced_total', 'Number of enforced ejections due to any outlier type');
    this.ejections5xx = counter('envoy_cluster_outlier_detection_ejections_enforced_consecutive_5xx', 'Number of enforced consecutive 5xx ejections');
    this.ejectionsGateway = counter('envoy_cluster_outlier_detection_ejections_enforced_consecutive_gateway_failure', 'Number of enforced consecutive gateway failure ejections');
    this.rqPendingOverflow = counter('envoy_cluster_upstream_rq_pending_overflow', 'Total requests that overflowed connection pool or requests circuit breaking and were failed');
    this.cxOverflow = counter('envoy_cluster_upstream_cx_overflow', "Total times that the cluster's connection circuit breaker overflowed");
    this.rqRetryOverflow = counter('envoy_cluster_upstream_rq_retry_overflow', 'Total requests not retried due to circuit breaking or exceeding the retry budget');
    const live = this.live;
    // Gauges are read from the live cluster states at scrape time.
    const gauge = (name: string, help: string, value: (c: ClusterGauges) => number) =>
      new Gauge({
        name,
        help,
        labelNames: LABEL,
        registers,
        collect() {
          this.reset();
          for (const [cluster, c] of live) this.set({ envoy_cluster_name: cluster }, value(c));
        },
      });
    gauge('envoy_cluster_outlier_detection_ejections_active', 'Number of currently ejected hosts', (c) => c.outlier?.ejectedCount ?? 0);
    const open = (name: string, help: string, isOpen: (c: ClusterGauges) => boolean) => gauge(name, help, (c) => (isOpen(c) ? 1 : 0));
    open('envoy_cluster_circuit_breakers_default_cx_open', 'Whether the connection circuit breaker is at its limit (0 closed, 1 open)', (c) => c.activeConnections >= c.policy.connectionPool.maxConnections);
    open('envoy_cluster_circuit_breakers_default_rq_open', 'Whether the requests circuit breaker is at its limit (0 closed, 1 open)', (c) => c.activeRequests >= c.policy.connectionPool.maxRequests);
    open('envoy_cluster_circuit_breakers_default_rq_pending_open', 'Whether the pending requests circuit breaker is at its limit (0 closed, 1 open)', (c) => c.pendingRequests >= c.policy.connectionPool.maxPendingRequests);
    open('envoy_cluster_circuit_breakers_default_rq_retry_open', 'Whether the retry circuit breaker is at its limit (0 closed, 1 open)', (c) => c.activeRetries >= c.policy.connectionPool.maxRetries);
  }

  /** A cluster state came to life: its series start at 0. */
  added(cluster: string, state: ClusterGauges): void {
    this.live.set(cluster, state);
    const l = { envoy_cluster_name: cluster };
    for (const c of [this.ejectionsTotal, this.ejections5xx, this.ejectionsGateway, this.rqPendingOverflow, this.cxOverflow, this.rqRetryOverflow]) c.inc(l, 0);
  }

  /** The cluster state is gone (its DestinationRule no longer applies): its series are removed. */
  removed(cluster: string): void {
    if (!this.live.delete(cluster)) return;
    const l = { envoy_cluster_name: cluster };
    for (const m of [this.ejectionsTotal, this.ejections5xx, this.ejectionsGateway, this.rqPendingOverflow, this.cxOverflow, this.rqRetryOverflow]) m.remove(l);
  }

  ejected(cluster: string, reason: EjectionReason): void {
    const l = { envoy_cluster_name: cluster };
    this.ejectionsTotal.inc(l);
    (reason === 'consecutive_5xx' ? this.ejections5xx : this.ejectionsGateway).inc(l);
  }

  overflow(cluster: string, resource: 'rq_pending' | 'cx' | 'rq_retry'): void {
    const l = { envoy_cluster_name: cluster };
    (resource === 'cx' ? this.cxOverflow : resource === 'rq_retry' ? this.rqRetryOverflow : this.rqPendingOverflow).inc(l);
  }
}
