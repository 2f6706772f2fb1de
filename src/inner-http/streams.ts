/** Closing the streams the inner HTTP servers run on (their idle timers: hbone/stream-timer-fix.ts). */
import http2 from 'node:http2';
import type { Duplex } from 'node:stream';

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
