/**
 * The waypoint's connection phase: for each authenticated CONNECT from the HBONE server, resolve
 * the target from `:authority` against the current mesh snapshot (a served service's VIP:port, or
 * the address of a workload this waypoint serves), run the chain's `onConnection` filters, then
 * choose the filter chain by the port's protocol as Istio's waypoint does (istio/istio
 * pilot/pkg/networking/core/listener_waypoint.go): - HTTP-family ports (http, http2, grpc,
 * grpc-web): answer 200 and serve HTTP inside the tunnel, HTTP/1.x or h2c with prior knowledge as
 * the client's first bytes show (Envoy's codec AUTO); - TCP and other declared ports: handed to the
 * TCP terminal (the router layer's TCP proxy), which answers 200 only once its upstream is up (503
 * otherwise), then relays bytes; - undeclared ports and workload-addressed traffic: answer 200,
 * sniff the first bytes (Envoy's http_inspector); HTTP/1.x or the HTTP/2 preface ⇒ HTTP, anything
 * else ⇒ TCP. A client's first bytes are waited for as long as Istio's waypoint waits:
 * `http.protocolDetectionTimeoutMs`, 15 s by default, because its internal listener sets no
 * `listener_filters_timeout` (listener_waypoint.go `buildWaypointInternal`), so Envoy's default
 * applies (envoyproxy/envoy api/envoy/config/listener/v3/listener.proto; MeshConfig
 * `protocolDetectionTimeout` only reaches sidecar listeners); a client that sends its request later
 * than 100 ms is still HTTP. At the timeout Envoy closes the connection
 * (`continue_on_listener_filters_timeout` is false); here the silent tunnel becomes TCP instead, so
 * server-first protocols work there too (istio/istio#55420). Unknown target ⇒ 503 (deliberately clearer than Envoy's 200-then-close with
 * `NR`). While the overload manager's `stop_accepting_requests` is active, every CONNECT is
 * answered 503 first, as Envoy's `connect_terminate` connection manager answers requests then
 * (pipeline/overload.ts).
 */
import type { ServerHttp2Stream } from 'node:http2';
import { type HboneRequest, respondAndClose, teardown } from '../hbone/index.ts';
import type { InnerHttpServer } from '../inner-http/index.ts';
import { type FilterChain, ConnectionContext, type ConnectInfo, FilterStatus, OVERLOAD_BODY, type OverloadManager } from '../pipeline/index.ts';
import { isHttpProtocol, type MeshSnapshot, type PortProtocol, type Target } from '../state/index.ts';
import { log } from '../util/index.ts';
import { sniff } from './sniff.ts';

/**
 * The terminal of TCP tunnels (the router layer's TCP proxy, Envoy's tcp_proxy): relays `stream`
 * to an upstream of `conn`'s target. `answered`: the CONNECT already got its 200 (sniffed ports).
 * `head`: bytes the client sent (and ended after) while being sniffed. Settles when the tunnel is
 * over; never rejects.
 */
export interface TcpTerminal {
  proxy(stream: ServerHttp2Stream, conn: ConnectionContext, chain: FilterChain, answered: boolean, head: Buffer | undefined): Promise<void>;
}

/** What the connection phase reads: current mesh and chain, the inner HTTP server, the TCP terminal. */
export interface WaypointListenerDeps {
  readonly mesh: { readonly current: MeshSnapshot };
  /** The chain current at each CONNECT (captured for the tunnel's lifetime). */
  readonly chain: { readonly current: FilterChain };
  readonly inner: InnerHttpServer;
  readonly tcp: TcpTerminal;
  /** How long (ms) an undeclared port waits for the client's first bytes before treating it as TCP. */
  readonly protocolDetectionTimeoutMs: number;
  /** The buffered-bytes budget: new CONNECTs are refused while it stops accepting requests. */
  readonly overload?: OverloadManager;
}

/** Build the HBONE server's `onConnect` handler for the waypoint. */
export function waypointConnectHandler(deps: WaypointListenerDeps): (stream: ServerHttp2Stream, req: HboneRequest) => void {
  return (stream, req) => {
    if (deps.overload && !deps.overload.acceptingRequests) {
      deps.overload.refused('tunnel');
      return respondAndClose(stream, 503, OVERLOAD_BODY);
    }
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
    conn.closer = closerOf(stream);
    const chain = deps.chain.current;
    (stream as TunnelStream)[kConnection] = { conn, chain };
    stream.on('close', completeConnection);
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

/**
 * What the tunnel's 'close' listener completes: kept on the stream so that one shared listener
 * serves every tunnel (thousands of idle ones hold no closure of their own).
 */
const kConnection = Symbol('waypoint.connection');
type TunnelStream = ServerHttp2Stream & { [kConnection]?: { readonly conn: ConnectionContext; readonly chain: FilterChain } };

function completeConnection(this: TunnelStream): void {
  const c = this[kConnection];
  if (c) c.chain.completeConnection(c.conn);
}

/** `conn.closer` of a tunnel (its own small closure: it keeps only the stream). */
function closerOf(stream: ServerHttp2Stream): () => void {
  return () => teardown(stream);
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
    void deps.tcp.proxy(stream, conn, chain, false, undefined);
  }
}

/** Sniff the tunnel's first bytes, then serve HTTP/1.x, h2c, or relay them as TCP. */
async function detect(deps: WaypointListenerDeps, stream: ServerHttp2Stream, conn: ConnectionContext, chain: FilterChain, timeoutMs: number): Promise<void> {
  const sniffed = await sniff(stream, timeoutMs);
  const { head, ended } = sniffed;
  if (sniffed.protocol === 'closed' || stream.destroyed) return;
  // HTTP/0.9 on an HTTP port goes to the connection manager, which refuses it (400 DPE, logged and
  // counted like a codec error); on a sniffed port it is TCP, as Envoy's http_inspector sees it.
  if (sniffed.protocol === 'HTTP/0.9' && conn.protocol !== 'UNKNOWN') return deps.inner.attach(stream, conn, chain, 'HTTP/1.1');
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
  await deps.tcp.proxy(stream, conn, chain, true, head);
}

function protocolOf(target: Target): PortProtocol {
  return target.kind === 'service' ? target.port.protocol : 'UNKNOWN';
}

function headerString(v: string | string[] | undefined): string {
  return v === undefined ? '' : Array.isArray(v) ? v.join(',') : v;
}
