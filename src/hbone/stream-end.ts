/**
 * How an HTTP/2 stream's incoming side ended: END_STREAM (the peer's message or byte stream is
 * complete) or a reset (RST_STREAM of any code, or the connection lost). Node's http2 cannot be
 * asked: for RST_STREAM(NO_ERROR), and for CANCEL, it ends the readable side as for END_STREAM
 * ('end' then 'close', and no 'aborted' or 'error' once our side had ended:
 * nodejs/node#56627), so 'end' says nothing about completeness.
 *
 * END_STREAM reaches the readable side (`push(null)` from the DATA or HEADERS frame that carries
 * it) while the stream is still open; a reset closes the stream first (Node's `closeStream`), then
 * ends the readable side. So the stream's `closed` flag at that moment tells the two apart.
 */
import http2, { type Http2Stream } from 'node:http2';
import { addAbortSignal } from 'node:stream';
import { readChunkwise } from './chunk-reads.ts';

const { NGHTTP2_CANCEL } = http2.constants;

/** What ended a stream's incoming side without END_STREAM. */
export interface StreamReset {
  /** RST_STREAM code received (or the code Node closed the stream with). */
  readonly code: number;
  /** The HTTP/2 connection itself failed or closed under the stream (no RST_STREAM for it). */
  readonly connectionLost: boolean;
}

interface EndState {
  /** undefined until the incoming side ended; then whether END_STREAM ended it. */
  endStream: boolean | undefined;
  /** Bytes the peer sent on the stream so far (DATA payload). */
  received: number;
  reset: StreamReset | undefined;
  onReset: ((reset: StreamReset) => void) | undefined;
  /** The stream's `push` before {@link watchEndStream} replaced it. */
  readonly push: (chunk: unknown, encoding?: BufferEncoding) => boolean;
}

const kEnd = Symbol('waypoint.streamEnd');
type Watched = Http2Stream & { [kEnd]?: EndState; push(chunk: unknown, encoding?: BufferEncoding): boolean };

/**
 * Follow how `stream`'s incoming side ends (see the module comment). `onReset` runs once, on the
 * next tick, when it ended without END_STREAM; that includes a reset we caused ourselves (callers
 * that tear a stream down ignore what follows). Install it before any data can end the stream.
 */
export function watchEndStream(stream: Http2Stream, onReset?: (reset: StreamReset) => void): void {
  const s = stream as Watched;
  const known = s[kEnd];
  if (known) {
    known.onReset = onReset ?? known.onReset;
    return;
  }
  const state: EndState = { endStream: undefined, received: 0, reset: undefined, onReset, push: s.push };
  s[kEnd] = state;
  // END_STREAM on the HEADERS: Node ends the readable side before the 'stream' event, so the
  // push(null) below is never seen (Node documents `endAfterHeaders` for exactly this flag).
  if (s.endAfterHeaders) state.endStream = true;
  s.push = watchedPush;
}

/** `push` of a watched stream: one shared function (no closure per stream; the state is on the stream). */
function watchedPush(this: Watched, chunk: unknown, encoding?: BufferEncoding): boolean {
  const state = this[kEnd]!;
  if (chunk === null) decide(this, state);
  else state.received += (chunk as Buffer).length;
  return state.push.call(this, chunk, encoding);
}

/** The incoming side is ending now (`push(null)`): record how, once. */
function decide(s: Watched, state: EndState): void {
  if (state.endStream !== undefined) return;
  state.endStream = !s.closed;
  if (state.endStream) return;
  const session = s.session;
  state.reset = { code: s.rstCode ?? 0, connectionLost: session === undefined || session.destroyed || session.closed };
  if (state.onReset) process.nextTick(state.onReset, state.reset);
}

/** True once the peer ended `stream`'s incoming side with END_STREAM (needs {@link watchEndStream}). */
export function endStreamReceived(stream: Http2Stream): boolean {
  return (stream as Watched)[kEnd]?.endStream === true;
}

/** Bytes the peer sent on `stream` so far (needs {@link watchEndStream}; 0 without it). */
export function bytesReceived(stream: Http2Stream): number {
  return (stream as Watched)[kEnd]?.received ?? 0;
}

/** How `stream`'s incoming side was cut, once it was (needs {@link watchEndStream}). */
export function resetOf(stream: Http2Stream): StreamReset | undefined {
  return (stream as Watched)[kEnd]?.reset;
}

/**
 * Prepare an HBONE CONNECT stream (to `where`) to serve as an HTTP/1.1 client's socket (undici's):
 *  - a reset, or the connection lost, before END_STREAM destroys it with an error and never
 *    ends it: undici takes an 'end', or a 'close' without an error, as the end of a close-delimited
 *    or `Connection: close` body (undici client-h1.js `onHttpSocketEnd`, `onHttpSocketClose`), so
 *    a body cut by RST_STREAM would be passed on as complete;
 *  - END_STREAM is handed over only when the reader asks for more with nothing left to read: undici 7
 *    asserts, and the process dies, when 'end' comes while its parser is paused under back-pressure
 *    (nodejs/undici#5360), and Node would emit it as soon as the last bytes are read;
 *  - `read()` returns one received chunk at a time ({@link readChunkwise}).
 * Returns the stream.
 */
export function asHttp1Socket<T extends Http2Stream>(stream: T, where: string): T {
  const error = (r: StreamReset) => tunnelReset(where, r);
  const s = stream as T &
    Watched & {
      _destroy(err: Error | null, cb: (err?: Error | null) => void): void;
      read(size?: number): unknown;
    };
  watchEndStream(s);
  const state = s[kEnd]!;
  const push = s.push;
  let pendingEnd = false;
  s.push = function (this: typeof s, chunk: unknown, encoding?: BufferEncoding): boolean {
    if (chunk !== null || this.destroyed) return push.call(this, chunk, encoding);
    decide(this, state);
    if (state.endStream) {
      pendingEnd = true;
      // Wake a reader waiting for data; it then reads, and finds the end.
      if (this.readableLength === 0) process.nextTick(wake, this);
    } else {
      // Later: Node is still inside its close handling of this stream.
      process.nextTick(fail, this, error(state.reset!));
    }
    return false;
  };
  // undici reads with `read()` until null: one chunk at a time, not all of them joined (chunk-reads.ts).
  const read = readChunkwise(s).read;
  s.read = function (this: typeof s, size?: number): unknown {
    // Node's own `read(0)` after END_STREAM is no request for more.
    if (pendingEnd && size !== 0 && this.readableLength === 0) {
      pendingEnd = false;
      push.call(this, null);
    }
    return read.call(this, size);
  };
  const destroy = s._destroy;
  s._destroy = function (this: typeof s, err: Error | null, cb: (err?: Error | null) => void): void {
    // Closed by the peer or with the connection (not by our own destroy) before END_STREAM.
    const session = this.session;
    const external = this.closed || session === undefined || session.destroyed;
    destroy.call(this, err, (e?: Error | null) => {
      if (e == null && external && state.endStream !== true) e = error(state.reset ?? { code: this.rstCode ?? 0, connectionLost: true });
      cb(e);
    });
  };
  return stream;
}

/**
 * The error of a tunnel reset before its end. Its code is undici's for a failed socket, so the
 * requests queued on that connection wait for another (undici client.js `onError`).
 */
function tunnelReset(where: string, r: StreamReset): Error {
  const what = r.connectionLost ? 'lost with its connection' : `reset (code ${r.code})`;
  return Object.assign(new Error(`HBONE stream to ${where} ${what} before its end`), { code: 'UND_ERR_SOCKET' });
}

function wake(s: Http2Stream): void {
  if (!s.destroyed) s.emit('readable');
}

function fail(s: Http2Stream, err: Error): void {
  if (!s.destroyed) s.destroy(err);
}

/** Aborted once: handing it to `addAbortSignal` destroys a stream with Node's own AbortError. */
const ABORTED = AbortSignal.abort();

/**
 * Reset `stream` with RST_STREAM (CANCEL, or `code`) and no END_STREAM before it. Node's
 * `close(code)` first ends our side when it is still open, and flushes that END_STREAM before the
 * RST_STREAM (lib/internal/http2/core.js `closeStream`, src/node_http2.cc `SubmitRstStream`): the
 * peer would see a complete message, then a reset it may ignore. A destroyed stream is not ended,
 * and Node resets it with CANCEL when destroyed with its AbortError (core.js `_destroy`). Another
 * `code` goes through `close(code)` with our side's end made a no-op (`_final` is what sends
 * END_STREAM); use it only on a stream with nothing in flight. A stream the peer already closed
 * is only released.
 */
export function resetStream(stream: Http2Stream, code: number = NGHTTP2_CANCEL): void {
  if (stream.destroyed) return;
  if (stream.closed) return void stream.destroy();
  if (code !== NGHTTP2_CANCEL) {
    (stream as Http2Stream & { _final(cb: () => void): void })._final = endWithoutEndStream;
    return void stream.close(code);
  }
  // The AbortError is emitted as the stream's 'error': ours, expected.
  stream.on('error', noop);
  addAbortSignal(ABORTED, stream);
}

function endWithoutEndStream(cb: () => void): void {
  cb();
}

function noop(): void {}
