/**
 * An HTTP/1.1 request inside a tunnel may carry `http2.maxHeaderCount` header fields (Envoy's
 * `max_headers_count`, 100); one more is answered 431 (`DPE`, `http1.too_many_headers`) and never
 * forwarded, where Node's parser alone would drop the excess fields silently and forward the rest.
 * Addresses: 127.0.16.x.
 */
import net from 'node:net';
import { afterAll, beforeAll, expect, test } from 'vitest';
import { parseHttpResponse, readAll } from '../../helpers/hbone-client.ts';
import { recorder } from '../../helpers/recorder.ts';
import { openEntry, startTestTopology, type TestTopology } from '../../helpers/topology.ts';

const rec = recorder();
let topo: TestTopology;

beforeAll(async () => {
  topo = await startTestTopology(16, { extraFilters: [rec.factory], bootstrap: { filters: rec.filters } });
});
afterAll(async () => {
  await topo?.close();
});

/** A GET with Host plus `extra` more header fields; the parsed answer. */
async function getWith(path: string, extra: number) {
  const s: net.Socket = await openEntry(topo);
  const all = readAll(s);
  const fields = Array.from({ length: extra }, (_, i) => `x-h${i}: ${i}\r\n`).join('');
  s.write(`GET ${path} HTTP/1.1\r\nhost: echo\r\n${fields}connection: close\r\n\r\n`);
  return parseHttpResponse(await all);
}

test('100 header fields are forwarded, all of them', async () => {
  // Host, connection and 98 more.
  const res = await getWith('/hundred', 98);
  expect(res.status).toBe(200);
  const echoed = JSON.parse(res.body.toString()) as { headers: Record<string, string> };
  expect(echoed.headers['x-h97']).toBe('97');
});

test('101 header fields: 431, DPE, http1.too_many_headers, not forwarded', async () => {
  const res = await getWith('/too-many', 99);
  expect(res.status).toBe(431);
  const r = await rec.find('/too-many');
  expect(r.flags).toBe('DPE');
  expect(r.details).toBe('http1.too_many_headers');
  expect(r.upstreamHost).toBe('');
});
