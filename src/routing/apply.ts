/**
 * The router's use of a matched route: select the rule for a request (client namespace, matches),
 * answer what the rule answers locally (404 `NR` when routes are attached but none matches, a
 * redirect, 500 for filters that cannot be honoured and for invalid or missing backends), and
 * otherwise hand back the backend, the rewritten path and authority, and the header edits.
 */
import { HeaderList, respond, sendLocalReply, type StreamContext, ResponseFlag } from '../pipeline/index.ts';
import { downstreamPeerOf } from '../peer/index.ts';
import type { Target } from '../state/index.ts';
import { applyHeaderModifier, modifyPath, redirectLocation } from './filters.ts';
import { splitTarget } from './match.ts';
import { pickBackend, selectMatch, tableFor } from './select.ts';
import type { CompiledMatch, CompiledRule, HeaderModifier, ResolvedBackend, ServicePortRoutes } from './types.ts';

/**
 * Envoy's `NC` (no cluster found) flag: a route's cluster does not exist. Istio's gateway routes
 * answer it with 500 (`cluster_not_found_response_code: INTERNAL_SERVER_ERROR`, istio/istio
 * pilot/pkg/networking/core/listener_waypoint.go `waypointRouteDestination`), as the Gateway API
 * requires for invalid backends.
 */
export const NO_CLUSTER_FOUND = ResponseFlag.NoClusterFound;

/** What the router applies for a request a rule sends upstream. */
export interface RoutedRequest {
  readonly rule: CompiledRule;
  readonly match: CompiledMatch;
  readonly backend: ResolvedBackend;
  /** Origin-form path to send (rewritten when the rule has a URLRewrite path). */
  readonly path: string;
  /** The authority to send (a URLRewrite hostname, else a `Host` header edit), or undefined to keep the request's. */
  readonly authority: string | undefined;
  /** Request header edits: the rule's, then the backend's. */
  readonly requestHeaders: readonly HeaderModifier[];
  /** Response header edits: the backend's, then the rule's. */
  readonly responseHeaders: readonly HeaderModifier[];
}

/** The namespace routes see as the client's: the downstream peer's, else the mTLS identity's. */
export function clientNamespace(stream: StreamContext): string {
  return downstreamPeerOf(stream)?.namespace || stream.conn.info.peer.namespace;
}

/**
 * Route one request of a service target with attached routes. `path` is the request target the
 * router would forward. Returns the routing to apply; `null` when no route applies to this client
 * (the default route stays); undefined when the request was answered here.
 */
export function routeRequest(stream: StreamContext, routes: ServicePortRoutes, target: Target & { kind: 'service' }, path: string): RoutedRequest | null | undefined {
  const table = tableFor(routes, clientNamespace(stream), target.service.namespace);
  if (!table) return null;
  const { path: bare, query } = splitTarget(path);
  const match = selectMatch(table, { method: stream.method, path: bare, query, headers: stream.requestHeaders.toRecord() });
  if (!match) {
    sendLocalReply(stream, 404, '', ResponseFlag.NoRouteFound, 'route_not_found');
    return undefined;
  }
  const rule = match.rule;
  if (rule.filterError) {
    sendLocalReply(stream, 500, '', ResponseFlag.None, 'route_filter_not_supported');
    return undefined;
  }
  if (rule.redirect) {
    const location = redirectLocation(rule.redirect, match, { authority: stream.authority, path: bare, query, listenerPort: target.port.port });
    const headers = new HeaderList(['location', location, 'content-length', '0']);
    if (rule.responseHeaders) applyHeaderModifier(headers, rule.responseHeaders);
    stream.responseCodeDetails = 'direct_response';
    if (respond(stream, rule.redirect.statusCode, undefined, headers)) stream.res.end();
    return undefined;
  }
  const weighted = pickBackend(rule);
  if (!weighted?.backend) {
    sendLocalReply(stream, 500, '', NO_CLUSTER_FOUND, 'cluster_not_found');
    return undefined;
  }
  const rewrite = rule.rewrite;
  const requestHeaders: HeaderModifier[] = [];
  const responseHeaders: HeaderModifier[] = [];
  if (rule.requestHeaders) requestHeaders.push(rule.requestHeaders);
  if (weighted.requestHeaders) requestHeaders.push(weighted.requestHeaders);
  if (weighted.responseHeaders) responseHeaders.push(weighted.responseHeaders);
  if (rule.responseHeaders) responseHeaders.push(rule.responseHeaders);
  return {
    rule,
    match,
    backend: weighted.backend,
    path: rewrite?.path ? modifyPath(rewrite.path, match, bare, query) : path,
    // URLRewrite's hostname wins over a `Host` header edit (Istio: istio/istio
    // pilot/pkg/networking/core/route/route.go `translateRoute`).
    authority: rewrite?.hostname ?? weighted.requestAuthority ?? rule.requestAuthority,
    requestHeaders,
    responseHeaders,
  };
}

/** Apply the request header edits of a routed request to the upstream headers. */
export function applyRequestHeaders(headers: HeaderList, routed: RoutedRequest): void {
  for (const m of routed.requestHeaders) applyHeaderModifier(headers, m);
}
