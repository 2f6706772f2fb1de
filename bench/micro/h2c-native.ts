/**
 * Experiment, not used by the waypoint (it aborts Node: see below): an inner h2c session served or
 * opened directly on an HBONE CONNECT stream's native handle, instead of Node's JS stream wrapper.
 * `H2C_FLOOR_INNER=native` makes bench/micro/floor-relay.ts use it on both sides, and
 * bench/micro/h2c-native-torture.ts shows it aborting.
 *
 * Node wraps any socket without a native StreamBase handle in a `JSStreamSocket` (nodejs/node
 * lib/internal/http2/core.js, `Http2Session` constructor), so every chunk of an inner session goes
 * through JS twice (lib/internal/js_stream_socket.js: `ondata` → `readBuffer`; `doWrite` →
 * `stream.write` per buffer and a `setImmediate` per write). An outer `Http2Stream`'s handle is
 * itself a StreamBase, so the inner nghttp2 session can consume it (src/node_http2.cc
 * `Http2Session::Consume` → `PushStreamListener`): reads and writes then stay in C++.
 *
 * Why it aborts: the inner session calls `ReadStop()` / `ReadStart()` on the handle it consumed
 * (`Http2Session::MaybeStopReading` whenever it starts a write, `OnStreamAfterWrite` when one
 * completes, `Close` / `FinishClose`), and `Http2Stream::ReadStart` / `ReadStop` begin with
 * `CHECK(!this->is_destroyed())`. The outer stream's handle is destroyed (`Http2Stream::Destroy`,
 * from JS `Http2Stream._destroy` → `handle.destroy()`) when the outer stream closes — a peer's
 * RST_STREAM, its connection lost — and nothing tells a session consuming it (Destroy does not
 * notify its listeners; only the handle's deletion later does, `~StreamResource` →
 * `OnStreamDestroy`). Guards tried, each with the abort the torture then found:
 *
 *  1. destroy the inner session from the outer stream's `_destroy`, before Node destroys the
 *     handle: an inner session closed earlier (its own GOAWAY, a peer's, an error) with a write in
 *     flight stays attached (`Close(code, socket_closed = false)` keeps the listener, and its final
 *     `SendPendingData` returns at once while a write is in progress, so `nghttp2_session_want_read`
 *     stays 1); the handle's destroy cancels that write on the next turn (`Done(UV_ECANCELED)`) →
 *     `OnStreamAfterWrite` → `ReadStart` → CHECK.
 *  2. (this file) also make the socket read as destroyed, so any inner close detaches at once
 *     (`Close(code, socket_closed = true)` → `RemoveStreamListener`), keeping the inner session
 *     referenced while the handle may still send a write pointing into its buffers: Node 24 defers
 *     a session's close while it is parsing input (`FinishClose` at the end of
 *     `ConsumeHTTP2Data`), and JS run from inside that parse (nextTicks and microtasks drain when
 *     the first callback scope, entered from C++ under libuv's read, exits) may destroy the outer
 *     stream: the handle is destroyed, then `FinishClose` → `ReadStop` → CHECK.
 *  3. destroy the handle a turn later: the JS stream is already marked destroyed, the detached
 *     handle delivers DATA to it, and Node's own `onStreamRead` (lib/internal/stream_base_commons.js)
 *     throws (`ErrnoException` of a positive byte count: ERR_OUT_OF_RANGE), uncaught.
 *
 * A JS-side guard cannot close these: the fix belongs in Node (`Http2Stream::ReadStart` /
 * `ReadStop` returning an error on a destroyed stream as `DoWrite` already does, or `Destroy`
 * detaching consuming listeners).
 */
import { EventEmitter } from 'node:events';
import http2, { type ClientHttp2Session, type ClientHttp2Stream, type Http2Server, type Http2Session, type Http2Stream, type SecureClientSessionOptions, type ServerHttp2Session, type ServerHttp2Stream } from 'node:http2';
import type { Duplex } from 'node:stream';

type Native = { isStreamBase?: boolean; readStart(): number; readStop(): number; ondone?: (() => void) | null };

function symbol(o: object, description: string): symbol | undefined {
  return Object.getOwnPropertySymbols(o).find((s) => s.description === description);
}

/**
 * The socket Node's Http2Session is given: the outer stream's handle as `_handle`, its events
 * relayed. It always reads as destroyed, so that whenever the inner session closes, Node tells the
 * native session its socket is gone (core.js `closeSession` → `handle.destroy(code, socket.destroyed)`):
 * `Http2Session::Close(code, socket_closed = true)` then sends nothing and removes itself from the
 * handle's listeners at once, instead of staying attached with a write in flight until the handle
 * is destroyed under it. The inner session stays referenced here as long as the outer stream lives:
 * a write it had queued on the handle points into its own buffers.
 */
class NativeTunnelSocket extends EventEmitter {
  readonly _handle: Native;
  readonly outer: Http2Stream;
  readonly destroyed = true;
  readable = true;
  writable = true;
  session: Http2Session | undefined;

  constructor(outer: Http2Stream, handle: Native) {
    super();
    this.outer = outer;
    this._handle = handle;
    outer.on('error', (err) => this.emit('error', err));
    outer.once('close', () => this.emit('close'));
  }

  /** Bytes the outer stream read into JS before the inner session took its handle (Node re-feeds them). */
  get readableLength(): number {
    return this.outer.readableLength;
  }

  read(): Buffer | null {
    return this.outer.read() as Buffer | null;
  }

  end(cb?: () => void): this {
    this.outer.end(cb);
    return this;
  }

  destroy(err?: Error): this {
    this.outer.destroy(err);
    return this;
  }

  resume(): this {
    return this;
  }

  pause(): this {
    return this;
  }
}

/** The native session's JS close (`ondone`), still pending when a write of it was in flight: run it now. */
function finishClose(s: Http2Session): void {
  const k = symbol(s, 'kHandle');
  const h = k ? (s as unknown as Record<symbol, Native | undefined>)[k] : undefined;
  if (h && typeof h.ondone === 'function') h.ondone();
}

/** A socket for an inner session on `outer`'s native handle, or undefined when it has none. */
function nativeSocket(outer: Http2Stream): NativeTunnelSocket | undefined {
  const k = symbol(outer, 'kHandle');
  const handle = k ? (outer as unknown as Record<symbol, Native | undefined>)[k] : undefined;
  if (!handle?.isStreamBase || outer.destroyed) return undefined;
  return new NativeTunnelSocket(outer, handle);
}

/**
 * The guards binding `session` to the handle of `socket.outer` (see the module comment), and the
 * handle's reading started: the inner session's listener is on top of the JS stream's from now on.
 */
function bind<S extends Http2Session>(socket: NativeTunnelSocket, session: S): S {
  const outer = socket.outer;
  socket.session = session;
  const inner = session as Http2Session & { destroy(err?: Error, code?: number): void };
  const destroySession = inner.destroy;
  inner.destroy = function (this: Http2Session, err?: Error, code?: number): void {
    const was = this.destroyed;
    destroySession.call(this, err, code);
    if (!was) finishClose(this);
  };
  // The tunnel ends with the inner session.
  session.once('close', () => {
    if (!outer.destroyed) outer.end();
  });
  const o = outer as Http2Stream & { _destroy(err: Error | null, cb: (err?: Error | null) => void): void };
  const destroy = o._destroy;
  o._destroy = function (this: typeof o, err: Error | null, cb: (err?: Error | null) => void): void {
    // The inner session lets go of the handle before Node destroys it.
    if (!session.destroyed) session.destroy();
    destroy.call(this, err, cb);
  };
  socket._handle.readStart();
  return session;
}

/**
 * Hand `outer` (a CONNECT stream answered 200) to `server` with the inner session on its native
 * handle. Returns the inner session, or undefined when the stream has no native handle (then the
 * caller falls back to `server.emit('connection', outer)`).
 */
export function attachNative(server: Http2Server, outer: ServerHttp2Stream): ServerHttp2Session | undefined {
  const socket = nativeSocket(outer);
  if (!socket) return undefined;
  let session: ServerHttp2Session | undefined;
  const take = (s: ServerHttp2Session) => (session = s);
  server.prependOnceListener('session', take);
  server.emit('connection', socket);
  server.off('session', take);
  return session ? bind(socket, session) : undefined;
}

/** An h2c client session on `tunnel`'s native handle (a CONNECT stream answered 200), or undefined when it has none. */
export function connectNative(tunnel: ClientHttp2Stream, authority: string, options: SecureClientSessionOptions = {}): ClientHttp2Session | undefined {
  const socket = nativeSocket(tunnel);
  if (!socket) return undefined;
  return bind(socket, http2.connect(authority, { ...options, createConnection: () => socket as unknown as Duplex }));
}
