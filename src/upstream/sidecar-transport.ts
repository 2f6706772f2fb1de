/**
 * The upstream transport toward workloads that run an Istio sidecar instead of ambient (Pods
 * annotated `sidecar.istio.io/status`, tunnel protocol `SIDECAR`): mutual TLS straight to
 * `podIP:targetPort`, as an Envoy cluster with Istio's `tlsMode-istio` transport socket
 * (ISTIO_MUTUAL) does. The sidecar's inbound listener picks its filter chain by the ALPN we offer:
 *
 * | bytes carried | ALPN offered (in order) | Istio source |
 * |---|---|---|
 * | TCP | `istio-peer-exchange`, `istio` | istio/istio pilot/pkg/networking/util/util.go `ALPNInMeshWithMxc` |
 * | HTTP/1.1 | `istio-http/1.1`, `istio`, `http/1.1` | istio/istio pilot/pkg/xds/filters/filters.go `mtlsHTTP11ALPN` |
 * | HTTP/2 | `istio-h2`, `istio`, `h2` | istio/istio pilot/pkg/xds/filters/filters.go `mtlsHTTP2ALPN` |
 *
 * The server must chain to the mesh root and present the endpoint workload's SPIFFE identity in a
 * URI SAN (Node's hostname check is replaced, as for HBONE). When `istio-peer-exchange` was
 * negotiated, the TCP metadata exchange runs before the socket is handed over (istio/proxy source/
 * extensions/filters/network/metadata_exchange): we write our frame first (an Envoy sidecar writes
 * its own on reading ours), then read the sidecar's; bytes after its frame stay in the socket for
 * the relay. A sidecar whose first bytes are not the exchange magic is taken as not speaking it:
 * its bytes pass through and the peer stays unknown, as Envoy's filter does.
 */
import net from 'node:net';
import tls, { type TLSSocket } from 'node:tls';
import { HboneConnectError, type TlsMaterial } from '../hbone/index.ts';
import { spiffeUrisOf } from '../identity/index.ts';
import { PeerExchangeDecoder, encodePeerExchange, type PeerExchangeState, type PeerInfo } from '../peer/index.ts';
import { formatHostPort } from '../state/index.ts';
import { log } from '../util/index.ts';

/** What the connection will carry; selects the ALPN list offered. */
export type SidecarProtocol = 'tcp' | 'http/1.1' | 'h2';

/** ALPN of the TCP metadata exchange. */
export const ALPN_PEER_EXCHANGE = 'istio-peer-exchange';

/** ALPN offered per {@link SidecarProtocol} (see the module comment for the Istio sources). */
export const SIDECAR_ALPN: Readonly<Record<SidecarProtocol, readonly string[]>> = Object.freeze({
  tcp: Object.freeze([ALPN_PEER_EXCHANGE, 'istio']),
  'http/1.1': Object.freeze(['istio-http/1.1', 'istio', 'http/1.1']),
  h2: Object.freeze(['istio-h2', 'istio', 'h2']),
});

/** Where to connect and whom to expect there. */
export interface SidecarDestination {
  readonly ip: string;
  /** The workload's target port (the sidecar intercepts it). */
  readonly port: number;
  /** SPIFFE URI the server certificate must carry (the endpoint workload's identity). */
  readonly identity: string;
}

/** What this proxy says about itself in the exchange. */
export interface LocalPeer {
  readonly peer: PeerInfo;
  /** Envoy node id (`x-envoy-peer-metadata-id`); '' leaves it out. */
  readonly nodeId: string;
}

/** Settings of a {@link SidecarTransport}. */
export interface SidecarTransportOptions {
  /** Current client certificate (read per connection, so rotation applies to new ones). */
  material(): TlsMaterial;
  /** This proxy's peer, given the connection's local IP (called once per exchange). */
  local(localAddress: string): LocalPeer;
  /** Bound (ms) on TCP connect + TLS handshake + the exchange. */
  readonly connectTimeoutMs: number;
  /** Largest exchange payload accepted (bytes); default the decoder's 64 KiB. */
  readonly maxExchangeBytes?: number;
}

/** An open connection to a sidecar. */
export interface SidecarConnection {
  /**
   * The TLS socket, ready for application bytes. After an exchange it is paused, with anything the
   * sidecar sent after its frame still readable: `pipe()` it or `resume()` it once listening
   * (a `'data'` listener alone does not restart a paused stream).
   */
  readonly socket: TLSSocket;
  /** Negotiated ALPN, '' when none. */
  readonly alpn: string;
  /** The sidecar's workload from the exchange; undefined when no exchange ran or it failed to say. */
  readonly peer: PeerInfo | undefined;
  /** The sidecar's node id from the exchange ('' when unknown). */
  readonly peerNodeId: string;
}

/** Opens mTLS connections to sidecars; see the module comment. */
export class SidecarTransport {
  private readonly opts: SidecarTransportOptions;

  constructor(opts: SidecarTransportOptions) {
    this.opts = opts;
  }

  /**
   * Connect to `dst` for `protocol`. Rejects with {@link HboneConnectError} (so the router and the
   * TCP listener count it as a connect failure, `UF`): reason `CONNECT` (socket error or closed
   * before ready), `TLS_FAILURE`, `IDENTITY_ERROR` (wrong or missing SPIFFE identity), `TIMEOUT`
   * (nothing complete within `connectTimeoutMs`, the exchange included), `PEER_EXCHANGE` (the
   * sidecar's frame started with the magic but was oversized, not a Struct, or cut off).
   */
  connect(dst: SidecarDestination, protocol: SidecarProtocol): Promise<SidecarConnection> {
    const where = formatHostPort(dst.ip, dst.port);
    const m = this.opts.material();
    return new Promise((resolve, reject) => {
      // Half-open, as for plain TCP: a peer that FINs after its last bytes may still be sent to.
      const tcp = net.connect({ host: dst.ip, port: dst.port, noDelay: true, allowHalfOpen: true });
      const socket = tls.connect({
        socket: tcp,
        cert: m.certPem,
        key: m.keyPem,
        ca: m.caPem,
        minVersion: 'TLSv1.2',
        ALPNProtocols: [...SIDECAR_ALPN[protocol]],
        rejectUnauthorized: true,
        // SPIFFE certificates carry no DNS name: identity is checked below instead.
        checkServerIdentity: () => undefined,
      });
      let settled = false;
      let detach = () => {};
      const settle = () => {
        settled = true;
        clearTimeout(timer);
        tcp.off('error', onError);
        socket.off('error', onError);
        socket.off('close', onClose);
        detach();
      };
      const fail = (err: HboneConnectError) => {
        if (settled) return;
        settle();
        log.debug({ err: err.message, endpoint: where }, 'sidecar connect failed');
        socket.destroy();
        tcp.destroy();
        reject(err);
      };
      const done = (alpn: string, peer: PeerInfo | undefined, peerNodeId: string) => {
        if (settled) return;
        settle();
        socket.on('error', (err) => log.debug({ err: err.message, endpoint: where }, 'sidecar connection error'));
        resolve({ socket, alpn, peer, peerNodeId });
      };
      const onError = (err: Error & { code?: string }) =>
        fail(new HboneConnectError(isTlsError(err) ? 'TLS_FAILURE' : 'CONNECT', `connect to sidecar ${where} failed: ${err.message}`, 0, { cause: err }));
      const onClose = () => fail(new HboneConnectError('CONNECT', `connection to sidecar ${where} closed before it was ready`));
      const timer = setTimeout(
        () => fail(new HboneConnectError('TIMEOUT', `connect to sidecar ${where} (handshake and peer exchange) timed out after ${this.opts.connectTimeoutMs} ms`)),
        this.opts.connectTimeoutMs,
      );
      tcp.once('error', onError);
      socket.once('error', onError);
      socket.once('close', onClose);
      socket.once('secureConnect', () => {
        const ids = spiffeUrisOf(socket.getPeerX509Certificate());
        if (!ids.includes(dst.identity)) {
          return fail(new HboneConnectError('IDENTITY_ERROR', `sidecar ${where} presented ${ids.join(', ') || 'no SPIFFE identity'}, expected ${dst.identity}`));
        }
        const alpn = socket.alpnProtocol || '';
        if (protocol !== 'tcp' || alpn !== ALPN_PEER_EXCHANGE) return done(alpn, undefined, '');
        let frame: Buffer;
        try {
          const local = this.opts.local(socket.localAddress ?? '');
          frame = encodePeerExchange(local.peer, local.nodeId);
        } catch (err) {
          return fail(new HboneConnectError('PEER_EXCHANGE', `cannot describe this proxy for istio-peer-exchange: ${(err as Error).message}`, 0, { cause: err }));
        }
        socket.write(frame);
        const decoder = new PeerExchangeDecoder({ maxPayloadBytes: this.opts.maxExchangeBytes });
        const onResult = (r: PeerExchangeState) => {
          if (r.state === 'need-more') return;
          detach();
          // Stop the flow here: the relay (or whoever reads next) gets `rest` first, then the rest of the stream.
          socket.pause();
          if (r.state === 'done') {
            if (r.rest.length > 0) socket.unshift(r.rest);
            return done(alpn, r.peer, r.nodeId);
          }
          if (r.kind === 'bad-magic') {
            log.debug({ endpoint: where }, 'sidecar sent no istio-peer-exchange frame; upstream peer unknown');
            if (r.rest.length > 0) socket.unshift(r.rest);
            return done(alpn, undefined, '');
          }
          fail(new HboneConnectError('PEER_EXCHANGE', `istio-peer-exchange with sidecar ${where} failed: ${r.error}`));
        };
        const onData = (chunk: Buffer) => onResult(decoder.push(chunk));
        const onEnd = () => onResult(decoder.end());
        detach = () => {
          socket.off('data', onData);
          socket.off('end', onEnd);
        };
        socket.on('data', onData);
        socket.once('end', onEnd);
      });
    });
  }
}

function isTlsError(err: Error & { code?: string }): boolean {
  return typeof err.code === 'string' && (err.code.startsWith('ERR_SSL') || err.code.includes('CERT'));
}
