/**
 * Request matching of compiled routes (Gateway API HTTPRouteMatch / GRPCMethodMatch semantics)
 * and the ordering of matches across rules and routes.
 *
 * Regular expressions: Gateway API leaves the dialect to the implementation and Envoy uses RE2 with
 * full-string matching (`safe_regex`, envoyproxy/envoy source/common/common/regex.cc
 * `CompiledGoogleReMatcher`). Here a pattern is compiled once per mesh snapshot with re2js (a port
 * of RE2: linear-time matching, so a pattern such as `(a+)+b` cannot stall the proxy on a crafted
 * value) and matched against the whole value (`RE2JS.matches`). What RE2 refuses (look-around,
 * back-references, repeat counts over 1000, ...) is refused, with RE2's own message, as Envoy
 * refuses it.
 */
import { RE2JS } from 're2js';
import type { CompiledMatch, PathMatcher, ValueMatcher } from './types.ts';

/**
 * Compile `source` as a full-match RE2 regex.
 * @throws Error when RE2 refuses the pattern.
 */
export function compileRegex(source: string): RE2JS {
  try {
    return RE2JS.compile(source);
  } catch (err) {
    throw new Error(`invalid regular expression ${JSON.stringify(source)} (RE2 syntax, as Envoy's safe_regex): ${(err as Error).message}`);
  }
}

/** A PathPrefix value as matched: the trailing `/` is ignored (`/abc/` ≡ `/abc`), `/` becomes ''. */
export function normalizePrefix(prefix: string): string {
  return prefix.endsWith('/') ? prefix.slice(0, -1) : prefix;
}

/** Whether `path` (no query) matches `m`. */
export function pathMatches(m: PathMatcher, path: string): boolean {
  switch (m.kind) {
    case 'Exact':
      return path === m.value;
    case 'PathPrefix': {
      // Element-wise: `/abc` matches `/abc`, `/abc/` and `/abc/def`, not `/abcd`.
      const p = m.value;
      if (p === '') return true;
      return path.startsWith(p) && (path.length === p.length || path.charCodeAt(p.length) === 0x2f);
    }
    case 'StringPrefix':
      return path.startsWith(m.value);
    case 'RegularExpression':
      return m.re!.matches(path);
  }
}

function valueMatches(m: ValueMatcher, value: string | undefined): boolean {
  if (value === undefined) return false;
  return m.re ? m.re.matches(value) : value === m.exact;
}

/** A request as the matcher sees it. */
export interface MatchInput {
  readonly method: string;
  /** Path without the query. */
  readonly path: string;
  /** The query string without `?` ('' when none). */
  readonly query: string;
  /** Node's header object (lower-case names; repeated headers joined or arrays). */
  readonly headers: Readonly<Record<string, string | string[] | undefined>>;
}

/** Whether the request satisfies every condition of `m`. `params` is the parsed query, made on first need. */
export function matches(m: CompiledMatch, req: MatchInput, params: { value: URLSearchParams | undefined }): boolean {
  if (m.method !== undefined && m.method !== req.method) return false;
  if (!pathMatches(m.path, req.path)) return false;
  for (let i = 0; i < m.headers.length; i++) {
    const h = m.headers[i];
    const v = req.headers[h.name];
    if (!valueMatches(h, Array.isArray(v) ? v.join(',') : v)) return false;
  }
  if (m.query.length > 0) {
    const q = (params.value ??= new URLSearchParams(req.query));
    for (let i = 0; i < m.query.length; i++) {
      const qm = m.query[i];
      if (!valueMatches(qm, q.get(qm.name) ?? undefined)) return false;
    }
  }
  return true;
}

/** First match of `table` (sorted by precedence) the request satisfies. */
export function firstMatch(table: readonly CompiledMatch[], req: MatchInput): CompiledMatch | undefined {
  const params: { value: URLSearchParams | undefined } = { value: undefined };
  for (let i = 0; i < table.length; i++) if (matches(table[i], req, params)) return table[i];
  return undefined;
}

const PATH_RANK: Readonly<Record<string, number>> = { Exact: 3, PathPrefix: 2, StringPrefix: 2, RegularExpression: 1 };

/**
 * Order two matches by Gateway API precedence (kubernetes-sigs/gateway-api
 * apis/v1/httproute_types.go `HTTPRouteRule`): exact path, then the longest prefix, then a method
 * match, then the most header matches, then the most query parameter matches. Regex paths rank
 * below prefixes, longest pattern first (Istio's `sortHTTPRoutes` in istio/istio
 * pilot/pkg/config/kube/gateway/conversion.go). Equal ones keep their order (the caller lists them
 * oldest route first, then namespace/name, then rule and match order, and sorts stably).
 */
export function comparePrecedence(a: CompiledMatch, b: CompiledMatch): number {
  const ra = PATH_RANK[a.path.kind];
  const rb = PATH_RANK[b.path.kind];
  if (ra !== rb) return rb - ra;
  if (a.path.value.length !== b.path.value.length) return b.path.value.length - a.path.value.length;
  if ((a.method === undefined) !== (b.method === undefined)) return a.method === undefined ? 1 : -1;
  if (a.headers.length !== b.headers.length) return b.headers.length - a.headers.length;
  return b.query.length - a.query.length;
}

/** Split a request target into path and query (no `?`). */
export function splitTarget(target: string): { path: string; query: string } {
  const q = target.indexOf('?');
  return q < 0 ? { path: target, query: '' } : { path: target.slice(0, q), query: target.slice(q + 1) };
}
