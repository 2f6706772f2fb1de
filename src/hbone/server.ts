/**
 * The HBONE server: mutual TLS 1.3 (ALPN `h2`, client certificate required and chained to the
 * mesh root), HTTP/2 with only `CONNECT` accepted. Used by the waypoint listener and by the
 * `waypoint inbound` role. It parses the CONNECT and hands the stream on; what to do with the
 * target is the caller's job.
 *
 * Behaviour follows ztunnel's inbound (istio/ztunnel src/proxy/inbound.rs): a method other than CONNECT or an
 * unparsable `:authority` is answered 400. Only a `stream` listener is registered — never a
 * `request` listener or `allowHTTP1` — so Node's compatibility layer cannot answer CONNECT with 405
 * (nodejs/node#36977).
 */
import http2, { type Http2SecureServer, type IncomingHttpHeaders, type ServerHttp2Session, type ServerHttp2Stream } from 'node:http2';
import type { AddressInfo, Socket } from 'node:net';
import type { TLSSocket } from 'node:tls';
import type { Registry } from 'prom-client';
import { svidIdentity, type SpiffeId } from '../identity/index.ts';
import { formatHostPort, normalizeIp, parseHostPort } from '../state/index.ts';
import { LogLimiter, listenOn, log } from '../util/index.ts';
import { startKeepalive } from './keepalive.ts';
import { HboneListenerStats, type SessionClosure, type TlsFailure } from './listener-stats.ts';
import { PeerLimits, type PeerLimitSettings } from './peer-limits.ts';
import { dropped, loopTurn, tooManyPrematureResets } from './premature-resets.ts';
import { destroySocketWithSession } from './session-socket.ts';
import { watchEndStream } from './stream-end.ts';
import { releaseTimerOnClose } from './stream-timer-fix.ts';
import { hboneTlsOptions, http2SessionOptions, type Http2Params, type TlsMaterial } from './settings.ts';

/** A parsed, authenticated CONNECT. */
export interface HboneRequest {
  readonly authority: string;
  readonly ip: string;
  readonly port: number;
  readonly headers: IncomingHttpHeaders;
  readonly peer: SpiffeId;
  /** TCP peer of the HBONE connection, normalised. */
  readonly remoteAddress: string;
  readonly remotePort: number;
  /** Local address the connection arrived on (the "dialed" IP), normalised. */
  readonly localAddress: string;
}

/** Settings and callbacks of an {@link HboneServer}. */
export interface HboneServerOptions {
  /** Used in log lines (`waypoint`, `inbound`). */
  readonly name: string;
  readonly material: TlsMaterial;
  readonly http2: Http2Params;
  /** How long a client may take to complete its TLS handshake (ms; Node's default is 120 s). */
  readonly tlsHandshakeTimeoutMs?: number;
  /** Registry for the listener's counters (TLS outcomes, refused streams); none when absent. */
  readonly metrics?: Registry;
  /** Per-client limits (see peer-limits.ts); none when absent. */
  readonly peerLimits?: PeerLimitSettings;
  /** Told when a client runs out of its stream budget, with how long its new connections are refused (ms; src/workers). */
  onPeerThrottled?(ip: string, forMs: number): void;
  /** Decide whether a client identity may connect. Return a reason to refuse, undefined to accept. */
  verifyPeer(peer: SpiffeId): string | undefined;
  /** A valid CONNECT arrived. The handler must answer the stream (respond or close). */
  onConnect(stream: ServerHttp2Stream, request: HboneRequest): void;
}

/** An HBONE listener; see the module comment. `listen()` rejects on bind errors. */
export class HboneServer {
  readonly server: Http2SecureServer;
  private readonly sessions = new Set<ServerHttp2Session>();
  /** Every accepted TCP socket, including ones still in the TLS handshake or refused. */
  private readonly sockets = new Set<Socket>();
  private readonly opts: HboneServerOptions;
  /** The TLS socket whose session Node is creating (see the 'secureConnection' listeners). */
  private accepting: TLSSocket | undefined;
  private stats: HboneListenerStats | undefined;
  /** Warnings a client can trigger at will (failed handshakes, refused identities, rejected streams), rate-limited. */
  private readonly warnings = new LogLimiter();
  private readonly peerLimits: PeerLimits | undefined;
  /** Set by {@link drain}: sessions that finish their handshake from then on get GOAWAY at once. */
  private draining = false;
  /** Resolved when the last accepted socket closes (a drain of handed-over connections waits on it). */
  private idleWaiter: (() => void) | undefined;
  /**
   * Listeners every stream shares: a waypoint holds thousands of idle tunnels, and a closure (with
   * Node's `once` wrapper) per stream and event cost more than the stream's own state.
   */
  private readonly onStreamError: (err: Error) => void;
  private readonly onStreamClose: (this: ServerHttp2Stream) => void;

  constructor(opts: HboneServerOptions) {
    this.opts = opts;
    this.onStreamError = (err) => log.debug({ err: err.message, server: opts.name }, 'HBONE stream error');
    const server = this;
    this.onStreamClose = function (this: ServerHttp2Stream) {
      server.streamClosed(this);
    };
    this.server = http2.createSecureServer({
      ...hboneTlsOptions(opts.material),
      requestCert: true,
      rejectUnauthorized: true,
      handshakeTimeout: opts.tlsHandshakeTimeoutMs ?? 10_000,
      ...http2SessionOptions(opts.http2, true),
      peerMaxConcurrentStreams: opts.http2.maxConcurrentStreams,
      // TCP_NODELAY as ztunnel sets it: frames are written whole, Nagle would only add latency.
      noDelay: true,
    });
    this.peerLimits = opts.peerLimits && new PeerLimits(opts.peerLimits, opts.onPeerThrottled && ((ip, ms) => opts.onPeerThrottled!(ip, ms)));
    // Before Node's TLS listener: a refused client costs no handshake.
    this.server.prependListener('connection', (socket: Socket) => {
      const ip = normalizeIp(socket.remoteAddress ?? '') ?? '';
      // Read now: once the handshake failed, the socket no longer knows its peer.
      remoteOf.set(socket, formatHostPort(ip, socket.remotePort ?? 0));
      const refusal = this.peerLimits?.opened(ip);
      if (refusal) {
        refused.add(socket);
        this.stats?.connectionRefused(refusal);
        this.warnings.warn(`refused:${refusal}`, { server: opts.name, remote: remoteOf.get(socket), reason: refusal }, 'HBONE connection refused: client over its limits');
        socket.destroy();
        return;
      }
      this.sockets.add(socket);
      socket.once('close', () => {
        this.sockets.delete(socket);
        this.peerLimits?.closed(ip);
        if (this.sockets.size === 0) this.idleWaiter?.();
      });
    });
    // Around Node's own 'secureConnection' listener, which creates the session and emits 'session'
    // (or 'unknownProtocol') synchronously: the TLS socket being turned into a session.
    this.server.prependListener('secureConnection', (socket: TLSSocket) => {
      this.accepting = socket;
    });
    this.server.on('secureConnection', () => {
      this.accepting = undefined;
    });
    this.server.on('session', (session) => this.onSession(session));
    this.server.on('stream', (stream, headers) => this.onStream(stream, headers));
    this.server.on('tlsClientError', (err: Error & { code?: string }, socket: TLSSocket) => this.onTlsError(err, socket));
    // A client that did not negotiate ALPN `h2` (HBONE is HTTP/2 only): refused at once instead
    // of after Node's `unknownProtocolTimeout`.
    this.server.on('unknownProtocol', (socket: TLSSocket) => {
      this.tlsFailed(socket, 'connection_error', `no ALPN h2 (offered ${socket.alpnProtocol || 'none'})`);
      socket.destroy();
    });
    this.server.on('sessionError', (err) => log.debug({ err: err.message, server: opts.name }, 'HBONE session error'));
  }

  /** Listen on `ip:port` / `[v6]:port`; resolves with the bound address. Rejects on EADDRINUSE etc. */
  async listen(hostPort: string): Promise<AddressInfo> {
    const bound = await listenOn(this.server, hostPort);
    if (this.opts.metrics) this.stats = new HboneListenerStats(this.opts.metrics, formatHostPort(bound.address, bound.port));
    return bound;
  }

  /**
   * Serve connections another process accepted on `bound` (src/workers: the primary owns the
   * listener and hands each connection over with {@link accept}) instead of listening here.
   */
  serveHandedOver(bound: AddressInfo): AddressInfo {
    if (this.opts.metrics) this.stats = new HboneListenerStats(this.opts.metrics, formatHostPort(bound.address, bound.port));
    return bound;
  }

  /** A TCP connection accepted elsewhere ({@link serveHandedOver}), served as one accepted here; false once draining. */
  accept(socket: Socket): boolean {
    if (this.draining) return false;
    this.server.emit('connection', socket);
    return true;
  }

  /** Swap the certificate for new connections (rotation); live connections keep theirs. */
  updateMaterial(m: TlsMaterial): void {
    this.server.setSecureContext(hboneTlsOptions(m));
  }

  /** Live HTTP/2 sessions (authenticated connections). */
  get sessionCount(): number {
    return this.sessions.size;
  }

  /** Accepted TCP sockets still open, including ones in the TLS handshake (leak checks). */
  get socketCount(): number {
    return this.sockets.size;
  }

  /**
   * Graceful shutdown: stop accepting, send GOAWAY on every session (in-flight streams finish),
   * and destroy what is left after `timeoutMs` (`onTimeout` is told first). Resolves when every
   * session is gone.
   */
  async drain(timeoutMs: number, onTimeout?: () => void): Promise<void> {
    this.draining = true;
    // A listening server closes once its connections are gone; handed-over ones are not its own.
    const listening = this.server.listening;
    const serverClosed = new Promise<void>((r) => this.server.close(() => r()));
    const closed = listening ? serverClosed : this.sockets.size === 0 ? Promise.resolve() : new Promise<void>((r) => (this.idleWaiter = r));
    for (const s of this.sessions) s.close();
    if (this.sessions.size === 0 && this.sockets.size === 0) return closed;
    const timer = setTimeout(() => {
      onTimeout?.();
      for (const s of this.sessions) s.destroy();
      for (const s of this.sockets) s.destroy();
    }, timeoutMs);
    await closed;
    clearTimeout(timer);
  }

  /** A handshake failed (`tlsClientError`), or its identity was refused right after. */
  private onTlsError(err: Error & { code?: string }, socket: TLSSocket): void {
    // Refused before the handshake (peer limits): already counted.
    const parent = (socket as TLSSocket & { _parent?: Socket })._parent;
    if (refused.has(socket) || (parent && refused.has(parent))) return;
    // Node destroys a socket whose certificate failed verification without an error of its own
    // (_tls_wrap.js onServerSocketSecure); the reason is in `authorizationError`.
    const verify = (socket as TLSSocket & { authorizationError?: string | Error }).authorizationError;
    const reason: TlsFailure =
      err.code === 'ERR_TLS_HANDSHAKE_TIMEOUT'
        ? 'handshake_timeout'
        : err.code === 'ERR_SSL_PEER_DID_NOT_RETURN_A_CERTIFICATE'
          ? 'fail_verify_no_cert'
          : verify || err.code?.includes('CERTIFICATE')
            ? 'fail_verify_error'
            : 'connection_error';
    this.tlsFailed(socket, reason, verify ? `client certificate: ${String(verify)}` : `${err.code ?? 'error'}: ${err.message.split('\n')[0]}`);
  }

  private tlsFailed(socket: TLSSocket, reason: TlsFailure, detail: string, peer?: string): void {
    this.stats?.tlsFailure(reason);
    const fields = { server: this.opts.name, remote: remoteOfSocket(socket), reason, detail, ...(peer ? { peer } : {}) };
    this.warnings.warn(`tls:${reason}`, fields, reason === 'fail_verify_san' ? 'HBONE client refused' : 'HBONE TLS handshake failed');
  }

  private onSession(session: ServerHttp2Session): void {
    const socket = this.accepting ?? (session.socket as TLSSocket);
    this.accepting = undefined;
    destroySocketWithSession(session, socket);
    const svid = svidIdentity(socket.getPeerX509Certificate());
    const refusal = 'problem' in svid ? svid.problem : this.opts.verifyPeer(svid.id);
    if (refusal) {
      this.tlsFailed(socket, 'fail_verify_san', refusal, 'id' in svid ? svid.id.uri : undefined);
      session.destroy();
      socket.destroy();
      return;
    }
    this.stats?.handshake();
    const remote = remoteOfSocket(socket);
    const state: SessionState = { peer: (svid as { id: SpiffeId }).id, remote, ip: parseHostPort(remote)?.ip ?? remote, lastStreamId: -1, closedStreams: 0, prematureResets: 0, rapidReset: false, closedBy: undefined };
    (session as TaggedSession)[kState] = state;
    this.sessions.add(session);
    // Accepted just before the drain, authenticated after it: told to go elsewhere at once (GOAWAY).
    if (this.draining) session.close();
    session.on('error', (err: Error & { code?: string }) => this.sessionError(state, err));
    session.once('close', () => this.sessions.delete(session));
    // Streams the HTTP/2 layer reset after the last one the waypoint saw are counted when the
    // session ends, while its state can still be read: before Node closes it with its socket
    // (lib/internal/http2/core.js `socketOnClose`), or destroys it (the other ends).
    const countTail = () => {
      const last = session.destroyed ? undefined : session.state.lastProcStreamID;
      // 0: the client opened no stream.
      if (last !== undefined && last > 0 && last > state.lastStreamId) this.skippedStreams(state, last + 2);
    };
    socket.prependListener('close', countTail);
    const destroy = session.destroy;
    session.destroy = (...args: Parameters<ServerHttp2Session['destroy']>) => {
      countTail();
      destroy.apply(session, args);
    };
    const p = this.opts.http2;
    try {
      session.setLocalWindowSize(p.initialConnectionWindowSize);
    } catch {
      // Session already closing.
    }
    startKeepalive(session, p.keepaliveIntervalMs, p.keepaliveTimeoutMs);
  }

  /**
   * Client stream ids only grow (RFC 9113 §5.1.1): ids skipped before stream `id` are streams Node
   * or nghttp2 reset before the waypoint saw them, malformed ones (RFC 9113 §8.1.1, e.g. a CONNECT
   * with `:path`) or ones over the session's stream limits. Counted (when the client's next stream
   * arrives, or up to the last stream nghttp2 processed when the session ends: nghttp2 exposes no
   * count of its own), logged at debug level and, rate-limited, as a warning.
   */
  private skippedStreams(state: SessionState, id: number): void {
    const skipped = (id - state.lastStreamId - 2) / 2;
    state.lastStreamId = id;
    if (skipped <= 0) return;
    this.stats?.streamsRejected('codec', skipped);
    const fields = { server: this.opts.name, peer: state.peer.uri, remote: state.remote, streams: skipped };
    this.warnings.warn('codec', fields, 'HBONE streams reset by the HTTP/2 layer (malformed, or over the stream limits)');
  }

  /**
   * A stream of an authenticated session closed: count it for Envoy's premature-reset rule
   * (premature-resets.ts), premature when the client dropped it unused within the minimum lifetime.
   */
  private streamClosed(stream: ServerHttp2Stream): void {
    const opened = (stream as TaggedStream)[kOpened];
    if (!opened) return;
    const session = opened.session;
    const state = session[kState]!;
    // Streams closed with their session are no client's resets.
    if (session.destroyed || session.closed || state.closedBy) return;
    const p = this.opts.http2;
    state.closedStreams++;
    if (performance.now() - opened.at < p.prematureResetMinStreamLifetimeMs && dropped(stream, opened.turn)) state.prematureResets++;
    if (state.rapidReset || !tooManyPrematureResets(state.closedStreams, state.prematureResets, p.prematureResetTotalStreamCount)) return;
    state.rapidReset = true;
    this.stats?.rapidReset();
    const msg = 'HBONE client resets most of its streams before using them (rapid reset)';
    // With per-client limits: its stream budget is spent, so its next stream (a flood's next one
    // is already on its way) is refused and closes the session, and its reconnections wait.
    if (this.peerLimits?.throttle(state.ip)) {
      const fields = { server: this.opts.name, peer: state.peer.uri, remote: state.remote, reason: 'premature_resets', streams: state.closedStreams, premature: state.prematureResets };
      return this.warnings.warn('premature_resets', fields, `${msg}; its stream budget is spent`);
    }
    this.closeSession(session, state, 'premature_resets', `${msg}; closing its session (GOAWAY ENHANCE_YOUR_CALM)`);
  }

  /** Close a session that abuses the waypoint: GOAWAY ENHANCE_YOUR_CALM, counted and warned about. */
  private closeSession(session: ServerHttp2Session, state: SessionState, reason: SessionClosure, msg: string): void {
    state.closedBy = reason;
    this.stats?.sessionClosed(reason);
    const fields = { server: this.opts.name, peer: state.peer.uri, remote: state.remote, reason, streams: state.closedStreams, premature: state.prematureResets };
    this.warnings.warn(`session:${reason}`, fields, msg);
    // With an error: `destroy(undefined, code)` sends NO_ERROR (Node's `destroy(error =
    // NGHTTP2_NO_ERROR, code)` takes the defaulted numeric error as the code).
    session.destroy(new Error(`closed: ${reason}`), http2.constants.NGHTTP2_ENHANCE_YOUR_CALM);
  }

  /**
   * A session error: the client went away (debug), or Node/nghttp2 closed the session on a
   * protocol violation or abuse they detect themselves (GOAWAY INTERNAL_ERROR mostly), warned
   * about and counted with the reason (see {@link http2Closure}).
   */
  private sessionError(state: SessionState, err: Error & { code?: string }): void {
    const fields = { server: this.opts.name, peer: state.peer.uri, remote: state.remote, err: err.message, code: err.code };
    if (state.closedBy || !err.code?.startsWith('ERR_HTTP2')) return log.debug(fields, 'HBONE session error');
    const reason = http2Closure(err);
    state.closedBy = reason;
    this.stats?.sessionClosed(reason);
    this.warnings.warn(`session:${reason}`, { ...fields, reason }, 'HBONE session closed by the HTTP/2 layer');
  }

  private onStream(stream: ServerHttp2Stream, headers: IncomingHttpHeaders): void {
    releaseTimerOnClose(stream);
    stream.on('error', this.onStreamError);
    const session = stream.session as TaggedSession | undefined;
    const state = session?.[kState];
    if (!state) {
      stream.close(http2.constants.NGHTTP2_REFUSED_STREAM);
      return;
    }
    this.skippedStreams(state, stream.id!);
    // Every stream counts against the client's budget, also those it reset at once (they cost us too).
    if (this.peerLimits && !this.peerLimits.stream(state.ip)) {
      // Over its stream rate: refused before any CONNECT handling, and the session closed so that
      // a flood stops costing (its new connections are refused for a while, see peer-limits.ts).
      this.stats?.streamsRejected('peer_stream_rate');
      stream.close(http2.constants.NGHTTP2_REFUSED_STREAM);
      this.closeSession(session!, state, 'peer_stream_rate', 'HBONE client over its stream rate; closing its session (GOAWAY ENHANCE_YOUR_CALM)');
      return;
    }
    (stream as TaggedStream)[kOpened] = { session: session!, at: performance.now(), turn: loopTurn() };
    stream.on('close', this.onStreamClose);
    // Tell the client's END_STREAM from a reset from the first frame on: an end that arrives while
    // the protocol is sniffed or the upstream dialed must still reach the upstream (relay.ts).
    watchEndStream(stream);
    // Reset by the client before we got to it (a cancel, or a rapid-reset flood): nothing to do.
    if (stream.closed || stream.destroyed) return;
    if (headers[':method'] !== 'CONNECT') {
      return respondAndClose(stream, 400, 'only CONNECT is supported on the HBONE port');
    }
    const authority = headers[':authority'] ?? '';
    const target = parseHostPort(authority);
    if (!target) return respondAndClose(stream, 400, `invalid :authority "${authority}": expected ip:port or [ipv6]:port`);
    const socket = session!.socket;
    this.opts.onConnect(stream, {
      authority,
      ip: target.ip,
      port: target.port,
      headers,
      peer: state.peer,
      remoteAddress: normalizeIp(socket.remoteAddress ?? '') ?? '',
      remotePort: socket.remotePort ?? 0,
      localAddress: normalizeIp(socket.localAddress ?? '') ?? '',
    });
  }
}

/** `ip:port` of each accepted TCP socket, read at accept time. */
const remoteOf = new WeakMap<Socket, string>();
/** Sockets refused before the TLS handshake. */
const refused = new WeakSet<Socket>();

/** The client `ip:port` of an accepted socket, or of the TLS socket over it (Node keeps that one as `_parent`). */
function remoteOfSocket(socket: Socket): string {
  const parent = (socket as Socket & { _parent?: Socket })._parent;
  return remoteOf.get(socket) ?? (parent ? remoteOf.get(parent) : undefined) ?? socket.remoteAddress ?? '';
}

/** What the server keeps per authenticated session. */
interface SessionState {
  readonly peer: SpiffeId;
  /** The client's `ip:port`, and its IP (the peer-limits key). */
  readonly remote: string;
  readonly ip: string;
  /** Highest client stream id seen so far (-1: none). */
  lastStreamId: number;
  /** Streams closed so far, and those of them closed unanswered early (premature-resets.ts). */
  closedStreams: number;
  prematureResets: number;
  /** Caught resetting most of its streams unused (counted once per session). */
  rapidReset: boolean;
  /** Why the waypoint or the HTTP/2 layer closed the session, once it did. */
  closedBy: SessionClosure | undefined;
}
const kState = Symbol('hbone.session');
type TaggedSession = ServerHttp2Session & { [kState]?: SessionState };
/** When and on which session a stream opened (for the premature-reset rule; Node unsets `stream.session` before 'close'). */
const kOpened = Symbol('hbone.opened');
type TaggedStream = ServerHttp2Stream & { [kOpened]?: { readonly session: TaggedSession; readonly at: number; readonly turn: number } };

/**
 * Why Node or nghttp2 closed a session, from the error they emit: too many streams refused in a
 * row (`http2.maxSessionRejectedStreams`; Node fails nghttp2's callback, src/node_http2.cc
 * `OnBeginHeadersCallback`), too many invalid frames (`maxSessionInvalidFrames`), a flood of frames
 * to acknowledge (nghttp2's `NGHTTP2_ERR_FLOODED`), else another protocol error.
 */
function http2Closure(err: Error & { code?: string }): SessionClosure {
  if (err.code === 'ERR_HTTP2_TOO_MANY_INVALID_FRAMES') return 'invalid_frames';
  if (err.message === 'The user callback function failed') return 'refused_streams';
  if (err.message.startsWith('Flooding was detected')) return 'flood';
  return 'protocol_error';
}

/** Answer a CONNECT with an error status and a short text body, then close the stream. */
export function respondAndClose(stream: ServerHttp2Stream, status: number, body = ''): void {
  if (stream.destroyed || stream.closed) return;
  try {
    if (!stream.headersSent) stream.respond({ ':status': status, 'content-type': 'text/plain' }, { endStream: body === '' });
    if (body !== '') stream.end(body);
  } catch {
    stream.destroy();
  }
}
