/**
 * The NetworkPolicy decisions of the waypoint's data path, for the `istio.authz` filter (the
 * NetworkPolicy mode, bootstrap `networkPolicy.enforceOnOriginalIdentity`). Lookups only: the
 * policies are compiled once per mesh snapshot (compile.ts).
 *
 * Endpoints and the decision, the same on both paths: a destination is reachable when at least one
 * of its candidate endpoints (the service port's healthy endpoints, or the addressed workload)
 * admits the original client on its target port, and the pick then only chooses among those.
 * - TCP: decided at CONNECT time: none admits ⇒ refuse the CONNECT (401, as ztunnel's L4
 *   denials); otherwise the relay picks among the admitting endpoints.
 * - HTTP: decided when the router picks the endpoint: refusing endpoints are skipped; none admits
 *   ⇒ 403 `NetworkPolicy: access denied` (admission.ts).
 * A target without any healthy endpoint is not a policy matter (503 `UH` as usual).
 */
import { type ConnectionContext, ResponseFlag } from '../pipeline/index.ts';
import type { MeshSnapshot, Target } from '../state/index.ts';
import { CONNECTION_ADMISSION, hasCandidates, NETWORK_POLICY_DENIED_DETAILS, type EndpointAdmission } from './admission.ts';
import { networkPolicyFor } from './compile.ts';
import { originalSource } from './source.ts';

/**
 * Decide a TCP (or not yet detected) tunnel under `snapshot`, at CONNECT time or again after a
 * mesh change (an open tunnel is judged on the endpoint it relays to). Leaves the admission on
 * the tunnel for the relay's pick. Returns undefined when allowed, else the denial details
 * (`network_policy_access_denied`), with the tunnel's response flag set to `DENY` (the access
 * log and the TCP stats report refused tunnels with it, as ztunnel's metrics do).
 */
export function decideTunnel(conn: ConnectionContext, snapshot: MeshSnapshot, target: Target): string | undefined {
  const compiled = networkPolicyFor(snapshot);
  const src = originalSource(snapshot, conn.info);
  const admission = compiled.admission(src);
  conn.set(CONNECTION_ADMISSION, admission);
  let allowed = true;
  if (admission) {
    if (conn.endpoint) allowed = admission.admit(conn.endpoint);
    else if (!hasCandidates(target)) allowed = true;
    else if (target.kind === 'workload') allowed = compiled.allows(src, target.workload, conn.info.targetPort);
    else allowed = target.service.endpoints.get(target.port.port)!.some(admission.admit);
  }
  if (allowed) {
    if (conn.responseFlags === ResponseFlag.AuthorizationPolicyDenied) conn.responseFlags = ResponseFlag.None;
    return undefined;
  }
  conn.responseFlags = ResponseFlag.AuthorizationPolicyDenied;
  return NETWORK_POLICY_DENIED_DETAILS;
}

/** The admission of one HTTP request on `conn` under `snapshot` (undefined: no pod is isolated). */
export function requestAdmission(conn: ConnectionContext, snapshot: MeshSnapshot): EndpointAdmission | undefined {
  return networkPolicyFor(snapshot).admission(originalSource(snapshot, conn.info));
}
