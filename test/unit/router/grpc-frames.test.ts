/** The gRPC message counter the router runs on gRPC bodies (Envoy's FrameInspector semantics). */
import { expect, test } from 'vitest';
import { GrpcFrameCounter, GrpcWebTrailerReader } from '../../../src/router/grpc-frames.ts';

/** A gRPC length-prefixed message with an `n`-byte payload. */
function frame(n: number, compressed = false): Buffer {
  const b = Buffer.alloc(5 + n, 0x61);
  b[0] = compressed ? 1 : 0;
  b.writeUInt32BE(n, 1);
  return b;
}

test('counts each message once, at its first byte, in one chunk', () => {
  const c = new GrpcFrameCounter();
  expect(c.inspect(Buffer.concat([frame(0), frame(3), frame(70_000, true)]))).toBe(3);
  expect(c.inspect(frame(1))).toBe(1);
});

test('messages split at every byte boundary are counted exactly once', () => {
  const body = Buffer.concat([frame(2), frame(0), frame(300), frame(5)]);
  for (let cut = 0; cut <= body.length; cut++) {
    for (let cut2 = cut; cut2 <= body.length; cut2 += 7) {
      const c = new GrpcFrameCounter();
      const n = c.inspect(body.subarray(0, cut)) + c.inspect(body.subarray(cut, cut2)) + c.inspect(body.subarray(cut2));
      expect(n, `cuts ${cut}/${cut2}`).toBe(4);
    }
  }
});

test('one byte at a time; a message starts when its prefix starts', () => {
  const body = Buffer.concat([frame(1), frame(4)]);
  const c = new GrpcFrameCounter();
  const starts: number[] = [];
  for (let i = 0; i < body.length; i++) if (c.inspect(body.subarray(i, i + 1)) === 1) starts.push(i);
  expect(starts).toEqual([0, 6]);
});

test('a 4 GiB - 1 length prefix is skipped, not buffered', () => {
  const c = new GrpcFrameCounter();
  const head = Buffer.from([0, 0xff, 0xff, 0xff, 0xff]);
  expect(c.inspect(head)).toBe(1);
  expect(c.inspect(Buffer.alloc(1 << 20))).toBe(0);
});

// ---- gRPC-Web trailer frame (istio/istio#58430) -------------------------------------------------

/** A gRPC-Web trailer frame (flag 0x80) carrying `lines`. */
function trailerFrame(lines: string): Buffer {
  const payload = Buffer.from(lines, 'latin1');
  const b = Buffer.alloc(5 + payload.length);
  b[0] = 0x80;
  b.writeUInt32BE(payload.length, 1);
  payload.copy(b, 5);
  return b;
}

test('gRPC-Web: the status comes from the trailer frame, wherever the chunks are cut', () => {
  const body = Buffer.concat([frame(3), frame(300), trailerFrame('grpc-status:7\r\ngrpc-message:denied\r\n')]);
  for (let cut = 0; cut <= body.length; cut++) {
    const r = new GrpcWebTrailerReader(false);
    r.inspect(body.subarray(0, cut));
    r.inspect(body.subarray(cut));
    expect(r.status, `cut ${cut}`).toBe('7');
  }
  const oneByOne = new GrpcWebTrailerReader(false);
  for (const b of body) oneByOne.inspect(Buffer.of(b));
  expect(oneByOne.status).toBe('7');
});

test('gRPC-Web: any case and spacing of the header line; no trailer frame, no status', () => {
  for (const [lines, status] of [
    ['Grpc-Status: 14\r\n', '14'],
    ['grpc-message:x\r\ngrpc-status:0', '0'],
    ['grpc-message: grpc-status:9\r\n', ''],
    ['', ''],
  ] as const) {
    const r = new GrpcWebTrailerReader(false);
    r.inspect(Buffer.concat([frame(1), trailerFrame(lines)]));
    expect(r.status, lines).toBe(status);
  }
  const none = new GrpcWebTrailerReader(false);
  none.inspect(Buffer.concat([frame(10), frame(0)]));
  expect(none.status).toBe('');
});

test('gRPC-Web: a data frame whose payload looks like a trailer is skipped; an oversized trailer is not read', () => {
  const fake = Buffer.concat([Buffer.of(0, 0, 0, 0, 0x10), Buffer.from('grpc-status:13\r\n')]);
  const r = new GrpcWebTrailerReader(false);
  r.inspect(Buffer.concat([fake, trailerFrame('grpc-status:0\r\n')]));
  expect(r.status).toBe('0');
  const big = new GrpcWebTrailerReader(false);
  big.inspect(trailerFrame(`grpc-status:3\r\nx-pad:${'p'.repeat(20_000)}\r\n`));
  expect(big.status).toBe('');
});

test('gRPC-Web text: base64 body, each frame padded on its own, decoded across any cut', () => {
  const segments = [frame(1), frame(4), trailerFrame('grpc-status:5\r\n')].map((f) => f.toString('base64'));
  expect(segments.some((s) => s.endsWith('='))).toBe(true);
  const text = Buffer.from(`${segments.join('')}\r\n`, 'latin1');
  for (let cut = 0; cut <= text.length; cut++) {
    const r = new GrpcWebTrailerReader(true);
    r.inspect(text.subarray(0, cut));
    r.inspect(text.subarray(cut));
    expect(r.status, `cut ${cut}`).toBe('5');
  }
  // The whole body encoded at once (no inner padding) reads the same.
  const whole = new GrpcWebTrailerReader(true);
  whole.inspect(Buffer.from(Buffer.concat([frame(2), trailerFrame('grpc-status:12\r\n')]).toString('base64')));
  expect(whole.status).toBe('12');
  // Garbage never throws.
  const junk = new GrpcWebTrailerReader(true);
  junk.inspect(Buffer.from('==*&^%$#@!==A=B=C', 'latin1'));
  expect(junk.status).toBe('');
});
