/**
 * Work around a Node bug (seen on 24.21.0): an Http2Stream's inactivity timer (`setTimeout()`, as
 * the HTTP/1 server inside a tunnel sets it) is cleared when the stream closes but kept for reuse
 * (nodejs/node lib/internal/stream_base_commons.js `setStreamTimeout`), and a write completing
 * after that re-arms it (`Timeout.refresh()` does not check that the timer was cleared). The armed
 * timer then holds the destroyed stream, with every byte still queued on it, until it fires: a
 * client that vanished with a large response pending kept tens of MB per stream for the whole
 * stream idle timeout (5 min by default). Clearing the timer once more at 'close' releases it.
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
