/**
 * The TCP proxy (Envoy's `envoy.filters.network.tcp_proxy`): the terminal of TCP tunnels, beside
 * the HTTP router. It leases an endpoint of the tunnel's target as the router does
 * (upstream/pick-endpoint.ts: load-balancer accounting, a DestinationRule's balancer hashing only
 * on the source IP, outlier ejections and `tcp.maxConnections`), opens the upstream connection,
 * and relays bytes both ways until both sides are closed (hbone/relay.ts).
 *
 * A CONNECT not answered yet (a declared TCP port) is answered 200 only once the upstream is up,
 * else 503 as ztunnel answers after its upstream connect; a sniffed port's CONNECT was answered
 * before, so a failure resets the stream. Failures map to Envoy's tcp_proxy flags through
 * upstream/failure.ts: no endpoint `UH`, `tcp.maxConnections` full `UO`, connect failure `UF`.
 *
 * While bytes flow, the tunnel counts in the overload manager's budget (its two sides' buffers) and
 * is reset with flag `OM` when it holds the most past the budget (pipeline/overload.ts).
 *
 * No upstream is dialed for a client that already reset its CONNECT, nor kept for one that resets
 * while the dial is pending (a rapid-reset flood must not open upstream connections:
 * CVE-2023-44487 class).
 */
import http2, { type ServerHttp2Stream } from 'node:http2';
import type { Duplex } from 'node:stream';
import { relay, resetStream, respondAndClose, teardown } from '../hbone/index.ts';
import { CONNECTION_ADMISSION } from '../netpol/index.ts';
import { originalClient } from '../peer/index.ts';
import { type ConnectionContext, type OverloadManager, RelayAccount, ResponseFlag, type ResponseFlagName } from '../pipeline/index.ts';
import {
  connectResponseHeaders,
  exchangePeer,
  type ClusterManager,
  CONNECT_FAILURE,
  CONNECTION_OVERFLOW,
  NO_HEALTHY_UPSTREAM,
  type UpstreamFailure,
  connectionHash,
  leaseEndpoint,
  type UpstreamLease,
} from '../upstream/index.ts';
import { clusterName } from '../state/index.ts';
import type { HashKey } from '../routing/index.ts';
import { log } from '../util/index.ts';

/** What the TCP proxy calls back into: the tunnel's filter chain (`onUpstreamConnected`). */
export interface TcpProxyChain {
  runUpstreamConnected(conn: ConnectionContext): void;
}

/** Body of a CONNECT refused before it was answered (the status comes from the failure). */
const REFUSAL_TEXT: Readonly<Partial<Record<ResponseFlagName, string>>> = Object.freeze({
  UH: 'no healthy upstream',
  UO: 'upstream overflow',
  UF: 'upstream connect error',
});

/** The TCP terminal; one per waypoint, bound to the core's cluster manager. */
export class TcpProxy {
  private readonly clusters: ClusterManager;
  private readonly overload: OverloadManager | undefined;

  constructor(clusters: ClusterManager, overload?: OverloadManager) {
    this.clusters = clusters;
    this.overload = overload;
  }

  /**
   * Relay the TCP tunnel `stream` of `conn`. `answered`: the CONNECT already got its 200 (sniffed
   * ports), so an upstream failure resets the stream instead of answering 503. `head`: bytes the
   * client sent (and ended after) while being sniffed, forwarded first. Settles when the tunnel
   * is over; never rejects.
   */
  async proxy(stream: ServerHttp2Stream, conn: ConnectionContext, chain: TcpProxyChain, answered: boolean, head: Buffer | undefined): Promise<void> {
    conn.innerProtocol = 'TCP';
    conn.upstreamCluster = clusterName(conn.target, 'tcp');
    // The CONNECT may come in the same read as the client's RST_STREAM, which Node processes only
    // after this handler ran: let the session finish the read, then look at the stream again.
    await new Promise<void>((r) => setImmediate(r));
    if (gone(stream)) return;
    // In the NetworkPolicy mode, only endpoints admitting the original client (decided at CONNECT).
    const lease = leaseEndpoint(this.clusters, conn.target, conn.info.targetIp, {
      admit: conn.get(CONNECTION_ADMISSION)?.admit,
      hash: (key: HashKey) => connectionHash(key, originalClient(conn.info)),
      connection: true,
    });
    if (!lease) return refuse(stream, conn, answered, NO_HEALTHY_UPSTREAM);
    conn.endpoint = lease.ep;
    conn.upstreamHost = lease.ep.authority;
    // Envoy's tcp_proxy on a full `max_connections` circuit breaker: the connection is refused.
    if (!lease.admitted) return refuse(stream, conn, answered, CONNECTION_OVERFLOW);
    let account: RelayAccount | undefined;
    try {
      const upstream = await this.dial(stream, lease);
      if (upstream === 'gone') return;
      if (upstream instanceof Error) {
        log.debug({ err: upstream.message, endpoint: lease.ep.authority }, 'upstream connect failed');
        return refuse(stream, conn, answered, CONNECT_FAILURE);
      }
      if (!answered) stream.respond({ ':status': 200 });
      conn.upstreamConnectHeaders = connectResponseHeaders(upstream);
      conn.upstreamExchangePeer = exchangePeer(upstream);
      chain.runUpstreamConnected(conn);
      if (head) {
        conn.bytesReceived += head.length;
        upstream.write(head);
      }
      // Reset under overload: both sides torn down (the relay then ends), logged and counted with `OM`.
      account = this.overload ? new RelayAccount(stream, upstream, () => overloadReset(conn, stream, upstream)) : undefined;
      if (account) this.overload!.open(account);
      // The destination cut the tunnel before its end: Envoy's tcp_proxy flags UR and resets the
      // downstream (envoyproxy/envoy source/common/tcp_proxy/tcp_proxy.cc `onUpstreamEvent`); relay() resets it.
      await relay(stream, upstream, conn, (side) => {
        if (side === 'upstream' && conn.responseFlags === ResponseFlag.None) conn.responseFlags = ResponseFlag.UpstreamRemoteReset;
      });
    } finally {
      if (account) this.overload!.close(account);
      lease.release();
    }
  }

  /**
   * Open the upstream connection to the leased endpoint; `'gone'` when the client closed the
   * stream first. A client that goes away while the dial is pending is let go at once (its lease
   * released); the connection, should it still open, is closed unused.
   */
  private dial(stream: ServerHttp2Stream, lease: UpstreamLease): Promise<Duplex | Error | 'gone'> {
    return new Promise((resolve) => {
      let settled = false;
      const onClose = () => {
        settled = true;
        resolve('gone');
      };
      stream.once('close', onClose);
      this.clusters.openTcp(lease.ep, 'tcp', lease.cluster).then(
        (upstream) => {
          stream.off('close', onClose);
          if (settled || gone(stream)) {
            upstream.destroy();
            return resolve('gone');
          }
          settled = true;
          resolve(upstream);
        },
        (err: Error) => {
          stream.off('close', onClose);
          if (!settled) resolve(err);
          settled = true;
        },
      );
    });
  }
}

function overloadReset(conn: ConnectionContext, downstream: Duplex, upstream: Duplex): void {
  conn.responseFlags = ResponseFlag.OverloadManager;
  teardown(downstream);
  teardown(upstream);
}

/** The client reset or closed the tunnel's stream: nothing is to be relayed any more. */
function gone(stream: ServerHttp2Stream): boolean {
  return stream.destroyed || stream.closed;
}

function refuse(stream: ServerHttp2Stream, conn: ConnectionContext, answered: boolean, f: UpstreamFailure): void {
  conn.responseFlags = f.flag;
  if (!answered) return respondAndClose(stream, f.status, REFUSAL_TEXT[f.flag] ?? '');
  // RST_STREAM alone: `close()` would first end the answered tunnel (END_STREAM), a clean close to the client.
  resetStream(stream, http2.constants.NGHTTP2_CONNECT_ERROR);
}
