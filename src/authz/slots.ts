/**
 * What the authorization filter (`istio.authz`, filters/authz) shares with the filters after it and
 * with telemetry, as typed slots (Envoy keeps the same facts in dynamic metadata: the RBAC filter's
 * `shadow_engine_result` / `shadow_effective_policy_id`, the access-log hint of AUDIT rules), and
 * what it reads from the RequestAuthentication filter.
 */
import { defineSlot } from '../pipeline/index.ts';
import type { AuthzResult, JwtInfo } from './types.ts';

/**
 * The engine's result for one inner HTTP request (decision, deciding rule, `audit` rule, dry-run
 * `shadow` result, `custom` provider). Unset when no policy applies to the request's target.
 * A denial is also visible as `stream.responseCodeDetails` (`rbac_access_denied_matched_policy[...]`).
 */
export const AUTHZ_RESULT = defineSlot<AuthzResult>('authz_result', 'stream');

/**
 * The engine's result for a TCP tunnel, decided at CONNECT time (or re-decided after a policy
 * change). Unset for HTTP tunnels (decided per request) and when no policy applies.
 */
export const TCP_AUTHZ_RESULT = defineSlot<AuthzResult>('authz_result', 'connection');

/**
 * The request's validated JWT, set by the RequestAuthentication filter (listed before the authz
 * filter) when a token validated; read for `requestPrincipals` and `request.auth.*`. Unset = no
 * valid token (a present but invalid token never reaches authz: authn answers 401).
 */
export const REQUEST_JWT = defineSlot<JwtInfo>('jwt_payload', 'stream');
