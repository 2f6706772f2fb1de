/**
 * RequestAuthentication (issue 5): JWT validation for `requestPrincipals` and `request.auth.*`,
 * run after CUSTOM (ext_authz) and before AUDIT/DENY/ALLOW (authz.md §2.3).
 *
 *   const authn = new RequestAuthn();                          // long-lived: owns the JWKS cache
 *   const verifier = authn.forTarget(snapshot, target);         // undefined: no RequestAuthentication applies
 *   if (verifier) {
 *     const r = await verifier.authenticate({ method, path, host, headers: headersFromRaw(raw) });
 *     if (!r.ok) return localReply(r.status, r.headers, r.body);   // details r.details
 *     apply r.headers (remove, then set) and r.path; attrs.jwt = r.jwt
 *   }
 *
 * `RequestAuthn.validate(snapshot)` throws a ConfigError for an invalid RequestAuthentication: use
 * it where a mesh update can still be refused (the store's `accept` hook, start-up).
 */
import type { MeshSnapshot, Target } from '../state/types.ts';
import { log } from '../util/log.ts';
import type { RequestAuthenticator } from './authenticator.ts';
import { compileAuthn, parseRequestAuthentications, type CompiledAuthn } from './compile.ts';
import { JwksCache, type JwksOptions } from './jwks.ts';

export { RequestAuthenticator, DEFAULT_CLOCK_SKEW_SECONDS, type AuthnFailed, type AuthnHeaderChanges, type AuthnOk, type AuthnRequest, type AuthnResult } from './authenticator.ts';
export { compileAuthn, type CompiledAuthn } from './compile.ts';
export { JwksCache, type JwksOptions } from './jwks.ts';
export { JwtStatus, type JwtStatusText } from './jwt-token.ts';
export { parseRequestAuthentication, type JwtRule, type RequestAuthentication } from './request-authentication.ts';

/** Options of {@link RequestAuthn}: JWKS cache timing (ms) and the JWT clock skew (s, default 60). */
export interface RequestAuthnOptions extends JwksOptions {
  readonly clockSkewSeconds?: number;
}

const EMPTY: CompiledAuthn = Object.freeze({ version: 0, policies: [], rules: [], forTarget: () => undefined });

/** RequestAuthentication across mesh snapshots: compiled per snapshot, JWKS cached across them. */
export class RequestAuthn {
  private readonly jwks: JwksCache;
  private readonly opts: RequestAuthnOptions;
  private readonly compiled = new WeakMap<MeshSnapshot, CompiledAuthn>();
  private latest: MeshSnapshot | undefined;

  constructor(opts: RequestAuthnOptions = {}) {
    this.opts = opts;
    this.jwks = new JwksCache(opts);
  }

  /** @throws ConfigError naming the first invalid RequestAuthentication of `snapshot`. */
  static validate(snapshot: MeshSnapshot): void {
    parseRequestAuthentications(snapshot);
  }

  /**
   * The compiled state of `snapshot` (cached). Never throws: an invalid RequestAuthentication (the
   * store should have refused it) is logged once and no token is validated for that snapshot, so
   * no request gets a request principal and policies that require one deny.
   */
  compiledFor(snapshot: MeshSnapshot): CompiledAuthn {
    let c = this.compiled.get(snapshot);
    if (c) return c;
    try {
      c = compileAuthn(snapshot, this.jwks, this.opts);
    } catch (err) {
      log.error({ err: String(err), version: snapshot.version }, 'authn: RequestAuthentications do not compile; no JWT is validated for this mesh version');
      c = EMPTY;
    }
    this.compiled.set(snapshot, c);
    if (!this.latest || snapshot.version > this.latest.version) {
      this.latest = snapshot;
      this.jwks.retain(c.rules);
    }
    return c;
  }

  /** The authenticator for `target` in `snapshot`; undefined when nothing applies. */
  forTarget(snapshot: MeshSnapshot, target: Target): RequestAuthenticator | undefined {
    return this.compiledFor(snapshot).forTarget(target);
  }
}
