/**
 * HTTP/2 frames written by hand, for tests that must put several frames (of an HBONE CONNECT
 * stream and of the h2c session inside it) into one write, in an order no HTTP/2 library
 * produces on demand. Header blocks are HPACK literals without indexing (RFC 7541 §6.2.2).
 */
import type { Duplex } from 'node:stream';

export const PREFACE = Buffer.from('PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n');
/** Frame types (RFC 9113 §6). */
export const FrameType = { Data: 0, Headers: 1, RstStream: 3, Settings: 4, Ping: 6, GoAway: 7, WindowUpdate: 8 } as const;
export type FrameType = (typeof FrameType)[keyof typeof FrameType];
export const END_STREAM = 0x1;
export const ACK = 0x1;
export const END_HEADERS = 0x4;

/** One frame. */
export function frame(type: FrameType, flags: number, streamId: number, payload: Buffer = Buffer.alloc(0)): Buffer {
  const h = Buffer.alloc(9);
  h.writeUIntBE(payload.length, 0, 3);
  h[3] = type;
  h[4] = flags;
  h.writeUInt32BE(streamId, 5);
  return Buffer.concat([h, payload]);
}

/** A header block of `[name, value]` pairs as HPACK literals without indexing (names and values under 127 bytes). */
export function headerBlock(fields: readonly (readonly [string, string])[]): Buffer {
  const parts: Buffer[] = [];
  for (const [name, value] of fields) {
    const n = Buffer.from(name);
    const v = Buffer.from(value);
    if (n.length > 126 || v.length > 126) throw new Error(`header ${name} too long for this encoder`);
    parts.push(Buffer.from([0x00, n.length]), n, Buffer.from([v.length]), v);
  }
  return Buffer.concat(parts);
}

/** HEADERS with END_HEADERS (and END_STREAM when `endStream`). */
export function headers(streamId: number, fields: readonly (readonly [string, string])[], endStream: boolean): Buffer {
  return frame(FrameType.Headers, END_HEADERS | (endStream ? END_STREAM : 0), streamId, headerBlock(fields));
}

/** RST_STREAM with `code`. */
export function rstStream(streamId: number, code: number): Buffer {
  const p = Buffer.alloc(4);
  p.writeUInt32BE(code);
  return frame(FrameType.RstStream, 0, streamId, p);
}

/** A SETTINGS payload of `[identifier, value]` pairs (RFC 9113 §6.5.1). */
export function settings(pairs: readonly (readonly [number, number])[]): Buffer {
  const b = Buffer.alloc(6 * pairs.length);
  pairs.forEach(([id, value], i) => {
    b.writeUInt16BE(id, 6 * i);
    b.writeUInt32BE(value, 6 * i + 2);
  });
  return b;
}

/** WINDOW_UPDATE of `increment` bytes. */
export function windowUpdate(streamId: number, increment: number): Buffer {
  const p = Buffer.alloc(4);
  p.writeUInt32BE(increment);
  return frame(FrameType.WindowUpdate, 0, streamId, p);
}

export interface Frame {
  readonly type: number;
  readonly flags: number;
  readonly streamId: number;
  readonly payload: Buffer;
}

/**
 * Reads frames off `socket` (a server's reader skips the client's preface first); `until` resolves
 * once a frame matching `pred` arrived.
 */
export class FrameReader {
  readonly frames: Frame[] = [];
  private buf = Buffer.alloc(0);
  private waiters: { pred: (f: Frame) => boolean; resolve: (f: Frame) => void }[] = [];
  closed = false;

  constructor(socket: Duplex, side: 'client' | 'server' = 'client') {
    let preface = side === 'server' ? PREFACE.length : 0;
    socket.on('data', (d: Buffer) => {
      this.buf = Buffer.concat([this.buf, d]);
      if (preface > 0) {
        const n = Math.min(preface, this.buf.length);
        this.buf = this.buf.subarray(n);
        preface -= n;
      }
      while (this.buf.length >= 9) {
        const len = this.buf.readUIntBE(0, 3);
        if (this.buf.length < 9 + len) break;
        const f: Frame = { type: this.buf[3], flags: this.buf[4], streamId: this.buf.readUInt32BE(5) & 0x7fffffff, payload: this.buf.subarray(9, 9 + len) };
        this.buf = this.buf.subarray(9 + len);
        this.frames.push(f);
        this.waiters = this.waiters.filter((w) => !(w.pred(f) && (w.resolve(f), true)));
      }
    });
    socket.once('close', () => (this.closed = true));
  }

  /** The first frame (already read or to come) that matches `pred`. */
  until(pred: (f: Frame) => boolean): Promise<Frame> {
    const f = this.frames.find(pred);
    if (f) return Promise.resolve(f);
    return new Promise((resolve) => this.waiters.push({ pred, resolve }));
  }
}
