/**
 * Relay bytes between two duplex streams (an HBONE CONNECT stream and a TCP socket or another
 * CONNECT stream), as ztunnel's copy loop does (ZT:src/copy.rs): each direction is piped with
 * back-pressure; the end of one direction is forwarded as a half-close (FIN / END_STREAM) while
 * the other keeps flowing (pitfall B1: the remaining direction is drained, never cut); an error
 * or reset on either side tears both down. Returns a promise that settles when both are closed,
 * with the byte counts.
 */
import http2 from 'node:http2';
import { finished, type Duplex } from 'node:stream';

/** Outcome of {@link relay}: byte counts (bytes) and the first error, if any. */
export interface RelayResult {
  /** Bytes read from `downstream` and written upstream. */
  readonly bytesReceived: number;
  /** Bytes read from `upstream` and written downstream. */
  readonly bytesSent: number;
  /** First error seen on either side, if any. */
  readonly error: Error | undefined;
}

/** Live byte counters a relay adds to as bytes move (bytes). */
export interface RelayMeter {
  bytesReceived: number;
  bytesSent: number;
}

/**
 * Relay until both sides are closed; never rejects (errors are reported in the result).
 * `meter`, when given, is updated as bytes move (periodic TCP stats read it mid-connection).
 */
export function relay(downstream: Duplex, upstream: Duplex, meter?: RelayMeter): Promise<RelayResult> {
  let bytesReceived = 0;
  let bytesSent = 0;
  let error: Error | undefined;
  downstream.on('data', (c: Buffer) => {
    bytesReceived += c.length;
    if (meter) meter.bytesReceived += c.length;
  });
  upstream.on('data', (c: Buffer) => {
    bytesSent += c.length;
    if (meter) meter.bytesSent += c.length;
  });
  downstream.pipe(upstream);
  upstream.pipe(downstream);
  const fail = (err: Error | null | undefined) => {
    if (!err) return;
    error ??= err;
    teardown(downstream);
    teardown(upstream);
  };
  // A peer's RST_STREAM while our writes are back-pressured never ends the Http2Stream by itself
  // (Node keeps it open for the pending writes): treat it as an error so both sides are released.
  downstream.once('aborted', () => fail(new Error('stream aborted by the peer')));
  upstream.once('aborted', () => fail(new Error('stream aborted by the peer')));
  return new Promise((resolve) => {
    let open = 2;
    const done = (err?: Error | null) => {
      fail(err);
      if (--open === 0) resolve({ bytesReceived, bytesSent, error });
    };
    finished(downstream, done);
    finished(upstream, done);
  });
}

/** Close one side now: an HTTP/2 stream with RST_STREAM(CANCEL), a socket by destroying it. */
export function teardown(s: Duplex): void {
  const h2 = s as Duplex & { close?: (code: number) => void; rstCode?: number };
  if (typeof h2.close === 'function' && 'rstCode' in h2) {
    if (!h2.destroyed) h2.close(http2.constants.NGHTTP2_CANCEL);
    return;
  }
  s.destroy();
}
