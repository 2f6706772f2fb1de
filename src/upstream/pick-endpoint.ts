/**
 * Choose the upstream endpoint for a tunnel's target: a healthy endpoint of the service port
 * (through the load balancer, or the cluster's DestinationRule policy: outlier ejections,
 * consistent hash, its simple algorithm), or, for workload-addressed traffic, the workload itself
 * on the port the client dialed (IS:listener_waypoint.go `direct-*` chains).
 */
import { formatHostPort } from '../state/ip.ts';
import type { Endpoint, Target } from '../state/types.ts';
import type { ClusterState } from './cluster-state.ts';
import type { LoadBalancer } from './load-balancer.ts';

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
    const listed = t.service.endpoints.get(t.port.port) ?? [];
    const all = admit && listed.length > 0 ? listed.filter(admit) : listed;
    if (opts?.cluster) return opts.cluster.pick(all, lb, opts.hash, avoid);
    // Filtered copies keep the full list's round-robin place.
    const cursor = lb.cursorFor(listed);
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
