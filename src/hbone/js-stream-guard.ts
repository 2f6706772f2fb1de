/**
 * Keeps Node's JS stream wrapper from throwing ERR_INTERNAL_ASSERTION (and the process from dying)
 * when an HTTP/2 session runs over a stream without a native handle: an h2c session inside an HBONE
 * CONNECT stream, which Node wraps in lib/internal/js_stream_socket.js (`JSStreamSocket`).
 *
 * Seen on Node 24.21, server and client side. The tunnel is closed with END_STREAM then RST_STREAM
 * (Node's `close(CANCEL)`) while one of the session's writes is still in flight on it (waiting on
 * its flow-control window, or not yet flushed): the END_STREAM leaves a shutdown pending behind
 * that write, the RST_STREAM closes the wrapper. Meanwhile the session reset one of its streams
 * (an upstream lost mid-response), which Node leaves pending behind the write in flight
 * (src/node_http2.cc `Http2Stream::SubmitRstStream`), and queued other frames. The wrapper's close
 * (`doClose`, a `setImmediate` later) cancels the write; the pending reset makes the session send
 * its queued frames at once, from inside that cancellation (node_http2.cc `ClearOutgoing`): the new
 * write is kept and the shutdown re-queued behind it. The cancelled write's own callback (`done`,
 * from the stream's destroy) then comes in a later `setImmediate`, completes the new write instead,
 * and runs the shutdown: `doShutdown` meets the closed handle (`assert(handle !== null)`).
 * nodejs/node#49400 (for #48519) made `doShutdown` wait while that close is pending, not after.
 *
 * The guard, per wrapper instance: a shutdown asked of an already closed wrapper completes at once
 * as cancelled (what `doClose` does with the shutdown it finds), instead of reaching the assertion.
 */
import type { Http2Session } from 'node:http2';
import { getSystemErrorMap } from 'node:util';

/** libuv's ECANCELED (negative, platform-specific), what Node's own `doClose` completes requests with. */
const UV_ECANCELED = [...getSystemErrorMap()].find(([, [name]]) => name === 'ECANCELED')?.[0] ?? -125;

/** The native JSStream handle's completion call (the only one of its methods used here). */
interface JsStreamHandle {
  finishShutdown(req: object, status: number): void;
}

/** What the guard touches of Node's JSStreamSocket (as seen through the session's socket proxy). */
interface JsStreamWrapper {
  _handle: JsStreamHandle | null;
  doShutdown?: (this: JsStreamWrapper, req: object) => number;
}

/**
 * Install the guard on `session`'s JS stream wrapper; a session on a native socket (TCP, TLS) has
 * none and is left alone. Call it when the session is created (its `session` event), before any
 * shutdown can be asked. Returns the session.
 */
export function guardJsStreamShutdown<S extends Http2Session>(session: S): S {
  // `session.socket` is Node's proxy to the socket: reads and assignments reach the wrapper itself.
  const wrapper = session.socket as unknown as JsStreamWrapper;
  const handle = wrapper._handle;
  const doShutdown = Object.getPrototypeOf(wrapper)?.doShutdown as JsStreamWrapper['doShutdown'];
  if (typeof doShutdown !== 'function' || handle === null || typeof handle.finishShutdown !== 'function') return session;
  wrapper.doShutdown = function (this: JsStreamWrapper, req: object): number {
    if (this._handle !== null) return doShutdown.call(this, req);
    handle.finishShutdown(req, UV_ECANCELED);
    return 0;
  };
  return session;
}
