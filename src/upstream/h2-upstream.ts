/**
 * HTTP/2 toward one endpoint, for service ports declared `http2`/`grpc` (Istio's cluster h2
 * upgrade, istio/istio pilot/pkg/networking/core/cluster_waypoint.go `applyH2Upgrade`) and for undeclared ports whose client spoke
 * h2c: h2c sessions (prior knowledge) over HBONE CONNECT streams (or plain TCP for endpoints
 * outside the mesh), many requests multiplexed per session.
 *
 * Pool rules as for HBONE connections (ztunnel's pool): a new session is opened when every
 * pooled one is at its stream limit (min of ours and the peer's SETTINGS_MAX_CONCURRENT_STREAMS);
 * a session that received GOAWAY, closed or saw its transport end (peer FIN) is never used again (requests already on it finish,
 * new ones go to a fresh session, as undici did not: nodejs/undici#3140); idle sessions close after `idleTimeoutMs`.
 *
 * It speaks undici's dispatch-handler protocol (onConnect/onHeaders/onData/onComplete/onError)
 * so the router drives HTTP/1.1 (undici) and HTTP/2 upstreams with one handler.
 */
import http2, { type ClientHttp2Session, type ClientHttp2Stream, type IncomingHttpHeaders, type OutgoingHttpHeaders } from 'node:http2';
import type { Duplex, Readable } from 'node:stream';
import { WaypointError, log } from '../util/index.ts';
import { http2Settings, type Http2Params, endStreamReceived, guardJsStreamShutdown, resetOf, resetStream, watchEndStream, type StreamReset, joinWritev } from '../hbone/index.ts';
import type { BufferHolder } from '../pipeline/index.ts';

/** One request to send: flat header list without pseudo-headers or connection-specific ones. */
export interface UpstreamRequest {
  readonly method: string;
  /** Origin-form path (`/p?q`). */
  readonly path: string;
  /** `:authority` (the client's Host / :authority). */
  readonly authority: string;
  /** Flat `[name, value, ...]` list; names may be any case (sent lower-cased). */
  readonly headers: readonly string[];
  /** null: no body (END_STREAM on HEADERS); a Buffer; or a stream piped with back-pressure. */
  readonly body: Buffer | Readable | null;
}

/** The undici-style handler the router implements. Header lists are flat; names lower-case. */
export interface UpstreamHandler {
  onConnect(abort: (err?: Error) => void): void;
  /** The stream or connection carrying the exchange (its buffers count in the overload budget); optional. */
  onCarrier?(carrier: BufferHolder): void;
  /** Informational (1xx) response headers; optional. */
  onInformational?(status: number): void;
  onHeaders(status: number, rawHeaders: (Buffer | string)[], resume: () => void, statusText: string): boolean;
  onData(chunk: Buffer): boolean;
  onComplete(trailers: string[] | null): void;
  onError(err: Error): void;
}

/**
 * Why an upstream exchange ended without a complete response, in Envoy's reset-reason names (the
 * `{...}` of `upstream_reset_{before,after}_response_started`; envoyproxy/envoy source/common/http/utility.cc
 * `resetReasonToString`): the peer's RST_STREAM (any code, NO_ERROR included), REFUSED_STREAM (never
 * processed: safe to retry), the connection lost under the stream, or a malformed response (a body
 * longer or shorter than its content-length, which nghttp2 resets with PROTOCOL_ERROR).
 */
export type UpstreamResetReason = 'remote_reset' | 'remote_refused_stream_reset' | 'connection_termination' | 'protocol_error';

/**
 * An upstream HTTP/2 stream ended without a complete response (no END_STREAM): `rstCode` is the
 * RST_STREAM code (0 when the session failed or closed), `responseStarted` whether headers had
 * arrived, `reason` what ended it.
 */
export class UpstreamResetError extends WaypointError {
  readonly rstCode: number;
  readonly responseStarted: boolean;
  readonly reason: UpstreamResetReason;
  constructor(message: string, rstCode: number, responseStarted: boolean, reason: UpstreamResetReason = defaultReason(rstCode)) {
    super('WP_ERR_UPSTREAM_RESET', message);
    this.name = 'UpstreamResetError';
    this.rstCode = rstCode;
    this.responseStarted = responseStarted;
    this.reason = reason;
  }
}

function defaultReason(rstCode: number): UpstreamResetReason {
  if (rstCode === http2.constants.NGHTTP2_REFUSED_STREAM) return 'remote_refused_stream_reset';
  return rstCode === 0 ? 'connection_termination' : 'remote_reset';
}

/** Settings of an {@link H2Upstream} (ms, counts). */
export interface H2UpstreamOptions {
  /** `ip:port` of the endpoint (for logs). */
  readonly authority: string;
  /** Opens the byte stream the session runs on (an HBONE CONNECT stream or a TCP socket). */
  open(): Promise<Duplex>;
  readonly http2: Http2Params;
  /** Close a session with no request in flight after this long (ms). */
  readonly idleTimeoutMs: number;
  /** Our cap on concurrent streams per session. */
  readonly maxStreamsPerSession: number;
  /**
   * Most sessions to open (a DestinationRule's `tcp.maxConnections`); when all are at their stream
   * limit, further requests share the least busy one (nghttp2 holds streams beyond the peer's
   * limit until one closes). Default: no limit.
   */
  readonly maxSessions?: number;
  /** Requests per session before it is retired (a DestinationRule's `http.maxRequestsPerConnection`); default: no limit. */
  readonly maxRequestsPerSession?: number;
}

interface PooledH2 {
  readonly session: Promise<ClientHttp2Session>;
  /** Resolved session, once up (for the synchronous capacity check). */
  live: ClientHttp2Session | undefined;
  active: number;
  /** Requests sent on it so far. */
  started: number;
  usable: boolean;
  idleTimer: NodeJS.Timeout | undefined;
}

/** h2c sessions to one endpoint; `dispatch` sends one request. */
export class H2Upstream {
  private readonly opts: H2UpstreamOptions;
  private readonly sessions: PooledH2[] = [];
  private closed = false;

  constructor(opts: H2UpstreamOptions) {
    this.opts = opts;
  }

  /** Open (or opening) h2c sessions to this endpoint. */
  get sessionCount(): number {
    return this.sessions.length;
  }

  /** Send `req`; the outcome reaches `handler` (never throws). */
  dispatch(req: UpstreamRequest, handler: UpstreamHandler): void {
    if (this.closed) {
      handler.onError(new UpstreamResetError('upstream pool closed', 0, false));
      return;
    }
    const pooled = this.acquire();
    pooled.active++;
    // Envoy's max_requests_per_connection: the session takes no new request once it has had its share.
    if (++pooled.started >= (this.opts.maxRequestsPerSession ?? Infinity)) this.retire(pooled);
    if (pooled.idleTimer) {
      clearTimeout(pooled.idleTimer);
      pooled.idleTimer = undefined;
    }
    // A session that is up takes the request now (no promise turn per request).
    if (pooled.live) return this.start(pooled, pooled.live, req, handler);
    pooled.session.then(
      (session) => this.start(pooled, session, req, handler),
      (err: Error) => {
        this.release(pooled);
        handler.onError(err);
      },
    );
  }

  /** GOAWAY every session; streams in flight finish. */
  async close(): Promise<void> {
    this.closed = true;
    const all = this.sessions.splice(0);
    await Promise.allSettled(all.map(async (p) => (await p.session).close()));
  }

  /** Tear everything down now. */
  async destroy(): Promise<void> {
    this.closed = true;
    const all = this.sessions.splice(0);
    await Promise.allSettled(all.map(async (p) => (await p.session).destroy()));
  }

  private start(pooled: PooledH2, session: ClientHttp2Session, req: UpstreamRequest, handler: UpstreamHandler): void {
    // A flat header list as Node takes it (names lower-cased by Node): no header object to build
    // and copy per request (Node's prepareRequestHeadersArray).
    const raw = req.headers;
    const headers: string[] = new Array(8 + raw.length);
    headers[0] = ':method';
    headers[1] = req.method;
    headers[2] = ':path';
    headers[3] = req.path;
    headers[4] = ':scheme';
    headers[5] = 'http';
    headers[6] = ':authority';
    headers[7] = req.authority;
    for (let i = 0; i < raw.length; i++) headers[8 + i] = raw[i];
    let stream: ClientHttp2Stream;
    try {
      stream = session.request(headers as unknown as OutgoingHttpHeaders, { endStream: req.body === null });
    } catch (err) {
      // The session went away between acquire and request (GOAWAY raced us): never processed.
      this.retire(pooled);
      this.release(pooled);
      handler.onError(new UpstreamResetError(`HTTP/2 request to ${this.opts.authority} failed: ${(err as Error).message}`, http2.constants.NGHTTP2_REFUSED_STREAM, false));
      return;
    }
    new H2Exchange(stream, handler, () => this.release(pooled), this.opts.authority);
    if (req.body === null) return;
    if (Buffer.isBuffer(req.body)) {
      stream.end(req.body);
      return;
    }
    const body = req.body;
    body.pipe(stream);
    body.once('error', () => resetStream(stream));
  }

  private acquire(): PooledH2 {
    for (const p of this.sessions) {
      if (!p.usable) continue;
      const peerMax = p.live?.remoteSettings?.maxConcurrentStreams ?? this.opts.maxStreamsPerSession;
      if (p.active < Math.min(peerMax, this.opts.maxStreamsPerSession)) return p;
    }
    if (this.sessions.length > 0 && this.sessions.length >= (this.opts.maxSessions ?? Infinity)) {
      let least = this.sessions[0];
      for (const p of this.sessions) if (p.active < least.active) least = p;
      return least;
    }
    const p: PooledH2 = { session: this.open(), live: undefined, active: 0, started: 0, usable: true, idleTimer: undefined };
    p.session.then(
      (s) => {
        p.live = s;
        s.once('goaway', () => this.retire(p));
        s.once('close', () => this.retire(p));
      },
      () => this.retire(p),
    );
    this.sessions.push(p);
    return p;
  }

  private async open(): Promise<ClientHttp2Session> {
    // Node's writev onto an Http2Stream corrupts batched chunks (hbone/writev-fix.ts).
    const socket = joinWritev(await this.opts.open());
    const session = guardJsStreamShutdown(
      http2.connect(`http://${this.opts.authority}`, {
        createConnection: () => socket,
        settings: http2Settings(this.opts.http2, false),
        maxSessionMemory: this.opts.http2.maxSessionMemoryMb,
      }),
    );
    session.on('error', (err) => log.debug({ err: err.message, endpoint: this.opts.authority }, 'upstream h2c session error'));
    // The peer's FIN (a server killed or restarted, a tunnel closed) ends the connection: nothing can
    // arrive on it any more. Node's http2 does not act on it when the transport is half-open (our TCP
    // sockets are, for the TCP relay), so the session would sit in CLOSE-WAIT taking requests that
    // wait for their timeout; destroy it (it closes and is retired) as nghttp2-based clients do on EOF.
    socket.once('end', () => session.destroy());
    session.unref();
    await new Promise<void>((resolve, reject) => {
      const onClose = () => reject(new UpstreamResetError(`h2c session to ${this.opts.authority} closed before it was ready`, 0, false));
      session.once('close', onClose);
      session.once('connect', () => {
        session.off('close', onClose);
        try {
          session.setLocalWindowSize(this.opts.http2.initialConnectionWindowSize);
        } catch {
          // closing
        }
        resolve();
      });
    });
    return session;
  }

  private release(p: PooledH2): void {
    p.active--;
    // A session retired for its request count closes (GOAWAY) once its last stream is done.
    if (p.active === 0 && !p.usable && p.started >= (this.opts.maxRequestsPerSession ?? Infinity)) {
      void p.session.then((s) => s.close(), () => {});
      return;
    }
    if (p.active === 0 && p.usable && this.opts.idleTimeoutMs > 0) {
      p.idleTimer = setTimeout(() => {
        this.retire(p);
        void p.session.then((s) => s.close());
      }, this.opts.idleTimeoutMs).unref();
    }
  }

  private retire(p: PooledH2): void {
    p.usable = false;
    if (p.idleTimer) clearTimeout(p.idleTimer);
    const i = this.sessions.indexOf(p);
    if (i >= 0) this.sessions.splice(i, 1);
  }
}

/**
 * One request/response on an upstream h2 stream, translated to handler calls. The response is
 * complete only when END_STREAM arrived (hbone/stream-end.ts): Node ends the stream alike for a
 * RST_STREAM(NO_ERROR) or CANCEL, which must reach the downstream as a reset, never as an end.
 */
class H2Exchange {
  private readonly stream: ClientHttp2Stream;
  private readonly handler: UpstreamHandler;
  private readonly release: () => void;
  private readonly where: string;
  private responseStarted = false;
  private trailers: string[] | null = null;
  private done = false;
  /** The response's content-length (-1 when none) and the body bytes read so far. */
  private declared = -1;
  private received = 0;

  constructor(stream: ClientHttp2Stream, handler: UpstreamHandler, release: () => void, where: string) {
    this.stream = stream;
    this.handler = handler;
    this.release = release;
    this.where = where;
    watchEndStream(stream, (r) => this.reset(r));
    handler.onCarrier?.(stream);
    handler.onConnect((err) => {
      // RST_STREAM(CANCEL) only: an END_STREAM first would pass a cut request body on as whole.
      resetStream(stream);
      this.fail(err ?? new Error('cancelled'));
    });
    // Listeners shared by every exchange (module functions finding it on the stream): no closures
    // or `once` wrappers per request; each of these events comes once per stream anyway.
    (stream as ExchangeStream)[kExchange] = this;
    stream.on('headers', onStreamHeaders);
    // Node passes the header block as received too (flat, pseudo-headers first) after its object.
    stream.on('response', onStreamResponse);
    stream.on('trailers', onStreamTrailers);
    stream.on('end', onStreamEnd);
    stream.on('error', noop);
    stream.on('close', onStreamClose);
  }

  informational(h: IncomingHttpHeaders): void {
    this.handler.onInformational?.(Number(h[':status']));
  }

  onTrailers(t: IncomingHttpHeaders, raw: string[] | undefined): void {
    this.trailers = raw ? withoutPseudo(raw) : flatten(t);
  }

  onEnd(): void {
    if (endStreamReceived(this.stream)) this.finish();
  }

  onClose(): void {
    const stream = this.stream;
    if (!this.done) this.reset(resetOf(stream) ?? { code: stream.rstCode ?? 0, connectionLost: true });
  }

  onResponse(h: IncomingHttpHeaders, raw: string[] | undefined): void {
    if (this.responseStarted) return;
    this.responseStarted = true;
    const cl = h['content-length'];
    if (cl !== undefined) this.declared = Number(cl);
    const status = Number(h[':status']);
    const stream = this.stream;
    const flowing = this.handler.onHeaders(status, raw ? withoutPseudo(raw) : flatten(h), () => stream.resume(), '');
    // Data is read only after the headers went downstream (Node may have DATA buffered already).
    stream.on('data', onStreamData);
    if (!flowing) stream.pause();
  }

  onData(c: Buffer): void {
    this.received += c.length;
    if (!this.handler.onData(c)) this.stream.pause();
  }

  /** The stream ended without END_STREAM: fail with Envoy's reset reason, and let go of what it still buffers. */
  private reset(r: StreamReset): void {
    if (this.done) return;
    const stream = this.stream;
    let reason: UpstreamResetReason;
    if (r.connectionLost) reason = 'connection_termination';
    else if (r.code === http2.constants.NGHTTP2_REFUSED_STREAM) reason = 'remote_refused_stream_reset';
    // nghttp2 resets a stream whose DATA does not add up to its content-length (RFC 9113 §8.1.1).
    else if (r.code === http2.constants.NGHTTP2_PROTOCOL_ERROR && this.declared >= 0 && this.received + stream.readableLength !== this.declared) reason = 'protocol_error';
    else reason = 'remote_reset';
    const what = r.connectionLost ? 'lost with its connection' : `reset (code ${r.code})`;
    this.fail(new UpstreamResetError(`HTTP/2 stream to ${this.where} ${what} before the end of the response`, r.code, this.responseStarted, reason));
    if (!stream.destroyed) stream.destroy();
  }

  private finish(): void {
    if (this.done) return;
    this.done = true;
    this.release();
    this.handler.onComplete(this.trailers);
  }

  private fail(err: Error): void {
    if (this.done) return;
    this.done = true;
    this.release();
    this.handler.onError(err);
  }
}

const kExchange = Symbol('waypoint.h2Exchange');
type ExchangeStream = ClientHttp2Stream & { [kExchange]: H2Exchange };

function onStreamHeaders(this: ExchangeStream, h: IncomingHttpHeaders): void {
  this[kExchange].informational(h);
}

function onStreamResponse(this: ExchangeStream, h: IncomingHttpHeaders, _flags: number, raw: string[] | undefined): void {
  this[kExchange].onResponse(h, raw);
}

function onStreamTrailers(this: ExchangeStream, t: IncomingHttpHeaders, _flags: number, raw: string[] | undefined): void {
  this[kExchange].onTrailers(t, raw);
}

function onStreamEnd(this: ExchangeStream): void {
  this[kExchange].onEnd();
}

function onStreamClose(this: ExchangeStream): void {
  this[kExchange].onClose();
}

function onStreamData(this: ExchangeStream, c: Buffer): void {
  this[kExchange].onData(c);
}

function noop(): void {}

/** A received header block (flat, as Node passes it) without its pseudo-headers. */
function withoutPseudo(raw: readonly string[]): string[] {
  let i = 0;
  while (i < raw.length && raw[i].charCodeAt(0) === 0x3a) i += 2;
  const out: string[] = new Array(raw.length - i);
  for (let j = 0; i < raw.length; i++, j++) out[j] = raw[i];
  // Pseudo-headers come first (RFC 9113 §8.3); a later one would be malformed and refused by nghttp2.
  return out;
}

/** An http2 header object as a flat `[name, value, ...]` list without pseudo-headers. */
function flatten(h: IncomingHttpHeaders): string[] {
  const out: string[] = [];
  for (const name in h) {
    if (name.charCodeAt(0) === 0x3a) continue;
    const v = h[name];
    if (v === undefined) continue;
    if (Array.isArray(v)) for (const x of v) out.push(name, x);
    else out.push(name, String(v));
  }
  return out;
}
