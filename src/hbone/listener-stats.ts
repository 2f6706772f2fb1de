/**
 * Counters of the HBONE listener, served at `/stats/prometheus`. TLS outcomes use Envoy's listener
 * stat names (Envoy docs "Listener statistics" and "TLS statistics"; source/common/tls/stats.h
 * `ALL_SSL_STATS`): `listener.<address>.ssl.<stat>` and
 * `listener.<address>.downstream_cx_transport_socket_connect_timeout`, which Envoy's Prometheus
 * output turns into `envoy_listener_ssl_<stat>{envoy_listener_address="<ip>_<port>"}`. As in
 * Envoy, a failed handshake counts once: in a `fail_verify_*` counter when the client certificate
 * was the reason, else in `ssl.connection_error`. What Envoy has no stat for is ours, under
 * `waypoint_hbone_`.
 */
import { Counter, type Registry } from 'prom-client';

/** Why a TLS handshake (or the identity check right after it) failed. */
export type TlsFailure =
  /** A handshake failure other than the client certificate (plaintext client, protocol or ALPN mismatch...). */
  | 'connection_error'
  /** The client sent no certificate. */
  | 'fail_verify_no_cert'
  /** The client certificate does not chain to the mesh root (or is expired, malformed...). */
  | 'fail_verify_error'
  /** The certificate is valid but its identity is refused (trust domain, not exactly one URI SAN). */
  | 'fail_verify_san'
  /** The handshake did not finish within `limits.tlsHandshakeTimeoutMs`. */
  | 'handshake_timeout';

/** Why a stream never reached the waypoint's CONNECT handling. */
export type StreamRejection =
  /** Reset by Node/nghttp2 before the waypoint saw it: malformed (RFC 9113 §8), or over the session's stream limits. */
  | 'codec'
  /** Refused: the client's address exceeded `limits.peerStreamRate`. */
  | 'peer_stream_rate';

/** Why an authenticated session was closed on the waypoint's side. */
export type SessionClosure =
  /** Most of its streams were reset unused (Envoy's premature-reset rule) and per-client limits are off. */
  | 'premature_resets'
  /** Its client exceeded `limits.peerStreamRate`. */
  | 'peer_stream_rate'
  /** Node refused more streams in a row than `http2.maxSessionRejectedStreams` (e.g. a fast rapid reset). */
  | 'refused_streams'
  /** More invalid frames than `http2.maxSessionInvalidFrames`. */
  | 'invalid_frames'
  /** nghttp2: a flood of frames to acknowledge (PING, SETTINGS) the client does not read. */
  | 'flood'
  /** Another protocol error Node or nghttp2 closed it for. */
  | 'protocol_error';

/** Why a TCP connection was closed before its TLS handshake (see peer-limits.ts). */
export type ConnectionRefusal = 'peer_connections' | 'peer_connection_rate' | 'peer_stream_rate';

const LISTENER = ['envoy_listener_address'] as const;

export class HboneListenerStats {
  private readonly labels: { envoy_listener_address: string };
  private readonly handshakes: Counter<'envoy_listener_address'>;
  private readonly failures: Record<TlsFailure, Counter<'envoy_listener_address'>>;
  private readonly streams: Counter<'reason'>;
  private readonly connections: Counter<'reason'>;
  private readonly sessions: Counter<'reason'>;
  private readonly rapidResets: Counter;

  /** `address` is the bound `ip:port` (`[v6]:port`); Envoy writes it with `_` for `:`. */
  constructor(registry: Registry, address: string) {
    this.labels = { envoy_listener_address: address.replace(/:/g, '_') };
    const counter = <L extends string>(name: string, help: string, labelNames: readonly L[]) =>
      (registry.getSingleMetric(name) as Counter<L> | undefined) ?? new Counter({ name, help, labelNames, registers: [registry] });
    const listener = (stat: string, help: string) => counter(`envoy_listener_${stat}`, help, LISTENER);
    this.handshakes = listener('ssl_handshake', 'Total successful TLS connection handshakes');
    this.failures = {
      connection_error: listener('ssl_connection_error', 'Total TLS connection errors not including failed certificate verifications'),
      fail_verify_no_cert: listener('ssl_fail_verify_no_cert', 'Total TLS connections that failed because of missing client certificate'),
      fail_verify_error: listener('ssl_fail_verify_error', 'Total TLS connections that failed CA verification'),
      fail_verify_san: listener('ssl_fail_verify_san', 'Total TLS connections that failed SAN verification'),
      handshake_timeout: listener('downstream_cx_transport_socket_connect_timeout', 'Total connections that timed out during transport socket connection negotiation'),
    };
    this.streams = counter('waypoint_hbone_streams_rejected_total', 'HBONE streams refused before CONNECT handling, by reason', ['reason']);
    this.connections = counter('waypoint_hbone_connections_refused_total', 'HBONE connections closed before the TLS handshake, by reason', ['reason']);
    this.sessions = counter('waypoint_hbone_sessions_closed_total', 'Authenticated HBONE sessions closed by the waypoint or its HTTP/2 layer, by reason', ['reason']);
    // Envoy's `downstream_rq_too_many_premature_resets` (http connection manager statistics).
    this.rapidResets = counter('waypoint_hbone_too_many_premature_resets_total', "HBONE sessions whose client reset most of its streams before using them (Envoy's premature-reset rule)", []);
    this.handshakes.inc(this.labels, 0);
    for (const c of Object.values(this.failures)) c.inc(this.labels, 0);
  }

  handshake(): void {
    this.handshakes.inc(this.labels);
  }

  tlsFailure(reason: TlsFailure): void {
    this.failures[reason].inc(this.labels);
  }

  streamsRejected(reason: StreamRejection, n = 1): void {
    this.streams.inc({ reason }, n);
  }

  connectionRefused(reason: ConnectionRefusal): void {
    this.connections.inc({ reason });
  }

  rapidReset(): void {
    this.rapidResets.inc();
  }

  sessionClosed(reason: SessionClosure): void {
    this.sessions.inc({ reason });
  }
}
