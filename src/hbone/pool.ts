/**
 * The HBONE client: a pool of mTLS HTTP/2 connections toward HBONE servers (a destination's
 * ztunnel on `podIP:15008`, or a waypoint), each carrying many CONNECT streams.
 *
 * Follows ztunnel's pool (istio/ztunnel src/proxy/pool.rs, src/proxy/h2/client.rs): connections are keyed by
 * destination address and the identity the server must present; a new connection is opened when
 * every pooled one is at its stream limit (min of ours and the peer's SETTINGS); connections that
 * received GOAWAY or died are never used again; idle ones are released after `idleTimeoutMs`.
 * The server's certificate must chain to the mesh root and carry the expected SPIFFE identity in a
 * URI SAN (Node's hostname check is replaced: SPIFFE certificates have no DNS SAN).
 */
import http2, { type ClientHttp2Session, type ClientHttp2Stream, type IncomingHttpHeaders, type OutgoingHttpHeaders } from 'node:http2';
import net from 'node:net';
import tls, { type TLSSocket } from 'node:tls';
import { WaypointError, log } from '../util/index.ts';
import { svidIdentity } from '../identity/index.ts';
import { formatHostPort } from '../state/index.ts';
import { startKeepalive } from './keepalive.ts';
import { destroySocketWithSession } from './session-socket.ts';
import { releaseTimerOnClose } from './stream-timer-fix.ts';
import { hboneTlsOptions, http2SessionOptions, type Http2Params, type TlsMaterial } from './settings.ts';

/** Where to open a CONNECT and whom to expect there. */
export interface HboneDestination {
  readonly ip: string;
  /** HBONE port (15008 unless configured otherwise). */
  readonly port: number;
  /** SPIFFE URI the server must present; undefined ⇒ any identity of `trustDomain`. */
  readonly identity: string | undefined;
}

/**
 * A CONNECT that did not yield a tunnel. `status` is the non-200 answer (0 when the connection
 * or stream failed before any answer); `reason` is ztunnel-style (`CONNECT`, `TLS_FAILURE`,
 * `IDENTITY_ERROR`, `HTTP_STATUS`, `TIMEOUT`), or `REFUSED_STREAM` / `STALE_CONNECTION` when the
 * one retry {@link HboneSessionPool.connect} makes for those failed too.
 */
export class HboneConnectError extends WaypointError {
  readonly status: number;
  readonly reason: string;
  constructor(reason: string, message: string, status = 0, options?: { cause?: unknown }) {
    super('WP_ERR_HBONE_CONNECT', message, options);
    this.name = 'HboneConnectError';
    this.status = status;
    this.reason = reason;
  }
}

/** Settings of an {@link HboneSessionPool} (times in ms). */
export interface HboneSessionPoolOptions {
  /** Current client certificate (read per new connection, so rotation applies to new ones). */
  material(): TlsMaterial;
  readonly http2: Http2Params;
  /** Trust domain accepted when a destination names no identity. */
  trustDomain(): string;
  /** TCP connect + TLS + HTTP/2 handshake of a new connection. */
  readonly connectTimeoutMs: number;
  /**
   * Wait for the answer to a CONNECT on an established connection (default `connectTimeoutMs`).
   * When it passes, the connection is probed with a PING; unanswered, it is closed.
   */
  readonly connectResponseTimeoutMs?: number;
  readonly idleTimeoutMs: number;
  readonly maxStreamsPerConnection: number;
  /**
   * Spread streams over at least this many connections per destination (default 1: a new stream
   * takes the first connection with room, as ztunnel's pool does). Above 1, up to this many are
   * opened and each new stream takes the least busy one, so that a server running workers
   * (node:cluster balances connections, not streams) gets its load spread.
   */
  readonly connections?: number;
  /** Source address to bind (the `tunnel` role's `--bind`). */
  readonly localAddress?: string;
}

interface PooledSession {
  readonly key: string;
  readonly dst: HboneDestination;
  readonly session: ClientHttp2Session;
  readonly ready: Promise<void>;
  /** The HTTP/2 handshake completed (a stream opened later reuses a live connection). */
  established: boolean;
  active: number;
  usable: boolean;
  /** A CONNECT on it got no answer in time: no new streams until a PING shows the peer alive. */
  suspect: boolean;
  idleTimer: NodeJS.Timeout | undefined;
  /** The TLS handshake completed (our side of it), and the server's first SETTINGS frame arrived. */
  secured: boolean;
  heard: boolean;
}

/** The pooled connection a stream counts against, released when the stream closes. */
const kPooled = Symbol('hbone.pooled');
type PooledStream = ClientHttp2Stream & { [kPooled]?: PooledSession };

/** How long a suspect connection's peer has to answer a PING before the connection is closed (ms). */
const PROBE_TIMEOUT_MS = 1000;

/** Pooled HBONE client connections; see the module comment for the rules it follows. */
export class HboneSessionPool {
  private readonly opts: HboneSessionPoolOptions;
  private readonly pools = new Map<string, PooledSession[]>();
  private closed = false;
  /** The 'close' listener every stream shares (a tunnel may idle for hours: no closure of its own). */
  private readonly onStreamClose: (this: PooledStream) => void;

  constructor(opts: HboneSessionPoolOptions) {
    this.opts = opts;
    const pool = this;
    this.onStreamClose = function (this: PooledStream) {
      const p = this[kPooled];
      if (p) pool.release(p);
    };
  }

  /**
   * Open a CONNECT stream to `authority` through `dst`. Resolves once the server answered 200, with
   * the stream and the response headers (ztunnel's response `baggage` lives there). Rejects with
   * {@link HboneConnectError}. Nothing was sent inside the tunnel before the answer, so a CONNECT
   * that got none may be sent again:
   *  - lost because a pooled connection died under it (a stale connection: the peer vanished or
   *    its IP now belongs to someone who answers RST, istio/ztunnel#1637): retried once, on a fresh connection;
   *  - refused (REFUSED_STREAM, or ENHANCE_YOUR_CALM, Node's refusal of a stream beyond its
   *    SETTINGS_MAX_CONCURRENT_STREAMS: a Node server still counts streams that closed in the same
   *    read until its JavaScript side let go of them, so a client that keeps within the limit can
   *    still be refused in a burst): retried up to {@link REFUSED_RETRIES} times after a short
   *    jittered back-off, by when the server has released its closed streams.
   */
  async connect(
    dst: HboneDestination,
    authority: string,
    headers?: OutgoingHttpHeaders,
  ): Promise<{ stream: ClientHttp2Stream; headers: IncomingHttpHeaders }> {
    let stale = false;
    for (let refused = 0; ; ) {
      try {
        return await this.tryConnect(dst, authority, headers);
      } catch (err) {
        if (!(err instanceof HboneConnectError)) throw err;
        if (err.reason === STALE && !stale) {
          stale = true;
          continue;
        }
        if (err.reason !== 'REFUSED_STREAM' || refused >= REFUSED_RETRIES || this.closed) throw err;
        await new Promise((r) => setTimeout(r, (Math.random() + 0.5) * REFUSED_BACKOFF_MS * 2 ** refused));
        refused++;
      }
    }
  }

  /** Open connections (for tests and `/config_dump`). */
  get connectionCount(): number {
    let n = 0;
    for (const list of this.pools.values()) n += list.length;
    return n;
  }

  /**
   * Drain the connections whose destination `stale` selects (its endpoint left the mesh state):
   * no new stream goes to them, GOAWAY is sent, streams in flight finish, then they close.
   * Returns how many were drained.
   */
  drainWhere(stale: (dst: HboneDestination) => boolean): number {
    let n = 0;
    for (const list of [...this.pools.values()]) {
      for (const p of [...list]) {
        if (!stale(p.dst)) continue;
        this.retire(p);
        p.session.close();
        n++;
      }
    }
    return n;
  }

  /** GOAWAY every connection; streams in flight finish. No new connections afterwards. */
  close(): void {
    this.closed = true;
    for (const list of this.pools.values()) for (const p of list) p.session.close();
    this.pools.clear();
  }

  /** Tear everything down now. */
  destroy(): void {
    this.closed = true;
    for (const list of this.pools.values()) for (const p of list) p.session.destroy();
    this.pools.clear();
  }

  private async tryConnect(dst: HboneDestination, authority: string, headers?: OutgoingHttpHeaders) {
    if (this.closed) throw new HboneConnectError('CONNECT', 'HBONE pool is closed');
    const pooled = this.acquire(dst);
    pooled.active++;
    if (pooled.idleTimer) {
      clearTimeout(pooled.idleTimer);
      pooled.idleTimer = undefined;
    }
    let stream: ClientHttp2Stream | undefined;
    const reused = pooled.established;
    try {
      await pooled.ready;
      stream = releaseTimerOnClose(pooled.session.request({ ...headers, ':method': 'CONNECT', ':authority': authority }, { endStream: false }));
    } catch (err) {
      this.release(pooled);
      if (err instanceof HboneConnectError) throw refusedAfterHandshake(pooled, err);
      throw new HboneConnectError('CONNECT', `HBONE request to ${formatHostPort(dst.ip, dst.port)} failed: ${(err as Error).message}`, 0, { cause: err });
    }
    (stream as PooledStream)[kPooled] = pooled;
    stream.on('close', this.onStreamClose);
    try {
      const timeoutMs = this.opts.connectResponseTimeoutMs ?? this.opts.connectTimeoutMs;
      return await awaitResponse(stream, `${formatHostPort(dst.ip, dst.port)} (${authority})`, timeoutMs, () => this.probe(pooled, timeoutMs));
    } catch (err) {
      // The pooled connection died under a stream that got no answer: it was stale.
      const s = pooled.session;
      if (reused && err instanceof HboneConnectError && err.reason === 'CONNECT' && (s.destroyed || s.closed || !pooled.usable)) {
        this.retire(pooled);
        throw new HboneConnectError(STALE, err.message, 0, { cause: err });
      }
      throw err instanceof HboneConnectError ? refusedAfterHandshake(pooled, err) : err;
    }
  }

  private acquire(dst: HboneDestination): PooledSession {
    const key = `${dst.ip}|${dst.port}|${dst.identity ?? ''}`;
    let list = this.pools.get(key);
    const spread = this.opts.connections ?? 1;
    if (list && (spread <= 1 || list.length >= spread)) {
      let best: PooledSession | undefined;
      for (const p of list) {
        if (!p.usable || p.suspect) continue;
        const peerMax = p.session.remoteSettings?.maxConcurrentStreams ?? this.opts.maxStreamsPerConnection;
        if (p.active >= Math.min(peerMax, this.opts.maxStreamsPerConnection)) continue;
        if (spread <= 1) return p;
        if (!best || p.active < best.active) best = p;
      }
      if (best) return best;
    } else if (!list) {
      list = [];
      this.pools.set(key, list);
    }
    const p = this.open(key, dst);
    list.push(p);
    return p;
  }

  /**
   * A CONNECT on `p` got no answer: a destination that stopped (a frozen process, a dead host whose
   * connection the kernel still holds) answers nothing, not even PING, and would make every stream
   * on the connection wait out its own timeout until keepalive noticed. New streams avoid it while
   * a PING checks the peer; unanswered within {@link PROBE_TIMEOUT_MS}, the connection is closed and
   * the CONNECTs waiting on it fail at once (connect failures, which the router retries elsewhere).
   */
  private probe(p: PooledSession, timeoutMs: number): void {
    if (p.suspect || !p.usable || p.session.destroyed) return;
    p.suspect = true;
    const where = formatHostPort(p.dst.ip, p.dst.port);
    const timer = setTimeout(() => {
      log.warn({ dst: where, timeoutMs }, 'HBONE connection unresponsive (no CONNECT answer, no PING answer); closing it');
      this.retire(p);
      p.session.destroy(new Error(`HBONE connection to ${where} unresponsive`));
    }, Math.min(PROBE_TIMEOUT_MS, timeoutMs)).unref();
    try {
      p.session.ping((err) => {
        if (err) return;
        clearTimeout(timer);
        p.suspect = false;
      });
    } catch {
      // Closing already (or too many PINGs outstanding): the timer decides.
    }
  }

  private release(p: PooledSession): void {
    p.active--;
    if (p.active === 0 && p.usable && this.opts.idleTimeoutMs > 0) {
      p.idleTimer = setTimeout(() => {
        this.retire(p);
        p.session.close();
      }, this.opts.idleTimeoutMs).unref();
    }
  }

  private retire(p: PooledSession): void {
    p.usable = false;
    if (p.idleTimer) clearTimeout(p.idleTimer);
    const list = this.pools.get(p.key);
    if (!list) return;
    const i = list.indexOf(p);
    if (i >= 0) list.splice(i, 1);
    if (list.length === 0) this.pools.delete(p.key);
  }

  private open(key: string, dst: HboneDestination): PooledSession {
    const where = formatHostPort(dst.ip, dst.port);
    const trustDomain = this.opts.trustDomain();
    const tcp = net.connect({ host: dst.ip, port: dst.port, localAddress: this.opts.localAddress, noDelay: true });
    const socket = tls.connect({
      socket: tcp,
      ...hboneTlsOptions(this.opts.material()),
      rejectUnauthorized: true,
      // SPIFFE certificates carry no DNS name: identity is checked below instead.
      checkServerIdentity: () => undefined,
    });
    const session = http2.connect(`https://${where}`, {
      createConnection: () => socket,
      ...http2SessionOptions(this.opts.http2, false),
    });
    destroySocketWithSession(session, socket);
    const pooled: PooledSession = { key, dst, session, ready: undefined as unknown as Promise<void>, established: false, active: 0, usable: true, suspect: false, idleTimer: undefined, secured: false, heard: false };
    session.once('remoteSettings', () => (pooled.heard = true));
    (pooled as { ready: Promise<void> }).ready = new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => {
        session.destroy();
        reject(new HboneConnectError('TIMEOUT', `HBONE connect to ${where} timed out after ${this.opts.connectTimeoutMs} ms`));
      }, this.opts.connectTimeoutMs);
      socket.once('secureConnect', () => {
        pooled.secured = true;
        // Exactly one URI SAN (SPIFFE X509-SVID §2), equal to the expected identity (ztunnel's IdentityVerifier).
        const svid = svidIdentity((socket as TLSSocket).getPeerX509Certificate());
        const ok = 'id' in svid && (dst.identity ? svid.id.uri === dst.identity : svid.id.trustDomain === trustDomain);
        if (!ok) {
          clearTimeout(timer);
          const want = dst.identity ?? `an identity of trust domain ${trustDomain}`;
          const got = 'id' in svid ? svid.id.uri : `no SPIFFE identity (${svid.problem})`;
          const err = new HboneConnectError('IDENTITY_ERROR', `HBONE server ${where} presented ${got}, expected ${want}`);
          reject(err);
          session.destroy();
        }
      });
      session.once('connect', () => {
        clearTimeout(timer);
        pooled.established = true;
        try {
          session.setLocalWindowSize(this.opts.http2.initialConnectionWindowSize);
        } catch {
          // closing
        }
        resolve();
      });
      session.once('error', (err) => {
        clearTimeout(timer);
        reject(new HboneConnectError(isTlsError(err) ? 'TLS_FAILURE' : 'CONNECT', `HBONE connect to ${where} failed: ${err.message}`, 0, { cause: err }));
      });
      session.once('close', () => {
        clearTimeout(timer);
        reject(new HboneConnectError('CONNECT', `HBONE connection to ${where} closed`));
      });
    });
    pooled.ready.catch(() => this.retire(pooled));
    session.on('error', (err) => log.debug({ err: err.message, dst: where }, 'HBONE client session error'));
    session.on('goaway', () => this.retire(pooled));
    session.once('close', () => this.retire(pooled));
    session.unref();
    session.socket?.unref?.();
    startKeepalive(session, this.opts.http2.keepaliveIntervalMs, this.opts.http2.keepaliveTimeoutMs);
    return pooled;
  }
}

/** Reason of a CONNECT lost with its pooled connection before any answer (retried once). */
const STALE = 'STALE_CONNECTION';

/** Retries of a refused CONNECT, and the back-off base (ms) doubling between them (see HboneSessionPool.connect). */
const REFUSED_RETRIES = 5;
const REFUSED_BACKOFF_MS = 5;

/**
 * A server that refuses our client certificate under TLS 1.3 does so after our side of the
 * handshake is done (RFC 8446 §4.4.2: the client's certificate is verified last), and Node's TLS
 * server then closes the connection without an alert (lib/_tls_wrap.js `onServerSocketSecure`): the
 * client sees only a closed connection and its CONNECT a closed stream. A connection closed after
 * the TLS handshake before the server's first HTTP/2 SETTINGS is reported as that.
 */
function refusedAfterHandshake(p: PooledSession, err: HboneConnectError): HboneConnectError {
  if (err.reason !== 'CONNECT' || !p.secured || p.heard || !(p.session.destroyed || p.session.closed)) return err;
  const where = formatHostPort(p.dst.ip, p.dst.port);
  return new HboneConnectError('TLS_FAILURE', `${err.message}: HBONE server ${where} closed the connection after the TLS handshake without an HTTP/2 SETTINGS frame, as a server does when it does not accept the client certificate (is it issued by a CA the server trusts?)`, 0, { cause: err });
}

function isTlsError(err: Error & { code?: string }): boolean {
  return typeof err.code === 'string' && (err.code.startsWith('ERR_SSL') || err.code.includes('CERT') || err.code === 'ERR_TLS_CERT_ALTNAME_INVALID');
}

/** A tunnel's stream error (shared by all tunnels: the closure above would keep this whole scope per tunnel). */
function onTunnelError(this: ClientHttp2Stream, err: Error): void {
  log.debug({ err: err.message, authority: this.sentHeaders?.[':authority'] }, 'HBONE tunnel stream error');
}

/** Wait for the CONNECT answer: 200 ⇒ the tunnel; anything else ⇒ HboneConnectError. `onTimeout` runs when none came in time. */
function awaitResponse(stream: ClientHttp2Stream, where: string, timeoutMs: number, onTimeout: () => void): Promise<{ stream: ClientHttp2Stream; headers: IncomingHttpHeaders }> {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      stream.close(http2.constants.NGHTTP2_CANCEL);
      reject(new HboneConnectError('TIMEOUT', `no answer to CONNECT ${where} within ${timeoutMs} ms`));
      onTimeout();
    }, timeoutMs);
    const onError = (err: Error & { code?: string }) => {
      clearTimeout(timer);
      // Node's server refuses a stream over its concurrency limit with ENHANCE_YOUR_CALM (node_http2.cc `OnBeginHeadersCallback`).
      const refused = stream.rstCode === http2.constants.NGHTTP2_REFUSED_STREAM || stream.rstCode === http2.constants.NGHTTP2_ENHANCE_YOUR_CALM;
      reject(new HboneConnectError(refused ? 'REFUSED_STREAM' : 'CONNECT', `CONNECT ${where} failed: ${err.message}`, 0, { cause: err }));
    };
    const onClose = () => onError(new Error(`stream closed (code ${stream.rstCode})`));
    stream.once('error', onError);
    stream.once('close', onClose);
    stream.once('response', (headers) => {
      clearTimeout(timer);
      stream.off('error', onError);
      stream.off('close', onClose);
      const status = Number(headers[':status']);
      if (status === 200) {
        stream.on('error', onTunnelError);
        resolve({ stream, headers });
      } else {
        stream.on('error', () => {});
        stream.close(http2.constants.NGHTTP2_CANCEL);
        reject(new HboneConnectError('HTTP_STATUS', `CONNECT ${where} answered ${status}`, status));
      }
    });
  });
}
