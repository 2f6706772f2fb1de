/**
 * Where a JWT is read from (Envoy jwt_authn `extractor.cc`): a header (the text after the
 * configured prefix, up to the first character that cannot be part of a JWT), a query parameter
 * of `:path` (URL-decoded, first occurrence), or a cookie. With no location configured a rule uses
 * Envoy's defaults: `Authorization: Bearer <token>` and the `access_token` parameter.
 */
import type { HeaderLookup } from '../authz/index.ts';
import type { JwtRule } from './request-authentication.ts';

/** A token found in the request, and where. */
export interface FoundToken {
  readonly token: string;
  readonly where: { readonly kind: 'header' | 'param' | 'cookie'; readonly name: string };
}

const DEFAULT_HEADER = { name: 'authorization', prefix: 'Bearer ' };
const DEFAULT_PARAM = 'access_token';
/** Characters a compact JWS can hold (base64url and the dots). */
const JWT_CHARS = /^[A-Za-z0-9_\-.=]*/;

/** The locations of `rule` (Envoy's defaults when it names none). */
export function locationsOf(rule: JwtRule): { headers: readonly { name: string; prefix: string }[]; params: readonly string[]; cookies: readonly string[] } {
  if (rule.fromHeaders.length === 0 && rule.fromParams.length === 0 && rule.fromCookies.length === 0) {
    return { headers: [DEFAULT_HEADER], params: [DEFAULT_PARAM], cookies: [] };
  }
  return { headers: rule.fromHeaders, params: rule.fromParams, cookies: rule.fromCookies };
}

/** Query parameters of a request target, decoded (`+` is a space, as Envoy's query parser does). */
export function queryParams(path: string): [string, string][] {
  const q = path.indexOf('?');
  if (q < 0) return [];
  const end = path.indexOf('#', q);
  const query = path.slice(q + 1, end < 0 ? undefined : end);
  const out: [string, string][] = [];
  for (const part of query.split('&')) {
    if (part === '') continue;
    const eq = part.indexOf('=');
    const dec = (s: string) => {
      try {
        return decodeURIComponent(s.replace(/\+/g, ' '));
      } catch {
        return s;
      }
    };
    out.push(eq < 0 ? [dec(part), ''] : [dec(part.slice(0, eq)), dec(part.slice(eq + 1))]);
  }
  return out;
}

/** `path` without every occurrence of query parameter `name` (Envoy's `removeJwt` for params). */
export function removeQueryParam(path: string, name: string): string {
  const q = path.indexOf('?');
  if (q < 0) return path;
  const kept = path
    .slice(q + 1)
    .split('&')
    .filter((part) => {
      const key = part.split('=')[0];
      let decoded = key;
      try {
        decoded = decodeURIComponent(key.replace(/\+/g, ' '));
      } catch {
        // keep raw
      }
      return part !== '' && decoded !== name;
    });
  return kept.length ? `${path.slice(0, q)}?${kept.join('&')}` : path.slice(0, q);
}

function cookies(headers: HeaderLookup): Map<string, string> {
  const out = new Map<string, string>();
  const raw = headers.get('cookie');
  if (!raw) return out;
  for (const pair of raw.split(/[;,]/)) {
    const eq = pair.indexOf('=');
    if (eq < 0) continue;
    const name = pair.slice(0, eq).trim();
    if (!out.has(name)) out.set(name, pair.slice(eq + 1).trim().replace(/^"(.*)"$/, '$1'));
  }
  return out;
}

/** Every token `rule` would see in the request, in Envoy's order (headers, then params, then cookies). */
export function extractTokens(rule: JwtRule, headers: HeaderLookup, path: string): FoundToken[] {
  const loc = locationsOf(rule);
  const found: FoundToken[] = [];
  for (const h of loc.headers) {
    const value = headers.get(h.name);
    if (value === undefined) continue;
    let token = value;
    if (h.prefix !== '') {
      const pos = value.indexOf(h.prefix);
      if (pos < 0) continue;
      token = JWT_CHARS.exec(value.slice(pos + h.prefix.length))![0];
    }
    found.push({ token, where: { kind: 'header', name: h.name } });
  }
  if (loc.params.length) {
    const params = queryParams(path);
    for (const name of loc.params) {
      const hit = params.find(([k]) => k === name);
      if (hit) found.push({ token: hit[1], where: { kind: 'param', name } });
    }
  }
  if (loc.cookies.length) {
    const jar = cookies(headers);
    for (const name of loc.cookies) {
      const v = jar.get(name);
      if (v !== undefined) found.push({ token: v, where: { kind: 'cookie', name } });
    }
  }
  return found;
}
