/**
 * Which AuthorizationPolicies a waypoint enforces, and for which traffic (istio/istio
 * `pilot/pkg/model/policyattachment.go` `ShouldAttachPolicy` for a waypoint):
 * - no targetRefs (selector or namespace-wide policies) → never the waypoint's (ztunnel's);
 * - `gateway.networking.k8s.io/Gateway <this waypoint>` from the waypoint's namespace, or
 *   `gateway.networking.k8s.io/GatewayClass istio-waypoint` from the root namespace → all traffic;
 * - `core/Service <name>` / `networking.istio.io/ServiceEntry <name>` from the service's namespace
 *   → only traffic addressed to that service (its VIP), never workload-addressed traffic.
 * Any one matching targetRef attaches the policy.
 */
import type { Service, WaypointIdentity } from '../state/index.ts';
import type { AuthorizationPolicy } from './policy.ts';

const GATEWAY_API = 'gateway.networking.k8s.io';
const NETWORKING_ISTIO = 'networking.istio.io';
/** Istio `constants.WaypointGatewayClassName`. */
export const WAYPOINT_GATEWAY_CLASS = 'istio-waypoint';

/** Where a policy attaches on this waypoint. */
export interface Attachment {
  /** Applies to everything the waypoint handles (Gateway or GatewayClass reference). */
  readonly waypoint: boolean;
  /** Service keys (see {@link serviceKey}) the policy applies to. */
  readonly services: readonly string[];
}

/** `Service/<ns>/<name>` or `ServiceEntry/<ns>/<name>`: how service attachments are keyed. */
export function serviceKey(service: Pick<Service, 'kind' | 'namespace' | 'name'>): string {
  return `${service.kind}/${service.namespace}/${service.name}`;
}

/** Attachment of `policy` on `waypoint`, given the mesh root namespace. */
export function attachmentOf(policy: AuthorizationPolicy, waypoint: WaypointIdentity, rootNamespace: string): Attachment {
  let toWaypoint = false;
  const services: string[] = [];
  for (const ref of policy.targetRefs) {
    if (ref.group === 'core' && ref.kind === 'Service') {
      services.push(serviceKey({ kind: 'Service', namespace: policy.namespace, name: ref.name }));
    } else if (ref.group === NETWORKING_ISTIO && ref.kind === 'ServiceEntry') {
      services.push(serviceKey({ kind: 'ServiceEntry', namespace: policy.namespace, name: ref.name }));
    } else if (ref.group === GATEWAY_API && ref.kind === 'GatewayClass') {
      if (ref.name === WAYPOINT_GATEWAY_CLASS && policy.namespace === rootNamespace) toWaypoint = true;
    } else if (ref.group === GATEWAY_API && ref.kind === 'Gateway') {
      if (ref.name === waypoint.name && policy.namespace === waypoint.namespace) toWaypoint = true;
    }
  }
  return { waypoint: toWaypoint, services };
}
