/**
 * Per-tunnel and per-request contexts. Every field is initialised in the constructor so V8 keeps
 * one object shape (fastify's stable-shape rule); filter data lives in slots (see slots.ts).
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { SpiffeId } from '../identity/spiffe.ts';
import type { Endpoint, MeshSnapshot, PortProtocol, Target } from '../state/types.ts';
import { LOCAL_REPLY_BODY, LOCAL_REPLY_STATUS, ResponseFlag } from '../telemetry/response-flags.ts';
import type { FilterChain } from './chain.ts';
import { HeaderList } from './headers.ts';
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
  rejectDetails: string;
  /** Bytes relayed on TCP tunnels. */
  bytesReceived: number;
  bytesSent: number;
  /** Inner requests served on this tunnel so far. */
  requestCount: number;
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
    this.bytesReceived = 0;
    this.bytesSent = 0;
    this.requestCount = 0;
    this.slots = new Array(slotCount('connection')).fill(undefined);
  }

  /** Refuse the tunnel from `onConnection` (then return StopAndReply). */
  reject(status: number, details: string): void {
    this.rejectStatus = status;
    this.rejectDetails = details;
  }

  get<T>(slot: Slot<T>): T | undefined {
    return this.slots[slot.index] as T | undefined;
  }

  set<T>(slot: Slot<T>, value: T): void {
    this.slots[slot.index] = value;
  }
}

/** One inner HTTP request/response exchange on a tunnel. */
export class StreamContext {
  readonly conn: ConnectionContext;
  readonly chain: FilterChain;
  readonly req: IncomingMessage;
  readonly res: ServerResponse;
  readonly startTime: number;
  readonly startMonotonic: number;
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
  /** Set once `onStreamComplete` has run. */
  completed: boolean;
  /** The router's handle to cancel the upstream request when the downstream goes away. */
  abortUpstream: { cancel(): void } | undefined;
  private readonly slots: unknown[];

  constructor(conn: ConnectionContext, chain: FilterChain, req: IncomingMessage, res: ServerResponse) {
    this.conn = conn;
    this.chain = chain;
    this.req = req;
    this.res = res;
    this.startTime = Date.now();
    this.startMonotonic = performance.now();
    this.responseCode = 0;
    this.responseFlags = ResponseFlag.None;
    this.responseCodeDetails = '';
    this.endpoint = undefined;
    this.upstreamHost = '';
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
    if (res.headersSent || res.destroyed) return false;
    this.responseCode = status;
    this.chain.runResponseHeaders(this, headers);
    if (statusText) res.writeHead(status, statusText, headers.raw);
    else res.writeHead(status, headers.raw);
    return true;
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
      this.res.destroy();
      return;
    }
    const headers = new HeaderList(['content-length', String(Buffer.byteLength(text)), 'content-type', 'text/plain']);
    if (this.respond(code, undefined, headers)) this.res.end(text);
  }
}
