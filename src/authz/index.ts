/**
 * The AuthorizationPolicy engine, as Istio's waypoint enforces policies (istio/istio
 * pilot/pkg/security/authz/builder.go and model/model.go). Pure, no I/O.
 *
 *   const authz = authzFor(snapshot);                     // the snapshot's AUTHZ part: a lookup
 *   // The connection manager normalizes `:path` before any filter (requestPathNormalizer), so
 *   // stream.path is already normalized; match on it without the query:
 *   const result = authz.forTarget(target).http.evaluate({ principal, sourceIp, ..., path: matchPath(stream.path) });
 *   // result.custom → ext_authz first; result.decision === 'DENY' → 403 `RBAC: access denied`,
 *   // details rbacDeniedDetails(result).
 *
 * `AUTHZ` is the compiled part the mesh store compiles into every snapshot before publishing it
 * (an invalid policy refuses the whole update); `compileAuthz(snapshot)` is its compiler and throws
 * a ConfigError for an invalid policy. The destination ztunnel's side (`waypoint inbound`) has its
 * own parts in src/ztunnel; CUSTOM policies are checked by the ext_authz client (src/ext-authz)
 * through the {@link ExtAuthzHook} the authz filter is given.
 */
export { authzFor, compileAuthz, requestPathNormalizer, ruleId, type CompiledAuthz, type TargetAuthz } from './compile.ts';
export { Evaluator, rbacDeniedDetails, type CompiledRule } from './evaluator.ts';
export { headersFromRaw } from './headers.ts';
export { matchPath, normalizeRequestPath, type NormalizedPath, type PathNormalization } from './path-normalize.ts';
export { canonicalGroup, parsePolicy, type AuthorizationPolicy, type TargetRef } from './policy.ts';
export { lookupProviderService, type ExtAuthzProvider } from './providers.ts';
export type { AuthzAction, AuthzResult, CustomCheck, Decision, HeaderLookup, JwtInfo, RequestAttributes, ShadowResult } from './types.ts';
// What the authorization filter (filters/authz) shares through slots, and the ext_authz hook it calls.
export { AUTHZ_RESULT, REQUEST_JWT, TCP_AUTHZ_RESULT } from './slots.ts';
export type { ExtAuthzDecision, ExtAuthzHook, HeaderMutation } from './ext-authz-hook.ts';
// The compiled part (compiled into every mesh snapshot by the store).
export { AUTHZ } from './compile.ts';
// Policy attachment, shared with RequestAuthentication (src/authn).
export { serviceKey, WAYPOINT_GATEWAY_CLASS } from './attachment.ts';
// Rules as istiod converts them for ztunnel, and the strict-mapping schema helpers that
// PeerAuthentication shares (both used by the ztunnel stand-in, src/ztunnel).
export { MATCH_NEVER, ztunnelRule } from './rule.ts';
export { mapping, show } from './policy-schema.ts';
