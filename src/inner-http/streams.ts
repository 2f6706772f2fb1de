/**
 * Closing and releasing the streams the inner HTTP servers run on: the CONNECT streams (tunnels),
 * the h2c sessions inside them and their request streams.
 *
 * Node never clears the inactivity timer of an HTTP/2 stream or session destroyed while open:
 * their destroy paths call `setTimeout(0)` only after marking them destroyed, and
 * `setStreamTimeout` ignores a destroyed target (Node 24 lib/internal/http2/core.js
 * `Http2Stream._destroy`, `closeSession`; lib/internal/stream_base_commons.js `setStreamTimeout`;
 * only a stream that closes before it is destroyed, `closeStream`, gets its timer cleared). The
 * armed timer keeps the object and all it references (queued response bytes, the request and its
 * upstream side) alive until it fires: the stream idle timeout (5 min) or the h2c idle timeout
 * (1 h). {@link clearTimerOnDestroy} closes that gap for `destroy()`; an h2c session whose
 * socket (the tunnel) closes is destroyed without it (`socketOnClose` calls `closeSession`), so the
 * tunnel's own close listener clears the session's timer first ({@link clearIdleTimer}).
 */
import http2 from 'node:http2';
import type { Duplex } from 'node:stream';

interface Timed {
  readonly destroyed: boolean;
  destroy(...args: unknown[]): unknown;
  setTimeout?(ms: number): unknown;
}

/**
 * Make `t.destroy()` clear its inactivity timer first, whoever calls it (us or Node's HTTP
 * servers). `t` is an Http2Stream, an Http2Session or a socket; anything without `setTimeout` is
 * returned as is.
 */
export function clearTimerOnDestroy<T extends object>(t: T): T {
  const o = t as unknown as Timed;
  if (typeof o.setTimeout !== 'function') return t;
  const destroy = o.destroy;
  o.destroy = function destroyClearingTimer(this: Timed, ...args: unknown[]) {
    if (!this.destroyed) this.setTimeout!(0);
    return destroy.apply(this, args);
  };
  return t;
}

/** Clear the inactivity timer of `t` now, unless it is already destroyed (then it is too late: see above). */
export function clearIdleTimer(t: { readonly destroyed: boolean; setTimeout(ms: number): unknown } | undefined): void {
  if (t !== undefined && !t.destroyed) t.setTimeout(0);
}

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
