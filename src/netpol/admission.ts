/**
 * How a NetworkPolicy decision reaches endpoint selection: the `istio.authz` filter (in the
 * NetworkPolicy mode) leaves an {@link EndpointAdmission} on the tunnel (TCP) or on the request
 * (HTTP); the core's endpoint pick (`pickEndpoint(..., { admit })`) skips the endpoints it refuses, and
 * the router answers 403 `NetworkPolicy: access denied` when every candidate was refused.
 * Filters never see the upstream pool: the predicate is over mesh-state {@link Endpoint}s only.
 */
import { ResponseFlag, defineSlot, sendLocalReply, type StreamContext } from '../pipeline/index.ts';
import { upstreamEndpoints, type Endpoint, type Target } from '../state/index.ts';

/** Which endpoints the original client may reach. */
export interface EndpointAdmission {
  /** True when `ep` may be picked. Pure; a lookup plus a few label/port compares. */
  readonly admit: (ep: Endpoint) => boolean;
}

/** The admission of a TCP (or still undetected) tunnel, decided at CONNECT time; read by the TCP relay's pick. */
export const CONNECTION_ADMISSION = defineSlot<EndpointAdmission>('network_policy_admission', 'connection');
/** The admission of one HTTP request, under the snapshot it was authorized with; read by the router's pick. */
export const STREAM_ADMISSION = defineSlot<EndpointAdmission>('network_policy_admission', 'stream');

/** Body of the HTTP denial (mirrors Envoy's `RBAC: access denied`). */
export const NETWORK_POLICY_DENIED_BODY = 'NetworkPolicy: access denied';
/** Response code details (HTTP) and connection termination details (TCP) of a denial. */
export const NETWORK_POLICY_DENIED_DETAILS = 'network_policy_access_denied';
/** HTTP status of a denial (TCP tunnels get 401 on the CONNECT, as ztunnel's L4 denials). */
export const NETWORK_POLICY_DENIED_STATUS = 403;

/**
 * True when `target` has an endpoint to pick at all (a healthy service endpoint — an instance of
 * the other waypoint a service goes through — or a healthy workload).
 */
export function hasCandidates(target: Target): boolean {
  if (target.kind === 'workload') return target.workload.healthy;
  return upstreamEndpoints(target.service, target.port.port).length > 0;
}

/**
 * Router helper: when the pick for `target` came back empty, was it because the request's
 * admission refused every candidate? Then answers 403 `NetworkPolicy: access denied` (flag `DENY`,
 * ztunnel's policy-denial flag) and returns true; else returns false (the caller answers 503 `UH`).
 */
export function replyIfAllRefused(s: StreamContext, target: Target): boolean {
  if (!s.get(STREAM_ADMISSION) || !hasCandidates(target)) return false;
  sendLocalReply(s, NETWORK_POLICY_DENIED_STATUS, NETWORK_POLICY_DENIED_BODY, ResponseFlag.AuthorizationPolicyDenied, NETWORK_POLICY_DENIED_DETAILS);
  return true;
}
