/**
 * HTTP/2 and TLS settings shared by every HBONE endpoint we run (waypoint listener, upstream pool,
 * and the tunnel/inbound roles). Values come from the bootstrap config; defaults are ztunnel's
 * (../shared/reference/hbone-waypoint.md §1.2, §1.5).
 */
import type { SecureContextOptions } from 'node:tls';

/** PEM material of one workload identity. */
export interface TlsMaterial {
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
}

/** ztunnel's values. */
export const DEFAULT_HTTP2: Http2Params = Object.freeze({
  initialStreamWindowSize: 4 * 1024 * 1024,
  initialConnectionWindowSize: 16 * 1024 * 1024,
  maxFrameSize: 1024 * 1024,
  maxConcurrentStreams: 100,
  maxHeaderListSize: 64 * 1024,
  maxSessionMemoryMb: 64,
  keepaliveIntervalMs: 10_000,
  keepaliveTimeoutMs: 20_000,
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
