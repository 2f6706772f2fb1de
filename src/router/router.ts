/**
 * `envoy.filters.http.router`: the terminal filter. Picks an endpoint of the tunnel's target
 * (service port endpoints, or the workload itself for workload-addressed traffic), sends the
 * request upstream through the cluster manager with bodies streamed both ways under
 * back-pressure, retries as Istio's default waypoint route does, and maps failures to Envoy's
 * status codes and response flags (one table: telemetry/response-flags.ts):
 * no endpoint ⇒ 503 `UH`; connect failure ⇒ 503 `UF`; reset ⇒ 503 `UC`/`UR` (before response
 * headers) or a downstream reset (after); request timeout ⇒ 504 `UT`; retries exhausted ⇒ `URX`.
 *
 * Upstream protocol (IS:cluster_waypoint.go `applyH2Upgrade`, pitfall D2): HTTP/2 (h2c inside the
 * upstream tunnel) for ports declared `http2`/`grpc`, HTTP/1.1 for other HTTP ports, and the
 * downstream's own protocol for undeclared ports.
 *
 * It is the one filter that talks to the upstream; it gets the cluster manager from the core,
 * which never hands it to other filters.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Http2ServerRequest } from 'node:http2';
import { Readable } from 'node:stream';
import type { Dispatcher } from 'undici';
import { HboneConnectError } from '../hbone/pool.ts';
import type { FilterEnv, FilterFactory, TerminalFilter } from '../pipeline/filter.ts';
import type { StreamContext } from '../pipeline/context.ts';
import { HeaderList, stripHopByHop } from '../pipeline/headers.ts';
import { replyIfAllRefused, STREAM_ADMISSION } from '../netpol/admission.ts';
import { bodyAfterBuffer } from '../pipeline/request-body.ts';
import type { Endpoint, Target } from '../state/types.ts';
import { ResponseFlag } from '../telemetry/response-flags.ts';
import { applyHeaderModifier, applyRequestHeaders, MirrorSender, routeRequest, routesFor, type CompiledRule, type HeaderModifier, type RoutedRequest } from '../routing/index.ts';
import { MAX_TIMER_MS } from '../routing/duration.ts';
import type { ClusterManager } from '../upstream/cluster-manager.ts';
import { clusterName } from '../upstream/cluster-name.ts';
import { UpstreamOverflowError } from '../upstream/cluster-state.ts';
import { GENERATED_COOKIE, requestHash } from '../upstream/hash-policy.ts';
import { UpstreamResetError, type UpstreamHandler, type UpstreamResetReason } from '../upstream/h2-upstream.ts';
import { pickEndpoint } from '../upstream/pick-endpoint.ts';
import { dedicatedKind, expectsContinue, forwardDedicated, restoreUpgradeHeaders } from './dedicated-upstream.ts';
import { forwardedFor } from './forwarded.ts';
import { GrpcFrameCounter } from './grpc-frames.ts';

/** The router's filter name, as Envoy's. */
export const ROUTER_FILTER_NAME = 'envoy.filters.http.router';

/** Route behaviour from the bootstrap `http` section (ms, counts). */
export interface RouterOptions {
  /** Per-request timeout (ms); 0 = none. */
  readonly requestTimeoutMs: number;
  /** Append the tunnel's client address to `x-forwarded-for`. */
  readonly appendForwardedFor: boolean;
  readonly retry: RetryPolicy;
}

/** Envoy's retry policy as Istio sets it on waypoint routes. */
export interface RetryPolicy {
  /** Retries after the first attempt. */
  readonly attempts: number;
  readonly retryOn: readonly string[];
  readonly retriableStatusCodes: readonly number[];
}

/** Istio's default: 2 retries on connect-failure, refused-stream, unavailable, cancelled, 503. */
export const DEFAULT_ROUTER_OPTIONS: RouterOptions = Object.freeze({
  requestTimeoutMs: 0,
  appendForwardedFor: false,
  retry: Object.freeze({
    attempts: 2,
    retryOn: Object.freeze(['connect-failure', 'refused-stream', 'unavailable', 'cancelled', 'retriable-status-codes']),
    retriableStatusCodes: Object.freeze([503]),
  }),
});

/** The router's factory, bound to the core's cluster manager and route options. */
export function routerFactory(clusters: ClusterManager, opts: RouterOptions = DEFAULT_ROUTER_OPTIONS): FilterFactory<Record<string, never>> {
  return {
    name: ROUTER_FILTER_NAME,
    parseConfig(raw) {
      if (raw !== undefined && (typeof raw !== 'object' || raw === null || Object.keys(raw).length > 0)) {
        throw new Error('the router takes no configuration (route settings live in the bootstrap `http` section)');
      }
      return {};
    },
    create: (_config, env) => new Router(clusters, env, compileRetry(opts)),
  };
}

/** Retry conditions resolved once into flags (the data path never parses strings). */
interface CompiledRoute {
  readonly requestTimeoutMs: number;
  readonly appendForwardedFor: boolean;
  readonly attempts: number;
  readonly onConnectFailure: boolean;
  readonly onRefusedStream: boolean;
  readonly onReset: boolean;
  readonly onUnavailable: boolean;
  readonly onCancelled: boolean;
  readonly on5xx: boolean;
  readonly onGatewayError: boolean;
  readonly retriableStatus: ReadonlySet<number>;
  /** Per-attempt timeout (ms, HTTPRoute `timeouts.backendRequest`); 0 = none. */
  readonly perTryTimeoutMs: number;
  /** Retry back-off base interval (ms): Envoy's 25 ms default, or HTTPRoute `retry.backoff`; capped at 10x. */
  readonly backoffBaseMs: number;
}

function compileRetry(o: RouterOptions): CompiledRoute {
  const on = new Set(o.retry.retryOn);
  return {
    requestTimeoutMs: o.requestTimeoutMs,
    appendForwardedFor: o.appendForwardedFor,
    attempts: o.retry.attempts,
    onConnectFailure: on.has('connect-failure') || on.has('5xx') || on.has('gateway-error') || on.has('reset'),
    onRefusedStream: on.has('refused-stream') || on.has('5xx') || on.has('reset'),
    onReset: on.has('reset') || on.has('5xx'),
    onUnavailable: on.has('unavailable'),
    onCancelled: on.has('cancelled'),
    on5xx: on.has('5xx'),
    onGatewayError: on.has('gateway-error'),
    retriableStatus: new Set(on.has('retriable-status-codes') ? o.retry.retriableStatusCodes : []),
    perTryTimeoutMs: 0,
    backoffBaseMs: 25,
  };
}

/**
 * The route settings of a matched HTTPRoute rule: its `timeouts` and `retry` override the
 * bootstrap's. `retry` with `codes` retries them besides Istio's connect-failure, refused-stream,
 * unavailable and cancelled (IS:pilot/pkg/config/kube/gateway/conversion.go `createRetryPolicy`);
 * `attempts` defaults to Istio's 2; `backoff` is Envoy's base interval.
 */
function ruleRoute(base: CompiledRoute, rule: CompiledRule): CompiledRoute {
  const t = rule.timeouts;
  const r = rule.retry;
  if (!t && !r) return base;
  const out = {
    ...base,
    requestTimeoutMs: t?.requestMs ?? base.requestTimeoutMs,
    perTryTimeoutMs: t?.backendRequestMs ?? 0,
  };
  if (!r) return out;
  if (r.attempts === 0) {
    // `attempts: 0`: Istio programs no retry policy at all (IS:conversion.go `createRetryPolicy`),
    // so nothing is retried and nothing is flagged `URX`.
    return { ...out, attempts: 0, onConnectFailure: false, onRefusedStream: false, onReset: false, onUnavailable: false, onCancelled: false, on5xx: false, onGatewayError: false, retriableStatus: new Set() };
  }
  const codes = r.codes.length > 0;
  return {
    ...out,
    attempts: r.attempts ?? DEFAULT_ROUTER_OPTIONS.retry.attempts,
    onConnectFailure: codes || base.onConnectFailure,
    onRefusedStream: codes || base.onRefusedStream,
    onUnavailable: codes || base.onUnavailable,
    onCancelled: codes || base.onCancelled,
    retriableStatus: codes ? new Set(r.codes) : base.retriableStatus,
    backoffBaseMs: r.backoffMs ?? base.backoffBaseMs,
  };
}

class Router implements TerminalFilter {
  readonly name = ROUTER_FILTER_NAME;
  private readonly clusters: ClusterManager;
  private readonly env: FilterEnv;
  private readonly route: CompiledRoute;
  /** Route settings of matched rules, derived once per rule (rules live as long as their snapshot). */
  private readonly ruleRoutes = new WeakMap<CompiledRule, CompiledRoute>();
  private readonly mirrors: MirrorSender;

  constructor(clusters: ClusterManager, env: FilterEnv, route: CompiledRoute) {
    this.clusters = clusters;
    this.env = env;
    this.route = route;
    this.mirrors = new MirrorSender(clusters);
    // Compile routes when a snapshot is published (not at its first request), so invalid routes
    // are reported when the mesh file is loaded or changed.
    routesFor(env.mesh.current);
    env.mesh.subscribe?.((next) => void routesFor(next));
  }

  private routeOf(rule: CompiledRule): CompiledRoute {
    let r = this.ruleRoutes.get(rule);
    if (!r) this.ruleRoutes.set(rule, (r = ruleRoute(this.route, rule)));
    return r;
  }

  /** RequestMirror: copies of the request as sent upstream, once its body is known (see UpstreamAttempt.send). */
  private mirrorOf(stream: StreamContext, routed: RoutedRequest, path: string, authority: string, headers: HeaderList): (body: Buffer | null) => void {
    const copy = { method: stream.method, path, authority, headers: [...headers.raw] };
    return (body) => {
      for (const m of routed.rule.mirrors) this.mirrors.send(m, { ...copy, body }, upstreamIsH2(m.backend.target, stream.http2));
    };
  }

  forward(stream: StreamContext): void {
    const conn = stream.conn;
    // A tunnel lives across mesh updates: use the current snapshot's view of its target, so new
    // requests on an old tunnel see today's endpoints (Envoy updates clusters under live connections).
    const mesh = this.env.mesh.current;
    const target = mesh === conn.mesh ? conn.target : mesh.resolveTarget(conn.info.targetIp, conn.info.targetPort);
    if (!target) {
      stream.sendLocalReply(404, '', ResponseFlag.NoRouteFound, 'route_not_found');
      return;
    }
    stream.upstreamCluster = clusterName(target, 'http');
    const req = stream.req;
    let headers: HeaderList;
    // A filter may have rewritten the target (the authz filter's normalized path).
    let path = stream.forwardPath ?? stream.path;
    if (stream.http2) {
      headers = new HeaderList(withoutPseudo(req.rawHeaders));
    } else {
      if (countHost(req.rawHeaders) > 1) {
        // Two Host headers make the target ambiguous (RFC 9112 §3.2): refuse rather than forward,
        // and close the connection as after any protocol error.
        (stream.res as unknown as { shouldKeepAlive: boolean }).shouldKeepAlive = false;
        stream.sendLocalReply(400, 'Bad Request: duplicate host header', ResponseFlag.DownstreamProtocolError, 'duplicate_host_header');
        return;
      }
      headers = new HeaderList(stripHopByHop(req.rawHeaders, req.headers.connection as string | undefined));
      // (`OPTIONS *` lands here too and gets 400: undici cannot send an asterisk-form target.)
      if (stream.path.charCodeAt(0) !== 0x2f) {
        // Absolute-form request target (`GET http://host/p`): send origin-form upstream with the
        // URI's authority as Host, as Envoy does with allow_absolute_url.
        const abs = absoluteForm(stream.path);
        if (!abs) {
          stream.sendLocalReply(400, 'Bad Request: invalid request target', ResponseFlag.DownstreamProtocolError, 'invalid_request_target');
          return;
        }
        path = stream.forwardPath ?? abs.path;
        headers.set('host', abs.host);
      }
    }
    // Gateway API routes attached to the target service (src/routing): the matched rule chooses
    // the backend, path, authority, header edits, timeouts and retries; a request no route
    // matches (404 NR), a redirect and invalid backends (500) are answered there.
    let upstream: Target = target;
    let route = this.route;
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
        route = this.routeOf(r.rule);
        path = r.path;
        if (r.authority !== undefined) {
          authority = r.authority;
          if (!stream.http2) headers.set('host', authority);
        }
      }
    }
    // x-request-id was kept or generated when the stream was created (StreamContext, as Envoy's
    // connection manager); a filter may have changed or removed it since.
    const rid = headers.get('x-request-id');
    if (rid) stream.requestId = rid;
    else headers.append('x-request-id', stream.requestId);
    if (this.route.appendForwardedFor) {
      const client = forwardedFor(conn.info.forwarded) ?? conn.info.downstreamAddress;
      const xff = headers.get('x-forwarded-for');
      headers.set('x-forwarded-for', xff ? `${xff}, ${client}` : client);
    }
    if (routed) applyRequestHeaders(headers, routed);
    const h2 = upstreamIsH2(upstream, stream.http2);
    // WebSocket upgrades and HTTP/1.1 `Expect: 100-continue` toward an HTTP/1.1 upstream take a
    // dedicated upstream tunnel with Node's HTTP client (pitfalls D1, C3: dedicated-upstream.ts).
    const dedicated = dedicatedKind(stream, h2);
    if (dedicated === 'upgrade') restoreUpgradeHeaders(req.rawHeaders, headers);
    else if (dedicated === undefined && req.headers.expect !== undefined) {
      // undici and the h2c upstream cannot relay `Expect`: answer 100 here (Node's h2 layer
      // already answered HTTP/2 clients; HTTP/1.0 clients get none, as from Node).
      headers.remove('expect');
      if (expectsContinue(stream)) (stream.res as ServerResponse).writeContinue();
    }
    stream.chain.runUpstreamRequest(stream, headers);
    if (dedicated) {
      const r = {
        kind: dedicated,
        target: upstream,
        headers,
        path,
        requestTimeoutMs: route.requestTimeoutMs,
        maxResponseHeadersBytes: this.clusters.maxResponseHeadersBytes,
        connectRetries: route.onConnectFailure ? route.attempts : 0,
      };
      return forwardDedicated(stream, this.clusters, r);
    }
    if (h2) {
      // Connection-specific headers never reach an HTTP/2 upstream (pitfall D3); TE only as `trailers`.
      headers.remove('host');
      if (/\btrailers\b/i.test(String(req.headers.te ?? ''))) headers.set('te', 'trailers');
    } else if (stream.http2) {
      // Host is the :authority; a `host` field an HTTP/2 client sent beside it is dropped (RFC 9113
      // §8.3.1), never sent upstream as a second Host.
      headers.remove('host');
      headers.raw.unshift('host', authority);
    }
    // A filter may have read the start of the body already (ext_authz with the body): it goes first.
    const pre = stream.bufferedBody;
    const length = pre ? (pre.complete ? pre.data.length : -1) : bodyLength(req, stream.http2);
    const attempt = new UpstreamAttempt(stream, this.clusters, route, upstream, headers, path, h2, authority, routed?.responseHeaders);
    if (routed && routed.rule.mirrors.length > 0) attempt.mirror = this.mirrorOf(stream, routed, path, authority, headers);
    if (length === 0) return attempt.send(null);
    if (pre?.complete) return sendGathered(pre.data, attempt);
    if (length > 0 && length <= SMALL_BODY_BYTES) return collectBody(req, length, attempt);
    // Streamed bodies are counted as they pass (pulled by the upstream, so back-pressure holds).
    // They are also kept while within SMALL_BODY_BYTES, as Envoy buffers bodies for retries: a
    // request whose body ended within that (a gRPC unary call, which has no content-length) can
    // be retried, and so can one whose body was never pulled (connect failure); a larger body,
    // once sending started, cannot be replayed and is not retried.
    const replay = new ReplayBuffer();
    attempt.send(Readable.from(counted(pre ? bodyAfterBuffer(stream) : req, stream, replay, attempt.requestFrames), { objectMode: false }), replay);
  }
}

/** Yield the request body's chunks, counting them into `stream.bytesReceived` and keeping them in `replay`. */
async function* counted(req: AsyncIterable<Buffer>, stream: StreamContext, replay: ReplayBuffer, frames: GrpcFrameCounter | null): AsyncGenerator<Buffer> {
  for await (const chunk of req) {
    stream.bytesReceived += chunk.length;
    if (frames) stream.requestMessages += frames.inspect(chunk);
    replay.add(chunk);
    yield chunk;
  }
  replay.complete = true;
  if (replay.onWhole && replay.whole) replay.onWhole(replay.take());
}

/** The first SMALL_BODY_BYTES of a streamed request body, kept so that a retry can resend it. */
class ReplayBuffer {
  private chunks: Buffer[] | null = [];
  private size = 0;
  /** The whole body went through (and fit). */
  complete = false;
  /** Some of the body left the request stream (it may have reached a failed upstream). */
  started = false;
  /** Called with the whole body once it ended within the limit (RequestMirror copies). */
  onWhole: ((body: Buffer) => void) | undefined = undefined;

  add(chunk: Buffer): void {
    this.started = true;
    if (!this.chunks) return;
    this.size += chunk.length;
    if (this.size > SMALL_BODY_BYTES) this.chunks = null;
    else this.chunks.push(chunk);
  }

  /** The body ended within the limit: {@link take} has all of it. */
  get whole(): boolean {
    return this.complete && this.chunks !== null;
  }

  take(): Buffer {
    const body = Buffer.concat(this.chunks ?? []);
    this.chunks = [body];
    return body;
  }
}

/**
 * Bodies up to this size (bytes, declared by Content-Length) are gathered before the request is
 * sent, so head and body leave in one write (one HTTP/2 DATA frame and one TLS record upstream),
 * and a retry can send them again. Larger and chunked bodies stream with back-pressure.
 */
const SMALL_BODY_BYTES = 64 * 1024;

/** Declared body size: 0 none, -1 unknown (chunked / streamed h2: stream it), else Content-Length. */
function bodyLength(req: IncomingMessage | Http2ServerRequest, http2: boolean): number {
  const cl = req.headers['content-length'];
  if (http2) {
    // HEADERS with END_STREAM: no body at all.
    if ((req as Http2ServerRequest).stream.endAfterHeaders) return 0;
    if (cl === undefined) return -1;
  } else {
    if (req.headers['transfer-encoding'] !== undefined) return -1;
    if (cl === undefined) return 0;
  }
  const n = Number(cl);
  return Number.isSafeInteger(n) && n >= 0 ? n : -1;
}

function collectBody(req: IncomingMessage | Http2ServerRequest, length: number, attempt: UpstreamAttempt): void {
  const chunks: Buffer[] = [];
  req.on('data', (c: Buffer) => chunks.push(c));
  req.once('end', () => sendGathered(chunks.length === 1 ? chunks[0] : Buffer.concat(chunks), attempt));
  // An aborted upload never ends: the downstream close handler cancels the stream.
  void length;
}

/** Send a whole body gathered before the request goes upstream (counted as received). */
function sendGathered(body: Buffer, attempt: UpstreamAttempt): void {
  attempt.stream.bytesReceived = body.length;
  if (attempt.requestFrames) attempt.stream.requestMessages += attempt.requestFrames.inspect(body);
  attempt.send(body);
}

function upstreamIsH2(target: Target, downstreamH2: boolean): boolean {
  if (target.kind === 'service') {
    const p = target.port.protocol;
    if (p === 'HTTP2' || p === 'GRPC') return true;
    if (p !== 'UNKNOWN') return false;
  }
  return downstreamH2;
}

/**
 * One request's upstream side: the attempts (first try and retries), the timeout, and the
 * undici-style handler for the current attempt. One object per request, no closures on the hot path.
 */
class UpstreamAttempt implements UpstreamHandler, Dispatcher.DispatchHandler {
  readonly stream: StreamContext;
  private readonly clusters: ClusterManager;
  private readonly route: CompiledRoute;
  private readonly target: Target;
  private readonly headers: HeaderList;
  private readonly path: string;
  private readonly h2: boolean;
  /** `:authority` sent to an HTTP/2 upstream (the request's, or a URLRewrite hostname). */
  private readonly authority: string;
  /** Response header edits of the matched route rule and backend (applied before the response phases). */
  private readonly responseEdits: readonly HeaderModifier[] | undefined;
  /** RequestMirror: called once with the whole request body when it is known (not for bodies past SMALL_BODY_BYTES). */
  mirror: ((body: Buffer | null) => void) | undefined;
  /** Per-attempt timeout (HTTPRoute `timeouts.backendRequest`) of the current attempt. */
  private tryTimer: NodeJS.Timeout | undefined;
  /** The current attempt was given up by its per-try timeout: its error callback is expected and ignored. */
  private abandoned: boolean;
  private body: Buffer | Readable | null;
  /** A streamed body's copy for retries (see ReplayBuffer). */
  private replay: ReplayBuffer | undefined;
  private ep: Endpoint | undefined;
  /** Authorities tried so far (a retry prefers another host). */
  private tried: string[] | undefined;
  private abort: ((err?: Error) => void) | undefined;
  /** The current attempt finished (its load-balancer slot released). */
  private finished: boolean;
  /** The whole request is over (answered, failed, cancelled or timed out). */
  private over: boolean;
  /** The current attempt's response is being discarded for a retry. */
  private discarding: boolean;
  private timer: NodeJS.Timeout | undefined;
  /** The retry back-off between two attempts (cleared when the request ends: a gone client starts no attempt). */
  private backoffTimer: NodeJS.Timeout | undefined;
  /** undici's resume function for this request (one per attempt, reused for every drain). */
  private resume: () => void;
  /** Trailers split off a gRPC trailers-only answer, sent when the response ends. */
  private pendingTrailers: string[] | null;
  /** gRPC only: message counters of the request body (read once, whatever the retries) and of the answer sent downstream. */
  readonly requestFrames: GrpcFrameCounter | null;
  private readonly responseFrames: GrpcFrameCounter | null;

  constructor(
    stream: StreamContext,
    clusters: ClusterManager,
    route: CompiledRoute,
    target: Target,
    headers: HeaderList,
    path: string,
    h2: boolean,
    authority: string = stream.authority,
    responseEdits?: readonly HeaderModifier[],
  ) {
    this.stream = stream;
    this.clusters = clusters;
    this.route = route;
    this.target = target;
    this.headers = headers;
    this.path = path;
    this.h2 = h2;
    this.authority = authority;
    this.responseEdits = responseEdits && responseEdits.length > 0 ? responseEdits : undefined;
    this.mirror = undefined;
    this.tryTimer = undefined;
    this.abandoned = false;
    this.body = null;
    this.replay = undefined;
    this.ep = undefined;
    this.tried = undefined;
    this.abort = undefined;
    this.finished = true;
    this.over = false;
    this.discarding = false;
    this.timer = undefined;
    this.backoffTimer = undefined;
    this.resume = noop;
    this.pendingTrailers = null;
    const grpc = stream.isGrpc;
    this.requestFrames = grpc ? new GrpcFrameCounter() : null;
    this.responseFrames = grpc ? new GrpcFrameCounter() : null;
    stream.abortUpstream = this;
  }

  /** Send the first attempt with `body` (null, a gathered Buffer, or the request stream and its replay copy). */
  send(body: Buffer | Readable | null, replay?: ReplayBuffer): void {
    this.body = body;
    this.replay = replay;
    if (this.mirror) {
      // The copy leaves once the body is whole; a streamed body past SMALL_BODY_BYTES is not mirrored.
      if (!isStream(body)) this.mirror(body as Buffer | null);
      else if (replay) replay.onWhole = this.mirror;
    }
    // Envoy's route timeout runs from the end of the downstream request to the end of the
    // response: a slow upload does not count against it.
    const req = this.stream.req;
    if (!isStream(body) || req.readableEnded) this.armTimeout();
    else req.once('end', () => this.armTimeout());
    this.attempt();
  }

  private armTimeout(): void {
    const ms = this.route.requestTimeoutMs;
    if (ms > 0 && !this.over && !this.timer) this.timer = setTimeout(onRequestTimeout, ms, this);
  }

  private attempt(): void {
    const s = this.stream;
    if (this.over || s.downstreamClosed) return this.end();
    const ep = startAttempt(this.clusters, this.target, s, this.tried);
    if (!ep) {
      this.end();
      // Every healthy endpoint refused by the NetworkPolicy mode: 403 `NetworkPolicy: access denied`.
      if (!replyIfAllRefused(s, this.target)) s.sendLocalReply(503, undefined, ResponseFlag.NoHealthyUpstream, 'no_healthy_upstream');
      return;
    }
    this.ep = ep;
    this.finished = false;
    this.discarding = false;
    this.abort = undefined;
    // DestinationRule circuit breakers and outlier detection apply in the cluster manager.
    const req = { method: s.method, path: this.path, authority: this.authority, headers: this.headers.raw, body: this.body };
    this.clusters.dispatch(this.target, ep, req, this, this.h2, s.attempts > 1);
    const perTry = this.route.perTryTimeoutMs;
    if (perTry > 0 && !this.over && !this.finished) {
      if (this.tryTimer) clearTimeout(this.tryTimer);
      this.tryTimer = setTimeout(onTryTimeout, perTry, this, s.attempts);
    }
  }

  /**
   * The per-try timeout (`timeouts.backendRequest`) of attempt `n` fired. Before the response
   * started, the attempt is retried when the policy retries timeouts (Envoy retries per-try
   * timeouts under `reset`, `5xx` and `gateway-error`) and the request can be resent; otherwise
   * the request ends as on the route timeout: 504 `UT` (`upstream_per_try_timeout`), or a reset.
   */
  tryTimeout(n: number): void {
    this.tryTimer = undefined;
    const s = this.stream;
    if (this.over || this.finished || s.attempts !== n) return;
    const r = this.route;
    const abort = this.abort;
    if (abort && !s.res.headersSent && (r.onReset || r.on5xx || r.onGatewayError) && this.canRetry() && this.replayable(false)) {
      this.abandoned = true;
      this.release();
      abort(new Error('per try timeout'));
      this.retry();
      return;
    }
    this.timeout('upstream_per_try_timeout');
  }

  /**
   * Called by the core when the downstream went away before the response completed: the request
   * timer, the per-try timer and a pending retry back-off are cleared and the current attempt is
   * aborted, so no further attempt starts (Envoy's router `onDestroy` resets the upstream request
   * and the retry state: ENV:source/common/router/router.cc `Filter::onDestroy`).
   */
  cancel(): void {
    const abort = this.abort && !this.finished ? this.abort : undefined;
    this.end();
    abort?.(new Error('downstream disconnected'));
  }

  /** The request timeout fired: 504 `UT` before the response started, else a reset. */
  timeout(details = 'response_timeout'): void {
    this.timer = undefined;
    if (this.over) return;
    this.over = true;
    const s = this.stream;
    if (this.abort && !this.finished) this.abort(new Error('request timeout'));
    this.end();
    if (s.res.headersSent) {
      s.addFlag(ResponseFlag.UpstreamRequestTimeout);
      s.responseCodeDetails = details;
      s.resetDownstream();
      return;
    }
    s.sendLocalReply(504, undefined, ResponseFlag.UpstreamRequestTimeout, details);
  }

  onConnect(abort: (err?: Error) => void): void {
    this.abort = abort;
    // Cancelled (downstream gone, timeout) while the request waited for a connection: stop now,
    // or the upstream request would stay open with no one to answer.
    if (this.over) abort(new Error('request cancelled'));
  }

  onHeaders(statusCode: number, rawHeaders: (Buffer | string)[], resume: () => void, statusText: string): boolean {
    if (this.over) {
      this.abort?.(new Error('request cancelled'));
      return false;
    }
    if (statusCode < 200) return true; // 1xx: Node's server already handled Continue.
    const raw: string[] = new Array(rawHeaders.length);
    for (let i = 0; i < rawHeaders.length; i++) raw[i] = rawHeaders[i].toString('latin1');
    if (this.retriableResponse(statusCode, raw)) {
      if (this.canRetry()) {
        // Drain this answer and try again once it is complete (the connection stays reusable).
        this.discarding = true;
        return true;
      }
      if (this.stream.attempts > this.route.attempts) this.stream.addFlag(ResponseFlag.UpstreamRetryLimitExceeded);
    }
    this.resume = resume;
    let connection: string | undefined;
    for (let i = 0; i < raw.length; i += 2) if (raw[i].length === 10 && raw[i].toLowerCase() === 'connection') connection = raw[i + 1];
    const s = this.stream;
    s.upstreamResponseMonotonic = performance.now();
    s.responseCodeDetails = 'via_upstream';
    if (this.ep) s.upstreamConnectHeaders = this.clusters.connectHeadersFor(this.ep);
    let headers = stripHopByHop(raw, connection);
    if (s.http2) {
      // gRPC trailers-only (grpc-status among the headers, which the gRPC protocol allows only
      // there): Node's compatibility API cannot send HEADERS with END_STREAM, so send the
      // equivalent headers + trailers (every gRPC client reads the status from either).
      const split = splitTrailersOnly(headers);
      headers = split.headers;
      this.pendingTrailers = split.trailers;
    }
    const out = new HeaderList(headers);
    // The cookie a DestinationRule's consistent hash generated for this request (hash-policy.ts).
    const cookie = s.get(GENERATED_COOKIE);
    if (cookie) out.append('set-cookie', cookie);
    if (this.responseEdits) for (const m of this.responseEdits) applyHeaderModifier(out, m);
    if (!s.respond(statusCode, statusText, out)) return false;
    const res = s.res;
    if (!res.writableNeedDrain) return true;
    res.once('drain', resume);
    return false;
  }

  onData(chunk: Buffer): boolean {
    if (this.over) {
      this.abort?.(new Error('request cancelled'));
      return false;
    }
    if (this.discarding) return true;
    const s = this.stream;
    s.bytesSent += chunk.length;
    if (this.responseFrames) s.responseMessages += this.responseFrames.inspect(chunk);
    if ((s.res as ServerResponse).write(chunk)) return true;
    s.res.once('drain', this.resume);
    return false;
  }

  onComplete(upstreamTrailers: string[] | null): void {
    this.release();
    if (this.over) return;
    if (this.discarding) return this.retry();
    this.end();
    const trailers = upstreamTrailers ?? this.pendingTrailers;
    const res = this.stream.res;
    if (trailers && trailers.length > 0) {
      const t: Record<string, string> = {};
      for (let i = 0; i < trailers.length; i += 2) t[String(trailers[i])] = String(trailers[i + 1]);
      // The upstream's gRPC status, for the stats (`grpc_response_status`).
      if (this.responseFrames) this.stream.grpcStatus = t['grpc-status'] ?? this.stream.grpcStatus;
      try {
        res.addTrailers(t);
      } catch {
        // Non-chunked HTTP/1.1 response: trailers cannot be sent.
      }
    }
    res.end();
  }

  onError(err: Error): void {
    // The error of an attempt its per-try timeout already gave up (and retried).
    if (this.abandoned) return void (this.abandoned = false);
    this.release();
    if (this.over) return this.end();
    const s = this.stream;
    // Already answered (e.g. a local reply after the request was cancelled): nothing to undo.
    if (s.downstreamClosed || s.res.writableEnded) return this.end();
    const [flag, details] = classify(err, s.res.headersSent);
    const retriable = !s.res.headersSent && this.retriableError(err);
    if (retriable && this.canRetry()) return this.retry();
    this.end();
    if (s.res.headersSent) {
      s.addFlag(flag);
      s.responseCodeDetails = details;
      s.resetDownstream();
      return;
    }
    s.sendLocalReply(undefined, undefined, flag, details);
    // Envoy's `UF,URX`: the retry policy wanted another attempt but the budget was spent.
    if (retriable && s.attempts > this.route.attempts) s.addFlag(ResponseFlag.UpstreamRetryLimitExceeded);
  }

  /** Whether another attempt is allowed at all (budget, downstream still there; the body is checked by the retry conditions). */
  private canRetry(): boolean {
    if (this.stream.attempts > this.route.attempts || this.over) return false;
    // A DestinationRule's `maxRetries` circuit breaker: no retry, the answer goes out flagged `UO` (Envoy's retry overflow).
    if (this.clusters.clusterFor(this.target)?.retryAllowed() === false) {
      this.stream.addFlag(ResponseFlag.UpstreamOverflow);
      return false;
    }
    return true;
  }

  /**
   * Whether the request body can be sent again: none, gathered, a streamed one kept whole, or
   * (`unsent`: the attempt failed before the upstream could take any of it) one never pulled.
   */
  private replayable(unsent: boolean): boolean {
    const r = this.replay;
    return !isStream(this.body) || (r !== undefined && (r.whole || (unsent && !r.started)));
  }

  /** Whether the retry policy covers this failure (budget aside). */
  private retriableError(err: Error & { code?: string }): boolean {
    // Envoy never retries a circuit breaker's overflow.
    if (err instanceof UpstreamOverflowError) return false;
    if (!this.replayable(isConnectFailure(err))) return false;
    if (isConnectFailure(err)) return this.route.onConnectFailure;
    if (err instanceof UpstreamResetError && !err.responseStarted) {
      if (err.rstCode === 7 /* REFUSED_STREAM */) return this.route.onRefusedStream;
      return this.route.onReset;
    }
    return this.route.onReset && err.code !== 'UND_ERR_ABORTED';
  }

  /** Whether the retry policy covers this response (budget aside). */
  private retriableResponse(status: number, raw: readonly string[]): boolean {
    if (!this.replayable(false)) return false;
    const r = this.route;
    if (r.retriableStatus.has(status) || (r.on5xx && status >= 500) || (r.onGatewayError && (status === 502 || status === 503 || status === 504))) return true;
    if (r.onUnavailable || r.onCancelled) {
      // gRPC trailers-only answers carry grpc-status in the headers (Envoy's retry_on for gRPC).
      for (let i = 0; i < raw.length; i += 2) {
        if (raw[i].length === 11 && raw[i].toLowerCase() === 'grpc-status') {
          const g = raw[i + 1];
          return (r.onUnavailable && g === '14') || (r.onCancelled && g === '1');
        }
      }
    }
    return false;
  }

  /**
   * Next attempt after Envoy's jittered exponential back-off: a random wait below
   * `base × 2^(attempt-1)`, capped at `max_interval` (10 × base, Envoy's default; ENV:source/common/
   * common/backoff_strategy.cc `JitteredExponentialBackOffStrategy`) and at Node's largest timer.
   * The timer is kept so that a cancelled request clears it ({@link end}).
   */
  private retry(): void {
    if (this.over) return this.end();
    if (this.ep) (this.tried ??= []).push(this.ep.authority);
    // A streamed body that ended within the replay limit is resent from its copy (one never
    // pulled is still whole in its stream and goes as it is).
    if (isStream(this.body) && this.replay?.whole) this.body = this.replay.take();
    const base = this.route.backoffBaseMs * 2 ** (this.stream.attempts - 1);
    const wait = Math.random() * Math.min(base, this.route.backoffBaseMs * 10, MAX_TIMER_MS);
    if (this.backoffTimer) clearTimeout(this.backoffTimer);
    this.backoffTimer = setTimeout(retryLater, wait, this);
  }

  /** Release the current attempt's load-balancer slot (once). */
  private release(): void {
    if (this.finished) return;
    this.finished = true;
    if (this.ep) this.clusters.lb.finish(this.ep);
  }

  /** The request is over: release everything. */
  private end(): void {
    this.over = true;
    this.release();
    if (this.timer) {
      clearTimeout(this.timer);
      this.timer = undefined;
    }
    if (this.tryTimer) {
      clearTimeout(this.tryTimer);
      this.tryTimer = undefined;
    }
    if (this.backoffTimer) {
      clearTimeout(this.backoffTimer);
      this.backoffTimer = undefined;
    }
  }

  /** Entry point for the back-off timer. */
  runRetry(): void {
    this.backoffTimer = undefined;
    this.attempt();
  }
}

/**
 * Pick the endpoint for a request's next attempt (avoiding `tried` authorities when another
 * exists), record it on the stream (endpoint, upstream host, attempt count) and count it as
 * active in the load balancer. Undefined when the target has no healthy endpoint. A
 * DestinationRule of the target's cluster shapes the pick (ClusterState.pick: outlier ejections,
 * consistent hash on the request's key, its algorithm).
 */
export function startAttempt(clusters: ClusterManager, target: Target, s: StreamContext, tried: readonly string[] | undefined): Endpoint | undefined {
  const cluster = clusters.clusterFor(target);
  const key = cluster?.policy.loadBalancer.consistentHash?.key;
  const hash = key ? requestHash(key, s) : undefined;
  const ep = pickEndpoint(clusters.lb, target, s.conn.info.targetIp, tried, { admit: s.get(STREAM_ADMISSION)?.admit, cluster, hash });
  if (!ep) return undefined;
  s.endpoint = ep;
  s.upstreamHost = ep.authority;
  s.attempts++;
  clusters.lb.start(ep);
  return ep;
}

function onRequestTimeout(a: UpstreamAttempt): void {
  a.timeout();
}

function onTryTimeout(a: UpstreamAttempt, n: number): void {
  a.tryTimeout(n);
}

function retryLater(a: UpstreamAttempt): void {
  a.runRetry();
}

function noop(): void {}

function isStream(b: Buffer | Readable | null): boolean {
  return b !== null && !Buffer.isBuffer(b);
}

/** `http(s)://authority/path?q` → origin-form path and authority; undefined for anything else. */
function absoluteForm(target: string): { path: string; host: string } | undefined {
  if (!/^https?:\/\//i.test(target)) return undefined;
  try {
    const u = new URL(target);
    return { path: `${u.pathname}${u.search}`, host: u.host };
  } catch {
    return undefined;
  }
}

function countHost(raw: readonly string[]): number {
  let n = 0;
  for (let i = 0; i < raw.length; i += 2) if (raw[i].length === 4 && raw[i].toLowerCase() === 'host') n++;
  return n;
}

/** Keep `content-type` in the headers and move the rest of a trailers-only answer to trailers. */
function splitTrailersOnly(raw: readonly string[]): { headers: string[]; trailers: string[] | null } {
  let grpc = false;
  for (let i = 0; i < raw.length; i += 2) if (raw[i].toLowerCase() === 'grpc-status') grpc = true;
  if (!grpc) return { headers: [...raw], trailers: null };
  const headers: string[] = [];
  const trailers: string[] = [];
  for (let i = 0; i < raw.length; i += 2) {
    const n = raw[i].toLowerCase();
    if (n === 'content-type' || n === 'date') headers.push(raw[i], raw[i + 1]);
    else trailers.push(raw[i], raw[i + 1]);
  }
  return { headers, trailers };
}

/** An HTTP/2 request's raw headers without pseudo-headers (`:method`, `:path`, ...). */
function withoutPseudo(raw: readonly string[]): string[] {
  const out: string[] = [];
  for (let i = 0; i < raw.length; i += 2) if (raw[i].charCodeAt(0) !== 0x3a) out.push(raw[i], raw[i + 1]);
  return out;
}

export function isConnectFailure(err: Error & { code?: string }): boolean {
  return err instanceof HboneConnectError || err.code === 'ECONNREFUSED' || err.code === 'UND_ERR_CONNECT_TIMEOUT' || err.code === 'EHOSTUNREACH' || err.code === 'ENETUNREACH';
}

/** Map an upstream failure to Envoy's response flag and details (`started`: response headers already sent downstream). */
export function classify(err: Error & { code?: string }, started: boolean): [string, string] {
  if (err instanceof UpstreamOverflowError) return [ResponseFlag.UpstreamOverflow, 'upstream_reset_before_response_started{overflow}'];
  if (isConnectFailure(err)) {
    return [ResponseFlag.UpstreamConnectionFailure, 'upstream_reset_before_response_started{connection_failure}'];
  }
  if (err.code === 'UND_ERR_HEADERS_OVERFLOW' || (err.code ?? '').startsWith('HPE_') || err.name === 'HTTPParserError') {
    return [ResponseFlag.UpstreamProtocolError, 'upstream_reset_before_response_started{protocol_error}'];
  }
  if (err.code === 'UND_ERR_ABORTED' || err.name === 'AbortError') {
    return [ResponseFlag.DownstreamConnectionTermination, 'downstream_remote_disconnect'];
  }
  const when = started ? 'upstream_reset_after_response_started' : 'upstream_reset_before_response_started';
  // [integrity] The h2c upstream names the reset reason (a RST_STREAM(NO_ERROR) is a remote reset too).
  if (err instanceof UpstreamResetError) return [RESET_FLAG[err.reason], `${when}{${err.reason}}`];
  return [ResponseFlag.UpstreamConnectionTermination, `${when}{connection_termination}`];
}

/** Envoy's flag per reset reason (ENV:source/common/router/router.cc `streamResetReasonToResponseFlag`). */
const RESET_FLAG: Readonly<Record<UpstreamResetReason, string>> = Object.freeze({
  remote_reset: ResponseFlag.UpstreamRemoteReset,
  remote_refused_stream_reset: ResponseFlag.UpstreamRemoteReset,
  connection_termination: ResponseFlag.UpstreamConnectionTermination,
  protocol_error: ResponseFlag.UpstreamProtocolError,
});
