/**
 * Upstream failure mapping: every way an upstream attempt or connection can fail, as the status
 * Envoy answers with, its response flag (pipeline/response-flags.ts) and its response code
 * details. The HTTP router, the dedicated (WebSocket / Expect) exchanges and the TCP proxy all
 * take their answers from here:
 * no endpoint ⇒ 503 `UH`; circuit breaker ⇒ 503 `UO`; connect failure ⇒ 503 `UF`; reset ⇒ 503
 * `UC`/`UR` before the response started; upstream protocol error ⇒ 502 `UPE`; request or per-try
 * timeout ⇒ 504 `UT`. {@link answerFailure} answers any of them.
 */
import { HboneConnectError } from '../hbone/index.ts';
import { LOCAL_REPLY_STATUS, ResponseFlag, sendLocalReply, type ResponseFlagName, type StreamContext } from '../pipeline/index.ts';
import { UpstreamOverflowError } from './cluster-state.ts';
import { UpstreamResetError, type UpstreamResetReason } from './h2-upstream.ts';

/** How an upstream failure is answered and logged. */
export interface UpstreamFailure {
  /** Status of the local reply (or of a refused CONNECT) while nothing was answered yet. */
  readonly status: number;
  readonly flag: ResponseFlagName;
  /** Envoy's response code details (`%RESPONSE_CODE_DETAILS%`). */
  readonly details: string;
}

function failure(flag: ResponseFlagName, details: string): UpstreamFailure {
  return Object.freeze({ status: LOCAL_REPLY_STATUS[flag] ?? 500, flag, details });
}

/** The target has no healthy endpoint (or none the NetworkPolicy mode admits). */
export const NO_HEALTHY_UPSTREAM: UpstreamFailure = failure(ResponseFlag.NoHealthyUpstream, 'no_healthy_upstream');

/** The route's request timeout fired (`timeouts.request`; Envoy's `response_timeout`). */
export const RESPONSE_TIMEOUT: UpstreamFailure = failure(ResponseFlag.UpstreamRequestTimeout, 'response_timeout');

/** An attempt's per-try timeout fired and no retry follows (`timeouts.backendRequest`). */
export const PER_TRY_TIMEOUT: UpstreamFailure = failure(ResponseFlag.UpstreamRequestTimeout, 'upstream_per_try_timeout');

/**
 * Answer `f` downstream: a local reply with its status, flag and details, or, once the response
 * has started, its flag and details and a reset of the downstream stream (sendLocalReply does both).
 */
export function answerFailure(stream: StreamContext, f: UpstreamFailure): void {
  sendLocalReply(stream, f.status, undefined, f.flag, f.details);
}

/** A DestinationRule's `tcp.maxConnections` refused a TCP connection (Envoy's tcp_proxy `UO`). */
export const CONNECTION_OVERFLOW: UpstreamFailure = failure(ResponseFlag.UpstreamOverflow, 'upstream_overflow');

/**
 * The upstream could not be reached. Also every failure to open a TCP proxy's upstream
 * connection, whatever the error (refused, timed out, TLS, CONNECT refused), as Envoy's tcp_proxy.
 */
export const CONNECT_FAILURE: UpstreamFailure = failure(ResponseFlag.UpstreamConnectionFailure, 'upstream_reset_before_response_started{connection_failure}');

const OVERFLOW = failure(ResponseFlag.UpstreamOverflow, 'upstream_reset_before_response_started{overflow}');
const PROTOCOL_ERROR = failure(ResponseFlag.UpstreamProtocolError, 'upstream_reset_before_response_started{protocol_error}');
const DOWNSTREAM_GONE = failure(ResponseFlag.DownstreamConnectionTermination, 'downstream_remote_disconnect');
/** Envoy's flag per reset reason (envoyproxy/envoy source/common/router/router.cc `streamResetReasonToResponseFlag`). */
const RESET_FLAG: Readonly<Record<UpstreamResetReason, ResponseFlagName>> = Object.freeze({
  remote_reset: ResponseFlag.UpstreamRemoteReset,
  remote_refused_stream_reset: ResponseFlag.UpstreamRemoteReset,
  connection_termination: ResponseFlag.UpstreamConnectionTermination,
  protocol_error: ResponseFlag.UpstreamProtocolError,
});
const REASONS = Object.keys(RESET_FLAG) as UpstreamResetReason[];
const resets = (when: string) => Object.fromEntries(REASONS.map((r) => [r, failure(RESET_FLAG[r], `${when}{${r}}`)])) as Record<UpstreamResetReason, UpstreamFailure>;
const RESETS = { before: resets('upstream_reset_before_response_started'), after: resets('upstream_reset_after_response_started') } as const;

/** Whether `err` means the upstream could not be reached at all (nothing was sent: safe to retry). */
export function isConnectFailure(err: Error & { code?: string }): boolean {
  return err instanceof HboneConnectError || err.code === 'ECONNREFUSED' || err.code === 'UND_ERR_CONNECT_TIMEOUT' || err.code === 'EHOSTUNREACH' || err.code === 'ENETUNREACH';
}

/** Whether `err` is a connect (or CONNECT answer) that timed out: the endpoint did not answer at all. */
export function isConnectTimeout(err: Error & { code?: string }): boolean {
  return (err instanceof HboneConnectError && err.reason === 'TIMEOUT') || err.code === 'UND_ERR_CONNECT_TIMEOUT';
}

/**
 * The failure of an HTTP exchange with the upstream. `started`: the response headers were
 * already sent downstream (the downstream is then reset, and only flag and details are kept).
 */
export function upstreamFailure(err: Error & { code?: string }, started: boolean): UpstreamFailure {
  if (err instanceof UpstreamOverflowError) return OVERFLOW;
  if (isConnectFailure(err)) return CONNECT_FAILURE;
  if (err.code === 'UND_ERR_HEADERS_OVERFLOW' || (err.code ?? '').startsWith('HPE_') || err.name === 'HTTPParserError') return PROTOCOL_ERROR;
  if (err.code === 'UND_ERR_ABORTED' || err.name === 'AbortError') return DOWNSTREAM_GONE;
  const when = started ? RESETS.after : RESETS.before;
  // The h2c upstream names the reset reason (a RST_STREAM(NO_ERROR) before END_STREAM is a remote reset too).
  if (err instanceof UpstreamResetError) return when[err.reason];
  return when.connection_termination;
}

