/**
 * The HTTP/1.x server that runs inside HBONE tunnels. One `http.Server` (never listening) is fed
 * each CONNECT stream through its `connection` event; every request on it becomes a
 * {@link StreamContext} and runs the filter chain the tunnel captured, then the router.
 *
 * Node corrupts corked string writes onto an Http2Stream (hbone/writev-fix.ts), so every stream
 * handed to the server gets the `_writev` fix first.
 */
import http, { type IncomingMessage, type ServerResponse } from 'node:http';
import type { Duplex } from 'node:stream';
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
}

const kTunnel = Symbol('waypoint.tunnel');
interface TunnelRef {
  readonly conn: ConnectionContext;
  readonly chain: FilterChain;
  readonly owner: InnerHttpServer;
  readonly stream: Duplex;
  /** Requests in flight on this tunnel. */
  active: number;
  /** The request being answered (HTTP/1.1 answers in order), for the idle timeout's 408. */
  current: StreamContext | undefined;
}
type TaggedSocket = Duplex & { [kTunnel]?: TunnelRef };

/** Serves HTTP/1.x on tunnels handed to {@link InnerHttpServer.attach}; one instance per waypoint. */
export class InnerHttpServer {
  private readonly server: http.Server;
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
      },
      onRequest,
    );
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
  }

  /** Serve HTTP on a tunnel that has already been answered 200. */
  attach(stream: Duplex, conn: ConnectionContext, chain: FilterChain): void {
    const ref: TunnelRef = { conn, chain, owner: this, stream, active: 0, current: undefined };
    (stream as TaggedSocket)[kTunnel] = ref;
    this.tunnels.add(ref);
    stream.once('close', () => this.tunnels.delete(ref));
    // RST_STREAM from the client while a response is back-pressured leaves the Http2Stream open
    // (it waits for writes that will never drain): destroy it so the request is cancelled.
    stream.once('aborted', () => stream.destroy());
    this.server.emit('connection', joinWritev(stream));
  }

  /**
   * Graceful drain of HTTP tunnels: idle ones are ended now (END_STREAM, the client sees a clean
   * close), busy ones after their current response, which goes out with `Connection: close`.
   */
  drain(): void {
    this.draining = true;
    for (const t of this.tunnels) if (t.active === 0) t.stream.end();
  }
}

function onRequest(req: IncomingMessage, res: ServerResponse): void {
  const ref = (req.socket as TaggedSocket)[kTunnel]!;
  const stream = new StreamContext(ref.conn, ref.chain, req, res);
  ref.conn.requestCount++;
  ref.active++;
  ref.current ??= stream;
  if (ref.owner.draining) res.shouldKeepAlive = false;
  res.once('close', () => onResponseClose(stream, ref));
  let result: PhaseResult;
  try {
    result = ref.chain.runRequestHeaders(stream);
  } catch (err) {
    return filterFailed(stream, err);
  }
  if (typeof result === 'number') {
    if (result === FilterStatus.Continue) ref.chain.terminal.forward(stream);
    return;
  }
  result.then(
    (status) => {
      if (status === FilterStatus.Continue && !res.destroyed) ref.chain.terminal.forward(stream);
    },
    (err) => filterFailed(stream, err),
  );
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
  s.res.shouldKeepAlive = false;
  s.sendLocalReply(undefined, undefined, ResponseFlag.StreamIdleTimeout, 'stream_idle_timeout');
  s.abortUpstream?.cancel();
}

function onResponseClose(stream: StreamContext, ref: TunnelRef): void {
  if (ref.current === stream) ref.current = undefined;
  if (--ref.active === 0 && ref.owner.draining) ref.stream.end();
  if (!stream.res.writableFinished) {
    if (stream.responseFlags === ResponseFlag.None) stream.addFlag(ResponseFlag.DownstreamConnectionTermination);
    stream.abortUpstream?.cancel();
  }
  stream.chain.completeStream(stream);
}

function filterFailed(stream: StreamContext, err: unknown): void {
  log.error({ err }, 'filter failed; answering 500');
  stream.sendLocalReply(500, 'internal error in filter chain', ResponseFlag.None, 'filter_chain_failed');
}
