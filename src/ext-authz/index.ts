/**
 * The ext_authz client for CUSTOM AuthorizationPolicies: Envoy's gRPC and HTTP ext_authz as Istio
 * configures them for `envoyExtAuthzGrpc` / `envoyExtAuthzHttp` providers (istio/istio
 * pilot/pkg/security/authz/builder/extauthz.go; envoyproxy/envoy
 * api/envoy/service/auth/v3/external_auth.proto). It dials through the upstream layer, so it sits
 * above it; the authz engine and filter only see the {@link ExtAuthzHook} it implements.
 *
 *   const extAuthz = new ExtAuthzClient({ dial: (ep, use) => clusterManager.openTcp(ep, use) });
 *   const result = authz.forTarget(target).http.evaluate(attrs);
 *   if (result.custom) {
 *     const outcome = await extAuthz.check(snapshot, result.custom.provider, {
 *       source: { address, port, principal }, destination: { address, port, principal },
 *       http: { method, path, host, headers: rawHeaders, protocol, body? },
 *     });
 *     if (!outcome.allow) return localReply(outcome.status, outcome.headers, outcome.body); // flag UAEX
 *     // else apply outcome.headersToUpstream / headersToRemove, then go on with result.decision
 *   }
 *
 * The authz filter's `ExtAuthzHook` (src/authz/ext-authz-hook.ts) over a client:
 * `authzFilterFactory({ extAuthz: createExtAuthzHook(client, meshStore) })` (`hook.ts`).
 *
 * See `client.ts` for the behaviour, `types.ts` for the shapes.
 */
export { ExtAuthzClient, type ExtAuthzClientOptions, type ExtAuthzProvider } from './client.ts';
export { applyHeaderMutations } from './check-response.ts';
export { createExtAuthzHook, type MeshSource } from './hook.ts';
export type { BodySettings, ProviderSettings } from './config.ts';
export type { CheckAllowed, CheckBody, CheckDenied, CheckHttpRequest, CheckInput, CheckOutcome, CheckPeer, Dial, HeaderMutation } from './types.ts';
export { EXT_AUTHZ_PROVIDERS } from './client.ts';
