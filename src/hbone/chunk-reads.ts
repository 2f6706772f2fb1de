/**
 * Reads from an HBONE stream one received chunk at a time. undici's HTTP/1.1 client reads its
 * socket with `read()` until it returns null (undici lib/dispatcher/client-h1.js `readMore`), and
 * Node's `read()` with no size joins every buffered chunk into a new Buffer (Node
 * lib/internal/streams/readable.js `fromList`): the DATA frames of a large response, buffered
 * together, were copied once more into a Buffer of their own. Those copies live outside V8's heap,
 * and their churn is what starts V8's full collections under large responses (each one marks the
 * whole heap). Returning the oldest chunk as it is copies nothing; the parser runs once per chunk.
 */
import type { Readable } from 'node:stream';

/** The part of Node's readable state read here (Node >= 22: an array and the index of its head). */
interface ReadableState {
  buffer: unknown;
  bufferIndex: number;
  highWaterMark: number;
  objectMode: boolean;
  decoder: unknown;
}

/** Make `read()` (no size) on `stream` return its oldest buffered chunk rather than all of them joined. Returns the stream. */
export function readChunkwise<T extends Readable>(stream: T): T {
  const read = stream.read;
  stream.read = function (this: T, size?: number) {
    if (size === undefined) {
      const st = (this as unknown as { _readableState: ReadableState })._readableState;
      const buf = st.buffer;
      // More than one chunk buffered: read exactly the first (Node returns it without a copy). A
      // read larger than the high-water mark would raise it, so such a chunk goes the usual way.
      if (Array.isArray(buf) && buf.length - st.bufferIndex > 1 && !st.objectMode && !st.decoder) {
        const n = (buf[st.bufferIndex] as Buffer | undefined)?.length ?? 0;
        if (n > 0 && n <= st.highWaterMark) return read.call(this, n);
      }
    }
    return read.call(this, size);
  };
  return stream;
}
