/**
 * RequestAuthentication: JWT validation for `requestPrincipals` and `request.auth.*`, run after
 * CUSTOM (ext_authz) and before AUDIT/DENY/ALLOW, as Istio orders the waypoint's HTTP filters
 * (istio/istio pilot/pkg/networking/core/listener_waypoint.go `buildWaypointHTTPFilters`).
 *
 *   const authn = new RequestAuthn();                          // long-lived: owns the JWKS cache
 *   MeshStore.open({ ..., parts: [..., authn.part] });          // compiled into every snapshot
 *   const verifier = authn.forTarget(snapshot, target);         // undefined: no RequestAuthentication applies
 *   if (verifier) {
 *     const r = await verifier.authenticate({ method, path, host, headers: headersFromRaw(raw) });
 *     if (!r.ok) return localReply(r.status, r.headers, r.body);   // details r.details
 *     apply r.headers (remove, then set) and r.path; attrs.jwt = r.jwt
 *   }
 *
 * An invalid RequestAuthentication refuses the whole mesh update (the {@link AUTHN} part);
 * `RequestAuthn.validate(snapshot)` checks one without compiling.
 */
import { definePart, type MeshPart, type MeshSnapshot, type Target } from '../state/index.ts';
import type { RequestAuthenticator } from './authenticator.ts';
import { compileAuthn, parseRequestAuthentications, type CompiledAuthn } from './compile.ts';
import { JwksCache, type JwksOptions } from './jwks.ts';

export { RequestAuthenticator, type AuthnFailed, type AuthnHeaderChanges, type AuthnOk, type AuthnRequest, type AuthnResult } from './authenticator.ts';
export type { CompiledAuthn } from './compile.ts';
export type { JwksOptions } from './jwks.ts';
export { JwtStatus, type JwtStatusText } from './jwt-token.ts';
export { parseRequestAuthentication, type JwtRule, type RequestAuthentication } from './request-authentication.ts';

/** Options of {@link RequestAuthn}: JWKS cache timing (ms) and the JWT clock skew (s, default 60). */
export interface RequestAuthnOptions extends JwksOptions {
  readonly clockSkewSeconds?: number;
}

/**
 * The RequestAuthentications of a snapshot, compiled: a part bound by a {@link RequestAuthn}
 * (`authn.part`), which compiles it against its JWKS cache.
 */
export const AUTHN = definePart<CompiledAuthn>('authn', { refusal: 'invalid request authentication' });

/** RequestAuthentication across mesh snapshots: compiled into each (its {@link part}), JWKS cached across them. */
export class RequestAuthn {
  /** The {@link AUTHN} part compiled with this instance's JWKS cache; give it to the store. Publishing a snapshot drops keys no rule uses any more. */
  readonly part: MeshPart<CompiledAuthn>;

  constructor(opts: RequestAuthnOptions = {}) {
    const jwks = new JwksCache(opts);
    this.part = AUTHN.with({
      compile: (snapshot) => compileAuthn(snapshot, jwks, opts),
      publish: (compiled) => jwks.retain(compiled.rules),
    });
  }

  /** @throws ConfigError naming the first invalid RequestAuthentication of `snapshot`. */
  static validate(snapshot: MeshSnapshot): void {
    parseRequestAuthentications(snapshot);
  }

  /** The compiled state of `snapshot` (its {@link AUTHN} part): a lookup. */
  compiledFor(snapshot: MeshSnapshot): CompiledAuthn {
    return snapshot.part(AUTHN);
  }

  /** The authenticator for `target` in `snapshot`; undefined when nothing applies. */
  forTarget(snapshot: MeshSnapshot, target: Target): RequestAuthenticator | undefined {
    return snapshot.part(AUTHN).forTarget(target);
  }
}
