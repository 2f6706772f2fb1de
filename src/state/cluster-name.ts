/**
 * Envoy cluster names as Istio's waypoint builds them (istio/istio
 * pilot/pkg/networking/core/cluster_waypoint.go): a served service port is
 * `inbound-vip|<port>|<http|tcp>|<hostname>`; workload-addressed traffic goes through the `encap`
 * cluster. Access logs (`%UPSTREAM_CLUSTER%`) and metrics show these strings.
 */
import type { Target } from './types.ts';

/** The cluster name for `target`, whose traffic is handled as `kind`. */
export function clusterName(target: Target, kind: 'http' | 'tcp'): string {
  if (target.kind === 'workload') return 'encap';
  return `inbound-vip|${target.port.port}|${kind}|${target.service.hostname}`;
}
