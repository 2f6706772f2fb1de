/** The gRPC message counter the router runs on gRPC bodies (Envoy's FrameInspector semantics). */
import { expect, test } from 'vitest';
import { GrpcFrameCounter } from '../../../src/router/grpc-frames.ts';

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
