/**
 * Applying the Gateway API filters a waypoint supports: header modifiers, path modifiers
 * (URLRewrite and RequestRedirect), and the redirect `Location`. Pure functions over compiled
 * filters; the router calls them with the matched rule.
 */
import type { HeaderList } from '../pipeline/headers.ts';
import { normalizePrefix } from './match.ts';
import type { HeaderFilterDoc } from './route-schema.ts';
import type { CompiledMatch, HeaderModifier, PathModifier, Redirect } from './types.ts';

/** Compile an HTTPHeaderFilter (names lower-cased); undefined when it changes nothing. */
export function compileHeaderModifier(doc: HeaderFilterDoc | null | undefined): HeaderModifier | undefined {
  if (!doc) return undefined;
  const pair = (h: { name: string; value: string }) => Object.freeze([h.name.toLowerCase(), h.value] as const);
  const m: HeaderModifier = {
    set: (doc.set ?? []).map(pair),
    add: (doc.add ?? []).map(pair),
    remove: (doc.remove ?? []).map((n) => n.toLowerCase()),
  };
  return m.set.length + m.add.length + m.remove.length === 0 ? undefined : m;
}

/**
 * Apply a header modifier: `remove` first, then `set` (replacing every value), then `add`
 * (appending), as Envoy's header parser evaluates `headers_to_remove` before `headers_to_add`.
 */
export function applyHeaderModifier(headers: HeaderList, m: HeaderModifier | undefined): void {
  if (!m) return;
  for (const name of m.remove) headers.remove(name);
  for (const [name, value] of m.set) headers.set(name, value);
  for (const [name, value] of m.add) headers.append(name, value);
}

/**
 * The path after a path modifier (GW:apis/v1/httproute_types.go `HTTPPathModifier`):
 * ReplaceFullPath replaces the whole path; ReplacePrefixMatch replaces the matched PathPrefix
 * element-wise (`/foo` + `/foo/bar` with `/xyz` → `/xyz/bar`; with `/` → `/bar`). The query
 * string is kept.
 */
export function modifyPath(mod: PathModifier, match: CompiledMatch, path: string, query: string): string {
  let out: string;
  if (mod.type === 'ReplaceFullPath') out = mod.value;
  else {
    // Validation allows ReplacePrefixMatch only with PathPrefix matches.
    const rest = path.slice(match.path.value.length);
    const replacement = normalizePrefix(mod.value);
    out = replacement === '' ? rest || '/' : replacement + rest;
  }
  return query ? `${out}?${query}` : out;
}

/** What the redirect needs to know of the request. */
export interface RedirectRequest {
  /** Request Host / :authority (may carry a port). */
  readonly authority: string;
  /** Path without query, and the query ('' when none). */
  readonly path: string;
  readonly query: string;
  /** The port the client dialed (the service port): Gateway API's "listener port" in the mesh. */
  readonly listenerPort: number;
}

/**
 * The `Location` of a RequestRedirect (GW:apis/v1/httproute_types.go `HTTPRequestRedirectFilter`):
 * scheme defaults to the request's (`http` inside the mesh tunnel); hostname to the request's;
 * port to the scheme's well-known port when a scheme is set, else to the listener (service) port;
 * the port is left out when it is the scheme's well-known one (http 80, https 443).
 */
export function redirectLocation(r: Redirect, match: CompiledMatch, req: RedirectRequest): string {
  const scheme = r.scheme ?? 'http';
  const host = r.hostname ?? hostOf(req.authority);
  const port = r.port ?? (r.scheme ? (scheme === 'https' ? 443 : 80) : req.listenerPort);
  const wellKnown = (scheme === 'http' && port === 80) || (scheme === 'https' && port === 443);
  const authority = wellKnown ? bracket(host) : `${bracket(host)}:${port}`;
  const target = r.path ? modifyPath(r.path, match, req.path, req.query) : req.query ? `${req.path}?${req.query}` : req.path;
  return `${scheme}://${authority}${target}`;
}

/** The host of an authority, without its port (IPv6 brackets removed). */
export function hostOf(authority: string): string {
  if (authority.startsWith('[')) {
    const end = authority.indexOf(']');
    return end > 0 ? authority.slice(1, end) : authority;
  }
  const colon = authority.lastIndexOf(':');
  return colon >= 0 && authority.indexOf(':') === colon ? authority.slice(0, colon) : authority;
}

function bracket(host: string): string {
  return host.includes(':') ? `[${host}]` : host;
}

/**
 * The authority of a mirrored request: Envoy suffixes the host with `-shadow`, before any port
 * (ENV:source/common/router/shadow_writer_impl.cc, `Http::Utility::buildShadowHost` style).
 */
export function shadowAuthority(authority: string): string {
  if (authority.startsWith('[')) return authority; // an IPv6 literal cannot take a suffix
  const colon = authority.lastIndexOf(':');
  return colon > 0 ? `${authority.slice(0, colon)}-shadow${authority.slice(colon)}` : `${authority}-shadow`;
}
