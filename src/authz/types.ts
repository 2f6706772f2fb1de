/**
 * Public shapes of the AuthorizationPolicy engine: what a caller passes in for one decision
 * ({@link RequestAttributes}) and what it gets back ({@link AuthzResult}).
 *
 * The engine is pure: it never does I/O. The authz filter fills the attributes from the tunnel and
 * request contexts, calls the per-target evaluator, and turns the result into a local reply
 * (403 `RBAC: access denied`), an ext_authz call (CUSTOM), access-log fields and stats.
 * Semantics: Istio's waypoint (istio/istio pilot/pkg/security/authz/builder/builder.go,
 * model/model.go, model/generator.go) and the AuthorizationPolicy reference
 * (istio/api security/v1beta1/authorization_policy.proto).
 */

/** `spec.action` of an AuthorizationPolicy (istio/api authorization_policy.proto; default ALLOW). */
export type AuthzAction = 'ALLOW' | 'DENY' | 'AUDIT' | 'CUSTOM';

/** Outcome of a check. */
export type Decision = 'ALLOW' | 'DENY';

/**
 * Request headers for `request.headers[...]` conditions (see `headers.ts` for adapters). Names are
 * given in lower case; an absent header is undefined.
 */
export interface HeaderLookup {
  /**
   * Each header field's value on its own, in arrival order: what header conditions test, value by
   * value (GHSA-ghc4-35x6-crw5). `cookie` crumbs come back as one `; `-joined value.
   */
  values(lowerName: string): readonly string[] | undefined;
  /** Every value joined with `,` (no space; `cookie` with `; `), for callers that read one string. */
  get(lowerName: string): string | undefined;
}

/** The payload of the request's validated JWT (RequestAuthentication runs before authz). */
export interface JwtInfo {
  /** Decoded claims (`iss`, `sub`, `aud`, `azp`, any nested claim). */
  readonly payload: Readonly<Record<string, unknown>>;
  /**
   * Top-level claims whose string value is split on spaces into a list before matching, besides
   * `scope` and `permission` which always are (RequestAuthentication `spaceDelimitedClaims`).
   */
  readonly spaceDelimitedClaims?: readonly string[];
}

/**
 * Everything a decision may look at. Every field is optional: an absent attribute makes positive
 * matchers false and `not*` matchers true, as Envoy's RBAC matchers do for a missing attribute.
 *
 * Connection-level fields (TCP and HTTP):
 * - `principal`: the peer's SPIFFE URI (`spiffe://td/ns/foo/sa/bar`) from the HBONE client
 *   certificate; source namespace, service account and trust domain are derived from it, as Envoy
 *   does (regexes over the URI). Undefined = no peer identity.
 * - `sourceIp`: the direct peer address of the HBONE connection (`source.ip`, `ipBlocks`).
 * - `remoteIp`: the "trusted client address" (`remote.ip`, `remoteIpBlocks`): at a waypoint the
 *   right-most `X-Forwarded-For` entry when present (Envoy's `remote_ip` with
 *   `xff_num_trusted_hops`); defaults to `sourceIp`.
 * - `destinationIp` / `destinationPort`: the CONNECT target (service VIP and service port, or pod
 *   IP and port for workload-addressed traffic).
 * - `sni`: TLS SNI of the downstream connection (`connection.sni`); none inside a plain tunnel.
 * - `metadata`: Envoy-style dynamic metadata for `experimental.envoy.filters.<f>[<key>]`
 *   conditions: filter name → key → value.
 *
 * HTTP-only fields (ignored by the TCP evaluator):
 * - `host` (`:authority`/Host, port included when the client sent one), `method` (`:method`),
 * - `path`: the **normalized** URL path without the query, as returned by `normalizeRequestPath`
 *   (`.path`); the caller forwards `.forward` upstream so authz and backend see the same path,
 * - `headers`, and `jwt` (for `requestPrincipals` and `request.auth.*`).
 */
export interface RequestAttributes {
  readonly principal?: string;
  readonly sourceIp?: string;
  readonly remoteIp?: string;
  readonly destinationIp?: string;
  readonly destinationPort?: number;
  readonly sni?: string;
  readonly metadata?: Readonly<Record<string, Readonly<Record<string, unknown>>>>;
  readonly host?: string;
  readonly method?: string;
  readonly path?: string;
  readonly headers?: HeaderLookup;
  readonly jwt?: JwtInfo;
}

/** A CUSTOM policy matched: the filter must ask this ext_authz provider before going on. */
export interface CustomCheck {
  /** `provider.name` of the matching CUSTOM policy (an `extensionProviders` entry of MeshConfig). */
  readonly provider: string;
  /** Id of the first matching CUSTOM rule, `ns[<ns>]-policy[<name>]-rule[<n>]`. */
  readonly policy: string;
}

/**
 * What dry-run (`istio.io/dry-run: "true"`) policies would have decided (builder.go `shadowRules`). Never
 * enforced; for logs and stats only. `DENY` when a dry-run DENY rule matches (its id in `policy`),
 * or when dry-run ALLOW policies exist and none matches (`policy` undefined); `ALLOW` otherwise
 * (with the matching dry-run ALLOW rule's id, if any). After an enforced DENY only the dry-run DENY
 * policies are evaluated, as Envoy's ALLOW filter is not reached.
 */
export interface ShadowResult {
  readonly decision: Decision;
  readonly policy?: string;
}

/**
 * The result of one check.
 * - `decision`: what to enforce once CUSTOM (if any) allowed.
 * - `policy`: the rule that decided, `ns[<ns>]-policy[<name>]-rule[<n>]`: the matching DENY rule,
 *   the matching ALLOW rule, or for a broken CUSTOM provider the deny rule Istio generates
 *   (`istio-ext-authz-ns[..]-policy[..]-rule[..]-deny-due-to-bad-CUSTOM-action`). Undefined when
 *   no policy decided (no ALLOW policy → allow; no ALLOW rule matched → deny, Envoy's `[none]`).
 * - `audit`: id of the first matching AUDIT rule (the request must be marked audited).
 * - `custom`: a CUSTOM rule matched with a usable provider: call ext_authz first; if it denies,
 *   the request is denied whatever `decision` says (CUSTOM runs first, istio/api
 *   authorization_policy.proto `CUSTOM`).
 * - `shadow`: present when dry-run policies apply to the target.
 */
export interface AuthzResult {
  readonly decision: Decision;
  readonly policy?: string;
  readonly audit?: string;
  readonly custom?: CustomCheck;
  readonly shadow?: ShadowResult;
}
