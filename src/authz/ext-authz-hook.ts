/**
 * The interface the authorization filter calls for CUSTOM policies (istio/api authorization_policy.proto
 * `CUSTOM` action; istio/istio pilot/pkg/security/authz/builder/extauthz.go): an ext_authz
 * client (`envoyExtAuthzGrpc` / `envoyExtAuthzHttp` providers of MeshConfig) implements it and is
 * handed to the filter's factory (`authzFilterFactory({ extAuthz })`, filters/authz).
 *
 * The filter calls it only when a CUSTOM rule with a usable provider matched (`result.custom`);
 * an unusable provider already denies in the engine. A denial answers the request with the
 * decision's status (403 by default), body and headers, flag `UAEX`, details `ext_authz_denied`;
 * an allow lets DENY and ALLOW policies decide next (CUSTOM can only narrow access); a rejected
 * promise answers 403 `UAEX` `ext_authz_error` (the hook applies the provider's `failOpen` and
 * `statusOnError` itself and should resolve instead).
 */
import type { ConnectionContext, ResponseFlagName, StreamContext } from '../pipeline/index.ts';
import type { CustomCheck, RequestAttributes } from './types.ts';

/**
 * One header change asked by the authorization server, in order:
 * - `set`: replace every value of `name` (or add it);
 * - `append`: append `value` to the existing value with `,` (add when absent);
 * - `add`: add another `name: value` line, keeping existing ones;
 * - `add-if-absent`: add only when `name` is absent;
 * - `overwrite-if-exists`: replace only when `name` is present.
 * Names are lower-case.
 */
export interface HeaderMutation {
  readonly name: string;
  readonly value: string;
  readonly action: 'set' | 'append' | 'add' | 'add-if-absent' | 'overwrite-if-exists';
}

/** The provider's answer. */
export interface ExtAuthzDecision {
  readonly allow: boolean;
  /** Denials: the HTTP status to answer (default 403). */
  readonly status?: number;
  /** Denials: headers for the local reply. Allows: headers to set on the upstream request. */
  readonly headers?: Readonly<Record<string, string>>;
  /** Denials: the local reply's body (default empty). */
  readonly body?: string;
  /** Denials: the response code details (default `ext_authz_denied`; `ext_authz_error` for a failed check). */
  readonly details?: string;
  /** Allows: headers to remove from the upstream request (after `headers` are set). */
  readonly removeHeaders?: readonly string[];
  /**
   * Allows: changes to the downstream response headers, in order (gRPC `OkHttpResponse.response_headers_to_add`,
   * HTTP `headersToDownstreamOnAllow`; Envoy's ext_authz `encodeHeaders`), applied to whatever
   * response the request gets (upstream or local reply).
   */
  readonly responseHeaders?: readonly HeaderMutation[];
  /** Allows: the check itself failed and the provider's `failOpen` let the request through. */
  readonly failedOpen?: boolean;
  /**
   * Denials: the Envoy response flag (default `UAEX`); `-` for the 413 answered when the body is
   * larger than `maxRequestBytes` without `allowPartialMessage` (Envoy's buffer limit, not a check).
   */
  readonly responseFlag?: ResponseFlagName;
}

/** An ext_authz client. */
export interface ExtAuthzHook {
  /** Check one HTTP request (`custom.provider` names the MeshConfig extension provider). */
  check(attrs: RequestAttributes, stream: StreamContext, custom: CustomCheck): Promise<ExtAuthzDecision>;
  /**
   * Check a TCP tunnel (gRPC providers only; Envoy's network ext_authz). Without it, CUSTOM rules
   * that match a TCP tunnel deny, as for an unusable provider.
   */
  checkConnection?(attrs: RequestAttributes, conn: ConnectionContext, custom: CustomCheck): Promise<ExtAuthzDecision>;
}
