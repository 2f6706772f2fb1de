/**
 * Kubernetes NetworkPolicy enforcement on the original client (bootstrap
 * `networkPolicy.enforceOnOriginalIdentity`): policies compiled once per mesh snapshot, the
 * tunnel decision and the per-request endpoint admission the `istio.authz` filter takes, and the
 * router's reply when every endpoint was refused.
 */
export {
  CONNECTION_ADMISSION,
  NETWORK_POLICY_DENIED_BODY,
  NETWORK_POLICY_DENIED_DETAILS,
  NETWORK_POLICY_DENIED_STATUS,
  STREAM_ADMISSION,
  hasCandidates,
  replyIfAllRefused,
  type EndpointAdmission,
} from './admission.ts';
export { compileNetworkPolicies, networkPolicyFor, type CompiledNetworkPolicies } from './compile.ts';
export { decideTunnel, requestAdmission } from './enforce.ts';
export { parseNetworkPolicy, type NetworkPolicy } from './policy.ts';
export { originalSource, type OriginalSource } from './source.ts';
