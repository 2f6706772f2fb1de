/**
 * The HTTP servers that run inside HBONE tunnels: one `http.Server` for HTTP/1.x and one
 * `http2.Http2Server` (h2c with prior knowledge) for HTTP/2, neither listening; each is fed the
 * CONNECT streams the listener hands it through its `connection` event; h2c streams are served on
 * Node's core stream API with a lean request/response of our own (h2-exchange.ts). Every request becomes a
 * {@link StreamContext}, passes the connection manager's checks (conn-manager.ts) and runs the
 * filter chain the tunnel captured, then the router; so do HTTP/1.1 WebSocket upgrades (`upgrade`
 * event) and `Expect: 100-continue` requests (`checkContinue`, so that Node does not answer 100
 * itself: the router relays the upstream's).
 *
 * What Node's HTTP/1 codec refuses (a malformed request: 400; headers over the limit: 431) and a
 * CONNECT inside the tunnel (405) are answered here as Envoy's codec answers them, and like every
 * local reply they get a stream with the `DPE` flag that runs the completion phases (access-log
 * line, `istio_requests_total`).
 *
 * Node corrupts corked string writes onto an Http2Stream (hbone/writev-fix.ts), so every stream
 * handed to the HTTP/1 server gets the `_writev` fix first.
 */
import http, { type IncomingMessage, type ServerResponse } from 'node:http';
import http2, { type IncomingHttpHeaders, type ServerHttp2Session, type ServerHttp2Stream } from 'node:http2';
import type { Socket } from 'node:net';
import type { Duplex } from 'node:stream';
import { clearIdleTimer, clearTimerOnDestroy, guardJsStreamShutdown, http2Settings, type Http2Params, joinWritev } from '../hbone/index.ts';
import {
  FilterStatus,
  ResponseFlag,
  StreamContext,
  downstreamClosed,
  responseComplete,
  sendLocalReply,
  type ConnectionContext,
  type FilterChain,
  type PhaseResult,
  type RequestHead,
} from '../pipeline/index.ts';
import { log } from '../util/index.ts';
import { closeThisTunnel, closeTunnel, destroyThis, type IdleClock, KeepAliveIdle, onTunnelEnd, ownResponse } from './streams.ts';
import { H2Request, H2Response, headerListSize, refuseOversizedHeaders } from './h2-exchange.ts';
import { admitRequest, codecError, isWebSocketUpgrade, refuseConnect, requestHead, unreadableHead, type ConnManagerOptions, type PathNormalizer, type Refusal } from './conn-manager.ts';

/** Limits of the HTTP/1.x server inside tunnels (bytes, ms). */
export interface InnerHttpOptions {
  /** Largest request header block (bytes); beyond it Node answers 431. */
  readonly maxHeaderSize: number;
  /** Idle keep-alive time (ms) of an inner connection; 0 disables. */
  readonly idleTimeoutMs: number;
  /** A tunnel with a request in flight and no bytes moving for this long (ms) is closed (Envoy's `stream_idle_timeout`, 5 min); 0 disables. */
  readonly streamIdleTimeoutMs: number;
  /** HTTP/2 settings of h2c sessions inside tunnels (windows, frame size, header list size). */
  readonly http2: Http2Params;
  /** Answer HTTP/1.0 requests with 426 as Envoy does unless `ISTIO_META_HTTP10` is set (default false: accepted). */
  readonly rejectHttp10: boolean;
  /** Path normalization by the connection manager, before any filter (conn-manager.ts); none by default. */
  readonly normalizePath?: PathNormalizer;
}

const kTunnel = Symbol('waypoint.tunnel');
interface TunnelRef {
  readonly conn: ConnectionContext;
  readonly chain: FilterChain;
  readonly owner: InnerHttpServer;
  readonly stream: Duplex;
  /** The h2c session when the tunnel carries HTTP/2. */
  session: ServerHttp2Session | undefined;
  /** Requests in flight on this tunnel. */
  active: number;
  /** The request being answered (HTTP/1.1 answers in order), for the idle timeout's 408. */
  current: StreamContext | undefined;
  /** HTTP/1: the last request received, and whether it asked to keep the connection (see onTunnelEnd). */
  last: StreamContext | undefined;
  lastKeepAlive: boolean;
  /** HTTP/1: keep-alive idle accounting (streams.ts). */
  readonly idle: IdleClock;
}
/** Set on an HTTP/1 tunnel once its codec failed: later parse errors of the same bytes are not answered again. */
const kCodecFailed = Symbol('waypoint.codecFailed');
type TaggedSocket = Duplex & { [kTunnel]?: TunnelRef; [kCodecFailed]?: boolean; _httpMessage?: ServerResponse | null };
type TaggedSession = ServerHttp2Session & { [kTunnel]?: TunnelRef };
/** A response's (HTTP/2: its stream's) exchange and tunnel, for the one shared 'close' listener: no closure per request. */
const kExchange = Symbol('waypoint.exchange');
type TaggedResponse = (ServerResponse | ServerHttp2Stream) & { [kExchange]?: StreamContext; [kTunnel]?: TunnelRef };

/** Serves HTTP/1.x and h2c on tunnels handed to {@link InnerHttpServer.attach}; one instance per waypoint. */
export class InnerHttpServer {
  private readonly server: http.Server;
  private readonly h2server: http2.Http2Server;
  /** The tunnel being attached to the h2c server (its `session` event fires synchronously). */
  private attaching: TunnelRef | undefined;
  /** The connection manager's settings (HTTP/1.0 refusal, path normalization). */
  readonly hcm: ConnManagerOptions;
  private readonly streamIdleTimeoutMs: number;
  /** HTTP/1 tunnels' keep-alive idle timeout, when counted here rather than by Node's server (streams.ts). */
  readonly keepAlive: KeepAliveIdle;
  /** Tunnels currently served (for drain). */
  readonly tunnels = new Set<TunnelRef>();
  /** Set by {@link drain}: responses carry `Connection: close` and idle tunnels are ended. */
  draining = false;
  /** Set by {@link cutting}. */
  cut = false;

  constructor(opts: InnerHttpOptions) {
    this.keepAlive = new KeepAliveIdle(opts.streamIdleTimeoutMs, opts.idleTimeoutMs);
    this.server = http.createServer(
      {
        maxHeaderSize: opts.maxHeaderSize,
        // Host is checked by the connection manager (conn-manager.ts), so that the 400 is
        // accounted like every local reply (Node's own answer would bypass the stream).
        requireHostHeader: false,
        // Uploads may take as long as they take; Envoy's waypoint has no request timeout by default.
        requestTimeout: 0,
        // 0 when KeepAliveIdle counts it (streams.ts): no timer switch per request.
        keepAliveTimeout: this.keepAlive.keepAliveMs > 0 ? 0 : opts.idleTimeoutMs,
        // Only WebSocket upgrades leave the HTTP parser (istio/istio#27078); any other `Upgrade`
        // (h2c, as Envoy ignores it) is an ordinary request whose hop-by-hop headers are stripped.
        shouldUpgradeCallback: isWebSocketUpgrade,
      },
      (req, res) => onRequest(req, res, (req.socket as TaggedSocket)[kTunnel]!),
    );
    // `Expect: 100-continue` is relayed, not answered by Node (istio/istio#36278): the router sends the
    // upstream's 100 (or answers it itself when the upstream cannot relay it).
    this.server.on('checkContinue', (req: IncomingMessage, res: ServerResponse) => onRequest(req, res, (req.socket as TaggedSocket)[kTunnel]!));
    // Any other expectation is an ordinary request too (Envoy only acts on 100-continue), not
    // Node's own 417 that no access log or metric would see.
    this.server.on('checkExpectation', (req: IncomingMessage, res: ServerResponse) => onRequest(req, res, (req.socket as TaggedSocket)[kTunnel]!));
    this.server.on('upgrade', onUpgrade);
    this.hcm = { rejectHttp10: opts.rejectHttp10, maxHeaderCount: opts.http2.maxHeaderCount, ...(opts.normalizePath ? { normalizePath: opts.normalizePath } : {}) };
    this.streamIdleTimeoutMs = opts.streamIdleTimeoutMs;
    const maxHeaderSize = opts.maxHeaderSize;
    // A client that half-closes right after its request still gets the whole response
    // (envoyproxy/envoy#2066): keep the tunnel writable after the downstream's END_STREAM.
    (this.server as http.Server & { httpAllowHalfOpen: boolean }).httpAllowHalfOpen = true;
    // Node sets this inactivity timeout on each connection while a request is in flight (the
    // keep-alive timeout applies between requests); on expiry the tunnel is destroyed and the
    // upstream request cancelled.
    this.server.timeout = opts.streamIdleTimeoutMs;
    this.server.on('timeout', onTunnelTimeout);
    // Bounded in bytes (maxHeaderSize) and fields (Envoy's `max_headers_count`): one field past the limit is kept, for the 431.
    this.server.maxHeadersCount = opts.http2.maxHeaderCount + 1;
    this.server.on('connect', onConnectRequest);
    this.server.on('clientError', onClientError);

    this.h2server = http2.createServer({
      // One header-size limit for both inner protocols: `http.maxRequestHeadersBytes`.
      settings: { ...http2Settings(opts.http2, true), maxHeaderListSize: opts.maxHeaderSize },
      maxSessionMemory: opts.http2.maxSessionMemoryMb,
      // The header block is bounded in bytes as HTTP/1's, and in count as Envoy's
      // `max_headers_count` (http2.maxHeaderCount; beyond it Node resets the stream).
      maxHeaderListPairs: opts.http2.maxHeaderCount,
    });
    this.h2server.on('session', (session: TaggedSession) => {
      const ref = this.attaching;
      if (!ref) return session.destroy();
      session[kTunnel] = ref;
      ref.session = clearTimerOnDestroy(guardJsStreamShutdown(session));
      session.on('error', (err) => log.debug({ err: err.message }, 'inner h2c session error'));
    });
    // Streams on Node's core API with our lean request/response (h2-exchange.ts), not its compatibility layer.
    this.h2server.on('stream', (h2: ServerHttp2Stream, headers: IncomingHttpHeaders, _flags: number, raw: string[]) => {
      // A reset stream errors; its exchange ends on 'close' (onResponseClose).
      h2.on('error', ignoreError);
      const ref = (h2.session as TaggedSession | undefined)?.[kTunnel];
      if (!ref) return h2.close(http2.constants.NGHTTP2_REFUSED_STREAM);
      // Node advertises SETTINGS_MAX_HEADER_LIST_SIZE but takes larger blocks: reset them as Envoy's
      // HTTP/2 codec does past max_request_headers_kb (http2.header_overflow, INTERNAL_ERROR).
      if (headerListSize(raw) > maxHeaderSize) return refuseOversizedHeaders(h2);
      const req = new H2Request(h2, headers, raw);
      const res = new H2Response(h2);
      if (req.method === 'CONNECT') return refuseConnect(begin(ref, req, res, requestHead(req)));
      // Answered at once as Node's compatibility layer does (the router relays no 100 to HTTP/2
      // clients); any other expectation is an ordinary request, as on HTTP/1 (Envoy acts on 100-continue only).
      if (headers.expect === '100-continue') res.writeContinue();
      const s = onRequest(req, res, ref);
      // Envoy's stream_idle_timeout per h2 stream: 408 `SI` before the response, else a reset.
      if (this.streamIdleTimeoutMs > 0) clearTimerOnDestroy(h2).setTimeout(this.streamIdleTimeoutMs, () => onStreamTimeout(s));
    });
    // An h2c session with no activity at all for the keep-alive idle time is closed (GOAWAY).
    if (opts.idleTimeoutMs > 0) {
      this.h2server.setTimeout(opts.idleTimeoutMs);
      // Node emits the server's 'timeout' with the idle session (and destroys it if nobody listens).
      (this.h2server as unknown as NodeJS.EventEmitter).on('timeout', (session: ServerHttp2Session) => session.close());
    }
  }

  /**
   * Serve HTTP on a tunnel that has already been answered 200: `protocol` is what the client
   * speaks inside (`HTTP/2` = h2c with prior knowledge, else HTTP/1.x).
   */
  attach(stream: Duplex, conn: ConnectionContext, chain: FilterChain, protocol: 'HTTP/1.1' | 'HTTP/2'): void {
    const ref: TunnelRef = { conn, chain, owner: this, stream, session: undefined, active: 0, current: undefined, last: undefined, lastKeepAlive: false, idle: { mark: 0, idleFor: 0, armedMs: 0 } };
    // Node's HTTP server arms the tunnel's idle timers (stream idle, keep-alive).
    clearTimerOnDestroy(stream);
    conn.innerProtocol = protocol;
    this.tunnels.add(ref);
    // Shared listeners reading the tunnel from the stream: an idle tunnel holds no closures of its own.
    (stream as TaggedSocket)[kTunnel] = ref;
    stream.on('close', onAttachedClose);
    // RST_STREAM from the client while a response is back-pressured leaves the Http2Stream open
    // (it waits for writes that will never drain): destroy it so the request is cancelled.
    stream.on('aborted', destroyThis);
    if (protocol === 'HTTP/2') {
      this.attaching = ref;
      try {
        this.h2server.emit('connection', joinWritev(stream));
      } finally {
        this.attaching = undefined;
      }
      stream.resume();
      // The tunnel ends when the h2c session does (the client's GOAWAY + close, or ours).
      ref.session?.once('close', () => void (stream.destroyed || stream.end()));
      return;
    }
    // After `Connection: close` Node's HTTP server calls `destroySoon()` if the socket has one, else
    // only `end()`: close the CONNECT stream both ways, as Envoy closes the TCP connection.
    (stream as Duplex & { destroySoon?: () => void }).destroySoon = closeThisTunnel;
    this.server.emit('connection', joinWritev(stream));
    stream.on('end', onAttachedEnd);
    // Protocol detection left the stream paused (with its first bytes pushed back).
    stream.resume();
  }

  /**
   * Graceful drain of HTTP tunnels as Envoy's connection manager drains (conn_manager_impl.cc):
   * h2c gets GOAWAY; idle HTTP/1 tunnels are ended now, busy ones after the response to their
   * last request, which goes out with `Connection: close` so no further request is sent on them.
   */
  drain(): void {
    this.draining = true;
    for (const t of this.tunnels) {
      // h2c: open streams finish (trailers included: nodejs/node#42713), then the session closes.
      if (t.session) t.session.close();
      else if (t.active === 0) closeTunnel(t.stream);
      // (A response already started with keep-alive closes the tunnel in onResponseClose.)
      else if (t.last && !t.last.res.headersSent) (t.last.res as ServerResponse).shouldKeepAlive = false;
    }
  }

  /** Drain timeout: requests cut from now on were cut by the waypoint (Envoy's `downstream_local_disconnect`). */
  cutting(): void {
    this.cut = true;
  }
}

/** 'close' of an attached tunnel: no longer served (see attach). */
function onAttachedClose(this: TaggedSocket): void {
  const ref = this[kTunnel]!;
  ref.owner.tunnels.delete(ref);
  // Node destroys the h2c session of a closed tunnel without clearing its idle timer
  // (streams.ts); this listener runs before Node's, while the session can still clear it.
  clearIdleTimer(ref.session);
}

function onAttachedEnd(this: TaggedSocket): void {
  onTunnelEnd(this[kTunnel]!);
}

function onRequest(req: IncomingMessage | H2Request, res: ServerResponse | H2Response, ref: TunnelRef): StreamContext {
  const chain = ref.chain.forStream();
  const stream = begin(ref, req, res, requestHead(req), true, chain);
  if (stream.http2 && ref.owner.draining) ref.session?.close();
  const refused = admitRequest(stream, ref.owner.hcm);
  if (refused) {
    refuse(stream, refused);
    return stream;
  }
  let result: PhaseResult;
  try {
    result = chain.runRequestHeaders(stream);
  } catch (err) {
    filterFailed(stream, err);
    return stream;
  }
  if (typeof result === 'number') {
    if (result === FilterStatus.Continue) chain.terminal.forward(stream);
    return stream;
  }
  result.then(
    (status) => {
      if (status === FilterStatus.Continue && !downstreamClosed(stream)) chain.terminal.forward(stream);
    },
    (err) => filterFailed(stream, err),
  );
  return stream;
}

/**
 * A new stream on `ref`, running `chain` (the tunnel's, without its dormant filters when they are:
 * FilterChain.forStream): counted, tracked for HTTP/1 keep-alive and drain (unless `track` is
 * false: a refused request that leaves an earlier response in flight), completed when its
 * response closes.
 */
function begin(ref: TunnelRef, req: IncomingMessage | H2Request, res: ServerResponse | H2Response, head: RequestHead, track = true, chain: FilterChain = ref.chain.forStream()): StreamContext {
  const stream = new StreamContext(ref.conn, chain, req, res, head);
  ref.conn.requestCount++;
  ref.active++;
  if (!stream.http2 && track) {
    ref.owner.keepAlive.requestStarts(ref.stream, ref.idle);
    ref.current ??= stream;
    ref.last = stream;
    // What the request itself asked for (Node derives it from the version and `Connection`),
    // before draining or a refusal turn keep-alive off.
    ref.lastKeepAlive = (res as ServerResponse).shouldKeepAlive;
    if (ref.owner.draining) (res as ServerResponse).shouldKeepAlive = false;
  }
  const closing: TaggedResponse = stream.http2 ? (res as H2Response).stream : (res as ServerResponse);
  closing[kExchange] = stream;
  closing[kTunnel] = ref;
  closing.on('close', onResClose);
  return stream;
}

function onResClose(this: TaggedResponse): void {
  onResponseClose(this[kExchange]!, this[kTunnel]!);
}

/** The connection manager refused the request: its local reply (an HTTP/1 connection closes after a protocol error). */
function refuse(stream: StreamContext, r: Refusal): void {
  if (r.close && !stream.http2) (stream.res as ServerResponse).shouldKeepAlive = false;
  sendLocalReply(stream, r.status, r.body, r.flag, r.details);
}

/**
 * CONNECT inside a tunnel: the waypoint does not proxy a second tunnel (Envoy's HCM has no
 * CONNECT route inside the waypoint's chains); answered 405, flag `DPE`, and the tunnel closed
 * (on h2c only the stream is answered, by our own 405, not Node's that no log or metric would see).
 */
function onConnectRequest(req: IncomingMessage, socket: Duplex): void {
  const ref = (socket as TaggedSocket)[kTunnel];
  if (!ref) return void socket.destroy();
  refuseConnect(begin(ref, req, ownResponse(req, socket), requestHead(req)));
}

/**
 * Node's HTTP/1 parser refused what the client sent (`clientError`). A codec error is answered as
 * Envoy's codec does (400, or 431 for headers over the limit; flag `DPE`) and the tunnel closed;
 * the answer goes through a stream with nothing known of the request, so it is logged and counted
 * like any local reply. When an earlier request on the tunnel is still being answered, nothing is
 * written in its way: that response finishes, then the tunnel closes (the failed request is
 * still accounted, response code 0). Transport errors just close the tunnel.
 */
function onClientError(err: Error & { code?: string }, socket: Duplex): void {
  log.debug({ err: err.message, code: err.code }, 'inner HTTP client error');
  const t = socket as TaggedSocket;
  const ref = t[kTunnel];
  // Bytes after a `Connection: close` request: the response in flight finishes, then the tunnel closes.
  if (err.code === 'HPE_CLOSED_CONNECTION' || t[kCodecFailed]) return;
  const failure = codecError(err);
  if (!ref || !failure) return void socket.destroy();
  t[kCodecFailed] = true;
  const req = new http.IncomingMessage(socket as Socket);
  req.httpVersionMajor = 1;
  req.httpVersionMinor = 1;
  req.httpVersion = '1.1';
  req.complete = true;
  req.push(null);
  const inFlight = t._httpMessage;
  if (inFlight || !socket.writable) {
    // Account the refused request on a response object that is never written.
    const res = new http.ServerResponse(req);
    const stream = begin(ref, req, res, unreadableHead('HTTP/1.1'), false);
    stream.addFlag(ResponseFlag.DownstreamProtocolError);
    stream.responseCodeDetails = failure.details;
    if (inFlight && !inFlight.writableFinished) inFlight.once('finish', () => closeTunnel(socket));
    else closeTunnel(socket);
    res.emit('close');
    return;
  }
  const stream = begin(ref, req, ownResponse(req, socket), unreadableHead('HTTP/1.1'));
  sendLocalReply(stream, failure.status, '', ResponseFlag.DownstreamProtocolError, failure.details);
}

/**
 * A WebSocket upgrade request (istio/istio#27078). Node's parser has let go of the tunnel, so the
 * exchange gets a ServerResponse on it as Node builds one for ordinary requests, then runs like
 * any request (filters may answer locally, e.g. an authz 403; the router forwards it:
 * router/dedicated-upstream.ts). An answer other than 101 ends the tunnel once written; after a
 * 101 the tunnel carries the upgraded protocol until both sides close, and stays subject to the
 * stream idle timeout (flag `SI`).
 */
function onUpgrade(req: IncomingMessage, socket: Duplex, head: Buffer): void {
  const ref = (socket as TaggedSocket)[kTunnel];
  if (!ref) return void socket.destroy();
  // Bytes the client sent after the request head belong to the upgraded protocol.
  if (head.length > 0) socket.unshift(head);
  const res = new http.ServerResponse(req);
  res.shouldKeepAlive = false;
  res.assignSocket(socket as Socket);
  res.once('finish', () => {
    if (res.statusCode !== 101) socket.end();
  });
  const stream = onRequest(req, res, ref);
  // Node took its own timeout listener off the tunnel; the timer it armed still runs.
  socket.on('timeout', () => {
    if (stream.responseCode !== 101) return onTunnelTimeout(socket);
    if (stream.responseFlags === ResponseFlag.None) stream.addFlag(ResponseFlag.StreamIdleTimeout);
    stream.responseCodeDetails = 'stream_idle_timeout';
    socket.destroy();
  });
}

/**
 * Idle timeout of a tunnel (Node calls this for the stream idle timeout, and between requests for
 * the keep-alive timeout, or the stream idle timeout when KeepAliveIdle counts the keep-alive time).
 * A request still waiting for its response gets Envoy's `408 stream timeout` with flag `SI` and
 * the upstream request is cancelled; otherwise the tunnel is closed (unless its keep-alive time is not over).
 */
function onTunnelTimeout(socket: Duplex): void {
  const ref = (socket as TaggedSocket)[kTunnel];
  const s = ref?.current;
  if (!s && ref && ref.owner.keepAlive.stillIdle(socket, ref.idle, ref.conn.requestCount)) return;
  if (!s || s.res.headersSent) {
    socket.destroy();
    return;
  }
  (s.res as ServerResponse).shouldKeepAlive = false;
  sendLocalReply(s, undefined, undefined, ResponseFlag.StreamIdleTimeout, 'stream_idle_timeout');
  s.abortUpstream?.cancel();
}

/** Stream idle timeout of one h2c request: 408 `SI` before the response started, else a reset. */
function onStreamTimeout(s: StreamContext): void {
  if (responseComplete(s)) return;
  sendLocalReply(s, undefined, undefined, ResponseFlag.StreamIdleTimeout, 'stream_idle_timeout');
  s.abortUpstream?.cancel();
}

function onResponseClose(stream: StreamContext, ref: TunnelRef): void {
  if (ref.current === stream) ref.current = undefined;
  // An idle keep-alive tunnel must not hold its last request (body copies, upstream objects).
  if (ref.last === stream) ref.last = undefined;
  // Draining after a keep-alive response: closed both ways, so a later request meets a closed
  // tunnel (retryable, RFC 9112 §9.3.1), not a half-closed one that takes it and cannot answer.
  if (--ref.active === 0 && ref.owner.draining && !ref.session) closeTunnel(ref.stream);
  if (!responseComplete(stream)) {
    if (stream.responseFlags === ResponseFlag.None) stream.addFlag(ResponseFlag.DownstreamConnectionTermination);
    if (stream.responseCodeDetails === '') stream.responseCodeDetails = ref.owner.cut ? 'downstream_local_disconnect' : 'downstream_remote_disconnect';
    stream.abortUpstream?.cancel();
  }
  stream.chain.completeStream(stream);
}

function ignoreError(): void {}

function filterFailed(stream: StreamContext, err: unknown): void {
  log.error({ err }, 'filter failed; answering 500');
  sendLocalReply(stream, 500, 'internal error in filter chain', ResponseFlag.None, 'filter_chain_failed');
}
