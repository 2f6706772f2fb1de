/**
 * The AuthorizationPolicy engine (issue 5; semantics: shared/reference/authz.md). Pure, no I/O.
 *
 *   const authz = authzFor(snapshot);                     // the snapshot's AUTHZ part: a lookup
 *   const norm = authz.normalizePath(stream.path);        // undefined → 400 path_normalization_failed
 *   const result = authz.forTarget(target).http.evaluate({ principal, sourceIp, ..., path: norm.path });
 *   // result.custom → ext_authz first; result.decision === 'DENY' → 403 `RBAC: access denied`,
 *   // details rbacDeniedDetails(result); forward norm.forward upstream.
 *
 * `AUTHZ` is the compiled part the mesh store compiles into every snapshot before publishing it
 * (an invalid policy refuses the whole update); `compileAuthz(snapshot)` is its compiler and throws
 * a ConfigError for an invalid policy. The destination ztunnel's side (`waypoint inbound`) has its
 * own parts: `ZTUNNEL_AUTHZ` and `PEER_AUTHENTICATION`.
 */
export { authzFor, compileAuthz, ruleId, type CompiledAuthz, type TargetAuthz } from './compile.ts';
export { Evaluator, rbacDeniedDetails } from './evaluator.ts';
export { headersFromRaw, headersFromRecord, withHeaderEdits } from './headers.ts';
export { normalizeRequestPath, type NormalizedPath, type PathNormalization } from './path-normalize.ts';
export { parsePolicy, type AuthorizationPolicy } from './policy.ts';
export type { ExtAuthzProvider } from './providers.ts';
export type { AuthzAction, AuthzResult, CustomCheck, Decision, HeaderLookup, JwtInfo, RequestAttributes, ShadowResult } from './types.ts';
// What the authorization filter (filters/authz) shares through slots, and the ext_authz hook it calls.
export { AUTHZ_RESULT, REQUEST_JWT, TCP_AUTHZ_RESULT } from './slots.ts';
export type { ExtAuthzDecision, ExtAuthzHook } from './ext-authz-hook.ts';
export type { HeaderMutation } from './ext-authz/types.ts';
// The compiled parts (compiled into every mesh snapshot by the store).
export { AUTHZ } from './compile.ts';
export { PEER_AUTHENTICATION, peerAuthenticationFor, type CompiledPeerAuthentication } from './peer-authentication.ts';
export { ZTUNNEL_AUTHZ, ztunnelAuthzFor, rejectionReason, type ZtunnelAuthz } from './selector.ts';
