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

/** Whether a session with `closed` closed streams, `premature` of them premature, must be closed. */
export function tooManyPrematureResets(closed: number, premature: number, totalStreamCount: number): boolean {
  if (totalStreamCount <= 0 || closed === 0) return false;
  // Before the count is reached: only once no later stream could bring the share under half.
  if (closed < totalStreamCount) return premature * 2 >= totalStreamCount;
  return premature * 2 >= closed;
}
