/**
 * Kubernetes NetworkPolicy enforcement on the original client (bootstrap
 * `networkPolicy.enforceOnOriginalIdentity`): policies validated and compiled once per mesh
 * snapshot (the `NETWORK_POLICIES` part), the tunnel decision and the per-request endpoint
 * admission the `istio.authz` filter takes, and the router's reply when every endpoint was refused.
 */
export {
  CONNECTION_ADMISSION,
  STREAM_ADMISSION,
  hasCandidates,
  replyIfAllRefused,
  type EndpointAdmission,
} from './admission.ts';
export { compileNetworkPolicies, NETWORK_POLICIES, networkPolicyFor, type CompiledNetworkPolicies } from './compile.ts';
export { decideTunnel, requestAdmission } from './enforce.ts';
export { parseNetworkPolicy, type NetworkPolicy } from './policy.ts';
export { originalSource, type OriginalSource } from './source.ts';
