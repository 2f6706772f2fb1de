/**
 * Per-tunnel and per-request contexts. Every field is initialised in the constructor so V8 keeps
 * one object shape (fastify's stable-shape rule); filter data lives in slots (see slots.ts).
 */
import { randomUUID } from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Http2ServerRequest, Http2ServerResponse, IncomingHttpHeaders } from 'node:http2';
import type { SpiffeId } from '../identity/spiffe.ts';
import type { PeerInfo } from '../peer/peer-info.ts';
import type { Endpoint, MeshSnapshot, PortProtocol, Target } from '../state/types.ts';
import { LOCAL_REPLY_BODY, LOCAL_REPLY_STATUS, ResponseFlag } from '../telemetry/response-flags.ts';
import type { FilterChain } from './chain.ts';
import { HeaderList } from './headers.ts';
import type { BufferedBody } from './request-body.ts';
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
   * HBONE and plain-TCP endpoints, when the sidecar sent no exchange, and until connected.
   */
  upstreamExchangePeer: PeerInfo | undefined;
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

/** A downstream request as Node's HTTP/1 server or HTTP/2 compatibility layer hands it over. */
export type DownstreamRequest = IncomingMessage | Http2ServerRequest;
/** The matching response object (both expose writeHead/write/end/addTrailers/'drain'). */
export type DownstreamResponse = ServerResponse | Http2ServerResponse;

/** One inner HTTP request/response exchange on a tunnel (HTTP/1.x or HTTP/2 inside the tunnel). */
export class StreamContext {
  readonly conn: ConnectionContext;
  readonly chain: FilterChain;
  readonly req: DownstreamRequest;
  readonly res: DownstreamResponse;
  readonly startTime: number;
  readonly startMonotonic: number;
  /** Downstream protocol as Envoy's `%PROTOCOL%`: `HTTP/1.0`, `HTTP/1.1` or `HTTP/2`. */
  readonly protocol: string;
  /** True for HTTP/2 downstreams (h2c inside the tunnel). */
  readonly http2: boolean;
  /** `:method`, the request target as received (`:path`), and `:authority`/Host ('' when absent). */
  readonly method: string;
  readonly path: string;
  readonly authority: string;
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
   * `x-request-id`: the client's, or a UUID v4 generated when the stream is created and added to
   * the request headers, before any filter runs (see {@link keepOrGenerateRequestId}).
   */
  requestId: string;
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

  constructor(conn: ConnectionContext, chain: FilterChain, req: DownstreamRequest, res: DownstreamResponse) {
    this.conn = conn;
    this.chain = chain;
    this.req = req;
    this.res = res;
    this.startTime = Date.now();
    this.startMonotonic = performance.now();
    const v = req.httpVersion;
    this.http2 = v === '2.0';
    this.protocol = this.http2 ? 'HTTP/2' : v === '1.0' ? 'HTTP/1.0' : 'HTTP/1.1';
    this.method = req.method ?? 'GET';
    this.path = req.url ?? '/';
    this.authority = (this.http2 ? (req as Http2ServerRequest).authority : req.headers.host) ?? '';
    this.forwardPath = undefined;
    this.bufferedBody = undefined;
    this.requestId = keepOrGenerateRequestId(req);
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
  addFlag(flag: string): void {
    if (flag === ResponseFlag.None) return;
    this.responseFlags = this.responseFlags === ResponseFlag.None ? flag : `${this.responseFlags},${flag}`;
  }

  /**
   * Write response headers downstream after the response-header phases ran (reverse order).
   * `raw` is a flat header list (see HeaderList). Returns false when the downstream is gone.
   */
  respond(status: number, statusText: string | undefined, headers: HeaderList): boolean {
    const res = this.res;
    if (res.headersSent || this.downstreamClosed) return false;
    this.responseCode = status;
    this.chain.runResponseHeaders(this, headers);
    if (this.http2) (res as Http2ServerResponse).writeHead(status, headers.raw as unknown as Record<string, string>);
    else if (statusText) (res as ServerResponse).writeHead(status, statusText, headers.raw);
    else (res as ServerResponse).writeHead(status, headers.raw);
    return true;
  }

  /**
   * True when the whole response was written and delivered (not cut by a reset). HTTP/2 needs its
   * own test: Node's compatibility response reports `writableFinished` after a client RST_STREAM.
   */
  get responseComplete(): boolean {
    if (!this.http2) return (this.res as ServerResponse).writableFinished;
    const res = this.res as Http2ServerResponse;
    return res.writableEnded && !(res.stream.rstCode > 0);
  }

  /** True once the downstream stream or connection is gone (nothing more can be written). */
  get downstreamClosed(): boolean {
    return this.http2 ? (this.res as Http2ServerResponse).stream.destroyed : (this.res as ServerResponse).destroyed;
  }

  /** Reset the downstream exchange (HTTP/1: close the connection; HTTP/2: RST_STREAM). */
  resetDownstream(): void {
    if (this.http2) (this.res as Http2ServerResponse).stream.close(0x2 /* INTERNAL_ERROR */);
    else (this.res as ServerResponse).destroy();
  }

  /**
   * Answer locally (Envoy's sendLocalReply): `status` (default from the flag's mapping),
   * a text body, a response flag and the details string. Response-header filters still run.
   * When the response already started, the downstream stream is reset instead.
   */
  sendLocalReply(status: number | undefined, body: string | undefined, flag: string, details: string): void {
    this.addFlag(flag);
    this.responseCodeDetails = details;
    const code = status ?? LOCAL_REPLY_STATUS[flag] ?? 500;
    const text = body ?? LOCAL_REPLY_BODY[flag] ?? '';
    if (this.res.headersSent) {
      this.resetDownstream();
      return;
    }
    if (this.isGrpc) {
      // Envoy answers a gRPC request with HTTP 200 and the status mapped to grpc-status
      // (ENV:source/common/grpc/status.cc `httpToGrpcStatus`), the text as grpc-message.
      const grpcStatus = String(httpToGrpcStatus(code));
      if (!this.respond(200, undefined, new HeaderList(['content-type', 'application/grpc']))) return;
      this.grpcStatus = grpcStatus;
      this.res.addTrailers({ 'grpc-status': grpcStatus, 'grpc-message': grpcMessageEncode(text) });
      this.res.end();
      return;
    }
    const headers = new HeaderList(['content-length', String(Buffer.byteLength(text)), 'content-type', 'text/plain']);
    if (this.respond(code, undefined, headers)) {
      this.bytesSent += Buffer.byteLength(text);
      this.res.end(text);
    }
  }

  /** True for gRPC requests (`content-type: application/grpc…`, not gRPC-Web) over HTTP/2. */
  get isGrpc(): boolean {
    if (!this.http2) return false;
    const ct = this.req.headers['content-type'];
    return typeof ct === 'string' && ct.startsWith('application/grpc') && !ct.startsWith('application/grpc-web');
  }
}

/**
 * `grpc-message` percent-encoding (gRPC over HTTP/2 spec, Envoy's `Grpc::Utility::PercentEncoding`):
 * only bytes outside printable ASCII (0x20–0x7E) and `%` itself are escaped, so `RBAC: access denied`
 * stays readable (encodeURIComponent would escape the `:` and clients show `%3A`).
 */
export function grpcMessageEncode(text: string): string {
  if (/^[\x20-\x24\x26-\x7e]*$/.test(text)) return text;
  let out = '';
  for (const byte of Buffer.from(text, 'utf8')) {
    out += byte >= 0x20 && byte <= 0x7e && byte !== 0x25 ? String.fromCharCode(byte) : `%${byte.toString(16).toUpperCase().padStart(2, '0')}`;
  }
  return out;
}

/** Envoy's HTTP status → gRPC status mapping for local replies. */
export function httpToGrpcStatus(http: number): number {
  switch (http) {
    case 400:
      return 13; // INTERNAL
    case 401:
      return 16; // UNAUTHENTICATED
    case 403:
      return 7; // PERMISSION_DENIED
    case 404:
      return 12; // UNIMPLEMENTED
    case 429:
    case 502:
    case 503:
    case 504:
      return 14; // UNAVAILABLE
    default:
      return 2; // UNKNOWN
  }
}

/**
 * Envoy's connection manager sets `x-request-id` before the first filter runs (ENV:
 * source/common/http/conn_manager_utility.cc `mutateRequestHeaders` → the UUID request-id extension
 * `UUIDRequestIDExtension::set`): a client's is kept, otherwise a UUID v4 is generated and written
 * into the request headers (`req.headers`). So every filter, the ext_authz CheckRequest, the
 * upstream request and every access-log line (locally answered requests included) carry the same id.
 */
function keepOrGenerateRequestId(req: IncomingMessage | Http2ServerRequest): string {
  const headers = req.headers;
  const have = headers['x-request-id'];
  const id = Array.isArray(have) ? have[0] : have;
  if (id) return id;
  // Filters read `req.headers`; the router writes the header upstream from `requestId`, and the
  // ext_authz CheckRequest adds it to its header map (both read `rawHeaders`, left as received).
  const generated = randomUUID();
  headers['x-request-id'] = generated;
  return generated;
}
