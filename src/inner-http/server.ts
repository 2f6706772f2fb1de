/**
 * The HTTP servers that run inside HBONE tunnels: one `http.Server` for HTTP/1.x and one
 * `http2.Http2Server` (h2c with prior knowledge) for HTTP/2, neither listening; each is fed the
 * CONNECT streams the listener hands it through its `connection` event. Every request becomes a
 * {@link StreamContext} and runs the filter chain the tunnel captured, then the router; so do
 * HTTP/1.1 WebSocket upgrades (`upgrade` event) and `Expect: 100-continue` requests
 * (`checkContinue`, so that Node does not answer 100 itself: the router relays the upstream's).
 *
 * Node corrupts corked string writes onto an Http2Stream (hbone/writev-fix.ts), so every stream
 * handed to the HTTP/1 server gets the `_writev` fix first.
 */
import http, { type IncomingMessage, type ServerResponse } from 'node:http';
import http2, { type Http2ServerRequest, type Http2ServerResponse, type ServerHttp2Session } from 'node:http2';
import type { Socket } from 'node:net';
import type { Duplex } from 'node:stream';
import { http2Settings, type Http2Params } from '../hbone/settings.ts';
import { joinWritev } from '../hbone/writev-fix.ts';
import type { FilterChain } from '../pipeline/chain.ts';
import { ConnectionContext, StreamContext } from '../pipeline/context.ts';
import { FilterStatus, type PhaseResult } from '../pipeline/filter.ts';
import { ResponseFlag } from '../telemetry/response-flags.ts';
import { log } from '../util/log.ts';

/** Limits of the HTTP/1.x server inside tunnels (bytes, ms). */
export interface InnerHttpOptions {
  /** Largest request header block (bytes); beyond it Node answers 431. */
  readonly maxHeaderSize: number;
  /** Idle keep-alive time (ms) of an inner connection; 0 disables. */
  readonly idleTimeoutMs: number;
  /**
   * A tunnel with a request in flight and no bytes moving either way for this long (ms) is closed
   * (Envoy's `stream_idle_timeout`, default 5 min); 0 disables.
   */
  readonly streamIdleTimeoutMs: number;
  /** HTTP/2 settings of h2c sessions inside tunnels (windows, frame size, header list size). */
  readonly http2: Http2Params;
  /** Answer HTTP/1.0 requests with 426 as Envoy does unless `ISTIO_META_HTTP10` is set (default false: accepted). */
  readonly rejectHttp10: boolean;
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
}
type TaggedSocket = Duplex & { [kTunnel]?: TunnelRef };
type TaggedSession = ServerHttp2Session & { [kTunnel]?: TunnelRef };

/** Serves HTTP/1.x and h2c on tunnels handed to {@link InnerHttpServer.attach}; one instance per waypoint. */
export class InnerHttpServer {
  private readonly server: http.Server;
  private readonly h2server: http2.Http2Server;
  /** The tunnel being attached to the h2c server (its `session` event fires synchronously). */
  private attaching: TunnelRef | undefined;
  readonly rejectHttp10: boolean;
  private readonly streamIdleTimeoutMs: number;
  /** Tunnels currently served (for drain). */
  readonly tunnels = new Set<TunnelRef>();
  /** Set by {@link drain}: responses carry `Connection: close` and idle tunnels are ended. */
  draining = false;

  constructor(opts: InnerHttpOptions) {
    this.server = http.createServer(
      {
        maxHeaderSize: opts.maxHeaderSize,
        // HTTP/1.1 without Host is answered 400 (RFC 9112 §3.2), as Envoy does.
        requireHostHeader: true,
        // Uploads may take as long as they take; Envoy's waypoint has no request timeout by default.
        requestTimeout: 0,
        keepAliveTimeout: opts.idleTimeoutMs,
        // Only WebSocket upgrades leave the HTTP parser (pitfall D1); any other `Upgrade`
        // (h2c, as Envoy ignores it) is an ordinary request whose hop-by-hop headers are stripped.
        shouldUpgradeCallback: isWebSocketUpgrade,
      },
      (req, res) => onRequest(req, res, (req.socket as TaggedSocket)[kTunnel]!),
    );
    // `Expect: 100-continue` is relayed, not answered by Node (pitfall C3): the router sends the
    // upstream's 100 (or answers it itself when the upstream cannot relay it).
    this.server.on('checkContinue', (req: IncomingMessage, res: ServerResponse) => onRequest(req, res, (req.socket as TaggedSocket)[kTunnel]!));
    this.server.on('upgrade', onUpgrade);
    this.rejectHttp10 = opts.rejectHttp10;
    this.streamIdleTimeoutMs = opts.streamIdleTimeoutMs;
    // A client that half-closes right after its request still gets the whole response
    // (pitfall B3): keep the tunnel writable after the downstream's END_STREAM.
    (this.server as http.Server & { httpAllowHalfOpen: boolean }).httpAllowHalfOpen = true;
    // Node sets this inactivity timeout on each connection while a request is in flight (the
    // keep-alive timeout applies between requests); on expiry the tunnel is destroyed and the
    // upstream request cancelled.
    this.server.timeout = opts.streamIdleTimeoutMs;
    this.server.on('timeout', onTunnelTimeout);
    // The header block is bounded in bytes (maxHeaderSize), not in count.
    this.server.maxHeadersCount = 0;
    this.server.on('connect', (_req: IncomingMessage, socket: Duplex) => {
      socket.end('HTTP/1.1 405 Method Not Allowed\r\nconnection: close\r\ncontent-length: 0\r\n\r\n');
    });
    this.server.on('clientError', (err: Error & { code?: string }, socket: Duplex) => {
      log.debug({ err: err.message, code: err.code }, 'inner HTTP client error');
      if (!socket.writable) return socket.destroy();
      const status = err.code === 'HPE_HEADER_OVERFLOW' ? '431 Request Header Fields Too Large' : '400 Bad Request';
      socket.end(`HTTP/1.1 ${status}\r\nconnection: close\r\ncontent-length: 0\r\n\r\n`);
    });

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
      ref.session = session;
      session.on('error', (err) => log.debug({ err: err.message }, 'inner h2c session error'));
    });
    this.h2server.on('request', (req: Http2ServerRequest, res: Http2ServerResponse) => {
      const ref = (req.stream.session as TaggedSession | undefined)?.[kTunnel];
      if (!ref) return req.stream.close(http2.constants.NGHTTP2_REFUSED_STREAM);
      const s = onRequest(req, res, ref);
      // Envoy's stream_idle_timeout per h2 stream: 408 `SI` before the response, else a reset.
      if (s && this.streamIdleTimeoutMs > 0) req.stream.setTimeout(this.streamIdleTimeoutMs, () => onStreamTimeout(s));
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
    const ref: TunnelRef = { conn, chain, owner: this, stream, session: undefined, active: 0, current: undefined, last: undefined, lastKeepAlive: false };
    conn.innerProtocol = protocol;
    this.tunnels.add(ref);
    stream.once('close', () => this.tunnels.delete(ref));
    // RST_STREAM from the client while a response is back-pressured leaves the Http2Stream open
    // (it waits for writes that will never drain): destroy it so the request is cancelled.
    stream.once('aborted', () => stream.destroy());
    if (protocol === 'HTTP/2') {
      this.attaching = ref;
      try {
        this.h2server.emit('connection', joinWritev(stream));
      } finally {
        this.attaching = undefined;
      }
      stream.resume();
      // The tunnel ends when the h2c session does (the client's GOAWAY + close, or ours).
      ref.session?.once('close', () => {
        if (!stream.destroyed) stream.end();
      });
      return;
    }
    (stream as TaggedSocket)[kTunnel] = ref;
    // Node's HTTP server closes a connection after a `Connection: close` exchange with
    // `destroySoon()` when the socket has one, else only `end()`: give the tunnel one, so the
    // CONNECT stream is closed both ways, as Envoy closes the TCP connection (a client that keeps
    // its side open must not hold the tunnel, and a drain, until the timeout).
    (stream as Duplex & { destroySoon?: () => void }).destroySoon = () => closeTunnel(stream);
    this.server.emit('connection', joinWritev(stream));
    stream.once('end', () => onTunnelEnd(ref));
    // Protocol detection left the stream paused (with its first bytes pushed back).
    stream.resume();
  }

  /**
   * Graceful drain of HTTP tunnels: idle ones are ended now (END_STREAM, the client sees a clean
   * close), busy ones after their current response, which goes out with `Connection: close`.
   */
  drain(): void {
    this.draining = true;
    for (const t of this.tunnels) {
      // h2c: GOAWAY, open streams finish (trailers included: pitfall E2), then the session closes.
      if (t.session) t.session.close();
      // Idle HTTP/1 tunnels are closed (Envoy closes idle HTTP/1 connections when draining).
      else if (t.active === 0) closeTunnel(t.stream);
    }
  }
}

function onRequest(req: IncomingMessage | Http2ServerRequest, res: ServerResponse | Http2ServerResponse, ref: TunnelRef): StreamContext {
  const stream = new StreamContext(ref.conn, ref.chain, req, res);
  ref.conn.requestCount++;
  ref.active++;
  if (!stream.http2) {
    ref.current ??= stream;
    ref.last = stream;
    // What the request itself asked for (Node derives it from the version and `Connection`),
    // before draining or the HTTP/1.0 refusal turn keep-alive off.
    ref.lastKeepAlive = (res as ServerResponse).shouldKeepAlive;
    if (ref.owner.draining) (res as ServerResponse).shouldKeepAlive = false;
    if (stream.protocol === 'HTTP/1.0' && ref.owner.rejectHttp10) {
      // Envoy without ISTIO_META_HTTP10: 426 Upgrade Required, then close.
      (res as ServerResponse).shouldKeepAlive = false;
      res.once('close', () => onResponseClose(stream, ref));
      stream.sendLocalReply(426, 'Upgrade Required', ResponseFlag.None, 'http1.0_not_allowed');
      return stream;
    }
  } else if (ref.owner.draining) {
    ref.session?.close();
  }
  res.once('close', () => onResponseClose(stream, ref));
  let result: PhaseResult;
  try {
    result = ref.chain.runRequestHeaders(stream);
  } catch (err) {
    filterFailed(stream, err);
    return stream;
  }
  if (typeof result === 'number') {
    if (result === FilterStatus.Continue) ref.chain.terminal.forward(stream);
    return stream;
  }
  result.then(
    (status) => {
      if (status === FilterStatus.Continue && !stream.downstreamClosed) ref.chain.terminal.forward(stream);
    },
    (err) => filterFailed(stream, err),
  );
  return stream;
}

/** `Upgrade: websocket` (a token of the header, any case) on a request with `Connection: upgrade`. */
function isWebSocketUpgrade(req: IncomingMessage): boolean {
  const u = req.headers.upgrade;
  return u !== undefined && /(?:^|,)\s*websocket\s*(?:,|$)/i.test(u);
}

/**
 * A WebSocket upgrade request (pitfall D1). Node's parser has let go of the tunnel, so the
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
 * Idle timeout of a tunnel (Node calls this for the stream idle timeout while a request is in
 * flight, and for the keep-alive timeout between requests). A request still waiting for its
 * response gets Envoy's `408 stream timeout` with flag `SI` and the upstream request is
 * cancelled; otherwise the tunnel is closed.
 */
function onTunnelTimeout(socket: Duplex): void {
  const s = (socket as TaggedSocket)[kTunnel]?.current;
  if (!s || s.res.headersSent) {
    socket.destroy();
    return;
  }
  (s.res as ServerResponse).shouldKeepAlive = false;
  s.sendLocalReply(undefined, undefined, ResponseFlag.StreamIdleTimeout, 'stream_idle_timeout');
  s.abortUpstream?.cancel();
}

/** Stream idle timeout of one h2c request: 408 `SI` before the response started, else a reset. */
function onStreamTimeout(s: StreamContext): void {
  if (s.responseComplete) return;
  s.sendLocalReply(undefined, undefined, ResponseFlag.StreamIdleTimeout, 'stream_idle_timeout');
  s.abortUpstream?.cancel();
}

/**
 * The client ended its side of an HTTP/1 tunnel (FIN through the source ztunnel, END_STREAM on the
 * CONNECT stream) while a request is unanswered. After a request that asked to keep the
 * connection (HTTP/1.1 without `Connection: close`), that is a client that went away (`curl -m`,
 * a killed process): as Envoy's HTTP connection manager, which treats a downstream FIN as a
 * disconnect (flag `DC`, details `downstream_remote_disconnect`), the tunnel is closed (END_STREAM
 * then RST_STREAM(NO_ERROR), as for any closed connection: a lone RST_STREAM(CANCEL) after the
 * client's END_STREAM left the source side open until shutdown), which cancels the upstream
 * request and any retry. After `Connection: close` (or an HTTP/1.0 request
 * without keep-alive) the client half-closed on purpose and still gets its answer (pitfall B3,
 * envoyproxy/envoy#2066).
 */
function onTunnelEnd(ref: TunnelRef): void {
  const s = ref.last;
  if (ref.active === 0 || !s || !ref.lastKeepAlive || s.res.writableEnded) return;
  closeTunnel(ref.stream);
}

function onResponseClose(stream: StreamContext, ref: TunnelRef): void {
  if (ref.current === stream) ref.current = undefined;
  if (--ref.active === 0 && ref.owner.draining && !ref.session) ref.stream.end();
  if (!stream.responseComplete) {
    if (stream.responseFlags === ResponseFlag.None) stream.addFlag(ResponseFlag.DownstreamConnectionTermination);
    if (stream.responseCodeDetails === '') stream.responseCodeDetails = 'downstream_remote_disconnect';
    stream.abortUpstream?.cancel();
  }
  stream.chain.completeStream(stream);
}

/**
 * Close an HTTP/1 tunnel as a server closes its connection: END_STREAM after the last bytes, then
 * RST_STREAM(NO_ERROR) so the peer stops sending (RFC 9113 §8.1) and the stream is released even
 * when the client keeps its side open.
 */
function closeTunnel(tunnel: Duplex): void {
  const close = () => {
    const h2 = tunnel as Duplex & { close?: (code?: number) => void };
    if (typeof h2.close === 'function') h2.close(http2.constants.NGHTTP2_NO_ERROR);
    else tunnel.destroy();
  };
  if (tunnel.writableFinished || tunnel.destroyed) return close();
  tunnel.once('finish', close);
  tunnel.end();
}

function filterFailed(stream: StreamContext, err: unknown): void {
  log.error({ err }, 'filter failed; answering 500');
  stream.sendLocalReply(500, 'internal error in filter chain', ResponseFlag.None, 'filter_chain_failed');
}
