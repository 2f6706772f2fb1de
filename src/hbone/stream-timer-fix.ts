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

/**
 * Clear `stream`'s inactivity timer for good when it closes. Returns the stream. The listener is
 * one shared function (`on`, as 'close' comes once): nothing is allocated per stream, which
 * matters for the thousands of idle tunnels a waypoint holds.
 */
export function releaseTimerOnClose<T extends Http2Stream>(stream: T): T {
  stream.on('close', clearStreamTimer);
  return stream;
}

/** Node's private symbol for a stream's timer (`kTimeout`, description 'timeout'), found on the first stream that has one. */
let kTimeout: symbol | undefined;

function clearStreamTimer(this: Http2Stream): void {
  const self = this as unknown as Record<symbol, NodeJS.Timeout | undefined>;
  kTimeout ??= Object.getOwnPropertySymbols(this).find((sym) => sym.description === 'timeout');
  if (kTimeout) clearTimeout(self[kTimeout]);
}

interface Timed {
  readonly destroyed: boolean;
  destroy(...args: unknown[]): unknown;
  setTimeout?(ms: number): unknown;
  [kDestroy]?: (...args: unknown[]) => unknown;
}
/** The `destroy` that {@link clearTimerOnDestroy} replaced. */
const kDestroy = Symbol('waypoint.destroy');

/**
 * Make `t.destroy()` clear its inactivity timer first, whoever calls it (us or Node's HTTP
 * servers). `t` is an Http2Stream, an Http2Session or a socket; anything without `setTimeout` is
 * returned as is. One shared function replaces `destroy` (the original is kept on the object).
 */
export function clearTimerOnDestroy<T extends object>(t: T): T {
  const o = t as unknown as Timed;
  if (typeof o.setTimeout !== 'function' || o.destroy === destroyClearingTimer) return t;
  o[kDestroy] = o.destroy;
  o.destroy = destroyClearingTimer;
  return t;
}

function destroyClearingTimer(this: Timed, ...args: unknown[]): unknown {
  if (!this.destroyed) this.setTimeout!(0);
  return this[kDestroy]!.apply(this, args);
}

/** Clear the inactivity timer of `t` now, unless it is already destroyed (then it is too late: see above). */
export function clearIdleTimer(t: { readonly destroyed: boolean; setTimeout(ms: number): unknown } | undefined): void {
  if (t !== undefined && !t.destroyed) t.setTimeout(0);
}
