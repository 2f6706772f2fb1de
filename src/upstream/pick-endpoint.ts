/**
 * Choose the upstream endpoint for a tunnel's target: a healthy endpoint of the service port
 * (through the load balancer, or the cluster's DestinationRule policy: outlier ejections,
 * consistent hash, its simple algorithm) — an instance of the other waypoint when the service goes
 * through one (chained waypoints, state/service-waypoints.ts) — or, for workload-addressed traffic,
 * the workload itself on the port the client dialed (istio/istio
 * pilot/pkg/networking/core/listener_waypoint.go `direct-*` chains).
 *
 * {@link leaseEndpoint} is the one pick the HTTP router and the TCP proxy share: the pick plus
 * its accounting (active in the load balancer, a TCP connection under the cluster's
 * `tcp.maxConnections`) until the lease is released.
 */
import { formatHostPort, upstreamEndpoints, type Endpoint, type Target } from '../state/index.ts';
import type { ClusterManager } from './cluster-manager.ts';
import type { ClusterState } from './cluster-state.ts';
import type { LoadBalancer } from './load-balancer.ts';
import type { HashKey } from '../routing/index.ts';

/** Optional inputs of {@link pickEndpoint}. */
export interface PickOptions {
  /**
   * Only endpoints it accepts may be picked (the NetworkPolicy mode, src/netpol/admission.ts);
   * undefined then also when every healthy endpoint was refused.
   */
  readonly admit?: (ep: Endpoint) => boolean;
  /** The runtime state of the target's cluster when a DestinationRule shapes it (see ClusterManager.clusterFor). */
  readonly cluster?: ClusterState;
  /** The request's consistent hash, when the cluster's policy hashes and the request has a key (see hash-policy.ts). */
  readonly hash?: bigint;
}

/**
 * Undefined when there is no healthy endpoint (the caller answers 503 `UH`). `avoid`: authorities
 * tried already (a retry prefers another host, Envoy's previous_hosts predicate, when one exists).
 * `options`: {@link PickOptions}, or just its `admit` predicate.
 */
export function pickEndpoint(lb: LoadBalancer, t: Target, address: string, avoid?: readonly string[], options?: PickOptions | ((ep: Endpoint) => boolean)): Endpoint | undefined {
  const opts: PickOptions | undefined = typeof options === 'function' ? { admit: options } : options;
  const admit = opts?.admit;
  if (t.kind === 'service') {
    // The service's own endpoints, or the instances of the other waypoint it goes through.
    const listed = upstreamEndpoints(t.service, t.port.port);
    // Endpoints whose connects timed out are left out while others remain (connect-ejection.ts).
    const all = lb.ejections.filter(admit && listed.length > 0 ? listed.filter(admit) : listed);
    if (opts?.cluster) return opts.cluster.pick(all, lb, opts.hash, avoid);
    // Filtered copies keep the full list's round-robin place (only round robin has one).
    const cursor = lb.policy === 'ROUND_ROBIN' ? lb.cursorFor(listed) : undefined;
    if (avoid && avoid.length > 0 && all.length > 1) {
      const others = all.filter((ep) => !avoid.includes(ep.authority));
      if (others.length > 0) return lb.pick(others, undefined, cursor);
    }
    return lb.pick(all, undefined, cursor);
  }
  if (!t.workload.healthy) return undefined;
  const ep: Endpoint = { workload: t.workload, address, targetPort: t.port, tunnel: t.workload.tunnelProtocol, authority: formatHostPort(address, t.port) };
  return admit && !admit(ep) ? undefined : ep;
}

/** Inputs of {@link leaseEndpoint}. */
export interface LeaseOptions {
  /** Only endpoints it accepts may be picked (see {@link PickOptions.admit}). */
  readonly admit?: (ep: Endpoint) => boolean;
  /** Authorities tried already (a retry prefers another host). */
  readonly avoid?: readonly string[];
  /** The consistent hash for the cluster's key; asked only when the cluster's policy hashes. */
  readonly hash?: (key: HashKey) => bigint | undefined;
  /** A TCP connection: also counted under the cluster's `tcp.maxConnections` circuit breaker. */
  readonly connection?: boolean;
}

/**
 * An endpoint picked for one HTTP attempt or one TCP connection. While {@link admitted}, it counts
 * as active in the load balancer (least-request) and, for a connection, under the cluster's
 * `tcp.maxConnections`, until {@link release} (idempotent).
 */
export class UpstreamLease {
  readonly ep: Endpoint;
  /** The DestinationRule-shaped cluster the endpoint belongs to, if any. */
  readonly cluster: ClusterState | undefined;
  /** False when `tcp.maxConnections` refused the connection (Envoy's tcp_proxy `UO`): nothing was counted. */
  readonly admitted: boolean;
  private readonly lb: LoadBalancer;
  private readonly connection: boolean;
  private held: boolean;

  constructor(lb: LoadBalancer, ep: Endpoint, cluster: ClusterState | undefined, connection: boolean) {
    this.lb = lb;
    this.ep = ep;
    this.cluster = cluster;
    this.connection = connection && cluster !== undefined;
    this.admitted = !this.connection || cluster!.admitConnection();
    this.held = this.admitted;
    if (this.held) lb.start(ep);
  }

  release(): void {
    if (!this.held) return;
    this.held = false;
    this.lb.finish(this.ep);
    if (this.connection) this.cluster!.releaseConnection();
  }
}

/**
 * Pick an endpoint of `target` (`address`: the dialed IP, for workload-addressed traffic) and
 * lease it; undefined when there is no healthy endpoint (503 `UH`). A DestinationRule of the
 * target's cluster shapes the pick (ClusterState.pick: outlier ejections, consistent hash, its
 * algorithm).
 */
export function leaseEndpoint(clusters: Pick<ClusterManager, 'lb' | 'clusterFor'>, target: Target, address: string, opts: LeaseOptions): UpstreamLease | undefined {
  const cluster = clusters.clusterFor(target);
  const key = cluster?.policy.loadBalancer.consistentHash?.key;
  const hash = key && opts.hash ? opts.hash(key) : undefined;
  const ep = pickEndpoint(clusters.lb, target, address, opts.avoid, { admit: opts.admit, cluster, hash });
  return ep && new UpstreamLease(clusters.lb, ep, cluster, opts.connection === true);
}
