/**
 * Applying the Gateway API filters a waypoint supports: header modifiers, path modifiers
 * (URLRewrite and RequestRedirect), and the redirect `Location`. Pure functions over compiled
 * filters; the router calls them with the matched rule.
 */
import type { HeaderList } from '../pipeline/index.ts';
import { normalizePrefix } from './match.ts';
import type { FieldPath } from '../state/index.ts';
import type { HeaderFilterDoc } from './route-schema.ts';
import type { CompiledMatch, HeaderModifier, PathModifier, Redirect } from './types.ts';

/**
 * Headers a header modifier never changes (ignored, with a warning): the connection-specific ones
 * Envoy's codecs own and refuse to forward (RFC 9113 §8.2.2; envoyproxy/envoy
 * source/common/http/http2/codec_impl.cc) and the framing headers (`content-length`,
 * `transfer-encoding`), which the proxy computes from the body it actually sends. Setting them
 * would break the request or truncate the response.
 */
const NOT_MODIFIABLE = new Set(['connection', 'keep-alive', 'proxy-connection', 'transfer-encoding', 'upgrade', 'te', 'content-length']);

/**
 * Characters Envoy's `HTTP_HEADER_VALUE` validation refuses in a header value (envoyproxy/envoy
 * api/envoy/config/core/v3/base.proto `HeaderValue`).
 */
const BAD_VALUE = /[\0\r\n]/;

/** A compiled HTTPHeaderFilter: the edits, and the authority a request `Host` set/add turns into. */
export interface CompiledHeaderFilter {
  readonly modifier: HeaderModifier | undefined;
  /** Request filters only: the value of a `set` (else `add`) of `Host`, applied as an authority rewrite. */
  readonly authority: string | undefined;
  /** Entries ignored (`host` on responses or in `remove`, connection-specific and framing headers), for the log. */
  readonly ignored: readonly string[];
}

/**
 * Compile an HTTPHeaderFilter (names lower-cased), as Istio converts it
 * (istio/istio pilot/pkg/config/kube/gateway/conversion.go `translateHeadersOperations`, then
 * istio/istio pilot/pkg/networking/core/route/route.go `translateHeadersOperations`):
 * - one action per header name, case-insensitively: a name twice in `set`, `add` or `remove`, or
 *   both in `set` and `remove`, is refused (the CRD's `listType=map` keyed by name);
 * - a value with CR, LF or NUL is refused (Envoy refuses such a `HeaderValueOption`);
 * - a request `Host` set/add becomes an authority rewrite (`host_rewrite_literal`), so it applies to
 *   HTTP/2 clients (`:authority`) as to HTTP/1.1 ones; `set` wins over `add`. `Host` on a response
 *   or in `remove` is dropped, as Istio drops it (Envoy's `HeaderUtility::isModifiableHeader` /
 *   `isRemovableHeader` refuse `host` and `:`-prefixed names, which the name pattern refuses here);
 * - connection-specific and framing headers ({@link NOT_MODIFIABLE}) are ignored.
 * @throws through `fail` (the route is not accepted).
 */
export function compileHeaderModifier(
  doc: HeaderFilterDoc | null | undefined,
  direction: 'request' | 'response',
  at: FieldPath,
  fail: (path: FieldPath, message: string) => never,
): CompiledHeaderFilter {
  const ignored: string[] = [];
  let setAuthority: string | undefined;
  let addAuthority: string | undefined;
  if (!doc) return { modifier: undefined, authority: undefined, ignored };
  const seen = { set: new Set<string>(), add: new Set<string>(), remove: new Set<string>() };
  const claim = (name: string, field: 'set' | 'add' | 'remove', i: number) => {
    const other = field === 'set' ? 'remove' : field === 'remove' ? 'set' : undefined;
    if (seen[field].has(name)) fail([...at, field, i], `header ${JSON.stringify(name)} appears twice in ${field} (names are case-insensitive)`);
    if (other && seen[other].has(name)) fail([...at, field, i], `header ${JSON.stringify(name)} is both set and removed: only one action per header name`);
    seen[field].add(name);
  };
  const keep = (name: string, field: string): boolean => {
    if (name === 'host' && direction === 'request' && field !== 'remove') return false;
    if (name === 'host' || NOT_MODIFIABLE.has(name)) {
      ignored.push(`${field} ${name}`);
      return false;
    }
    return true;
  };
  const pairs = (field: 'set' | 'add') => {
    const out: (readonly [string, string])[] = [];
    (doc[field] ?? []).forEach((h, i) => {
      const name = h.name.toLowerCase();
      claim(name, field, i);
      if (BAD_VALUE.test(h.value)) fail([...at, field, i, 'value'], 'must not contain CR, LF or NUL');
      if (name === 'host' && direction === 'request') {
        if (field === 'set') setAuthority = h.value;
        else addAuthority = h.value;
      }
      if (keep(name, field)) out.push(Object.freeze([name, h.value] as const));
    });
    return out;
  };
  const set = pairs('set');
  const add = pairs('add');
  const remove: string[] = [];
  (doc.remove ?? []).forEach((n, i) => {
    const name = n.toLowerCase();
    claim(name, 'remove', i);
    if (keep(name, 'remove')) remove.push(name);
  });
  const m: HeaderModifier = { set, add, remove };
  return { modifier: set.length + add.length + remove.length === 0 ? undefined : m, authority: setAuthority ?? addAuthority, ignored };
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
 * The path after a path modifier (kubernetes-sigs/gateway-api apis/v1/httproute_types.go
 * `HTTPPathModifier`): ReplaceFullPath replaces the whole path; ReplacePrefixMatch replaces the
 * matched PathPrefix element-wise (`/foo` + `/foo/bar` with `/xyz` → `/xyz/bar`; with `/` →
 * `/bar`). The query string is kept.
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
 * The `Location` of a RequestRedirect (kubernetes-sigs/gateway-api apis/v1/httproute_types.go
 * `HTTPRequestRedirectFilter`): scheme defaults to the request's (`http` inside the mesh tunnel);
 * hostname to the request's; port to the scheme's well-known port when a scheme is set, else to the
 * listener (service) port; the port is left out when it is the scheme's well-known one (http 80,
 * https 443).
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
 * (envoyproxy/envoy source/common/router/shadow_writer_impl.cc, `Http::Utility::buildShadowHost` style).
 */
export function shadowAuthority(authority: string): string {
  if (authority.startsWith('[')) return authority; // an IPv6 literal cannot take a suffix
  const colon = authority.lastIndexOf(':');
  return colon > 0 ? `${authority.slice(0, colon)}-shadow${authority.slice(colon)}` : `${authority}-shadow`;
}
