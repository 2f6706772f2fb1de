/**
 * Kubernetes NetworkPolicy at the waypoint (the `istio.authz` filter's NetworkPolicy mode): ingress
 * policies of the destination pods evaluated against the original client.
 *
 *   MeshStore.open({ ..., parts: [..., NETWORK_POLICIES] });   // validated and compiled per snapshot
 *   decideTunnel(conn, snapshot, target);                       // TCP, at CONNECT time
 *   requestAdmission(conn, snapshot);                           // HTTP: the router's endpoint pick honours it
 *
 * See compile.ts (semantics), policy.ts (validation), enforce.ts (the data path's decisions).
 */
export { CONNECTION_ADMISSION, NETWORK_POLICY_DENIED_DETAILS, STREAM_ADMISSION, type EndpointAdmission } from './admission.ts';
export { compileNetworkPolicies, NETWORK_POLICIES, networkPolicyFor, type CompiledNetworkPolicies } from './compile.ts';
export { decideTunnel, requestAdmission } from './enforce.ts';
