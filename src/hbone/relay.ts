/**
 * Relay bytes between two duplex streams (an HBONE CONNECT stream and a TCP socket or another
 * CONNECT stream), as ztunnel's copy loop does (istio/ztunnel src/copy.rs): each direction is piped with
 * back-pressure; the end of one direction (END_STREAM / FIN) is forwarded as a half-close while
 * the other keeps flowing (the remaining direction is drained, never cut: istio/ztunnel#1065).
 *
 * A side cut before its end (RST_STREAM of any code, NO_ERROR included; a TCP reset; its
 * connection lost) is never passed on as an end: the other side is reset too (RST_STREAM(CANCEL),
 * or a TCP RST, as Envoy's tcp_proxy propagates an upstream reset: envoyproxy/envoy source/common/tcp_proxy/
 * tcp_proxy.cc `onUpstreamEvent`). A peer that sends END_STREAM and then RST_STREAM(NO_ERROR) only
 * asks us to stop sending (RFC 9113 §8.1): everything it sent is delivered, then the end.
 */
import http2, { type Http2Stream } from 'node:http2';
import net from 'node:net';
import tls from 'node:tls';
import type { Duplex } from 'node:stream';
import { endStreamReceived, resetStream, watchEndStream } from './stream-end.ts';

/** Outcome of {@link relay}: byte counts (bytes), the first error and which side was cut first. */
export interface RelayResult {
  /** Bytes read from `downstream` and written upstream. */
  readonly bytesReceived: number;
  /** Bytes read from `upstream` and written downstream. */
  readonly bytesSent: number;
  /** First error seen on either side, if any. */
  readonly error: Error | undefined;
  /** The side whose peer cut it first (a reset, or its connection lost, before its end), if any. */
  readonly reset: 'downstream' | 'upstream' | undefined;
}

/** Live byte counters a relay adds to as bytes move (bytes). */
export interface RelayMeter {
  bytesReceived: number;
  bytesSent: number;
}

/** One side of a relay. */
export type Side = 'downstream' | 'upstream';

/**
 * Relay until both sides are closed; never rejects (errors are reported in the result).
 * `meter`, when given, is updated as bytes move (periodic TCP stats read it mid-connection).
 * `onReset` learns which side's peer cut it first, before the other side is reset (so before
 * either side closes).
 */
export function relay(downstream: Duplex, upstream: Duplex, meter?: RelayMeter, onReset?: (side: Side) => void): Promise<RelayResult> {
  let bytesReceived = 0;
  let bytesSent = 0;
  let error: Error | undefined;
  let reset: Side | undefined;
  let over = false;
  /** A side whose peer asked us to stop sending to it (END_STREAM, then RST_STREAM(NO_ERROR)). */
  let stopped: Side | undefined;
  downstream.on('data', (c: Buffer) => {
    if (stopped === 'upstream') return;
    bytesReceived += c.length;
    if (meter) meter.bytesReceived += c.length;
  });
  upstream.on('data', (c: Buffer) => {
    if (stopped === 'downstream') return;
    bytesSent += c.length;
    if (meter) meter.bytesSent += c.length;
  });
  // Ends are forwarded below, once known to be ends and not resets.
  downstream.pipe(upstream, { end: false });
  upstream.pipe(downstream, { end: false });

  /** Tear both sides down; `side`: the side whose peer cut it (a reset), if that is the cause. */
  const abort = (err: Error, side: Side | undefined) => {
    if (over) return;
    over = true;
    error ??= err;
    reset ??= side;
    if (side) onReset?.(side);
    cut(downstream);
    cut(upstream);
  };

  const follow = (s: Duplex, side: Side, other: Duplex) => {
    s.on('error', (err: Error) => abort(err, side));
    if (isHttp2(s)) {
      watchEndStream(s, (r) => abort(new Error(`${side} stream ${r.connectionLost ? 'lost with its connection' : `reset (code ${r.code})`} before its end`), side));
      // RST_STREAM(NO_ERROR) after END_STREAM while we still send: stop sending, deliver the rest.
      s.once('aborted', () => {
        if (!over && endStreamReceived(s) && s.rstCode === http2.constants.NGHTTP2_NO_ERROR) stopSending(s, side, other);
      });
    }
    const ended = () => {
      if (over) return;
      if (isHttp2(s) && !endStreamReceived(s)) return; // a reset: the watch aborts
      if (stopped !== otherSide(side)) other.end();
      // A stopped side takes nothing more: release it (writes still queued to it would hold it open).
      if (stopped === side) s.destroy();
    };
    // A side that ended before the relay began (a client's END_STREAM or FIN that came while the
    // protocol was sniffed or the upstream dialed) is forwarded now; its 'end' will not come again.
    if (s.readableEnded) ended();
    else s.once('end', ended);
    s.once('close', () => {
      // Destroyed by someone else (e.g. the tunnel was terminated) before both ends: abort.
      if (!over && !s.readableEnded) abort(new Error(`${side} closed before its end`), undefined);
    });
  };

  const stopSending = (s: Http2Stream & Duplex, side: Side, other: Duplex) => {
    stopped = side;
    // What the other side still sends has nowhere to go: drop it. An HTTP/2 peer is asked to stop
    // the same way, once all we relayed to it and our END_STREAM went out ('finish'; Node then
    // sends RST_STREAM(NO_ERROR) after it); a socket is read until its client closes.
    other.unpipe(s);
    other.resume();
    if (isHttp2(other)) {
      const stop = () => other.close(http2.constants.NGHTTP2_NO_ERROR);
      if (other.writableFinished) stop();
      else other.once('finish', stop);
    }
    if (s.readableEnded) s.destroy();
  };

  follow(downstream, 'downstream', upstream);
  follow(upstream, 'upstream', downstream);
  return new Promise((resolve) => {
    let open = 2;
    const closed = () => {
      if (--open === 0) resolve({ bytesReceived, bytesSent, error, reset });
    };
    for (const s of [downstream, upstream]) {
      if (s.closed) closed();
      else s.once('close', closed);
    }
  });
}

function otherSide(side: Side): Side {
  return side === 'downstream' ? 'upstream' : 'downstream';
}

function isHttp2(s: Duplex): s is Duplex & Http2Stream {
  const h2 = s as Duplex & { close?: unknown };
  return typeof h2.close === 'function' && 'rstCode' in h2;
}

/** Reset one side: an HTTP/2 stream with RST_STREAM(CANCEL), a TCP socket with a TCP RST. */
function cut(s: Duplex): void {
  if (isHttp2(s) || !(s instanceof net.Socket) || s instanceof tls.TLSSocket || s.destroyed) return teardown(s);
  s.resetAndDestroy();
}

/** Close one side now: an HTTP/2 stream with RST_STREAM(CANCEL) (no END_STREAM first), a socket by destroying it. */
export function teardown(s: Duplex): void {
  if (isHttp2(s)) return resetStream(s);
  s.destroy();
}
