/**
 * JSON Web Key Sets for RequestAuthentication rules, and signature checks with `jose`.
 *
 * Sources, as istiod resolves them (`JwtKeyResolver.BuildLocalJwks`): the rule's inline `jwks`;
 * else its `jwksUri`; else OpenID discovery (`<issuer>/.well-known/openid-configuration`,
 * `jwks_uri`). Remote sets are fetched with `fetch` (undici) when a token first needs them, cached
 * for `cacheMaxAgeMs` (default 5 min, Istio's remote-JWKS `cache_duration`) and fetched again after
 * that; a token whose `kid`/`alg` matches no cached key triggers one early re-fetch when the last
 * fetch is older than `cooldownMs` (default 30 s), so a key rotation is picked up at once. A failed
 * re-fetch keeps the previous keys (istiod keeps the last good set); with no keys at all the token
 * fails with `Jwks remote fetch is failed`. Nothing is fetched for requests without a token, so a
 * JWKS outage never blocks them.
 */
import { compactVerify, createLocalJWKSet, errors, type JSONWebKeySet, type JWSHeaderParameters } from 'jose';
import { log } from '../util/index.ts';
import { JwtStatus, type JwtStatusText, type ParsedJwt } from './jwt-token.ts';

type LocalSet = ReturnType<typeof createLocalJWKSet>;

/** Timing of remote key sets (ms). */
export interface JwksOptions {
  readonly cacheMaxAgeMs?: number;
  readonly cooldownMs?: number;
}

/** Where a rule's keys come from. */
export interface KeySource {
  /** The keys to verify with, or why there are none. */
  keys(): Promise<LocalSet | { readonly error: JwtStatusText }>;
  /** Fetch again if the last fetch is older than the cooldown; true when newer keys arrived. */
  refetch(): Promise<boolean>;
}

function localSet(json: unknown): LocalSet {
  return createLocalJWKSet(json as JSONWebKeySet);
}

/** Keys given inline (`jwks`). An unusable set fails every token with `Jwks doesn't have any valid public key`. */
export function inlineKeys(jwks: string): KeySource {
  let set: LocalSet | undefined;
  try {
    set = localSet(JSON.parse(jwks));
  } catch (err) {
    log.warn({ err: String(err) }, 'authn: inline jwks is not a usable JSON Web Key Set');
  }
  return { keys: async () => set ?? { error: JwtStatus.JwksNoValidKeys }, refetch: async () => false };
}

async function fetchJson(url: string, timeoutMs: number): Promise<unknown> {
  const res = await fetch(url, { signal: AbortSignal.timeout(timeoutMs), headers: { accept: 'application/json, application/jwk-set+json' } });
  if (res.status !== 200) {
    await res.body?.cancel();
    throw new Error(`HTTP ${res.status} from ${url}`);
  }
  return res.json();
}

/** Keys fetched from a URL (or found by OpenID discovery when `uri` resolves lazily). */
class RemoteKeys implements KeySource {
  private readonly uri: () => Promise<string>;
  private readonly timeoutMs: number;
  private readonly maxAge: number;
  private readonly cooldown: number;
  private set: LocalSet | undefined;
  private fetchedAt = 0;
  private pending: Promise<boolean> | undefined;

  constructor(uri: () => Promise<string>, timeoutMs: number, opts: JwksOptions) {
    this.uri = uri;
    this.timeoutMs = timeoutMs;
    this.maxAge = opts.cacheMaxAgeMs ?? 300_000;
    this.cooldown = opts.cooldownMs ?? 30_000;
  }

  async keys(): Promise<LocalSet | { error: JwtStatusText }> {
    if (!this.set || Date.now() - this.fetchedAt >= this.maxAge) await this.load();
    return this.set ?? { error: JwtStatus.JwksFetchFail };
  }

  async refetch(): Promise<boolean> {
    if (this.set && Date.now() - this.fetchedAt < this.cooldown) return false;
    return this.load();
  }

  /** One fetch at a time; resolves true when a new set was installed. */
  private load(): Promise<boolean> {
    this.pending ??= (async () => {
      let where = '';
      try {
        where = await this.uri();
        const next = localSet(await fetchJson(where, this.timeoutMs));
        this.set = next;
        this.fetchedAt = Date.now();
        return true;
      } catch (err) {
        log.warn({ uri: where || undefined, err: String(err), stale: this.set !== undefined }, 'authn: JWKS fetch failed');
        if (this.set) this.fetchedAt = Date.now() - this.maxAge + Math.min(this.cooldown, this.maxAge); // retry after the cooldown
        return false;
      } finally {
        this.pending = undefined;
      }
    })();
    return this.pending;
  }
}

/** Remote key sets shared by every snapshot, by URL (or issuer, for discovery) and timeout. */
export class JwksCache {
  private readonly opts: JwksOptions;
  private readonly remote = new Map<string, RemoteKeys>();

  constructor(opts: JwksOptions = {}) {
    this.opts = opts;
  }

  /** The key source of a rule (see the module comment for the order). */
  source(rule: { readonly issuer: string; readonly jwks?: string; readonly jwksUri?: string; readonly timeoutMs: number }): KeySource {
    if (rule.jwks !== undefined) return inlineKeys(rule.jwks);
    const key = `${rule.jwksUri ?? `discovery:${rule.issuer}`}|${rule.timeoutMs}`;
    let src = this.remote.get(key);
    if (!src) {
      const uri = rule.jwksUri;
      const resolve = uri !== undefined ? async () => uri : () => discoverJwksUri(rule.issuer, rule.timeoutMs);
      src = new RemoteKeys(resolve, rule.timeoutMs, this.opts);
      this.remote.set(key, src);
    }
    return src;
  }

  /** Forget remote sets no rule in `keep` uses (keys as built by {@link source}). */
  retain(rules: readonly { readonly issuer: string; readonly jwks?: string; readonly jwksUri?: string; readonly timeoutMs: number }[]): void {
    const live = new Set(rules.filter((r) => r.jwks === undefined).map((r) => `${r.jwksUri ?? `discovery:${r.issuer}`}|${r.timeoutMs}`));
    for (const k of this.remote.keys()) if (!live.has(k)) this.remote.delete(k);
  }
}

/** OpenID Connect discovery: the `jwks_uri` of `<issuer>/.well-known/openid-configuration`. */
async function discoverJwksUri(issuer: string, timeoutMs: number): Promise<string> {
  const doc = (await fetchJson(`${issuer.replace(/\/+$/, '')}/.well-known/openid-configuration`, timeoutMs)) as { jwks_uri?: unknown };
  if (typeof doc?.jwks_uri !== 'string') throw new Error(`no jwks_uri in the OpenID configuration of ${issuer}`);
  return doc.jwks_uri;
}

/**
 * Verify `jwt`'s signature with `keys`: every key matching its `kid`/`alg` is tried
 * (jwt_verify_lib `verifyJwt`). Returns true, or the status text: `Jwks doesn't have key to match
 * kid or alg from Jwt` when no key matches, `Jwt verification fails` when none verifies.
 */
export async function verifySignature(jwt: ParsedJwt, keys: LocalSet): Promise<true | JwtStatusText> {
  const [prot, payload, signature] = jwt.token.split('.');
  let candidates: Awaited<ReturnType<LocalSet>>[];
  try {
    candidates = [await keys(jwt.header as JWSHeaderParameters, { protected: prot, payload, signature })];
  } catch (err) {
    if (err instanceof errors.JWKSMultipleMatchingKeys) {
      candidates = [];
      for await (const k of err as unknown as AsyncIterable<Awaited<ReturnType<LocalSet>>>) candidates.push(k);
    } else if (err instanceof errors.JWKSNoMatchingKey) {
      return JwtStatus.JwksKidAlgMismatch;
    } else {
      return JwtStatus.VerificationFail;
    }
  }
  for (const key of candidates) {
    try {
      await compactVerify(jwt.token, key);
      return true;
    } catch {
      // next candidate
    }
  }
  return JwtStatus.VerificationFail;
}
