/**
 * JWT parsing with Envoy's error statuses (google/jwt_verify_lib `jwt.cc` `Jwt::parseFromString`,
 * `status.cc` `getStatusString`, the texts Envoy's jwt_authn filter returns as 401/403 bodies).
 * Only the structure is checked here; time, audience and signature come later.
 */

/** Envoy / jwt_verify_lib status texts (the local reply body). */
export const JwtStatus = Object.freeze({
  Missed: 'Jwt is missing',
  NotYetValid: 'Jwt not yet valid',
  Expired: 'Jwt is expired',
  BadFormat: 'Jwt is not in the form of Header.Payload.Signature',
  HeaderParseError: 'Jwt header is an invalid Base64url input or an invalid JSON',
  HeaderBadAlg: 'Jwt header [alg] field is not a string',
  HeaderNotImplementedAlg: 'Jwt header [alg] field value is invalid',
  HeaderBadKid: 'Jwt header [kid] field is not a string',
  PayloadParseError: 'Jwt payload is an invalid Base64 or an invalid JSON',
  SignatureParseError: 'Jwt signature is an invalid Base64',
  UnknownIssuer: 'Jwt issuer is not configured',
  AudienceNotAllowed: 'Audiences in Jwt are not allowed',
  VerificationFail: 'Jwt verification fails',
  JwksParseError: 'Jwks is an invalid JSON',
  JwksNoValidKeys: "Jwks doesn't have any valid public key",
  JwksKidAlgMismatch: "Jwks doesn't have key to match kid or alg from Jwt",
  JwksFetchFail: 'Jwks remote fetch is failed',
});
export type JwtStatusText = (typeof JwtStatus)[keyof typeof JwtStatus];

/** Algorithms jwt_verify_lib implements (others: `HeaderNotImplementedAlg`). */
const ALGORITHMS = new Set(['RS256', 'RS384', 'RS512', 'PS256', 'PS384', 'PS512', 'ES256', 'ES384', 'ES512', 'HS256', 'HS384', 'HS512', 'EdDSA']);

/** A structurally valid JWT. */
export interface ParsedJwt {
  readonly token: string;
  readonly header: Readonly<Record<string, unknown>>;
  readonly alg: string;
  readonly kid?: string;
  readonly payload: Readonly<Record<string, unknown>>;
  /** The payload segment as sent (base64url): what `outputPayloadToHeader` forwards. */
  readonly payloadBase64Url: string;
  readonly iss: string;
  readonly sub: string;
  /** `aud` as a list ('' entries dropped). */
  readonly audiences: readonly string[];
  /** Seconds since the epoch; 0 when absent. */
  readonly exp: number;
  readonly nbf: number;
}

const B64URL = /^[A-Za-z0-9_-]*={0,2}$/;

function decodeJson(segment: string): Record<string, unknown> | undefined {
  if (!B64URL.test(segment)) return undefined;
  try {
    const v: unknown = JSON.parse(Buffer.from(segment, 'base64url').toString('utf8'));
    return typeof v === 'object' && v !== null && !Array.isArray(v) ? (v as Record<string, unknown>) : undefined;
  } catch {
    return undefined;
  }
}

const num = (v: unknown): number | undefined => (v === undefined ? 0 : typeof v === 'number' && Number.isFinite(v) && v >= 0 ? Math.floor(v) : undefined);

/** Parse `token`; a status text when it is malformed. */
export function parseJwt(token: string): ParsedJwt | { readonly error: JwtStatusText } {
  const parts = token.split('.');
  if (parts.length !== 3) return { error: JwtStatus.BadFormat };
  const header = decodeJson(parts[0]);
  if (!header) return { error: JwtStatus.HeaderParseError };
  if (typeof header.alg !== 'string') return { error: JwtStatus.HeaderBadAlg };
  if (!ALGORITHMS.has(header.alg)) return { error: JwtStatus.HeaderNotImplementedAlg };
  if (header.kid !== undefined && typeof header.kid !== 'string') return { error: JwtStatus.HeaderBadKid };
  const payload = decodeJson(parts[1]);
  if (!payload) return { error: JwtStatus.PayloadParseError };
  if (!B64URL.test(parts[2]) || parts[2] === '') return { error: JwtStatus.SignatureParseError };
  const iss = payload.iss ?? '';
  const sub = payload.sub ?? '';
  const aud = payload.aud;
  const exp = num(payload.exp);
  const nbf = num(payload.nbf);
  if (typeof iss !== 'string' || typeof sub !== 'string' || exp === undefined || nbf === undefined) return { error: JwtStatus.PayloadParseError };
  let audiences: string[];
  if (aud === undefined) audiences = [];
  else if (typeof aud === 'string') audiences = [aud];
  else if (Array.isArray(aud) && aud.every((a) => typeof a === 'string')) audiences = aud as string[];
  else return { error: JwtStatus.PayloadParseError };
  return {
    token,
    header,
    alg: header.alg,
    ...(typeof header.kid === 'string' ? { kid: header.kid } : {}),
    payload,
    payloadBase64Url: parts[1],
    iss,
    sub,
    audiences: audiences.filter((a) => a !== ''),
    exp,
    nbf,
  };
}

/**
 * jwt_verify_lib `CheckAudience`: configured and token audiences compared without an `http://` or
 * `https://` prefix and without one trailing `/`. No configured audiences: any token passes.
 */
export function audienceChecker(configured: readonly string[]): (tokenAudiences: readonly string[]) => boolean {
  const clean = (a: string) => {
    let s = a;
    if (s.startsWith('https://')) s = s.slice(8);
    else if (s.startsWith('http://')) s = s.slice(7);
    if (s.endsWith('/')) s = s.slice(0, -1);
    return s;
  };
  const allowed = new Set(configured.map(clean));
  return (tokenAudiences) => allowed.size === 0 || tokenAudiences.some((a) => allowed.has(clean(a)));
}
