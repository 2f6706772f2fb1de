/**
 * Closing the streams the inner HTTP servers run on (their idle timers: hbone/stream-timer-fix.ts),
 * an HTTP/1 tunnel the client half-closed, and the keep-alive idle timeout of HTTP/1 tunnels.
 */
import http, { type IncomingMessage, type ServerResponse } from 'node:http';
import http2 from 'node:http2';
import type { Socket } from 'node:net';
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

/**
 * A response of our own on an HTTP/1 tunnel Node's parser let go of (CONNECT) or failed on (codec
 * error): a ServerResponse over the tunnel as Node builds one for requests, closing the tunnel
 * once written.
 */
export function ownResponse(req: IncomingMessage, socket: Duplex): ServerResponse {
  const res = new http.ServerResponse(req);
  res.shouldKeepAlive = false;
  res.assignSocket(socket as Socket);
  res.once('finish', () => closeTunnel(socket));
  return res;
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

/**
 * The keep-alive idle timeout of HTTP/1 tunnels (Envoy's HCM `idle_timeout`: a tunnel idle after
 * its last response is closed) without a timer operation per request. Given a `keepAliveTimeout`,
 * Node's HTTP server switches each connection's inactivity timer twice per request (lib/_http_server.js
 * `resetSocketTimeout`, `resOnFinish`), a visible share of a request's CPU on a tunnel's
 * Http2Stream. When the keep-alive timeout is not shorter than the stream idle timeout, the server
 * runs without one: the tunnel keeps the stream idle timeout as its only inactivity timer, and each
 * time it fires on a tunnel idle after a response, the idle time is added up here and the timer
 * re-armed for what remains, until the keep-alive timeout is reached.
 */
export class KeepAliveIdle {
  /** The stream idle timeout (ms): the tunnels' inactivity timer. */
  readonly streamIdleMs: number;
  /** The keep-alive idle timeout (ms) counted here; 0 when Node's server counts it (or nobody). */
  readonly keepAliveMs: number;

  constructor(streamIdleMs: number, keepAliveMs: number) {
    this.streamIdleMs = streamIdleMs;
    this.keepAliveMs = streamIdleMs > 0 && keepAliveMs >= streamIdleMs ? keepAliveMs : 0;
  }

  /**
   * The inactivity timer of `tunnel` fired with no request in flight, after `requests` requests
   * (`clock` is the tunnel's). True when the tunnel stays: its keep-alive idle time is not over,
   * and the timer was re-armed for the rest.
   */
  stillIdle(tunnel: Duplex, clock: IdleClock, requests: number): boolean {
    if (this.keepAliveMs === 0 || requests === 0) return false;
    if (clock.mark !== requests) {
      clock.mark = requests;
      clock.idleFor = 0;
    }
    clock.idleFor += clock.armedMs || this.streamIdleMs;
    const rest = this.keepAliveMs - clock.idleFor;
    if (rest <= 0) return false;
    clock.armedMs = Math.min(rest, this.streamIdleMs);
    (tunnel as Duplex & { setTimeout(ms: number): void }).setTimeout(clock.armedMs);
    return true;
  }

  /** A request starts on `tunnel`: its inactivity timer is the stream idle timeout again (after a re-arm for less). */
  requestStarts(tunnel: Duplex, clock: IdleClock): void {
    if (clock.armedMs === 0 || clock.armedMs === this.streamIdleMs) return;
    clock.armedMs = this.streamIdleMs;
    (tunnel as Duplex & { setTimeout(ms: number): void }).setTimeout(this.streamIdleMs);
  }
}

/** One tunnel's keep-alive idle accounting (see {@link KeepAliveIdle}). */
export interface IdleClock {
  /** Requests the tunnel had served when its idle time was last added up. */
  mark: number;
  /** Idle time (ms) added up since its last request. */
  idleFor: number;
  /** The inactivity timer now armed (ms; 0: the stream idle timeout Node set). */
  armedMs: number;
}
