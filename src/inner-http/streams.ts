/** Closing the streams the inner HTTP servers run on (their idle timers: hbone/stream-timer-fix.ts), and an HTTP/1 tunnel the client half-closed. */
import http2 from 'node:http2';
import type { Duplex } from 'node:stream';
import type { StreamContext } from '../pipeline/index.ts';

/**
 * Close an HTTP/1 tunnel as a server closes its connection: END_STREAM after the last bytes, then
 * RST_STREAM(NO_ERROR) so the peer stops sending (RFC 9113 §8.1) and the stream is released even
 * when the client keeps its side open.
 */
export function closeTunnel(tunnel: Duplex): void {
  const close = () => {
    const h2 = tunnel as Duplex & { close?: (code?: number) => void };
    if (typeof h2.close === 'function') h2.close(http2.constants.NGHTTP2_NO_ERROR);
    else tunnel.destroy();
  };
  if (tunnel.writableFinished || tunnel.destroyed) return close();
  tunnel.once('finish', close);
  tunnel.end();
}

/** {@link closeTunnel} as a method of the tunnel (one function for every tunnel: its `destroySoon`). */
export function closeThisTunnel(this: Duplex): void {
  closeTunnel(this);
}

/** `destroy()` as a listener shared by every tunnel. */
export function destroyThis(this: Duplex): void {
  this.destroy();
}

/** Queued bytes of a finished answer still delivered to a client that half-closed (one h2 window). */
const DELIVER_AFTER_FIN_BYTES = 65_535;

/** What {@link onTunnelEnd} reads of an HTTP/1 tunnel. */
export interface Http1TunnelState {
  readonly stream: Duplex;
  /** Requests in flight. */
  readonly active: number;
  /** The last request received, and whether it asked to keep the connection. */
  readonly last: StreamContext | undefined;
  readonly lastKeepAlive: boolean;
}

/**
 * The client ended its side of an HTTP/1 tunnel (FIN through the source ztunnel, END_STREAM on the
 * CONNECT stream) while a request is unanswered. After a request that asked to keep the
 * connection (HTTP/1.1 without `Connection: close`), that is a client that went away (`curl -m`,
 * a killed process): as Envoy's HTTP connection manager, which treats a downstream FIN as a
 * disconnect (flag `DC`, details `downstream_remote_disconnect`), the tunnel is closed (END_STREAM
 * then RST_STREAM(NO_ERROR), as for any closed connection: a lone RST_STREAM(CANCEL) after the
 * client's END_STREAM left the source side open until shutdown), which cancels the upstream
 * request and any retry. After `Connection: close` (or an HTTP/1.0 request without keep-alive)
 * the client half-closed on purpose and still gets its answer (envoyproxy/envoy#2066).
 */
export function onTunnelEnd(ref: Http1TunnelState): void {
  const s = ref.last;
  if (ref.active === 0 || !s || !ref.lastKeepAlive || s.res.writableFinished) return;
  // A whole answer with little left to flush (a local reply such as a 400) is still delivered:
  // the client may have half-closed right after its request (RFC 9112 §9.6 lets it).
  if (s.res.writableEnded && ref.stream.writableLength <= DELIVER_AFTER_FIN_BYTES) return;
  // Response bytes still queued toward a client that left will never be read, so END_STREAM
  // would wait behind them (with the upstream's unread response) until the stream idle timeout:
  // reset the tunnel now (Node sends RST_STREAM(NO_ERROR), which ends the source's side as well).
  if (ref.stream.writableLength > 0) ref.stream.destroy();
  else closeTunnel(ref.stream);
}
