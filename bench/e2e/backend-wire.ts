/**
 * What the scenario load (load.ts, on the loadtest engine) and the bench backends (backends.ts) agree on:
 * request paths, the gRPC service, and how a backend tells whether its HTTP/2 peer is the client
 * itself (bytes relayed end to end) or a proxy that terminated HTTP/2 (the waypoint at L7).
 */
import type { ServiceDefinition } from '@grpc/grpc-js';

/**
 * The clients' HTTP/2 SETTINGS_INITIAL_WINDOW_SIZE: an odd value no proxy picks for itself. A
 * backend that sees it in its peer's SETTINGS talks to the client's own HTTP/2 session, so every
 * hop in between relayed bytes; any other value means a proxy terminated HTTP/2 and opened its own
 * session upstream.
 */
export const PEER_WINDOW_MARKER = 1_048_573;

/** h2c response header / gRPC response metadata: the backend's peer SETTINGS_INITIAL_WINDOW_SIZE. */
export const PEER_WINDOW_HEADER = 'x-bench-peer-window';

/** gRPC request metadata naming one probe call, so the backend can find that call's HTTP/2 stream. */
export const PROBE_HEADER = 'x-bench-probe';

/** `GET /bytes/<n>` answers n bytes (HTTP/1.1 and h2c backends). */
export function bytesPath(n: number): string {
  return `/bytes/${n}`;
}

/** How a run's traffic reached the backend, from the peer window the backend saw. */
export type Http2Mode = 'relayed' | 'terminated' | 'unknown';

export function http2Mode(peerWindow: number | null | undefined): Http2Mode {
  if (peerWindow === null || peerWindow === undefined || !Number.isFinite(peerWindow)) return 'unknown';
  return peerWindow === PEER_WINDOW_MARKER ? 'relayed' : 'terminated';
}

const identity = (b: Buffer): Buffer => b;

/** `bench.Echo/Unary`: bytes in, the same bytes out. No .proto: identity (de)serializers over Buffers. */
export const ECHO_SERVICE: ServiceDefinition = {
  Unary: {
    path: '/bench.Echo/Unary',
    requestStream: false,
    responseStream: false,
    requestSerialize: identity,
    requestDeserialize: identity,
    responseSerialize: identity,
    responseDeserialize: identity,
  },
};
