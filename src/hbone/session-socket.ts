/**
 * Ties an HTTP/2 session's socket to the session's end. When Node destroys a session it ends the
 * socket and destroys it only once the socket's pending writes have gone out
 * (nodejs/node lib/internal/http2/core.js `finishSessionClose`; the native side does not even get
 * there while a write is in progress, src/node_http2.cc `Http2Session::Close`). A peer that stopped
 * reading and then vanished never lets those writes finish: the socket, every byte queued for it
 * and its file descriptor stayed for good, the session never emitted 'close', and every later
 * graceful shutdown waited its whole drain for it. Here the socket is destroyed a short grace
 * after the session is (long enough for a live peer to receive the final GOAWAY).
 */
import type { Http2Session } from 'node:http2';
import type { Socket } from 'node:net';

/** How long a destroyed session's socket may keep flushing (the final GOAWAY) before it is destroyed (ms). */
export const SOCKET_CLOSE_GRACE_MS = 1000;

/**
 * Destroy `socket` `graceMs` after `session` is destroyed (by us, by Node on a protocol error, or
 * at the end of a graceful close), unless it closed by itself by then. `socket` must be the real
 * socket (a session's `socket` property is a proxy that stops working once Node lets go of it).
 */
export function destroySocketWithSession(session: Http2Session, socket: Socket, graceMs = SOCKET_CLOSE_GRACE_MS): void {
  let timer: NodeJS.Timeout | undefined;
  socket.once('close', () => clearTimeout(timer));
  const arm = () => {
    if (timer || socket.destroyed) return;
    timer = setTimeout(() => socket.destroy(), graceMs).unref();
  };
  if (session.destroyed) return arm();
  // Every path that ends a session (ours, Node's on a socket or protocol error, the last stream of
  // a closing session) goes through `destroy()`, and no event marks that moment ('close' waits for
  // the socket), so the instance's method is wrapped.
  const destroy = session.destroy;
  session.destroy = function (this: Http2Session, ...args: Parameters<Http2Session['destroy']>) {
    destroy.apply(this, args);
    arm();
  };
}
