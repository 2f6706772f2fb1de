/**
 * Work around a Node bug (seen on 20.20.2 and still on 24.21.0): when a writer corks a string
 * and a Buffer onto an Http2Stream (what `http.Server` does for a response's header block and
 * body), the native `_writev` path sends corrupted bytes in place of the string. We replace the
 * stream's `_writev` with one that joins the chunks into a single Buffer and writes it once.
 * Besides fixing the bytes, this sends one DATA frame per corked batch instead of several,
 * which is cheaper.
 */
import type { Duplex } from 'node:stream';

interface WritevChunk {
  chunk: Buffer | string;
  encoding: BufferEncoding;
}
type WritableInternals = Duplex & {
  _writev?: (chunks: WritevChunk[], cb: (err?: Error | null) => void) => void;
  _write: (chunk: Buffer, encoding: BufferEncoding, cb: (err?: Error | null) => void) => void;
};

/** Install the fix on one Http2Stream before handing it to a writer that corks. Returns the stream. */
export function joinWritev<T extends Duplex>(stream: T): T {
  (stream as unknown as WritableInternals)._writev = joinedWritev;
  return stream;
}

function joinedWritev(this: WritableInternals, chunks: WritevChunk[], cb: (err?: Error | null) => void): void {
  const bufs: Buffer[] = new Array(chunks.length);
  for (let i = 0; i < chunks.length; i++) {
    const c = chunks[i].chunk;
    bufs[i] = typeof c === 'string' ? Buffer.from(c, chunks[i].encoding) : c;
  }
  this._write(bufs.length === 1 ? bufs[0] : Buffer.concat(bufs), 'buffer' as BufferEncoding, cb);
}
