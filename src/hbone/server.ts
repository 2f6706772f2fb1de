/**
 * The HBONE server: mutual TLS 1.3 (ALPN `h2`, client certificate required and chained to the
 * mesh root), HTTP/2 with only `CONNECT` accepted. Used by the waypoint listener and by the
 * `waypoint inbound` role. It parses the CONNECT and hands the stream on; what to do with the
 * target is the caller's job.
 *
 * Behaviour follows ztunnel's inbound (ZT:src/proxy/inbound.rs): a method other than CONNECT or an
 * unparsable `:authority` is answered 400. Only a `stream` listener is registered — never a
 * `request` listener or `allowHTTP1` — so Node's compatibility layer cannot answer CONNECT with 405
 * (pitfall A1, nodejs/node#36977).
 */
import http2, { type Http2SecureServer, type IncomingHttpHeaders, type ServerHttp2Session, type ServerHttp2Stream } from 'node:http2';
import type { AddressInfo, Socket } from 'node:net';
import type { TLSSocket } from 'node:tls';
import { peerSpiffeId, type SpiffeId } from '../identity/index.ts';
import { normalizeIp, parseHostPort } from '../state/index.ts';
import { listenOn, log } from '../util/index.ts';
import { startKeepalive } from './keepalive.ts';
import { hboneTlsOptions, http2Settings, type Http2Params, type TlsMaterial } from './settings.ts';

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
  /** Decide whether a client identity may connect. Return a reason to refuse, undefined to accept. */
  verifyPeer(peer: SpiffeId | undefined): string | undefined;
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

  constructor(opts: HboneServerOptions) {
    this.opts = opts;
    const p = opts.http2;
    this.server = http2.createSecureServer({
      ...hboneTlsOptions(opts.material),
      requestCert: true,
      rejectUnauthorized: true,
      settings: http2Settings(p, true),
      maxSessionMemory: p.maxSessionMemoryMb,
      peerMaxConcurrentStreams: p.maxConcurrentStreams,
      // TCP_NODELAY as ztunnel sets it: frames are written whole, Nagle would only add latency.
      noDelay: true,
    });
    this.server.on('connection', (socket: Socket) => {
      this.sockets.add(socket);
      socket.once('close', () => this.sockets.delete(socket));
    });
    this.server.on('session', (session) => this.onSession(session));
    this.server.on('stream', (stream, headers) => this.onStream(stream, headers));
    this.server.on('tlsClientError', (err: Error, socket: TLSSocket) => {
      log.debug({ err: err.message, remote: socket.remoteAddress, server: opts.name }, 'HBONE TLS handshake failed');
    });
    this.server.on('sessionError', (err) => log.debug({ err: err.message, server: opts.name }, 'HBONE session error'));
  }

  /** Listen on `ip:port` / `[v6]:port`; resolves with the bound address. Rejects on EADDRINUSE etc. */
  listen(hostPort: string): Promise<AddressInfo> {
    return listenOn(this.server, hostPort);
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
   * and destroy what is left after `timeoutMs`. Resolves when every session is gone.
   */
  async drain(timeoutMs: number): Promise<void> {
    const closed = new Promise<void>((r) => this.server.close(() => r()));
    for (const s of this.sessions) s.close();
    if (this.sessions.size === 0 && this.sockets.size === 0) return closed;
    const timer = setTimeout(() => {
      for (const s of this.sessions) s.destroy();
      for (const s of this.sockets) s.destroy();
    }, timeoutMs);
    await closed;
    clearTimeout(timer);
  }

  private onSession(session: ServerHttp2Session): void {
    const socket = session.socket as TLSSocket;
    const peer = peerSpiffeId(socket.getPeerX509Certificate());
    const refusal = this.opts.verifyPeer(peer);
    if (refusal) {
      log.warn({ server: this.opts.name, remote: socket.remoteAddress, peer: peer?.uri, reason: refusal }, 'HBONE client refused');
      session.destroy();
      socket.destroy();
      return;
    }
    (session as SessionWithPeer)[kPeer] = peer!;
    this.sessions.add(session);
    session.on('error', (err) => log.debug({ err: err.message, server: this.opts.name }, 'HBONE session error'));
    session.once('close', () => this.sessions.delete(session));
    const p = this.opts.http2;
    try {
      session.setLocalWindowSize(p.initialConnectionWindowSize);
    } catch {
      // Session already closing.
    }
    startKeepalive(session, p.keepaliveIntervalMs, p.keepaliveTimeoutMs);
  }

  private onStream(stream: ServerHttp2Stream, headers: IncomingHttpHeaders): void {
    stream.on('error', (err) => log.debug({ err: err.message, server: this.opts.name }, 'HBONE stream error'));
    const session = stream.session as SessionWithPeer | undefined;
    const peer = session?.[kPeer];
    if (!peer) {
      stream.close(http2.constants.NGHTTP2_REFUSED_STREAM);
      return;
    }
    if (headers[':method'] !== 'CONNECT') {
      return respondAndClose(stream, 400, 'only CONNECT is supported on the HBONE port');
    }
    const authority = headers[':authority'] ?? '';
    const target = parseHostPort(authority);
    if (!target) return respondAndClose(stream, 400, `invalid :authority "${authority}": expected ip:port or [ipv6]:port`);
    const socket = session.socket;
    this.opts.onConnect(stream, {
      authority,
      ip: target.ip,
      port: target.port,
      headers,
      peer,
      remoteAddress: normalizeIp(socket.remoteAddress ?? '') ?? '',
      remotePort: socket.remotePort ?? 0,
      localAddress: normalizeIp(socket.localAddress ?? '') ?? '',
    });
  }
}

const kPeer = Symbol('hbone.peer');
type SessionWithPeer = ServerHttp2Session & { [kPeer]?: SpiffeId };

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
