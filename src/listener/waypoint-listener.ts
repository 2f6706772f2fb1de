/**
 * The waypoint's connection phase: for each authenticated CONNECT from the HBONE server, resolve
 * the target from `:authority` against the current mesh snapshot (a served service's VIP:port, or
 * the address of a workload this waypoint serves), run the chain's `onConnection` filters, then
 *  - HTTP ports: answer 200 and serve HTTP/1.1 inside the tunnel (each request: filters, router);
 *  - TCP ports: open the upstream tunnel first, answer 200 only once it is up (503 otherwise, as
 *    ztunnel answers only after its upstream connect), then relay bytes.
 * Unknown target ⇒ 503 (deliberately clearer than Envoy's 200-then-close with `NR`).
 */
import type { ServerHttp2Stream } from 'node:http2';
import type { HboneRequest } from '../hbone/server.ts';
import { respondAndClose } from '../hbone/server.ts';
import { relay } from '../hbone/relay.ts';
import type { InnerHttpServer } from '../inner-http/server.ts';
import type { FilterChain } from '../pipeline/chain.ts';
import { ConnectionContext, type ConnectInfo } from '../pipeline/context.ts';
import { FilterStatus } from '../pipeline/filter.ts';
import { isHttpProtocol } from '../state/protocol.ts';
import type { MeshSnapshot, PortProtocol, Target } from '../state/types.ts';
import type { ClusterManager } from '../upstream/cluster-manager.ts';
import { pickEndpoint } from '../upstream/pick-endpoint.ts';
import { log } from '../util/log.ts';

/** What the connection phase reads: current mesh and chain, the inner HTTP server, the upstream. */
export interface WaypointListenerDeps {
  readonly mesh: { readonly current: MeshSnapshot };
  /** The chain current at each CONNECT (captured for the tunnel's lifetime). */
  readonly chain: { readonly current: FilterChain };
  readonly inner: InnerHttpServer;
  readonly clusters: ClusterManager;
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
  // HTTP/2 and gRPC ports are relayed as bytes until the L7 work brings h2c inside tunnels.
  if (isHttpProtocol(conn.protocol) && conn.protocol !== 'HTTP2' && conn.protocol !== 'GRPC') {
    stream.respond({ ':status': 200 });
    deps.inner.attach(stream, conn, chain);
    return;
  }
  void relayTcp(deps.clusters, stream, conn);
}

async function relayTcp(clusters: ClusterManager, stream: ServerHttp2Stream, conn: ConnectionContext): Promise<void> {
  const ep = pickEndpoint(clusters.lb, conn.target, conn.info.targetIp);
  if (!ep) return respondAndClose(stream, 503, 'no healthy upstream');
  clusters.lb.start(ep);
  try {
    let upstream;
    try {
      upstream = await clusters.openTcp(ep);
    } catch (err) {
      log.debug({ err: (err as Error).message, endpoint: ep.authority }, 'upstream connect failed');
      return respondAndClose(stream, 503, 'upstream connect error');
    }
    if (stream.destroyed) {
      upstream.destroy();
      return;
    }
    stream.respond({ ':status': 200 });
    const result = await relay(stream, upstream);
    conn.bytesReceived = result.bytesReceived;
    conn.bytesSent = result.bytesSent;
  } finally {
    clusters.lb.finish(ep);
  }
}

function protocolOf(target: Target): PortProtocol {
  return target.kind === 'service' ? target.port.protocol : 'UNKNOWN';
}

function headerString(v: string | string[] | undefined): string {
  return v === undefined ? '' : Array.isArray(v) ? v.join(',') : v;
}
