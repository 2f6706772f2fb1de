/**
 * Choose the upstream endpoint for a tunnel's target: a healthy endpoint of the service port
 * (through the load balancer), or, for workload-addressed traffic, the workload itself on the
 * port the client dialed (IS:listener_waypoint.go `direct-*` chains).
 */
import { formatHostPort } from '../state/ip.ts';
import type { Endpoint, Target } from '../state/types.ts';
import type { LoadBalancer } from './load-balancer.ts';

/**
 * Undefined when there is no healthy endpoint (the caller answers 503 `UH`). `avoid`: authorities
 * tried already (a retry prefers another host, Envoy's previous_hosts predicate, when one exists).
 */
export function pickEndpoint(lb: LoadBalancer, t: Target, address: string, avoid?: readonly string[]): Endpoint | undefined {
  if (t.kind === 'service') {
    const all = t.service.endpoints.get(t.port.port) ?? [];
    if (avoid && avoid.length > 0 && all.length > 1) {
      const others = all.filter((ep) => !avoid.includes(ep.authority));
      if (others.length > 0) return lb.pick(others);
    }
    return lb.pick(all);
  }
  if (!t.workload.healthy) return undefined;
  return { workload: t.workload, address, targetPort: t.port, tunnel: t.workload.tunnelProtocol, authority: formatHostPort(address, t.port) };
}
