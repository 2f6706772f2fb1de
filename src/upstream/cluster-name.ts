/**
 * Envoy cluster names as Istio's waypoint builds them (IS:cluster_waypoint.go,
 * listener_waypoint.go `getWaypointDestinationCluster`): a service port this waypoint serves is
 * `inbound-vip|<port>|<http|tcp>|<hostname>`, any other service port (a route's backend) is
 * `outbound|<port>||<hostname>`; workload-addressed traffic goes through the `encap` cluster.
 * Access logs (`%UPSTREAM_CLUSTER%`) and metrics show these strings.
 */
import type { Target } from '../state/types.ts';

/** The cluster name for `target`, whose traffic is handled as `kind`. */
export function clusterName(target: Target, kind: 'http' | 'tcp'): string {
  if (target.kind === 'workload') return 'encap';
  if (!target.service.servedByThisWaypoint) return `outbound|${target.port.port}||${target.service.hostname}`;
  return `inbound-vip|${target.port.port}|${kind}|${target.service.hostname}`;
}
