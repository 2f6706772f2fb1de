/**
 * One attempt of a request upstream (Envoy's router `UpstreamRequest`): the endpoint it leased,
 * the undici-style handler of its exchange, its per-try timeout, and the response it passes
 * downstream (headers through the response phases, body under back-pressure, trailers). Whether
 * to retry, and what a failure answers, are its {@link AttemptOwner}'s calls (request-forwarder.ts).
 *
 * Also the request body's replay: the copy of a streamed body kept so that a retry can resend it.
 */
import type { ServerResponse } from 'node:http';
import { Readable } from 'node:stream';
import type { Dispatcher } from 'undici';
import { applyHeaderModifier, type HeaderModifier } from '../routing/index.ts';
import type { Target } from '../state/index.ts';
import { type ClusterManager, type UpstreamHandler, type UpstreamRequest as UpstreamMessage, type UpstreamLease } from '../upstream/index.ts';
import { GENERATED_COOKIE } from './attempt-endpoint.ts';
import { GrpcWebTrailerReader, type GrpcFrameCounter } from './grpc-frames.ts';
import { type BufferHolder, HeaderList, heldBy, isHopByHop, namesMoreHeaders, respond, type StreamContext, stripHopByHop } from '../pipeline/index.ts';

/** Where an attempt is (one state at a time; the last two are final). */
export const AttemptState = {
  /** Created, not sent. */
  Idle: 0,
  /** Handed to the connection pool; no connection yet. */
  Connecting: 1,
  /** The request is on a connection (it can be aborted). */
  Sent: 2,
  /** Response headers went downstream; the body follows. */
  ResponseStarted: 3,
  /** A response the retry policy retries: read to its end and dropped. */
  Draining: 4,
  /** Completed or failed; its endpoint lease is released. */
  Done: 5,
  /** Given up (request over, per-try timeout); late callbacks are ignored. */
  Cancelled: 6,
} as const;
export type AttemptState = (typeof AttemptState)[keyof typeof AttemptState];

/** What an attempt reports to the request it belongs to, and reads from it. */
export interface AttemptOwner {
  readonly stream: StreamContext;
  readonly clusters: ClusterManager;
  /** Response header edits of the matched route rule and backend (applied before the response phases). */
  readonly responseEdits: readonly HeaderModifier[] | undefined;
  /** gRPC only: message counter of the answer sent downstream. */
  readonly responseFrames: GrpcFrameCounter | null;
  /** Final response headers arrived (`raw`: without hop-by-hop headers): true when the retry policy takes another attempt (this answer is drained). */
  retriesResponse(status: number, raw: readonly string[]): boolean;
  /** The response was passed downstream whole (its trailers and end follow). */
  onAttemptComplete(a: UpstreamRequest): void;
  /** A retried response was drained: the next attempt may start. */
  onAttemptDrained(a: UpstreamRequest): void;
  onAttemptError(a: UpstreamRequest, err: Error): void;
  onPerTryTimeout(a: UpstreamRequest): void;
}

/** One attempt; see the module comment. */
export class UpstreamRequest implements UpstreamHandler, Dispatcher.DispatchHandler {
  state: AttemptState;
  readonly lease: UpstreamLease;
  private readonly owner: AttemptOwner;
  private abort: ((err?: Error) => void) | undefined;
  /** Per-attempt timeout (HTTPRoute `timeouts.backendRequest`). */
  private tryTimer: NodeJS.Timeout | undefined;
  /** undici's resume function for this attempt (reused for every drain). */
  private resume: () => void;
  /** Trailers split off a gRPC trailers-only answer, sent when the response ends. */
  private pendingTrailers: string[] | null;
  /** The upstream stream or connection carrying the exchange (its buffers count for the request). */
  private carrier: BufferHolder | undefined;
  /** gRPC-Web answers passed downstream: reads the status from the body's trailer frame. */
  private webTrailer: GrpcWebTrailerReader | null;
  /**
   * HTTP/1.1 upstream to an HTTP/1 downstream: body bytes the response's Content-Length still
   * announces (-1: unknown), and the chunk that completed it, held for `res.end(chunk)`. undici
   * completes the response right after that chunk (the same parser run), so nothing waits; Node
   * then writes head and body in one corked batch without a deferred uncork per response.
   */
  private bodyLeft: number;
  private lastChunk: Buffer | null;
  private http1Upstream: boolean;

  constructor(owner: AttemptOwner, lease: UpstreamLease) {
    this.state = AttemptState.Idle;
    this.owner = owner;
    this.lease = lease;
    this.abort = undefined;
    this.tryTimer = undefined;
    this.resume = noop;
    this.pendingTrailers = null;
    this.carrier = undefined;
    this.webTrailer = null;
    this.bodyLeft = -1;
    this.lastChunk = null;
    this.http1Upstream = false;
  }

  /** Not finished: its callbacks still count. */
  get live(): boolean {
    return this.state !== AttemptState.Done && this.state !== AttemptState.Cancelled;
  }

  /** Bytes waiting in the upstream side's buffers for this attempt (0 once it is over: the connection may serve another request). */
  get bufferedBytes(): number {
    return this.live ? heldBy(this.carrier) : 0;
  }

  /** The request reached a connection (the attempt can be aborted). */
  get connected(): boolean {
    return this.abort !== undefined;
  }

  /**
   * Send `req` to the leased endpoint of `target`'s cluster (circuit breakers and outlier
   * detection apply in the cluster manager). `retry`: counted against `maxRetries`.
   * `perTryMs`: the per-try timeout (0 = none).
   */
  start(target: Target, req: UpstreamMessage, h2: boolean, retry: boolean, perTryMs: number): void {
    this.state = AttemptState.Connecting;
    this.http1Upstream = !h2;
    this.owner.clusters.dispatch(target, this.lease.ep, req, this, h2, retry);
    if (perTryMs > 0 && this.live) this.tryTimer = setTimeout(onTryTimeout, perTryMs, this);
  }

  /** Give the attempt up: release its endpoint and abort its exchange with `err`. No-op once finished. */
  cancel(err: Error): void {
    if (!this.live) return;
    this.state = AttemptState.Cancelled;
    this.release();
    this.abort?.(err);
  }

  onCarrier(carrier: BufferHolder): void {
    this.carrier = carrier;
  }

  onConnect(abort: (err?: Error) => void): void {
    if (this.abort === undefined) this.owner.clusters.connectOutcome(this.lease.ep);
    this.abort = abort;
    // Cancelled (downstream gone, timeout) while the request waited for a connection: stop now,
    // or the upstream request would stay open with no one to answer.
    if (this.state === AttemptState.Cancelled) abort(new Error('request cancelled'));
    else if (this.state === AttemptState.Connecting) this.state = AttemptState.Sent;
  }

  onHeaders(statusCode: number, rawHeaders: (Buffer | string)[], resume: () => void, statusText: string): boolean {
    if (this.state === AttemptState.Cancelled) {
      this.abort?.(new Error('request cancelled'));
      return false;
    }
    if (statusCode < 200) return true; // 1xx: Node's server already handled Continue.
    // One pass: the header block as strings, and without hop-by-hop headers (what goes downstream).
    let headers: string[] = [];
    let connection: string | undefined;
    let contentLength: string | undefined;
    for (let i = 0; i < rawHeaders.length; i += 2) {
      const n = rawHeaders[i].toString('latin1');
      const v = rawHeaders[i + 1].toString('latin1');
      if (!isHopByHop(n)) {
        headers.push(n, v);
        if (n.length === 14 && n.toLowerCase() === 'content-length') contentLength = v;
      } else if (n.length === 10 && n.toLowerCase() === 'connection') connection = v;
    }
    const o = this.owner;
    if (o.retriesResponse(statusCode, headers)) {
      // Drain this answer and try again once it is complete (the connection stays reusable).
      this.state = AttemptState.Draining;
      return true;
    }
    this.state = AttemptState.ResponseStarted;
    this.resume = resume;
    const s = o.stream;
    s.upstreamResponseMonotonic = performance.now();
    s.responseCodeDetails = 'via_upstream';
    s.upstreamConnectHeaders = o.clusters.connectHeadersFor(this.lease.ep);
    // Headers the Connection header names are hop-by-hop too (rare: a second pass).
    if (connection !== undefined && namesMoreHeaders(connection)) headers = stripHopByHop(headers, connection);
    if (s.isGrpcWeb) this.webTrailer = grpcWebAnswer(s, headers);
    else if (s.http2) {
      // gRPC trailers-only (grpc-status among the headers, which the gRPC protocol allows only
      // there): the head goes out before the body is known to be empty, so send the equivalent
      // headers + trailers (every gRPC client reads the status from either).
      const split = splitTrailersOnly(headers);
      headers = split.headers;
      this.pendingTrailers = split.trailers;
    }
    const out = new HeaderList(headers);
    // The cookie a DestinationRule's consistent hash generated for this request (hash-policy.ts).
    const cookie = s.get(GENERATED_COOKIE);
    if (cookie) out.append('set-cookie', cookie);
    if (o.responseEdits) for (const m of o.responseEdits) applyHeaderModifier(out, m);
    if (!respond(s, statusCode, statusText, out)) return false;
    if (this.http1Upstream && !s.http2 && contentLength !== undefined) this.bodyLeft = declaredLength(contentLength);
    const res = s.res;
    if (!res.writableNeedDrain) return true;
    res.once('drain', resume);
    return false;
  }

  onData(chunk: Buffer): boolean {
    if (this.state === AttemptState.Cancelled) {
      this.abort?.(new Error('request cancelled'));
      return false;
    }
    if (this.state === AttemptState.Draining) return true;
    const o = this.owner;
    const s = o.stream;
    s.bytesSent += chunk.length;
    if (o.responseFrames) s.responseMessages += o.responseFrames.inspect(chunk);
    else if (this.webTrailer) this.webTrailer.inspect(chunk);
    if (this.bodyLeft > 0 && (this.bodyLeft -= chunk.length) === 0) {
      this.lastChunk = chunk;
      return true;
    }
    if ((s.res as ServerResponse).write(chunk)) return true;
    s.res.once('drain', this.resume);
    return false;
  }

  onComplete(upstreamTrailers: string[] | null): void {
    if (!this.live) return;
    const drained = this.state === AttemptState.Draining;
    this.finish();
    const o = this.owner;
    if (drained) return o.onAttemptDrained(this);
    o.onAttemptComplete(this);
    const trailers = upstreamTrailers ?? this.pendingTrailers;
    const res = o.stream.res;
    if (this.webTrailer && this.webTrailer.status !== '') o.stream.grpcStatus = this.webTrailer.status;
    if (trailers && trailers.length > 0) {
      const t: Record<string, string> = {};
      for (let i = 0; i < trailers.length; i += 2) t[String(trailers[i])] = String(trailers[i + 1]);
      // The upstream's gRPC status, for the stats (`grpc_response_status`).
      if (o.responseFrames || o.stream.isGrpcWeb) o.stream.grpcStatus = t['grpc-status'] ?? o.stream.grpcStatus;
      try {
        res.addTrailers(t);
      } catch {
        // Non-chunked HTTP/1.1 response: trailers cannot be sent.
      }
    }
    const last = this.lastChunk;
    if (last === null) res.end();
    else {
      this.lastChunk = null;
      res.end(last);
    }
  }

  onError(err: Error): void {
    // A cancelled attempt's error is the expected end of its abort.
    if (!this.live) return;
    if (!this.connected) this.owner.clusters.connectOutcome(this.lease.ep, err);
    this.finish();
    this.owner.onAttemptError(this, err);
  }

  /** Entry point of the per-try timer. */
  perTryTimeout(): void {
    this.tryTimer = undefined;
    if (this.live) this.owner.onPerTryTimeout(this);
  }

  private finish(): void {
    this.state = AttemptState.Done;
    this.release();
  }

  private release(): void {
    this.lease.release();
    if (this.tryTimer) {
      clearTimeout(this.tryTimer);
      this.tryTimer = undefined;
    }
  }
}

/** A Content-Length value as a byte count; -1 when it is not one. */
function declaredLength(v: string): number {
  const n = Number(v);
  return Number.isSafeInteger(n) && n >= 0 ? n : -1;
}

function onTryTimeout(a: UpstreamRequest): void {
  a.perTryTimeout();
}

function noop(): void {}

/**
 * The answer to a gRPC-Web request: a trailers-only one carries `grpc-status` in its headers
 * (recorded now, and left there: a browser cannot read HTTP trailers); a gRPC-Web body gets a
 * reader for its trailer frame. Anything else (an HTTP error page) has no gRPC status.
 */
function grpcWebAnswer(s: StreamContext, headers: readonly string[]): GrpcWebTrailerReader | null {
  let ct = '';
  for (let i = 0; i < headers.length; i += 2) {
    const n = headers[i];
    if (n.length === 11 && n.toLowerCase() === 'grpc-status') s.grpcStatus = headers[i + 1].trim();
    else if (n.length === 12 && n.toLowerCase() === 'content-type') ct = headers[i + 1].toLowerCase();
  }
  return ct.startsWith('application/grpc-web') ? new GrpcWebTrailerReader(ct.startsWith('application/grpc-web-text')) : null;
}

/** Keep `content-type` in the headers and move the rest of a trailers-only answer to trailers. */
function splitTrailersOnly(raw: string[]): { headers: string[]; trailers: string[] | null } {
  let grpc = false;
  for (let i = 0; i < raw.length; i += 2) if (raw[i].length === 11 && raw[i].toLowerCase() === 'grpc-status') grpc = true;
  if (!grpc) return { headers: raw, trailers: null };
  const headers: string[] = [];
  const trailers: string[] = [];
  for (let i = 0; i < raw.length; i += 2) {
    const n = raw[i].toLowerCase();
    if (n === 'content-type' || n === 'date') headers.push(raw[i], raw[i + 1]);
    else trailers.push(raw[i], raw[i + 1]);
  }
  return { headers, trailers };
}

/**
 * Bodies up to this size (bytes, declared by Content-Length) are gathered before the request is
 * sent, so head and body leave in one write (one HTTP/2 DATA frame and one TLS record upstream),
 * and a retry can send them again. Larger and chunked bodies stream with back-pressure.
 */
export const SMALL_BODY_BYTES = 64 * 1024;

/** The first SMALL_BODY_BYTES of a streamed request body, kept so that a retry can resend it. */
export class ReplayBuffer {
  private chunks: Buffer[] | null = [];
  private size = 0;
  /** The whole body went through (and fit). */
  complete = false;
  /** Some of the body left the request stream (it may have reached a failed upstream). */
  started = false;
  /** Called with the whole body once it ended within the limit (RequestMirror copies). */
  onWhole: ((body: Buffer) => void) | undefined = undefined;

  add(chunk: Buffer): void {
    this.started = true;
    if (!this.chunks) return;
    this.size += chunk.length;
    if (this.size > SMALL_BODY_BYTES) this.chunks = null;
    else this.chunks.push(chunk);
  }

  /** The body ended within the limit: {@link take} has all of it. */
  get whole(): boolean {
    return this.complete && this.chunks !== null;
  }

  take(): Buffer {
    const body = Buffer.concat(this.chunks ?? []);
    this.chunks = [body];
    return body;
  }
}

/** Yield the request body's chunks, counting them into `stream.bytesReceived` and keeping them in `replay`. */
export async function* counted(req: AsyncIterable<Buffer>, stream: StreamContext, replay: ReplayBuffer, frames: GrpcFrameCounter | null): AsyncGenerator<Buffer> {
  for await (const chunk of req) {
    countChunk(chunk, stream, replay, frames);
    yield chunk;
  }
  bodyEnded(replay);
}

function countChunk(chunk: Buffer, stream: StreamContext, replay: ReplayBuffer, frames: GrpcFrameCounter | null): void {
  stream.bytesReceived += chunk.length;
  if (frames) stream.requestMessages += frames.inspect(chunk);
  replay.add(chunk);
}

function bodyEnded(replay: ReplayBuffer): void {
  replay.complete = true;
  if (replay.onWhole && replay.whole) replay.onWhole(replay.take());
}

/**
 * {@link counted} over the downstream request itself, without an async generator and a
 * `Readable.from` per request (a promise per chunk; a third of the streamed-body cost of a gRPC
 * unary call): the request is read only when this stream's reader asks (so back-pressure holds,
 * and a body never pulled can still be sent again), each chunk counted and kept as it passes.
 * A request that closes before its end fails this stream, as the generator's iteration does.
 */
export class CountedBody extends Readable {
  readonly #src: Readable;
  #paused = true;
  #ended = false;

  constructor(src: Readable, stream: StreamContext, replay: ReplayBuffer, frames: GrpcFrameCounter | null) {
    super();
    this.#src = src;
    src.on('data', (chunk: Buffer) => {
      countChunk(chunk, stream, replay, frames);
      if (!this.push(chunk)) this.#pause();
    });
    src.once('end', () => {
      this.#ended = true;
      bodyEnded(replay);
      this.push(null);
    });
    src.once('error', (err) => this.destroy(err));
    src.once('close', () => {
      if (!this.#ended) this.destroy(Object.assign(new Error('the request body ended before it was complete'), { code: 'ERR_STREAM_PREMATURE_CLOSE' }));
    });
    // Nothing is read before the upstream asks ('data' listeners make a stream flow).
    src.pause();
  }

  #pause(): void {
    this.#paused = true;
    this.#src.pause();
  }

  override _read(): void {
    if (!this.#paused) return;
    this.#paused = false;
    this.#src.resume();
  }
}

export function isStream(b: Buffer | Readable | null): b is Readable {
  return b !== null && !Buffer.isBuffer(b);
}

/**
 * Whether a request body can be sent again: none, gathered, a streamed one kept whole, or
 * (`unsent`: the attempt failed before the upstream could take any of it) one never pulled.
 */
export function replayable(body: Buffer | Readable | null, replay: ReplayBuffer | undefined, unsent: boolean): boolean {
  return !isStream(body) || (replay !== undefined && (replay.whole || (unsent && !replay.started)));
}
