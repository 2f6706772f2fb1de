/**
 * HTTP/2 and TLS settings shared by every HBONE endpoint we run (waypoint listener, upstream pool,
 * and the tunnel/inbound roles). Values come from the bootstrap config; window, frame and
 * keepalive defaults are ztunnel's (istio/ztunnel src/config.rs, src/proxy/h2/server.rs; TLS:
 * src/tls/certificate.rs).
 */
import type { SecureContextOptions } from 'node:tls';

/** PEM material of one workload identity. */
export interface TlsMaterial {
  /** The leaf, then any intermediates (istiod's CA answers with a chain), as presented to peers. */
  readonly certPem: string;
  readonly keyPem: string;
  /** Mesh root(s) peers must chain to. */
  readonly caPem: string;
}

/** HTTP/2 parameters (bytes, ms). */
export interface Http2Params {
  readonly initialStreamWindowSize: number;
  readonly initialConnectionWindowSize: number;
  readonly maxFrameSize: number;
  readonly maxConcurrentStreams: number;
  readonly maxHeaderListSize: number;
  readonly maxSessionMemoryMb: number;
  readonly keepaliveIntervalMs: number;
  readonly keepaliveTimeoutMs: number;
  /** Most header fields in one request header block, pseudo-headers included (Node `maxHeaderListPairs`). */
  readonly maxHeaderCount: number;
  /**
   * RST_STREAM frames a client may send: a token bucket of `streamResetBurst` tokens refilled at
   * `streamResetRate` per second (nghttp2 `nghttp2_option_set_stream_reset_rate_limit`); when it is
   * empty the session gets GOAWAY. Servers only.
   */
  readonly streamResetBurst: number;
  readonly streamResetRate: number;
  /**
   * Envoy's premature-reset rule (premature-resets.ts): a session most of whose streams the client
   * resets before they are answered, within this lifetime (ms), is closed once this many streams
   * closed (0 turns the rule off).
   */
  readonly prematureResetMinStreamLifetimeMs: number;
  readonly prematureResetTotalStreamCount: number;
  /** Invalid frames a session may receive in its lifetime before it is closed (Node `maxSessionInvalidFrames`). */
  readonly maxSessionInvalidFrames: number;
  /** Streams in a row a session may have refused (over its limits) before it is closed (Node `maxSessionRejectedStreams`). */
  readonly maxSessionRejectedStreams: number;
  /** Our PINGs and SETTINGS awaiting the peer's acknowledgement, at most (Node `maxOutstandingPings` / `maxOutstandingSettings`). */
  readonly maxOutstandingPings: number;
  readonly maxOutstandingSettings: number;
  /** Parameters accepted in one SETTINGS frame (Node `maxSettings`). */
  readonly maxSettings: number;
}

/** ztunnel's values for windows, frames and keepalive; the abuse limits are explained in README "Limits". */
export const DEFAULT_HTTP2: Http2Params = Object.freeze({
  initialStreamWindowSize: 4 * 1024 * 1024,
  initialConnectionWindowSize: 16 * 1024 * 1024,
  maxFrameSize: 1024 * 1024,
  maxConcurrentStreams: 200,
  maxHeaderListSize: 64 * 1024,
  maxSessionMemoryMb: 64,
  keepaliveIntervalMs: 10_000,
  keepaliveTimeoutMs: 20_000,
  maxHeaderCount: 100,
  streamResetBurst: 10_000,
  streamResetRate: 1_000,
  prematureResetMinStreamLifetimeMs: 1_000,
  prematureResetTotalStreamCount: 500,
  maxSessionInvalidFrames: 1_000,
  maxSessionRejectedStreams: 100,
  maxOutstandingPings: 10,
  maxOutstandingSettings: 10,
  maxSettings: 32,
});

/** HBONE's TLS profile: TLS 1.3 only, ALPN exactly `h2`, no SNI (ztunnel src/tls/certificate.rs). */
export function hboneTlsOptions(m: TlsMaterial): SecureContextOptions & { ALPNProtocols: string[] } {
  return {
    cert: m.certPem,
    key: m.keyPem,
    ca: m.caPem,
    minVersion: 'TLSv1.3',
    maxVersion: 'TLSv1.3',
    ALPNProtocols: ['h2'],
  };
}

/**
 * Node session options for an HBONE session (`http2.createSecureServer` / `http2.connect`): the
 * SETTINGS we send, memory, and the abuse limits of {@link Http2Params}.
 */
export function http2SessionOptions(p: Http2Params, server: boolean) {
  return {
    settings: http2Settings(p, server),
    maxSessionMemory: p.maxSessionMemoryMb,
    maxHeaderListPairs: p.maxHeaderCount,
    maxSessionInvalidFrames: p.maxSessionInvalidFrames,
    // Node refuses a new stream (ENHANCE_YOUR_CALM) while its table holds maxConcurrentStreams,
    // counting streams closed earlier in the same read (src/node_http2.cc `CanAddStream`), and
    // kills the session past this many refusals in a row: a client that cancels its streams and
    // opens as many in one write gets up to maxConcurrentStreams of them refused, not its session closed.
    maxSessionRejectedStreams: Math.max(p.maxSessionRejectedStreams, p.maxConcurrentStreams),
    maxOutstandingPings: p.maxOutstandingPings,
    maxOutstandingSettings: p.maxOutstandingSettings,
    maxSettings: p.maxSettings,
    // nghttp2 applies its reset rate limit to servers only, and only when both are given.
    ...(server ? { streamResetBurst: p.streamResetBurst, streamResetRate: p.streamResetRate } : {}),
  };
}

/** Node `settings` object for an HBONE session. */
export function http2Settings(p: Http2Params, server: boolean) {
  return {
    initialWindowSize: p.initialStreamWindowSize,
    maxFrameSize: p.maxFrameSize,
    maxHeaderListSize: p.maxHeaderListSize,
    enablePush: false,
    ...(server ? { maxConcurrentStreams: p.maxConcurrentStreams } : {}),
  };
}
