/**
 * Read one `security.istio.io` RequestAuthentication into a validated {@link RequestAuthentication},
 * refusing what Istio's admission validation refuses (istio/istio
 * `pkg/config/validation/validation.go` `ValidateRequestAuthentication`, `validateJwtRule`,
 * `validatePolicyTargetReference`, `validateOneOfSelectorType`; `pkg/config/security`
 * `ParseJwksURI`). The fields are those of API `security/v1beta1/request_authentication.proto`
 * `JWTRule`: issuer, audiences, jwksUri, jwks, fromHeaders (name, prefix), fromParams, fromCookies,
 * outputPayloadToHeader, forwardOriginalToken, outputClaimToHeaders (header, claim), timeout (JWKS
 * fetch), spaceDelimitedClaims.
 */
import { ConfigError } from '../util/index.ts';
import { canonicalGroup, type TargetRef } from '../authz/index.ts';
import { type KeptResource, locateField, type FieldPath } from '../state/index.ts';

/** One header a token may be read from (`JWTHeader`). */
export interface JwtHeaderLocation {
  /** Lower-case header name. */
  readonly name: string;
  /** Text before the token (`Bearer `); '' = the whole value. */
  readonly prefix: string;
}

/** One validated `jwtRules[]` entry. */
export interface JwtRule {
  readonly issuer: string;
  readonly audiences: readonly string[];
  readonly jwksUri?: string;
  /** Inline JWKS (JSON text). */
  readonly jwks?: string;
  /** Token locations; when all three are empty Envoy's defaults apply (Authorization `Bearer `, `access_token`). */
  readonly fromHeaders: readonly JwtHeaderLocation[];
  readonly fromParams: readonly string[];
  readonly fromCookies: readonly string[];
  /** Lower-case header to receive the base64url payload of a verified token; '' = none. */
  readonly outputPayloadToHeader: string;
  readonly forwardOriginalToken: boolean;
  readonly outputClaimToHeaders: readonly { readonly header: string; readonly claim: string }[];
  /** JWKS fetch timeout (ms); Istio's default 5 s. */
  readonly timeoutMs: number;
  readonly spaceDelimitedClaims: readonly string[];
  /** `RequestAuthentication/<ns>/<name>` it came from. */
  readonly source: string;
}

/** A validated RequestAuthentication. */
export interface RequestAuthentication {
  readonly namespace: string;
  readonly name: string;
  /** `RequestAuthentication/<ns>/<name>`. */
  readonly ref: string;
  readonly hasSelector: boolean;
  readonly targetRefs: readonly TargetRef[];
  readonly rules: readonly JwtRule[];
}

/** Default JWKS fetch timeout (JWTRule `timeout`, Istio: 5 s). */
export const DEFAULT_JWKS_TIMEOUT_MS = 5_000;

const GATEWAY_API = 'gateway.networking.k8s.io';
const ALLOWED_TARGETS = [
  { group: 'core', kind: 'Service' },
  { group: 'networking.istio.io', kind: 'ServiceEntry' },
  { group: GATEWAY_API, kind: 'Gateway' },
  { group: GATEWAY_API, kind: 'GatewayClass' },
];
/** RFC 7230 token characters: a valid header name. */
const HEADER_NAME = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/;

const isRecord = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);

/**
 * Parse and validate `resource`.
 * @throws ConfigError naming the object and field of the first problem.
 */
export function parseRequestAuthentication(resource: KeptResource): RequestAuthentication {
  const ref = `RequestAuthentication/${resource.namespace}/${resource.name}`;
  const fail = (path: FieldPath, message: string): never => {
    throw new ConfigError(message, locateField(resource, ref, path));
  };
  const spec = resource.object.spec ?? {};
  if (!isRecord(spec)) return fail(['spec'], 'must be a mapping');
  const known = new Set(['selector', 'targetRef', 'targetRefs', 'jwtRules']);
  for (const k of Object.keys(spec)) if (!known.has(k)) fail(['spec', k], 'unknown field');

  const str = (v: unknown, path: FieldPath): string => (typeof v === 'string' ? v : fail(path, `must be a string, got ${JSON.stringify(v)}`));
  const strList = (v: unknown, path: FieldPath): string[] => {
    if (v === undefined || v === null) return [];
    if (!Array.isArray(v)) return fail(path, 'must be a list of strings');
    return v.map((x, i) => str(x, [...path, i]));
  };

  // Target selection: at most one of selector, targetRef, targetRefs.
  const set = ['selector', 'targetRef', 'targetRefs'].filter((k) => spec[k] !== undefined && spec[k] !== null);
  if (set.length > 1) fail(['spec'], `only one of selector, targetRef or targetRefs may be set, found ${set.join(', ')}`);
  const rawRefs: unknown[] = Array.isArray(spec.targetRefs) ? spec.targetRefs : isRecord(spec.targetRef) ? [spec.targetRef] : [];
  if (spec.targetRefs !== undefined && spec.targetRefs !== null && !Array.isArray(spec.targetRefs)) fail(['spec', 'targetRefs'], 'must be a list');
  if (rawRefs.length > 16) fail(['spec', 'targetRefs'], 'at most 16 targetRefs are allowed');
  const refPath = (i: number): FieldPath => (Array.isArray(spec.targetRefs) ? ['spec', 'targetRefs', i] : ['spec', 'targetRef']);
  const targetRefs: TargetRef[] = rawRefs.map((r, i) => {
    if (!isRecord(r)) return fail(refPath(i), 'must be a mapping');
    const group = canonicalGroup(typeof r.group === 'string' ? r.group : '');
    const kind = str(r.kind, [...refPath(i), 'kind']);
    const name = str(r.name, [...refPath(i), 'name']);
    if (r.namespace !== undefined && r.namespace !== null && r.namespace !== '' && r.namespace !== resource.namespace) {
      fail([...refPath(i), 'namespace'], 'cross namespace referencing is not currently supported');
    }
    if (!ALLOWED_TARGETS.some((t) => t.group === group && t.kind === kind)) {
      fail(refPath(i), `targetRef must be to one of ${ALLOWED_TARGETS.map((t) => `${t.group}/${t.kind}`).join(', ')} but was ${group}/${kind}`);
    }
    return { group, kind, name };
  });

  const rawRules = spec.jwtRules ?? [];
  if (!Array.isArray(rawRules)) return fail(['spec', 'jwtRules'], 'must be a list');
  const rules = rawRules.map((r, i): JwtRule => {
    const at = (...rest: (string | number)[]): FieldPath => ['spec', 'jwtRules', i, ...rest];
    if (!isRecord(r)) return fail(at(), 'must be a mapping');
    const issuer = r.issuer === undefined ? '' : str(r.issuer, at('issuer'));
    if (issuer === '') fail(at('issuer'), 'issuer must be set');
    const audiences = strList(r.audiences, at('audiences'));
    audiences.forEach((a, j) => a === '' && fail(at('audiences', j), 'audience must be non-empty string'));
    const jwksUri = r.jwksUri === undefined || r.jwksUri === null || r.jwksUri === '' ? undefined : str(r.jwksUri, at('jwksUri'));
    if (jwksUri !== undefined) {
      let u: URL | undefined;
      try {
        u = new URL(jwksUri);
      } catch {
        fail(at('jwksUri'), `invalid jwksUri ${JSON.stringify(jwksUri)}`);
      }
      if (u && u.protocol !== 'http:' && u.protocol !== 'https:') fail(at('jwksUri'), `jwksUri scheme must be http or https, got ${JSON.stringify(u.protocol.slice(0, -1))}`);
      if (u && u.hostname === '') fail(at('jwksUri'), 'jwksUri must have a host');
    }
    const jwks = r.jwks === undefined || r.jwks === null || r.jwks === '' ? undefined : str(r.jwks, at('jwks'));
    if (jwks !== undefined) {
      let parsed: unknown;
      try {
        parsed = JSON.parse(jwks);
      } catch (err) {
        fail(at('jwks'), `jwks parse error: ${(err as Error).message}`);
      }
      if (!isRecord(parsed) || !Array.isArray(parsed.keys)) fail(at('jwks'), 'jwks parse error: no "keys" list');
    }
    const fromHeaders = (Array.isArray(r.fromHeaders) ? r.fromHeaders : r.fromHeaders == null ? [] : fail(at('fromHeaders'), 'must be a list')).map(
      (h: unknown, j: number): JwtHeaderLocation => {
        if (!isRecord(h)) return fail(at('fromHeaders', j), 'must be a mapping with name and prefix');
        const name = h.name === undefined ? '' : str(h.name, at('fromHeaders', j, 'name'));
        if (name === '') fail(at('fromHeaders', j, 'name'), 'location header name must be non-empty string');
        return { name: name.toLowerCase(), prefix: h.prefix === undefined || h.prefix === null ? '' : str(h.prefix, at('fromHeaders', j, 'prefix')) };
      },
    );
    const fromParams = strList(r.fromParams, at('fromParams'));
    fromParams.forEach((p, j) => p === '' && fail(at('fromParams', j), 'location query must be non-empty string'));
    const fromCookies = strList(r.fromCookies, at('fromCookies'));
    fromCookies.forEach((c, j) => c === '' && fail(at('fromCookies', j), 'cookie name must be non-empty string'));
    const payloadHeader = r.outputPayloadToHeader == null ? '' : str(r.outputPayloadToHeader, at('outputPayloadToHeader'));
    if (payloadHeader !== '' && !HEADER_NAME.test(payloadHeader)) fail(at('outputPayloadToHeader'), `invalid header name ${JSON.stringify(payloadHeader)}`);
    const claimHeaders = (Array.isArray(r.outputClaimToHeaders) ? r.outputClaimToHeaders : r.outputClaimToHeaders == null ? [] : fail(at('outputClaimToHeaders'), 'must be a list')).map(
      (c: unknown, j: number) => {
        if (!isRecord(c)) return fail(at('outputClaimToHeaders', j), 'must be a mapping with header and claim');
        const header = c.header === undefined ? '' : str(c.header, at('outputClaimToHeaders', j, 'header'));
        const claim = c.claim === undefined ? '' : str(c.claim, at('outputClaimToHeaders', j, 'claim'));
        if (!HEADER_NAME.test(header)) fail(at('outputClaimToHeaders', j, 'header'), `invalid header name ${JSON.stringify(header)}`);
        if (claim === '') fail(at('outputClaimToHeaders', j, 'claim'), 'claim name must be non-empty');
        return { header: header.toLowerCase(), claim };
      },
    );
    let timeoutMs = DEFAULT_JWKS_TIMEOUT_MS;
    if (r.timeout !== undefined && r.timeout !== null) {
      const m = typeof r.timeout === 'string' ? /^(\d+)(?:\.(\d{1,9}))?s$/.exec(r.timeout) : null;
      if (!m) fail(at('timeout'), `must be a duration such as "5s", got ${JSON.stringify(r.timeout)}`);
      timeoutMs = Number(m![1]) * 1000 + Math.ceil(Number(`0.${m![2] ?? '0'}`) * 1000);
    }
    return {
      issuer,
      audiences,
      ...(jwksUri !== undefined ? { jwksUri } : {}),
      ...(jwks !== undefined ? { jwks } : {}),
      fromHeaders,
      fromParams,
      fromCookies,
      outputPayloadToHeader: payloadHeader.toLowerCase(),
      forwardOriginalToken: r.forwardOriginalToken === true,
      outputClaimToHeaders: claimHeaders,
      timeoutMs,
      spaceDelimitedClaims: strList(r.spaceDelimitedClaims, at('spaceDelimitedClaims')),
      source: ref,
    };
  });

  return { namespace: resource.namespace, name: resource.name, ref, hasSelector: spec.selector !== undefined && spec.selector !== null, targetRefs, rules };
}
