/**
 * `envoy.filters.http.router`: the terminal filter of HTTP chains, its decision part. Per request
 * it resolves the tunnel's target under the current snapshot, matches the Gateway API routes
 * attached to it (backend, path, authority, header edits, mirrors, timeouts and retries: the
 * rule's settings, retry-policy.ts), builds the upstream header block, and hands the request to
 * its sender: a {@link RequestForwarder} (pooled HTTP/1.1 or h2c upstream, retries; request-
 * forwarder.ts and upstream-request.ts), or a dedicated upstream tunnel for WebSocket upgrades
 * and `Expect: 100-continue` (dedicated-upstream.ts). Failures map to Envoy's status codes and
 * response flags in one place, upstream/failure.ts.
 *
 * Upstream protocol (istio/istio pilot/pkg/networking/core/cluster_waypoint.go `applyH2Upgrade`,
 * istio/istio#54125): HTTP/2 (h2c inside the upstream tunnel) for ports declared `http2`/`grpc`,
 * HTTP/1.1 for other HTTP ports, and the downstream's own protocol for undeclared ports.
 *
 * It is the one HTTP filter that talks to the upstream; it gets the cluster manager from the
 * core, which never hands it to other filters.
 */
import type { ServerResponse } from 'node:http';
import { originalClient } from '../peer/index.ts';
import { type MeshSnapshot, type Target, clusterName } from '../state/index.ts';
import {
  downstreamClosed,
  FilterStatus,
  ResponseFlag,
  type FilterEnv,
  type FilterFactory,
  type HeaderList,
  OVERLOAD_BODY,
  OVERLOAD_DETAILS,
  type OverloadManager,
  type PhaseResult,
  sendLocalReply,
  type StreamContext,
  type TerminalFilter,
} from '../pipeline/index.ts';
import { applyRequestHeaders, routeRequest, routesFor, type CompiledRule, type RoutedRequest } from '../routing/index.ts';
import type { ClusterManager } from '../upstream/index.ts';
import { MirrorSender } from './mirror.ts';
import { dedicatedKind, expectsContinue, forwardDedicated, restoreUpgradeHeaders } from './dedicated-upstream.ts';
import { forwardWithBody, RequestForwarder } from './request-forwarder.ts';
import { compileRoute, DEFAULT_ROUTER_OPTIONS, RouteSettings, type CompiledRoute, type RouterOptions } from './retry-policy.ts';

/** The router's filter name, as Envoy's. */
export const ROUTER_FILTER_NAME = 'envoy.filters.http.router';

/** What the core may run inside the router. */
export interface RouterHooks {
  /**
   * A route rule was chosen for `stream` (under `mesh`): run the filters attached to it, before the
   * upstream request is built (src/extensions `runRouteFilters`). StopAndReply: they answered.
   */
  readonly onRoute?: (stream: StreamContext, rule: CompiledRule, mesh: MeshSnapshot) => PhaseResult;
}

/**
 * The router's factory, bound to the core's cluster manager and route options, and to the
 * overload manager's budget (requests count in it; none are refused without one).
 */
export function routerFactory(clusters: ClusterManager, opts: RouterOptions = DEFAULT_ROUTER_OPTIONS, overload?: OverloadManager, hooks: RouterHooks = {}): FilterFactory<Record<string, never>> {
  return {
    name: ROUTER_FILTER_NAME,
    parseConfig(raw) {
      if (raw !== undefined && (typeof raw !== 'object' || raw === null || Object.keys(raw).length > 0)) {
        throw new Error('the router takes no configuration (route settings live in the bootstrap `http` section)');
      }
      return {};
    },
    create: (_config, env) => new Router(clusters, env, new RouteSettings(compileRoute(opts)), overload, hooks),
  };
}

class Router implements TerminalFilter {
  readonly name = ROUTER_FILTER_NAME;
  private readonly clusters: ClusterManager;
  private readonly env: FilterEnv;
  /** The bootstrap's route settings and each route rule's, derived per snapshot as it is published. */
  private readonly settings: RouteSettings;
  private readonly mirrors: MirrorSender;
  private readonly overload: OverloadManager | undefined;
  private readonly onRoute: RouterHooks['onRoute'];

  constructor(clusters: ClusterManager, env: FilterEnv, settings: RouteSettings, overload: OverloadManager | undefined, hooks: RouterHooks) {
    this.clusters = clusters;
    this.overload = overload;
    this.onRoute = hooks.onRoute;
    this.env = env;
    this.settings = settings;
    this.mirrors = new MirrorSender(clusters);
    // Compile routes and their settings when a snapshot is published (not at its first request),
    // so invalid routes are reported when the mesh file is loaded or changed.
    settings.observe(env.mesh.current);
    env.mesh.subscribe?.((next) => settings.observe(next));
  }

  /** RequestMirror: copies of the request as sent upstream, once its body is known (see RequestForwarder.send). */
  private mirrorOf(stream: StreamContext, routed: RoutedRequest, path: string, authority: string, headers: HeaderList): (body: Buffer | null) => void {
    const copy = { method: stream.method, path, authority, headers: [...headers.raw] };
    return (body) => {
      for (const m of routed.rule.mirrors) this.mirrors.send(m, { ...copy, body }, upstreamIsH2(m.backend.target, stream.http2));
    };
  }

  /** Resolve the target and its route (backend, path, authority, settings), then {@link send}. */
  forward(stream: StreamContext): void {
    // Under `stop_accepting_requests` nothing new goes upstream: Envoy's load-shed point before the
    // router creates an upstream request (`envoy.load_shed_points.http_downstream_filter_check`).
    if (this.overload && !this.overload.acceptingRequests) {
      this.overload.refused('request');
      sendLocalReply(stream, 503, OVERLOAD_BODY, ResponseFlag.OverloadManager, OVERLOAD_DETAILS);
      return;
    }
    const conn = stream.conn;
    // A tunnel lives across mesh updates: use the current snapshot's view of its target, so new
    // requests on an old tunnel see today's endpoints (Envoy updates clusters under live connections).
    const mesh = this.env.mesh.current;
    const target = mesh === conn.mesh ? conn.target : mesh.resolveTarget(conn.info.targetIp, conn.info.targetPort);
    if (!target) {
      sendLocalReply(stream, 404, '', ResponseFlag.NoRouteFound, 'route_not_found');
      return;
    }
    // The tunnel's own target is the connection manager's stat prefix (the same cluster name).
    stream.upstreamCluster = target === conn.target && stream.statPrefix !== '' ? stream.statPrefix : clusterName(target, 'http');
    // The request headers as the filters left them (the connection manager built the list without
    // pseudo- and hop-by-hop headers, checked Host and turned an absolute-form target into origin form).
    const headers = stream.requestHeaders;
    // A filter may have rewritten the target (the authz filter's normalized path).
    let path = stream.forwardPath ?? stream.path;
    // Gateway API routes attached to the target service (src/routing): the matched rule chooses
    // the backend, path, authority, header edits, timeouts and retries; a request no route
    // matches (404 NR), a redirect and invalid backends (500) are answered there.
    let upstream: Target = target;
    let route = this.settings.base;
    let routed: RoutedRequest | undefined;
    let authority = stream.authority;
    const attached = target.kind === 'service' ? routesFor(mesh).forTarget(target) : undefined;
    if (attached) {
      const r = routeRequest(stream, attached, target as Target & { kind: 'service' }, path);
      if (r === undefined) return;
      if (r) {
        routed = r;
        upstream = stream.routeTarget = r.backend.target;
        stream.upstreamCluster = r.backend.cluster;
        route = this.settings.of(r.rule);
        path = r.path;
        if (r.authority !== undefined) {
          authority = r.authority;
          if (!stream.http2) headers.set('host', authority);
        }
      }
    }
    // The chosen rule's own filters (WaypointFilters attached to it) run now, before the upstream request.
    const ran = routed && this.onRoute ? this.onRoute(stream, routed.rule, mesh) : FilterStatus.Continue;
    if (typeof ran === 'number') {
      if (ran === FilterStatus.Continue) this.send(stream, upstream, route, routed, headers, path, authority);
      return;
    }
    ran.then(
      (status) => {
        if (status === FilterStatus.Continue && !downstreamClosed(stream)) this.send(stream, upstream, route, routed, headers, path, authority);
      },
      () => sendLocalReply(stream, 500, 'internal error in filter chain', ResponseFlag.None, 'filter_chain_failed'),
    );
  }

  /**
   * Finish the upstream header block (request id, `x-forwarded-for`, the rule's header edits, the
   * upstream-request phases) and hand the request to its sender: a dedicated upstream tunnel
   * (WebSocket upgrade, `Expect: 100-continue` to HTTP/1.1), or a {@link RequestForwarder}.
   */
  private send(stream: StreamContext, upstream: Target, route: CompiledRoute, routed: RoutedRequest | undefined, headers: HeaderList, path: string, authority: string): void {
    const req = stream.req;
    // x-request-id was kept or generated when the stream was created (StreamContext, as Envoy's
    // connection manager); a filter may have changed or removed it since.
    const rid = headers.get('x-request-id');
    if (rid) stream.requestId = rid;
    else headers.append('x-request-id', stream.requestId);
    if (this.settings.base.appendForwardedFor) {
      const client = originalClient(stream.conn.info);
      const xff = headers.get('x-forwarded-for');
      headers.set('x-forwarded-for', xff ? `${xff}, ${client}` : client);
    }
    if (routed) applyRequestHeaders(headers, routed);
    const h2 = upstreamIsH2(upstream, stream.http2);
    // WebSocket upgrades and HTTP/1.1 `Expect: 100-continue` toward an HTTP/1.1 upstream take a
    // dedicated upstream tunnel with Node's HTTP client (dedicated-upstream.ts).
    const dedicated = dedicatedKind(stream, h2);
    if (dedicated === 'upgrade') restoreUpgradeHeaders(req.rawHeaders, headers);
    else if (dedicated === undefined && headers.get('expect') !== undefined) {
      // undici and the h2c upstream cannot relay `Expect`: answer 100 here (Node's h2 layer
      // already answered HTTP/2 clients; HTTP/1.0 clients get none, as from Node).
      const answer = expectsContinue(stream);
      headers.remove('expect');
      if (answer) (stream.res as ServerResponse).writeContinue();
    }
    stream.chain.runUpstreamRequest(stream, headers);
    // A filter answered in its upstream-request phase (a WaypointFilter that threw): nothing goes upstream.
    if (stream.responseCode !== 0) return;
    if (dedicated) {
      const r = {
        kind: dedicated,
        target: upstream,
        headers,
        path,
        requestTimeoutMs: route.requestTimeoutMs,
        maxResponseHeadersBytes: this.clusters.maxResponseHeadersBytes,
        connectRetries: route.onConnectFailure ? route.attempts : 0,
        overload: this.overload,
      };
      return forwardDedicated(stream, this.clusters, r);
    }
    if (h2) {
      // Connection-specific headers never reach an HTTP/2 upstream (envoyproxy/envoy#30362); TE
      // only as `trailers`, which the connection manager left in the list.
      headers.remove('host');
    } else if (stream.http2) {
      // Host is the :authority; a `host` field an HTTP/2 client sent beside it is dropped (RFC 9113
      // §8.3.1), never sent upstream as a second Host.
      headers.remove('host');
      headers.raw.unshift('host', authority);
    }
    const f = new RequestForwarder(stream, this.clusters, route, upstream, headers, path, h2, authority, routed?.responseHeaders, this.overload);
    if (routed && routed.rule.mirrors.length > 0) f.mirror = this.mirrorOf(stream, routed, path, authority, headers);
    forwardWithBody(stream, f);
  }
}

function upstreamIsH2(target: Target, downstreamH2: boolean): boolean {
  if (target.kind === 'service') {
    const p = target.port.protocol;
    if (p === 'HTTP2' || p === 'GRPC') return true;
    if (p !== 'UNKNOWN') return false;
  }
  return downstreamH2;
}

