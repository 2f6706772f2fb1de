/**
 * The waypoint's connection phase: for each authenticated CONNECT from the HBONE server, resolve
 * the target from `:authority` against the current mesh snapshot (a served service's VIP:port, or
 * the address of a workload this waypoint serves), run the chain's `onConnection` filters, then
 * choose the filter chain by the port's protocol as Istio's waypoint does (IS:listener_waypoint.go):
 *  - HTTP-family ports (http, http2, grpc, grpc-web): answer 200 and serve HTTP inside the tunnel,
 *    HTTP/1.x or h2c with prior knowledge as the client's first bytes show (Envoy's codec AUTO);
 *  - TCP and other declared ports: open the upstream tunnel first, answer 200 only once it is up
 *    (503 otherwise, as ztunnel answers only after its upstream connect), then relay bytes;
 *  - undeclared ports and workload-addressed traffic: answer 200, sniff the first bytes (Envoy's
 *    http_inspector); HTTP/1.x or the HTTP/2 preface ⇒ HTTP, anything else, or silence for the
 *    detection timeout ⇒ TCP, so server-first protocols work (pitfall G1).
 * Unknown target ⇒ 503 (deliberately clearer than Envoy's 200-then-close with `NR`).
 */
import http2, { type ServerHttp2Stream } from 'node:http2';
import type { HboneRequest } from '../hbone/server.ts';
import { respondAndClose } from '../hbone/server.ts';
import { relay, teardown } from '../hbone/relay.ts';
import type { InnerHttpServer } from '../inner-http/server.ts';
import type { FilterChain } from '../pipeline/chain.ts';
import { ConnectionContext, type ConnectInfo } from '../pipeline/context.ts';
import { FilterStatus } from '../pipeline/filter.ts';
import { isHttpProtocol } from '../state/protocol.ts';
import type { MeshSnapshot, PortProtocol, Target } from '../state/types.ts';
import { connectResponseHeaders, exchangePeer, type ClusterManager } from '../upstream/cluster-manager.ts';
import { clusterName } from '../upstream/cluster-name.ts';
import { CONNECTION_ADMISSION } from '../netpol/admission.ts';
import { sourceIp } from '../upstream/hash-policy.ts';
import { pickEndpoint } from '../upstream/pick-endpoint.ts';
import { xxHash64 } from '../upstream/xxhash.ts';
import { ResponseFlag } from '../telemetry/response-flags.ts';
import { log } from '../util/log.ts';
import { refuseHttp09, sniff } from './sniff.ts';

/** What the connection phase reads: current mesh and chain, the inner HTTP server, the upstream. */
export interface WaypointListenerDeps {
  readonly mesh: { readonly current: MeshSnapshot };
  /** The chain current at each CONNECT (captured for the tunnel's lifetime). */
  readonly chain: { readonly current: FilterChain };
  readonly inner: InnerHttpServer;
  readonly clusters: ClusterManager;
  /** How long (ms) an undeclared port waits for the client's first bytes before treating it as TCP. */
  readonly protocolDetectionTimeoutMs: number;
}

/** Build the HBONE server's `onConnect` handler for the waypoint. */
export function waypointConnectHandler(deps: WaypointListenerDeps): (stream: ServerHttp2Stream, req: HboneRequest) => void {
  return (stream, req) => {
    const mesh = deps.mesh.current;
    const target = mesh.resolveTarget(req.ip, req.port);
    if (!target) {
      log.debug({ authority: req.authority, peer: req.peer.uri }, 'CONNECT to a target this waypoint does not serve');
      return respondAndClose(stream, 503, `no service or workload served by this waypoint at ${req.authority}`);
    }
    const info: ConnectInfo = {
      peer: req.peer,
      downstreamAddress: req.remoteAddress,
      downstreamPort: req.remotePort,
      authority: req.authority,
      targetIp: req.ip,
      targetPort: req.port,
      forwarded: headerString(req.headers.forwarded),
      baggage: headerString(req.headers.baggage),
      traceparent: headerString(req.headers.traceparent),
    };
    const conn = new ConnectionContext(info, mesh, target, protocolOf(target));
    conn.closer = () => teardown(stream);
    const chain = deps.chain.current;
    stream.once('close', () => chain.completeConnection(conn));
    let result;
    try {
      result = chain.runConnection(conn);
    } catch (err) {
      log.error({ err }, 'onConnection filter failed');
      return respondAndClose(stream, 500);
    }
    if (typeof result === 'number') return admitted(deps, stream, conn, chain, result);
    result.then(
      (status) => admitted(deps, stream, conn, chain, status),
      (err) => {
        log.error({ err }, 'onConnection filter failed');
        respondAndClose(stream, 500);
      },
    );
  };
}

function admitted(deps: WaypointListenerDeps, stream: ServerHttp2Stream, conn: ConnectionContext, chain: FilterChain, status: FilterStatus): void {
  if (stream.destroyed) return;
  if (status !== FilterStatus.Continue) return respondAndClose(stream, conn.rejectStatus || 403, conn.rejectDetails);
  if (isHttpProtocol(conn.protocol)) {
    stream.respond({ ':status': 200 });
    void detect(deps, stream, conn, chain, 0);
  } else if (conn.protocol === 'UNKNOWN') {
    stream.respond({ ':status': 200 });
    // When TCP would be refused (L7-only policy), a client slow to send its request must not
    // become TCP at the detection timeout and lose its tunnel unanswered: wait for its bytes.
    void detect(deps, stream, conn, chain, conn.rejectIfTcp ? 0 : deps.protocolDetectionTimeoutMs);
  } else {
    void relayTcp(deps.clusters, stream, conn, chain, false, undefined);
  }
}

/** Sniff the tunnel's first bytes, then serve HTTP/1.x, h2c, or relay them as TCP. */
async function detect(deps: WaypointListenerDeps, stream: ServerHttp2Stream, conn: ConnectionContext, chain: FilterChain, timeoutMs: number): Promise<void> {
  const sniffed = await sniff(stream, timeoutMs);
  const { head, ended } = sniffed;
  if (sniffed.protocol === 'closed' || stream.destroyed) return;
  // HTTP/0.9 is refused on an HTTP port; on a sniffed one it is TCP, as Envoy's http_inspector sees it.
  if (sniffed.protocol === 'HTTP/0.9' && conn.protocol !== 'UNKNOWN') return refuseHttp09(stream, conn.info.authority);
  const protocol = sniffed.protocol === 'HTTP/0.9' ? 'TCP' : sniffed.protocol;
  if (protocol !== 'TCP') return deps.inner.attach(stream, conn, chain, protocol);
  if (conn.protocol !== 'UNKNOWN') {
    // A declared HTTP port: bytes that are not HTTP get the HTTP/1 parser's 400; a client that
    // ended its side before a whole request line (or before any byte: END_STREAM on the CONNECT)
    // can send no request, so its tunnel is ended at once rather than held open.
    if (!ended) return deps.inner.attach(stream, conn, chain, 'HTTP/1.1');
    stream.end();
    return;
  }
  if (conn.rejectIfTcp) {
    // A filter refused this tunnel should it carry TCP (an L4 deny on a sniffed port): the CONNECT
    // was already answered, so close it before any upstream is dialed or any byte relayed.
    conn.innerProtocol = 'TCP';
    conn.rejectDetails = conn.rejectIfTcp;
    teardown(stream);
    return;
  }
  await relayTcp(deps.clusters, stream, conn, chain, true, head);
}

/**
 * Relay a TCP tunnel. `answered`: the CONNECT already got its 200 (sniffed ports), so an
 * upstream failure resets the stream instead of answering 503. `head`: bytes the client sent
 * (and ended after) while being sniffed, forwarded first.
 */
async function relayTcp(clusters: ClusterManager, stream: ServerHttp2Stream, conn: ConnectionContext, chain: FilterChain, answered: boolean, head: Buffer | undefined): Promise<void> {
  conn.innerProtocol = 'TCP';
  conn.upstreamCluster = clusterName(conn.target, 'tcp');
  // A DestinationRule's policy for the cluster: its balancer (a consistent hash only on the source
  // IP, the one key Envoy's tcp_proxy hashes), outlier ejections and `tcp.maxConnections`.
  const cluster = clusters.clusterFor(conn.target);
  const hash = cluster?.policy.loadBalancer.consistentHash?.key.kind === 'sourceIp' ? xxHash64(sourceIp(conn)) : undefined;
  // In the NetworkPolicy mode, only endpoints admitting the original client (decided at CONNECT).
  const ep = pickEndpoint(clusters.lb, conn.target, conn.info.targetIp, undefined, { admit: conn.get(CONNECTION_ADMISSION)?.admit, cluster, hash });
  if (!ep) {
    conn.responseFlags = ResponseFlag.NoHealthyUpstream;
    return failTcp(stream, answered, 'no healthy upstream');
  }
  conn.endpoint = ep;
  conn.upstreamHost = ep.authority;
  if (cluster && !cluster.admitConnection()) {
    // Envoy's tcp_proxy on a full `max_connections` circuit breaker: the connection is refused, flag UO.
    conn.responseFlags = ResponseFlag.UpstreamOverflow;
    return failTcp(stream, answered, 'upstream overflow');
  }
  clusters.lb.start(ep);
  try {
    let upstream;
    try {
      upstream = await clusters.openTcp(ep, 'tcp', cluster);
    } catch (err) {
      log.debug({ err: (err as Error).message, endpoint: ep.authority }, 'upstream connect failed');
      conn.responseFlags = ResponseFlag.UpstreamConnectionFailure;
      return failTcp(stream, answered, 'upstream connect error');
    }
    if (stream.destroyed || stream.closed) {
      upstream.destroy();
      return;
    }
    if (!answered) stream.respond({ ':status': 200 });
    conn.upstreamConnectHeaders = connectResponseHeaders(upstream);
    conn.upstreamExchangePeer = exchangePeer(upstream);
    chain.runUpstreamConnected(conn);
    if (head) {
      conn.bytesReceived += head.length;
      upstream.write(head);
    }
    await relay(stream, upstream, conn);
  } finally {
    clusters.lb.finish(ep);
    cluster?.releaseConnection();
  }
}

function failTcp(stream: ServerHttp2Stream, answered: boolean, message: string): void {
  if (!answered) return respondAndClose(stream, 503, message);
  if (!stream.destroyed) stream.close(http2.constants.NGHTTP2_CONNECT_ERROR);
}

function protocolOf(target: Target): PortProtocol {
  return target.kind === 'service' ? target.port.protocol : 'UNKNOWN';
}

function headerString(v: string | string[] | undefined): string {
  return v === undefined ? '' : Array.isArray(v) ? v.join(',') : v;
}
