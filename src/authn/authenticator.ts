/**
 * JWT authentication of one request against the RequestAuthentication rules of its target, as
 * Envoy's `envoy.filters.http.jwt_authn` does with the config istiod generates (istio/istio
 * `pilot/pkg/security/authn/policy_applier.go` `convertToEnvoyJwtConfig`; Envoy jwt_authn
 * `verifier.cc`, `authenticator.cc`, `extractor.cc`, `filter.cc`):
 *
 * - Each rule is a provider that reads tokens from its own locations. A token passes a provider
 *   when it parses, its `iss` is the rule's issuer (else `Jwt issuer is not configured`), it is
 *   not before `nbf` nor after `exp` (60 s clock skew, Envoy's default), an audience matches
 *   (`Audiences in Jwt are not allowed`, answered with 403), and a key of the rule's JWKS
 *   verifies it.
 * - One rule: requires_any{provider, allow_missing}. Several: requires_any{P1, ..., Pn,
 *   requires_all{any{P1, allow_missing}, ..., any{Pn, allow_missing}}}. So: no token anywhere →
 *   allowed without identity (the policies decide); a token some provider accepts → allowed; a
 *   token no provider accepts → 401 (403 for an audience mismatch) with the status text as body,
 *   errors other than "missing"/"unknown issuer" preferred (Envoy's AnyVerifier aggregation).
 * - On success, per accepted token: `outputPayloadToHeader` gets the base64url payload,
 *   `outputClaimToHeaders` the claims (strings, numbers, booleans; lists joined with `,`), and
 *   unless `forwardOriginalToken` the token is removed (its header, or its query parameter).
 *   Headers named by `outputPayloadToHeader` / `outputClaimToHeaders` are always removed from the
 *   incoming request first (Envoy's `sanitizeHeaders`), so a client cannot forge them.
 * - CORS preflights (OPTIONS with Origin and Access-Control-Request-Method) pass untouched
 *   (istiod sets `bypass_cors_preflight`).
 */
import type { HeaderLookup, JwtInfo } from '../authz/index.ts';
import { extractTokens, removeQueryParam, type FoundToken } from './extract.ts';
import type { JwksCache, KeySource } from './jwks.ts';
import { verifySignature } from './jwks.ts';
import { JwtStatus, audienceChecker, parseJwt, type JwtStatusText, type ParsedJwt } from './jwt-token.ts';
import type { JwtRule } from './request-authentication.ts';

/** Envoy jwt_authn's default `clock_skew_seconds`. */
export const DEFAULT_CLOCK_SKEW_SECONDS = 60;
/** Envoy's cap on the path in the `WWW-Authenticate` realm. */
const MAX_REALM_PATH = 256;

/** The request as authentication sees it. */
export interface AuthnRequest {
  readonly method: string;
  /** `:path` with its query (as forwarded). */
  readonly path: string;
  /** `:authority`. */
  readonly host: string;
  /** `x-forwarded-proto` / `:scheme`; default `http`. */
  readonly scheme?: string;
  readonly headers: HeaderLookup;
}

/** Request changes to make when authentication passed. */
export interface AuthnHeaderChanges {
  /** Headers to delete (lower-case), applied first. */
  readonly remove: readonly string[];
  /** Headers to set (replace), applied after the removals. */
  readonly set: readonly (readonly [string, string])[];
}

/** Authentication passed (or there was no token). */
export interface AuthnOk {
  readonly ok: true;
  /** `<iss>/<sub>` of the accepted token (Istio's request principal); undefined without one. */
  readonly principal: string | undefined;
  /** The accepted token's claims; undefined without one. */
  readonly claims: Readonly<Record<string, unknown>> | undefined;
  /** For the authz engine's `RequestAttributes.jwt`; undefined without a token. */
  readonly jwt: JwtInfo | undefined;
  readonly headers: AuthnHeaderChanges;
  /** The new `:path` when a token was taken out of the query; undefined = unchanged. */
  readonly path?: string;
}

/** Authentication failed: send this local reply. */
export interface AuthnFailed {
  readonly ok: false;
  /** 401, or 403 for `Audiences in Jwt are not allowed` (Envoy jwt_authn). */
  readonly status: 401 | 403;
  /** Envoy's status text, which is also the body (`Jwt is expired`, `Jwt verification fails`, ...). */
  readonly reason: JwtStatusText;
  readonly body: string;
  /** `www-authenticate: Bearer realm="<scheme>://<host><path>", error="invalid_token"`. */
  readonly headers: readonly (readonly [string, string])[];
  /** Envoy response code details: `jwt_authn_access_denied{<reason with _ for spaces>}`. */
  readonly details: string;
}

export type AuthnResult = AuthnOk | AuthnFailed;

/** One rule, ready to verify. */
interface Provider {
  readonly rule: JwtRule;
  readonly keys: KeySource;
  readonly audienceOk: (aud: readonly string[]) => boolean;
}

type ProviderOutcome = { readonly ok: true; readonly jwt: ParsedJwt; readonly token: FoundToken } | { readonly ok: false; readonly status: JwtStatusText };

const MISSED = JwtStatus.Missed;
const UNKNOWN = JwtStatus.UnknownIssuer;

function claimText(v: unknown): string | undefined {
  if (typeof v === 'string') return v;
  if (typeof v === 'number' && Number.isFinite(v)) return String(v);
  if (typeof v === 'boolean') return v ? 'true' : 'false';
  if (Array.isArray(v)) {
    const parts = v.map(claimText);
    return parts.every((p) => p !== undefined) ? parts.join(',') : undefined;
  }
  return undefined;
}

/** A claim by name; `a.b` reads nested claims (Envoy `claim_to_headers`). */
function claimAt(payload: Readonly<Record<string, unknown>>, name: string): unknown {
  if (name in payload) return payload[name];
  let v: unknown = payload;
  for (const key of name.split('.')) {
    if (v === null || typeof v !== 'object' || Array.isArray(v)) return undefined;
    v = (v as Record<string, unknown>)[key];
  }
  return v;
}

/** Verifies requests against a fixed list of JWT rules (those attached to one target). */
export class RequestAuthenticator {
  /** The rules, sorted by issuer as istiod sorts them. */
  readonly rules: readonly JwtRule[];
  private readonly providers: readonly Provider[];
  private readonly sanitize: readonly string[];
  private readonly skewSeconds: number;

  constructor(rules: readonly JwtRule[], jwks: JwksCache, opts: { clockSkewSeconds?: number } = {}) {
    this.rules = [...rules].sort((a, b) => (a.issuer < b.issuer ? -1 : a.issuer > b.issuer ? 1 : 0));
    this.providers = this.rules.map((rule) => ({ rule, keys: jwks.source(rule), audienceOk: audienceChecker(rule.audiences) }));
    const names = new Set<string>();
    for (const r of this.rules) {
      if (r.outputPayloadToHeader) names.add(r.outputPayloadToHeader);
      for (const c of r.outputClaimToHeaders) names.add(c.header);
    }
    this.sanitize = [...names];
    this.skewSeconds = opts.clockSkewSeconds ?? DEFAULT_CLOCK_SKEW_SECONDS;
  }

  /** Authenticate `req` (see the module comment). Never rejects. */
  async authenticate(req: AuthnRequest): Promise<AuthnResult> {
    const h = req.headers;
    if (req.method === 'OPTIONS' && h.get('origin') && h.get('access-control-request-method')) {
      return { ok: true, principal: undefined, claims: undefined, jwt: undefined, headers: { remove: [], set: [] } };
    }
    const outcomes = await Promise.all(this.providers.map((p) => this.verifyProvider(p, req)));
    const status = this.decide(outcomes.map((o) => (o.ok ? 'ok' : o.status)));
    if (status !== 'ok') return this.failure(status, req);

    const remove = new Set(this.sanitize);
    const set: [string, string][] = [];
    let path: string | undefined;
    let first: { jwt: ParsedJwt; rule: JwtRule } | undefined;
    outcomes.forEach((o, i) => {
      if (!o.ok) return;
      const rule = this.providers[i].rule;
      first ??= { jwt: o.jwt, rule };
      if (rule.outputPayloadToHeader) set.push([rule.outputPayloadToHeader, o.jwt.payloadBase64Url]);
      for (const c of rule.outputClaimToHeaders) {
        const text = claimText(claimAt(o.jwt.payload, c.claim));
        if (text !== undefined) set.push([c.header, text]);
      }
      if (!rule.forwardOriginalToken) {
        if (o.token.where.kind === 'header') remove.add(o.token.where.name);
        else if (o.token.where.kind === 'param') path = removeQueryParam(path ?? req.path, o.token.where.name);
      }
    });
    const accepted = first as { jwt: ParsedJwt; rule: JwtRule } | undefined;
    return {
      ok: true,
      principal: accepted ? `${accepted.jwt.iss}/${accepted.jwt.sub}` : undefined,
      claims: accepted?.jwt.payload,
      jwt: accepted ? { payload: accepted.jwt.payload, ...(accepted.rule.spaceDelimitedClaims.length ? { spaceDelimitedClaims: accepted.rule.spaceDelimitedClaims } : {}) } : undefined,
      headers: { remove: [...remove], set },
      ...(path !== undefined && path !== req.path ? { path } : {}),
    };
  }

  /** The requirement tree istiod builds, over each provider's status (see the module comment). */
  private decide(statuses: readonly ('ok' | JwtStatusText)[]): 'ok' | JwtStatusText {
    if (statuses.length === 0) return 'ok';
    if (statuses.includes('ok')) return 'ok';
    if (statuses.length === 1) return statuses[0] === MISSED ? 'ok' : statuses[0];
    // requires_all{any{Pi, allow_missing}}: the first provider whose token is present but bad.
    const inner = statuses.find((s) => s !== MISSED) ?? 'ok';
    if (inner === 'ok') return 'ok';
    // Outer requires_any: aggregate like Envoy's AnyVerifierImpl::onComplete.
    let final: JwtStatusText = MISSED;
    for (const s of [...statuses, inner] as JwtStatusText[]) {
      if ((s !== MISSED && s !== UNKNOWN) || final === MISSED) final = s;
    }
    return final;
  }

  private failure(status: JwtStatusText, req: AuthnRequest): AuthnFailed {
    const scheme = req.headers.get('x-forwarded-proto') ?? req.scheme ?? 'http';
    const realm = `${scheme}://${req.host}${req.path.slice(0, MAX_REALM_PATH)}`;
    const challenge = `Bearer realm="${realm}"${status === MISSED ? '' : ', error="invalid_token"'}`;
    return {
      ok: false,
      status: status === JwtStatus.AudienceNotAllowed ? 403 : 401,
      reason: status,
      body: status,
      headers: [['www-authenticate', challenge]],
      details: `jwt_authn_access_denied{${status.replace(/\s/g, '_')}}`,
    };
  }

  /** One provider over the tokens in its locations: Envoy tries them last to first, stops at the first success. */
  private async verifyProvider(p: Provider, req: AuthnRequest): Promise<ProviderOutcome> {
    const tokens = extractTokens(p.rule, req.headers, req.path);
    if (tokens.length === 0) return { ok: false, status: MISSED };
    let last: ProviderOutcome = { ok: false, status: MISSED };
    for (let i = tokens.length - 1; i >= 0; i--) {
      last = await this.verifyToken(p, tokens[i]);
      if (last.ok) return last;
    }
    return last;
  }

  private async verifyToken(p: Provider, found: FoundToken): Promise<ProviderOutcome> {
    const jwt = parseJwt(found.token);
    if ('error' in jwt) return { ok: false, status: jwt.error };
    if (jwt.iss !== p.rule.issuer) return { ok: false, status: UNKNOWN };
    const now = Math.floor(Date.now() / 1000);
    if (jwt.nbf > now + this.skewSeconds) return { ok: false, status: JwtStatus.NotYetValid };
    if (jwt.exp > 0 && now > jwt.exp + this.skewSeconds) return { ok: false, status: JwtStatus.Expired };
    if (!p.audienceOk(jwt.audiences)) return { ok: false, status: JwtStatus.AudienceNotAllowed };
    let keys = await p.keys.keys();
    if ('error' in keys) return { ok: false, status: keys.error };
    let verdict = await verifySignature(jwt, keys);
    if (verdict === JwtStatus.JwksKidAlgMismatch && (await p.keys.refetch())) {
      keys = await p.keys.keys();
      if ('error' in keys) return { ok: false, status: keys.error };
      verdict = await verifySignature(jwt, keys);
    }
    return verdict === true ? { ok: true, jwt, token: found } : { ok: false, status: verdict };
  }
}
