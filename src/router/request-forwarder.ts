/**
 * One request's trip upstream once the router decided where it goes: its body (none, gathered,
 * or streamed with a replay copy), the route's request timeout, the attempts ({@link
 * UpstreamRequest}, one at a time) and the retries between them ({@link RetryState}), and the
 * answer when they fail (upstream/failure.ts: 503 `UH`/`UF`/`UC`/`UR`/`UO`, 502 `UPE`, 504 `UT`,
 * `URX` when the retry budget was spent; a downstream reset once the response started).
 *
 * It is the core's handle on the upstream side (`StreamContext.abortUpstream`): a downstream that
 * goes away cancels the current attempt, the timers and a pending retry.
 *
 * It is also the request's account in the overload manager's budget (pipeline/overload.ts): the
 * bytes waiting in the downstream request and transport, the streamed body and the current
 * attempt's upstream connection; reset as Envoy's `reset_high_memory_stream` (flag `OM`).
 */
import type { IncomingMessage } from 'node:http';
import { Readable } from 'node:stream';
import { replyIfAllRefused } from '../netpol/index.ts';
import type { HeaderModifier } from '../routing/index.ts';
import type { Target } from '../state/index.ts';
import {
  ResponseFlag,
  bodyAfterBuffer,
  downstreamClosed,
  type BufferAccount,
  type Http2DownstreamRequest,
  type HeaderList,
  heldBy,
  type OverloadManager,
  OVERLOAD_DETAILS,
  requestBody,
  resetDownstream,
  type StreamContext,
} from '../pipeline/index.ts';
import { answerFailure, type ClusterManager, CONNECT_FAILURE, NO_HEALTHY_UPSTREAM, PER_TRY_TIMEOUT, RESPONSE_TIMEOUT, upstreamFailure, type UpstreamFailure } from '../upstream/index.ts';
import { GrpcFrameCounter } from './grpc-frames.ts';
import { RetryState, type CompiledRoute } from './retry-policy.ts';
import { startAttempt } from './attempt-endpoint.ts';
import { counted, CountedBody, isStream, replayable, ReplayBuffer, SMALL_BODY_BYTES, UpstreamRequest, type AttemptOwner } from './upstream-request.ts';

/** See the module comment. One per request (and one UpstreamRequest per attempt); its timers call module functions, not closures. */
export class RequestForwarder implements AttemptOwner, BufferAccount {
  readonly stream: StreamContext;
  readonly clusters: ClusterManager;
  private readonly retry: RetryState;
  private readonly target: Target;
  private readonly headers: HeaderList;
  private readonly path: string;
  private readonly h2: boolean;
  /** `:authority` sent to an HTTP/2 upstream (the request's, or a URLRewrite hostname). */
  private readonly authority: string;
  readonly responseEdits: readonly HeaderModifier[] | undefined;
  /** RequestMirror: called once with the whole request body when it is known (not for bodies past SMALL_BODY_BYTES). */
  mirror: ((body: Buffer | null) => void) | undefined;
  private body: Buffer | Readable | null;
  /** A streamed body's copy for retries (see ReplayBuffer). */
  private replay: ReplayBuffer | undefined;
  /** The latest attempt. */
  private current: UpstreamRequest | undefined;
  private timer: NodeJS.Timeout | undefined;
  /** The whole request is over (answered, failed, cancelled or timed out). */
  private over: boolean;
  /** gRPC only: message counters of the request body (read once, whatever the retries) and of the answer sent downstream. */
  readonly requestFrames: GrpcFrameCounter | null;
  readonly responseFrames: GrpcFrameCounter | null;
  /** The budget this request counts in (from its first attempt to its end), if any. */
  private readonly overload: OverloadManager | undefined;
  accounted: number;
  prevAccount: BufferAccount | undefined;
  nextAccount: BufferAccount | undefined;

  constructor(
    stream: StreamContext,
    clusters: ClusterManager,
    route: CompiledRoute,
    target: Target,
    headers: HeaderList,
    path: string,
    h2: boolean,
    authority: string,
    responseEdits: readonly HeaderModifier[] | undefined,
    overload?: OverloadManager,
  ) {
    this.stream = stream;
    this.clusters = clusters;
    this.retry = new RetryState(route);
    this.target = target;
    this.headers = headers;
    this.path = path;
    this.h2 = h2;
    this.authority = authority;
    this.responseEdits = responseEdits && responseEdits.length > 0 ? responseEdits : undefined;
    this.mirror = undefined;
    this.body = null;
    this.replay = undefined;
    this.current = undefined;
    this.timer = undefined;
    this.over = false;
    const grpc = stream.isGrpc;
    this.requestFrames = grpc ? new GrpcFrameCounter() : null;
    this.responseFrames = grpc ? new GrpcFrameCounter() : null;
    this.overload = overload;
    this.accounted = 0;
    this.prevAccount = undefined;
    this.nextAccount = undefined;
    stream.abortUpstream = this;
  }

  /** Send the first attempt with `body` (null, a gathered Buffer, or the request stream and its replay copy). */
  send(body: Buffer | Readable | null, replay?: ReplayBuffer): void {
    this.body = body;
    this.replay = replay;
    if (this.mirror) {
      // The copy leaves once the body is whole; a streamed body past SMALL_BODY_BYTES is not mirrored.
      if (!isStream(body)) this.mirror(body);
      else if (replay) replay.onWhole = this.mirror;
    }
    // Envoy's route timeout runs from the end of the downstream request to the end of the
    // response: a slow upload does not count against it.
    const req = requestBody(this.stream);
    if (!isStream(body) || req.readableEnded) this.armTimeout();
    else req.once('end', () => this.armTimeout());
    this.overload?.open(this);
    this.attempt();
  }

  /** Bytes this request holds: downstream request and transport, streamed body, current attempt upstream. */
  bufferedBytes(): number {
    const s = this.stream;
    // HTTP/2: the stream is both the request body and the transport.
    const own = s.http2 ? 0 : (s.req as IncomingMessage).readableLength;
    const transport = s.http2 ? (s.req as Http2DownstreamRequest).stream : (s.req as IncomingMessage).socket;
    const body = this.body;
    return own + heldBy(transport) + (isStream(body) ? body.readableLength : 0) + (this.current?.bufferedBytes ?? 0);
  }

  /** The overload manager resets this request (Envoy's `reset_high_memory_stream`): flag `OM`, the downstream reset, the attempt cancelled. */
  overloadReset(): void {
    if (this.over) return;
    const s = this.stream;
    s.addFlag(ResponseFlag.OverloadManager);
    s.responseCodeDetails = OVERLOAD_DETAILS;
    this.current?.cancel(new Error('request cancelled'));
    this.end();
    resetDownstream(s);
  }

  private armTimeout(): void {
    const ms = this.retry.route.requestTimeoutMs;
    if (ms > 0 && !this.over && !this.timer) this.timer = setTimeout(onRequestTimeout, ms, this);
  }

  /** Start the next attempt (first, or after a retry's back-off). */
  attempt(): void {
    const s = this.stream;
    if (this.over || downstreamClosed(s)) return this.end();
    const lease = startAttempt(this.clusters, this.target, s, this.retry.tried);
    if (!lease) {
      this.end();
      // Every healthy endpoint refused by the NetworkPolicy mode: 403 `NetworkPolicy: access denied`.
      if (!replyIfAllRefused(s, this.target)) answerFailure(s, NO_HEALTHY_UPSTREAM);
      return;
    }
    // A retry left with only a host whose connect just timed out (no other endpoint: the panic
    // of connect-ejection.ts) would wait that timeout again: it fails now, as it would then.
    if (s.attempts > 1 && this.retry.tried?.includes(lease.ep.authority) && this.clusters.lb.ejections.isEjected(lease.ep.authority)) {
      lease.release();
      s.attempts--;
      this.end();
      answerFailure(s, CONNECT_FAILURE);
      s.addFlag(ResponseFlag.UpstreamRetryLimitExceeded);
      return;
    }
    const a = (this.current = new UpstreamRequest(this, lease));
    s.chain.runUpstreamAttempt(s, this.headers);
    const req = { method: s.method, path: this.path, authority: this.authority, headers: this.headers.raw, body: this.body };
    a.start(this.target, req, this.h2, s.attempts > 1, this.retry.route.perTryTimeoutMs);
  }

  /**
   * Called by the core when the downstream went away before the response completed: the request
   * timer, the per-try timer and a pending retry back-off are cleared and the current attempt is
   * aborted, so no further attempt starts (Envoy's router `onDestroy` resets the upstream request
   * and the retry state: envoyproxy/envoy source/common/router/router.cc `Filter::onDestroy`).
   */
  cancel(): void {
    this.current?.cancel(new Error('downstream disconnected'));
    this.end();
  }

  /** The request timeout fired: 504 `UT` before the response started, else a reset. */
  timeout(f: UpstreamFailure = RESPONSE_TIMEOUT): void {
    if (this.over) return;
    this.over = true;
    this.current?.cancel(new Error('request timeout'));
    this.end();
    answerFailure(this.stream, f);
  }

  /**
   * The per-try timeout (`timeouts.backendRequest`) of attempt `a` fired. Before the response
   * started, the attempt is retried when the policy retries timeouts (Envoy retries per-try
   * timeouts under `reset`, `5xx` and `gateway-error`) and the request can be resent; otherwise
   * the request ends as on the route timeout: 504 `UT` (`upstream_per_try_timeout`), or a reset.
   */
  onPerTryTimeout(a: UpstreamRequest): void {
    if (this.over || a !== this.current) return;
    if (a.connected && !this.stream.res.headersSent && this.retry.retriesTimeout && this.canRetry() && this.replayable(false)) {
      a.cancel(new Error('per try timeout'));
      this.retryAfter(a);
      return;
    }
    this.timeout(PER_TRY_TIMEOUT);
  }

  retriesResponse(status: number, raw: readonly string[]): boolean {
    if (!this.replayable(false) || !this.retry.retriesResponse(status, raw)) return false;
    if (this.canRetry()) return true;
    if (this.retry.exhausted(this.stream)) this.stream.addFlag(ResponseFlag.UpstreamRetryLimitExceeded);
    return false;
  }

  onAttemptDrained(a: UpstreamRequest): void {
    if (this.over) return;
    this.retryAfter(a);
  }

  onAttemptComplete(): void {
    this.end();
  }

  onAttemptError(a: UpstreamRequest, err: Error & { code?: string }): void {
    if (this.over) return this.end();
    const s = this.stream;
    // Already answered (e.g. a local reply after the request was cancelled): nothing to undo.
    if (downstreamClosed(s) || s.res.writableEnded) return this.end();
    const f = upstreamFailure(err, s.res.headersSent);
    const retriable = !s.res.headersSent && this.retry.retriesError(err, (unsent) => this.replayable(unsent));
    if (retriable && this.canRetry()) return this.retryAfter(a);
    this.end();
    answerFailure(s, f);
    // Envoy's `UF,URX`: the retry policy wanted another attempt but the budget was spent.
    if (retriable && this.retry.exhausted(s)) s.addFlag(ResponseFlag.UpstreamRetryLimitExceeded);
  }

  /** Whether another attempt is allowed at all (budget, breaker, request not over; the body is checked by the retry conditions). */
  private canRetry(): boolean {
    if (this.over || this.retry.exhausted(this.stream)) return false;
    return this.retry.breakerAllows(this.stream, this.clusters.clusterFor(this.target));
  }

  private replayable(unsent: boolean): boolean {
    return replayable(this.body, this.replay, unsent);
  }

  /** The next attempt after `a`, once the back-off has passed. */
  private retryAfter(a: UpstreamRequest): void {
    if (this.over) return this.end();
    // A streamed body that ended within the replay limit is resent from its copy (one never
    // pulled is still whole in its stream and goes as it is).
    if (isStream(this.body) && this.replay?.whole) this.body = this.replay.take();
    this.retry.backOff(this.stream, a.lease.ep.authority, nextAttempt, this);
  }

  /** The request is over: clear its timer and a pending retry (the current attempt has finished or was cancelled). */
  private end(): void {
    this.over = true;
    this.overload?.close(this);
    if (this.timer) {
      clearTimeout(this.timer);
      this.timer = undefined;
    }
    this.retry.cancel();
  }

  /** Entry point of the request timer. */
  requestTimeout(): void {
    this.timer = undefined;
    this.timeout();
  }
}

function onRequestTimeout(f: RequestForwarder): void {
  f.requestTimeout();
}

function nextAttempt(f: RequestForwarder): void {
  f.attempt();
}

/**
 * Send the request of `f` with its body: none; gathered (declared within SMALL_BODY_BYTES, or
 * read whole by a filter); or streamed, counted as it passes and pulled by the upstream so that
 * back-pressure holds.
 */
export function forwardWithBody(stream: StreamContext, f: RequestForwarder): void {
  const req = requestBody(stream);
  // A filter may have read the start of the body already (ext_authz with the body): it goes first.
  const pre = stream.bufferedBody;
  const length = pre ? (pre.complete ? pre.data.length : -1) : bodyLength(stream);
  if (length === 0) return f.send(null);
  if (pre?.complete) return sendGathered(pre.data, f);
  if (length > 0 && length <= SMALL_BODY_BYTES) return collectBody(req, f);
  // Streamed bodies are also kept while within SMALL_BODY_BYTES, as Envoy buffers bodies for
  // retries: a request whose body ended within that (a gRPC unary call, which has no
  // content-length) can be retried, and so can one whose body was never pulled (connect
  // failure); a larger body, once sending started, cannot be replayed and is not retried.
  const replay = new ReplayBuffer();
  f.send(pre ? Readable.from(counted(bodyAfterBuffer(stream), stream, replay, f.requestFrames), { objectMode: false }) : new CountedBody(req, stream, replay, f.requestFrames), replay);
}

/** Declared body size: 0 none, -1 unknown (chunked / streamed h2: stream it), else Content-Length. */
function bodyLength(stream: StreamContext): number {
  const req = stream.req;
  const cl = req.headers['content-length'];
  if (stream.http2) {
    // HEADERS with END_STREAM: no body at all.
    if ((req as Http2DownstreamRequest).stream.endAfterHeaders) return 0;
    if (cl === undefined) return -1;
  } else {
    if (req.headers['transfer-encoding'] !== undefined) return -1;
    if (cl === undefined) return 0;
  }
  const n = Number(cl);
  return Number.isSafeInteger(n) && n >= 0 ? n : -1;
}

function collectBody(req: Readable, f: RequestForwarder): void {
  const chunks: Buffer[] = [];
  req.on('data', (c: Buffer) => chunks.push(c));
  // An aborted upload never ends: the downstream close handler cancels the stream.
  req.once('end', () => sendGathered(chunks.length === 1 ? chunks[0] : Buffer.concat(chunks), f));
}

/** Send a whole body gathered before the request goes upstream (counted as received). */
function sendGathered(body: Buffer, f: RequestForwarder): void {
  f.stream.bytesReceived = body.length;
  if (f.requestFrames) f.stream.requestMessages += f.requestFrames.inspect(body);
  f.send(body);
}
