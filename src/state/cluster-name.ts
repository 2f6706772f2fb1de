/**
 * Envoy cluster names as Istio's waypoint builds them (istio/istio
 * pilot/pkg/networking/core/cluster_waypoint.go, listener_waypoint.go
 * `getWaypointDestinationCluster`): a service port this waypoint serves is
 * `inbound-vip|<port>|<http|tcp>|<hostname>`, any other service port (a route's backend) is
 * `outbound|<port>||<hostname>`; workload-addressed traffic goes through the `encap` cluster.
 * Access logs (`%UPSTREAM_CLUSTER%`) and metrics show these strings.
 */
import type { Target } from './types.ts';

/** The cluster name for a tunnel's `target` (a service port this waypoint serves, or a workload), whose traffic is handled as `kind`. */
export function clusterName(target: Target, kind: 'http' | 'tcp'): string {
  if (target.kind === 'workload') return 'encap';
  return `inbound-vip|${target.port.port}|${kind}|${target.service.hostname}`;
}

/** The cluster name for any service port (a DestinationRule's cluster): {@link clusterName} when this waypoint serves it, else `outbound|<port>||<hostname>`. */
export function serviceClusterName(target: Extract<Target, { kind: 'service' }>, kind: 'http' | 'tcp'): string {
  return target.service.servedByThisWaypoint ? clusterName(target, kind) : `outbound|${target.port.port}||${target.service.hostname}`;
}
