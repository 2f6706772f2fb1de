/** `readChunkwise` (src/hbone/chunk-reads.ts): `read()` hands out the received chunks as they are, never joined. */
import { Readable } from 'node:stream';
import { expect, test } from 'vitest';
import { readChunkwise } from '../../../src/hbone/chunk-reads.ts';

function source(): Readable {
  return new Readable({ read() {} });
}

test('read() returns each buffered chunk itself, oldest first, then null', () => {
  const r = readChunkwise(source());
  const chunks = [Buffer.from('abc'), Buffer.from('defg'), Buffer.from('h')];
  for (const c of chunks) r.push(c);
  // The same Buffers (no copy), as undici's `while ((chunk = socket.read()) !== null)` loop reads them.
  expect(r.read()).toBe(chunks[0]);
  expect(r.read()).toBe(chunks[1]);
  expect(r.read()).toBe(chunks[2]);
  expect(r.read()).toBeNull();
});

test('the bytes and the end are what plain reads give', async () => {
  const r = readChunkwise(source());
  const got: Buffer[] = [];
  r.on('readable', () => {
    let c: Buffer | null;
    while ((c = r.read() as Buffer | null) !== null) got.push(c);
  });
  const ended = new Promise((resolve) => r.once('end', resolve));
  for (let i = 0; i < 50; i++) r.push(Buffer.alloc(100 + i, i));
  r.push(null);
  await ended;
  expect(Buffer.concat(got)).toEqual(Buffer.concat(Array.from({ length: 50 }, (_, i) => Buffer.alloc(100 + i, i))));
  expect(got.length).toBe(50);
});

test('a size, and a first chunk above the high-water mark, are read as Node reads them', () => {
  const r = readChunkwise(source());
  r.push(Buffer.from('abc'));
  r.push(Buffer.from('def'));
  expect(String(r.read(4))).toBe('abcd');
  expect(String(r.read())).toBe('ef');
  const hwm = r.readableHighWaterMark;
  const big = Buffer.alloc(hwm + 1, 1);
  r.push(big);
  r.push(Buffer.from('z'));
  // Reading exactly that chunk would raise the stream's high-water mark: joined instead.
  expect(r.read()?.length).toBe(big.length + 1);
  expect(r.readableHighWaterMark).toBe(hwm);
});
