/**
 * The per-tunnel and per-request contexts: records of what is known about one HBONE tunnel and
 * one inner HTTP request (Envoy's StreamInfo plus the request headers), which filters read and
 * annotate. Answering the downstream lives in local-reply.ts and running phases in chain.ts; the
 * contexts only hold facts. Every field is initialised in the constructor so V8 keeps one object
 * shape (fastify's stable-shape rule); filter data lives in slots (see slots.ts).
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { IncomingHttpHeaders, ServerHttp2Stream } from 'node:http2';
import type { SpiffeId } from '../identity/index.ts';
import type { Endpoint, MeshSnapshot, PortProtocol, Target } from '../state/index.ts';
import { ResponseFlag, type ResponseFlagName } from './response-flags.ts';
import type { HeaderList } from './headers.ts';
import { slotCount, type Slot } from './slots.ts';

let nextConnectionId = 1;

/** What the HBONE listener learned about one CONNECT before any filter ran. */
export interface ConnectInfo {
  /** Client identity from the mTLS certificate's URI SAN. */
  readonly peer: SpiffeId;
  /** TCP peer of the HBONE connection (the source pod IP for a ztunnel), normalised. */
  readonly downstreamAddress: string;
  readonly downstreamPort: number;
  /** The CONNECT `:authority` as received, and its parsed target address. */
  readonly authority: string;
  readonly targetIp: string;
  readonly targetPort: number;
  /** ztunnel's CONNECT headers, kept verbatim ('' when absent). */
  readonly forwarded: string;
  readonly baggage: string;
  readonly traceparent: string;
}

/** One HBONE tunnel (one CONNECT stream = one user TCP connection, as in ztunnel). */
export class ConnectionContext {
  readonly id: number;
  readonly info: ConnectInfo;
  /** Mesh snapshot the tunnel was admitted under. */
  readonly mesh: MeshSnapshot;
  readonly target: Target;
  readonly protocol: PortProtocol;
  /** Wall-clock start (ms since epoch) and monotonic start (ms). */
  readonly startTime: number;
  readonly startMonotonic: number;
  /** Status the CONNECT was refused with by a filter (0 = not refused). */
  rejectStatus: number;
  /** Why the tunnel was refused or terminated by a filter (the access log's connection termination details). */
  rejectDetails: string;
  /**
   * Undeclared (sniffed) ports: a refusal a filter decided in `onConnection` that applies only if
   * the payload turns out to be TCP (the CONNECT was answered 200 before sniffing): the tunnel is
   * then closed before any upstream is dialed, with these details. '' = none.
   */
  rejectIfTcp: string;
  /** Set by the listener: tears the tunnel down now (see {@link terminate}). */
  closer: (() => void) | undefined;
  /** Bytes relayed on TCP tunnels, counted as they move. */
  bytesReceived: number;
  bytesSent: number;
  /** Inner requests served on this tunnel so far. */
  requestCount: number;
  /** How the tunnel's payload was handled: 'TCP' (relayed as bytes), 'HTTP/1.1' or 'HTTP/2' inside, '' before known. */
  innerProtocol: string;
  /** TCP tunnels: the endpoint relayed to, its `ip:port`, Envoy cluster name, response flags (`-` when none). */
  endpoint: Endpoint | undefined;
  upstreamHost: string;
  upstreamCluster: string;
  responseFlags: string;
  /**
   * TCP tunnels: response headers of the upstream HBONE CONNECT (a destination ztunnel answers
   * with the workload's `baggage` there); undefined for plain-TCP endpoints and until connected.
   */
  upstreamConnectHeaders: IncomingHttpHeaders | undefined;
  /**
   * TCP tunnels to a sidecar workload: the upstream peer as it described itself over
   * `istio-peer-exchange` (Envoy's `upstream_peer` from the TCP metadata exchange); undefined for
   * HBONE and plain-TCP endpoints, when the sidecar sent no exchange, and until connected. A
   * `PeerInfo` of src/peer, kept opaque here so the filter API does not depend on the peer codecs:
   * read it with `upstreamExchangePeerOf(conn)` (src/peer/index.ts).
   */
  upstreamExchangePeer: unknown;
  private readonly slots: unknown[];

  constructor(info: ConnectInfo, mesh: MeshSnapshot, target: Target, protocol: PortProtocol) {
    this.id = nextConnectionId++;
    this.info = info;
    this.mesh = mesh;
    this.target = target;
    this.protocol = protocol;
    this.startTime = Date.now();
    this.startMonotonic = performance.now();
    this.rejectStatus = 0;
    this.rejectDetails = '';
    this.rejectIfTcp = '';
    this.closer = undefined;
    this.bytesReceived = 0;
    this.bytesSent = 0;
    this.requestCount = 0;
    this.innerProtocol = '';
    this.endpoint = undefined;
    this.upstreamHost = '';
    this.upstreamCluster = '';
    this.responseFlags = ResponseFlag.None;
    this.upstreamConnectHeaders = undefined;
    this.upstreamExchangePeer = undefined;
    this.slots = new Array(slotCount('connection')).fill(undefined);
  }

  /** Refuse the tunnel from `onConnection` (then return StopAndReply). */
  reject(status: number, details: string): void {
    this.rejectStatus = status;
    this.rejectDetails = details;
  }

  /**
   * End an admitted tunnel now (e.g. a policy change revoked its authorization): the CONNECT
   * stream is reset and a TCP relay closes its upstream too; `details` become the termination
   * details. No-op when the listener installed no closer.
   */
  terminate(details: string): void {
    this.rejectDetails = details;
    this.closer?.();
  }

  get<T>(slot: Slot<T>): T | undefined {
    return this.slots[slot.index] as T | undefined;
  }

  set<T>(slot: Slot<T>, value: T): void {
    this.slots[slot.index] = value;
  }
}

/**
 * An HTTP/2 downstream request as the inner h2c server hands it over (src/inner-http serves h2
 * streams on Node's core stream API, not its compatibility layer): the head as received, and the
 * server stream, which is also the request body (a Readable; see request-body.ts `requestBody`).
 */
export interface Http2DownstreamRequest {
  readonly httpVersion: '2.0';
  /** `:method` and `:path` as received. */
  readonly method: string;
  readonly url: string;
  /** The header block as Node's http2 core parsed it (pseudo-headers included), and as sent. */
  readonly headers: IncomingHttpHeaders;
  readonly rawHeaders: string[];
  readonly stream: ServerHttp2Stream;
}

/** The answer to an {@link Http2DownstreamRequest}: what the router, filters and local replies use of a response. */
export interface Http2DownstreamResponse {
  readonly stream: ServerHttp2Stream;
  readonly headersSent: boolean;
  /** `end()` was called. */
  readonly writableEnded: boolean;
  readonly writableFinished: boolean;
  readonly writableNeedDrain: boolean;
  readonly destroyed: boolean;
  /** Status and header list (flat `[name, value, ...]` pairs or a record). */
  writeHead(status: number, headers?: readonly string[] | Readonly<Record<string, string>>): void;
  write(chunk: Buffer | string): boolean;
  end(chunk?: Buffer | string): void;
  /** Trailers sent when the response ends (HTTP/2 HEADERS with END_STREAM after the body). */
  addTrailers(trailers: Readonly<Record<string, string>>): void;
  destroy(err?: Error): void;
  /** 'close' (the stream closed: answered, reset or gone) and 'drain' (the stream's). */
  on(event: 'close' | 'drain', listener: () => void): void;
  once(event: 'close' | 'drain', listener: () => void): void;
  off(event: 'close' | 'drain', listener: () => void): void;
}

/** A downstream request: Node's HTTP/1 message, or an HTTP/2 stream's head and body. */
export type DownstreamRequest = IncomingMessage | Http2DownstreamRequest;
/** The matching response (both expose writeHead/write/end/addTrailers and 'close'/'drain'). */
export type DownstreamResponse = ServerResponse | Http2DownstreamResponse;

/**
 * The request line and header block of one inner request, as the HTTP connection manager
 * (src/inner-http) read it from the codec: pseudo-headers as fields, every other header in one
 * mutable list.
 */
export interface RequestHead {
  /** `HTTP/1.0`, `HTTP/1.1` or `HTTP/2`. */
  readonly protocol: string;
  /** `:method`, the request target as received (`:path`), `:authority` (else Host; '' when absent). */
  readonly method: string;
  readonly path: string;
  readonly authority: string;
  /** The other headers, sender's case and order kept; hop-by-hop headers already removed. */
  readonly headers: HeaderList;
}

/**
 * What a stream needs of its filter chain once the request phases ran: the router's upstream
 * request and attempt phases, the response-header phase (local-reply.ts) and completion. FilterChain
 * implements it; the context holds it by this interface so the contexts do not depend on the
 * chain.
 */
export interface StreamPhases {
  runUpstreamRequest(stream: StreamContext, headers: HeaderList): void;
  runUpstreamAttempt(stream: StreamContext, headers: HeaderList): void;
  runResponseHeaders(stream: StreamContext, headers: HeaderList): void;
  completeStream(stream: StreamContext): void;
}

/** What a filter read of a request body (request-body.ts `bufferRequestBody`). */
export interface BufferedBody {
  /** The bytes read, in order (the whole body when `complete`). */
  readonly data: Buffer;
  /** The request ended within what was read: `data` is the whole body. */
  readonly complete: boolean;
}

/**
 * One inner HTTP request/response exchange on a tunnel (HTTP/1.x or HTTP/2 inside the tunnel).
 * Filters read the request from `method`/`path`/`authority`/`requestHeaders` (never from `req`,
 * which is the body stream) and answer through local-reply.ts.
 */
export class StreamContext {
  readonly conn: ConnectionContext;
  readonly chain: StreamPhases;
  /** The downstream request (its body stream; the head is in the fields below) and response. */
  readonly req: DownstreamRequest;
  readonly res: DownstreamResponse;
  readonly startTime: number;
  readonly startMonotonic: number;
  /** Downstream protocol as Envoy's `%PROTOCOL%`: `HTTP/1.0`, `HTTP/1.1` or `HTTP/2`. */
  readonly protocol: string;
  /** True for HTTP/2 downstreams (h2c inside the tunnel). */
  readonly http2: boolean;
  /** `:method`. */
  readonly method: string;
  /**
   * The request target in origin form (`:path`) and `:authority` (Host; '' when absent). The
   * connection manager rewrites an absolute-form target into these before any filter runs;
   * filters do not change them (a rewritten target goes in {@link forwardPath}).
   */
  path: string;
  authority: string;
  /**
   * The request headers without pseudo-headers and hop-by-hop headers, built once by the
   * connection manager. Filters edit this list in `onRequestHeaders` (ext_authz and JWT header
   * changes); the router sends it upstream after its own changes and the `onUpstreamRequest` phase.
   */
  readonly requestHeaders: HeaderList;
  /** gRPC request: HTTP/2 with `content-type: application/grpc…` (not gRPC-Web). */
  readonly isGrpc: boolean;
  /**
   * gRPC-Web request (any HTTP version): `content-type: application/grpc-web`, `…+proto`,
   * `application/grpc-web-text…`. Its answer's status travels in the body's trailer frame.
   */
  readonly isGrpcWeb: boolean;
  /**
   * The request target to send upstream when a filter rewrote it (the authz filter's normalized
   * path, query kept); undefined = `path` as received. The router and the access log use it.
   */
  forwardPath: string | undefined;
  /**
   * The start of the request body a filter already read from `req` (request-body.ts
   * `bufferRequestBody`, e.g. ext_authz `includeRequestBodyInCheck`); the router sends it before
   * the rest of `req`. Undefined = nothing read.
   */
  bufferedBody: BufferedBody | undefined;
  /**
   * `x-request-id`: the client's, or a UUID v4 the connection manager generated and added to
   * {@link requestHeaders} before any filter ran ('' until then).
   */
  requestId: string;
  /**
   * The HTTP connection manager's stat prefix: Istio names the HTTP chain of a service port after
   * its inbound cluster (`inbound-vip|80|http|web.demo.svc.cluster.local`; `encap` for
   * workload-addressed traffic). Set by the connection manager.
   */
  statPrefix: string;
  /** Request and response body bytes (Envoy's `%BYTES_RECEIVED%` / `%BYTES_SENT%`). */
  bytesReceived: number;
  bytesSent: number;
  /** Upstream attempts made (1 + retries); 0 when none was sent. */
  attempts: number;
  /** Envoy cluster name of the upstream (`inbound-vip|80|http|web.demo.svc.cluster.local`), or ''. */
  upstreamCluster: string;
  /**
   * The backend service a matched HTTPRoute/GRPCRoute rule sent the request to (set by the router);
   * undefined when the default route applies (the tunnel's own target). Stats name
   * `destination_service*` after it, as Envoy reads them from the upstream cluster.
   */
  routeTarget: Target | undefined;
  /** Monotonic time (ms) the first upstream response byte arrived, 0 until then. */
  upstreamResponseMonotonic: number;
  /** grpc-status of the answer: a gRPC local reply's, or the upstream's (trailers, or a trailers-only answer); '' when none. */
  grpcStatus: string;
  /** gRPC requests: messages (length-prefixed frames) that started in the request / response body so far, counted by the router. */
  requestMessages: number;
  responseMessages: number;
  /** Final status sent downstream (0 until headers are written). */
  responseCode: number;
  /** Envoy response flags, comma-joined; `-` when none. */
  responseFlags: string;
  /** Envoy-style response code details (`via_upstream`, `no_healthy_upstream`, ...). */
  responseCodeDetails: string;
  /** Chosen endpoint, once the router picked one. */
  endpoint: Endpoint | undefined;
  /** `ip:port` of the upstream host actually used, or '' . */
  upstreamHost: string;
  /**
   * Response headers of an HBONE CONNECT to the endpoint that answered (ztunnel's `baggage`
   * describing the destination workload lives there), set with the upstream response headers;
   * undefined for plain-TCP endpoints and local replies before any upstream answer.
   */
  upstreamConnectHeaders: IncomingHttpHeaders | undefined;
  /** Set once `onStreamComplete` has run. */
  completed: boolean;
  /** The router's handle to cancel the upstream request when the downstream goes away. */
  abortUpstream: { cancel(): void } | undefined;
  private readonly slots: unknown[];

  constructor(conn: ConnectionContext, chain: StreamPhases, req: DownstreamRequest, res: DownstreamResponse, head: RequestHead) {
    this.conn = conn;
    this.chain = chain;
    this.req = req;
    this.res = res;
    this.startTime = Date.now();
    this.startMonotonic = performance.now();
    this.protocol = head.protocol;
    this.http2 = head.protocol === 'HTTP/2';
    this.method = head.method;
    this.path = head.path;
    this.authority = head.authority;
    this.requestHeaders = head.headers;
    const ct = head.headers.get('content-type');
    this.isGrpc = this.http2 && isGrpcRequest(ct);
    this.isGrpcWeb = ct !== undefined && ct.startsWith('application/grpc-web');
    this.forwardPath = undefined;
    this.bufferedBody = undefined;
    this.requestId = '';
    this.statPrefix = '';
    this.bytesReceived = 0;
    this.bytesSent = 0;
    this.attempts = 0;
    this.upstreamCluster = '';
    this.routeTarget = undefined;
    this.upstreamResponseMonotonic = 0;
    this.grpcStatus = '';
    this.requestMessages = 0;
    this.responseMessages = 0;
    this.responseCode = 0;
    this.responseFlags = ResponseFlag.None;
    this.responseCodeDetails = '';
    this.endpoint = undefined;
    this.upstreamHost = '';
    this.upstreamConnectHeaders = undefined;
    this.completed = false;
    this.abortUpstream = undefined;
    this.slots = new Array(slotCount('stream')).fill(undefined);
  }

  get<T>(slot: Slot<T>): T | undefined {
    return this.slots[slot.index] as T | undefined;
  }

  set<T>(slot: Slot<T>, value: T): void {
    this.slots[slot.index] = value;
  }

  /** Add an Envoy response flag (kept in the order set, comma-joined like Envoy's `%RESPONSE_FLAGS%`). */
  addFlag(flag: ResponseFlagName): void {
    if (flag === ResponseFlag.None) return;
    this.responseFlags = this.responseFlags === ResponseFlag.None ? flag : `${this.responseFlags},${flag}`;
  }
}

/** `application/grpc…` but not gRPC-Web. */
function isGrpcRequest(ct: string | undefined): boolean {
  return ct !== undefined && ct.startsWith('application/grpc') && !ct.startsWith('application/grpc-web');
}
