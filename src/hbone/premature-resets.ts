/**
 * Envoy's rapid-reset defence (CVE-2023-44487), applied per HBONE session: a stream is "premature"
 * when the client resets it within a minimum lifetime of its opening, before using it (server.ts:
 * Envoy's "before the response headers"; a rapid-reset flood opens and resets streams at once).
 * Once `totalStreamCount`
 * streams have closed on a session, the session is closed when at least half of them were
 * premature; it is closed earlier when that is already certain, i.e. as soon as half of
 * `totalStreamCount` were premature. Source: envoyproxy/envoy source/common/http/conn_manager_impl.cc
 * `isPrematureRstStream` and `maybeDrainDueToPrematureResets` (runtime keys
 * `overload.premature_reset_min_stream_lifetime_seconds`, default 1 s, and
 * `overload.premature_reset_total_stream_count`, default 500; Envoy 1.27.1 release notes).
 * Cancels of tunnels in use, however many and however fast, never count.
 */
import type { ServerHttp2Stream } from 'node:http2';
import { bytesReceived, endStreamReceived } from './stream-end.ts';

/** Whether a session with `closed` closed streams, `premature` of them premature, must be closed. */
export function tooManyPrematureResets(closed: number, premature: number, totalStreamCount: number): boolean {
  if (totalStreamCount <= 0 || closed === 0) return false;
  // Before the count is reached: only once no later stream could bring the share under half.
  if (closed < totalStreamCount) return premature * 2 >= totalStreamCount;
  return premature * 2 >= closed;
}

/**
 * Whether the client dropped `stream` (opened in event-loop turn `turn`) before it could see an
 * answer: Envoy's "reset before the response headers were sent". Node marks headers sent as soon
 * as they are queued, and the 200 of a CONNECT to an HTTP port is queued at once: a stream closed
 * in the turn it opened in was reset in the same read (no answer could have reached the client),
 * and a later close counts when no answer was queued. A stream that carried a byte or END_STREAM
 * from the client was used, whatever its fate.
 */
export function dropped(stream: ServerHttp2Stream, turn: number): boolean {
  if (bytesReceived(stream) > 0 || endStreamReceived(stream)) return false;
  return turn === currentTurn || !stream.headersSent;
}

/** Event-loop turns counted while streams open (one setImmediate per turn at most). */
let currentTurn = 0;
let turnPending = false;
export function loopTurn(): number {
  if (!turnPending) {
    turnPending = true;
    setImmediate(() => {
      currentTurn++;
      turnPending = false;
    });
  }
  return currentTurn;
}
