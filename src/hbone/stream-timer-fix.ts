/**
 * Work around a Node bug (seen on 24.21.0): an Http2Stream's inactivity timer (`setTimeout()`, as
 * the HTTP/1 server inside a tunnel sets it) is cleared when the stream closes but kept for reuse
 * (nodejs/node lib/internal/stream_base_commons.js `setStreamTimeout`), and a write completing
 * after that re-arms it (`Timeout.refresh()` does not check that the timer was cleared). The armed
 * timer then holds the destroyed stream, with every byte still queued on it, until it fires: a
 * client that vanished with a large response pending kept tens of MB per stream for the whole
 * stream idle timeout (5 min by default). Clearing the timer once more at 'close' releases it.
 *
 * A second gap: Node never clears the timer of an HTTP/2 stream or session destroyed while open
 * (their destroy paths call `setTimeout(0)` only after marking them destroyed, and
 * `setStreamTimeout` ignores a destroyed target: lib/internal/http2/core.js `Http2Stream._destroy`,
 * `closeSession`). {@link clearTimerOnDestroy} closes it for `destroy()`; an h2c session whose
 * socket closes is destroyed without it (`socketOnClose` → `closeSession`), so its owner clears it
 * first ({@link clearIdleTimer}). Both held tunnels, their queued bytes and upstream sides for the
 * stream idle timeout (5 min) or the h2c idle timeout (1 h).
 */
import type { Http2Stream } from 'node:http2';

/** Clear `stream`'s inactivity timer for good when it closes. Returns the stream. */
export function releaseTimerOnClose<T extends Http2Stream>(stream: T): T {
  stream.once('close', clearStreamTimer);
  return stream;
}

function clearStreamTimer(this: Http2Stream): void {
  // Node keeps the timer under a private symbol (`kTimeout`, description 'timeout').
  for (const sym of Object.getOwnPropertySymbols(this)) {
    if (sym.description === 'timeout') clearTimeout((this as unknown as Record<symbol, NodeJS.Timeout | undefined>)[sym]);
  }
}

interface Timed {
  readonly destroyed: boolean;
  destroy(...args: unknown[]): unknown;
  setTimeout?(ms: number): unknown;
}

/**
 * Make `t.destroy()` clear its inactivity timer first, whoever calls it (us or Node's HTTP
 * servers). `t` is an Http2Stream, an Http2Session or a socket; anything without `setTimeout` is
 * returned as is.
 */
export function clearTimerOnDestroy<T extends object>(t: T): T {
  const o = t as unknown as Timed;
  if (typeof o.setTimeout !== 'function') return t;
  const destroy = o.destroy;
  o.destroy = function destroyClearingTimer(this: Timed, ...args: unknown[]) {
    if (!this.destroyed) this.setTimeout!(0);
    return destroy.apply(this, args);
  };
  return t;
}

/** Clear the inactivity timer of `t` now, unless it is already destroyed (then it is too late: see above). */
export function clearIdleTimer(t: { readonly destroyed: boolean; setTimeout(ms: number): unknown } | undefined): void {
  if (t !== undefined && !t.destroyed) t.setTimeout(0);
}
