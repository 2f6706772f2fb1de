/**
 * Keeps Node's JS stream wrapper from throwing ERR_INTERNAL_ASSERTION (and the process from dying)
 * when an HTTP/2 session runs over a stream without a native handle: an h2c session inside an HBONE
 * CONNECT stream, which Node wraps in lib/internal/js_stream_socket.js (`JSStreamSocket`).
 *
 * Seen on Node 24.21. When the CONNECT stream is reset (the client's `close(CANCEL)`: END_STREAM,
 * then RST_STREAM) while a session write is still waiting on the tunnel (its flow-control window),
 * the END_STREAM leaves a shutdown pending behind that write and the reset closes the wrapper.
 * The wrapper's close (`doClose`, one `setImmediate` later) cancels the write; when the session
 * had reset one of its streams meanwhile (an upstream that failed mid-response), nghttp2's pending
 * RST_STREAM makes the session write again at once, from inside that cancellation
 * (src/node_http2.cc `ClearOutgoing`): the new write is recorded and the shutdown re-queued behind
 * it. The cancelled write's own callback (`done`, from the stream's destroy) then arrives in a later
 * `setImmediate`, completes that new write instead, and runs the shutdown: `doShutdown` meets a
 * closed handle (`assert(handle !== null)`). nodejs/node#49400 (for #48519) added the pending-close
 * state to `doShutdown` and `doWrite`, which covers the shutdown only while that close is pending.
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
