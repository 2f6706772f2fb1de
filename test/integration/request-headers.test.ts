/**
 * Filters edit the request through `stream.requestHeaders` in `onRequestHeaders`; what they leave
 * is what later filters see and what the router sends upstream, over HTTP/1.1 and h2c inside the
 * tunnel alike. The list holds no pseudo- or hop-by-hop headers and carries the connection
 * manager's x-request-id. Addresses: 127.0.211.x.
 */
import http2 from 'node:http2';
import { afterAll, beforeAll, expect, test } from 'vitest';
import { FilterStatus, type FilterFactory } from '../../src/pipeline/index.ts';
import { openEntry, startTestTopology, type TestTopology } from '../helpers/topology.ts';
import { parseHttpResponse, readAll } from '../helpers/hbone-client.ts';

/** What the second filter saw of the list the first one edited, per request path. */
const seenByLater = new Map<string, string[]>();

const editor: FilterFactory<unknown> = {
  name: 'test.edit_headers',
  parseConfig: () => ({}),
  create: () => ({
    name: 'test.edit_headers',
    onRequestHeaders(stream) {
      const h = stream.requestHeaders;
      h.remove('x-drop');
      h.set('x-added', 'by-filter');
      h.set('x-replaced', 'new');
      return FilterStatus.Continue;
    },
  }),
};
const observer: FilterFactory<unknown> = {
  name: 'test.observe_headers',
  parseConfig: () => ({}),
  create: () => ({
    name: 'test.observe_headers',
    onRequestHeaders(stream) {
      seenByLater.set(stream.path, [...stream.requestHeaders.raw]);
      return FilterStatus.Continue;
    },
  }),
};

let topo: TestTopology;
beforeAll(async () => {
  topo = await startTestTopology(211, {
    extraFilters: [editor, observer],
    bootstrap: { filters: [{ name: 'test.edit_headers' }, { name: 'test.observe_headers' }, { name: 'envoy.filters.http.router' }] },
  });
});
afterAll(async () => {
  await topo?.close();
});

interface Echo {
  url: string;
  headers: Record<string, string>;
}

test('HTTP/1.1: removed, added and replaced headers are what the next filter and the upstream get', async () => {
  const socket = await openEntry(topo);
  socket.write('GET /h1 HTTP/1.1\r\nHost: echo.demo.svc.cluster.local\r\nX-Drop: secret\r\nX-Replaced: old\r\nX-Keep: yes\r\nConnection: close\r\n\r\n');
  const res = parseHttpResponse(await readAll(socket));
  expect(res.status).toBe(200);
  const echo = JSON.parse(res.body.toString()) as Echo;
  expect(echo.headers['x-drop']).toBeUndefined();
  expect(echo.headers['x-added']).toBe('by-filter');
  expect(echo.headers['x-replaced']).toBe('new');
  expect(echo.headers['x-keep']).toBe('yes');
  const later = seenByLater.get('/h1')!;
  expect(later).not.toContain('X-Drop');
  expect(later).not.toContain('Connection');
  expect(later).toEqual(expect.arrayContaining(['Host', 'echo.demo.svc.cluster.local', 'X-Keep', 'yes', 'x-added', 'by-filter', 'x-request-id']));
  // The connection manager's request id is in the list and reaches the upstream.
  expect(echo.headers['x-request-id']).toBe(later[later.indexOf('x-request-id') + 1]);
});

test('h2c: the same edits, and no pseudo-headers in the list', async () => {
  const session = http2.connect(`http://${topo.entry.host}:${topo.entry.port}`);
  try {
    const echo = await new Promise<Echo>((resolve, reject) => {
      const req = session.request({ ':path': '/h2', ':authority': 'echo.demo.svc.cluster.local', 'x-drop': 'secret', 'x-replaced': 'old', 'x-request-id': 'client-id' });
      const chunks: Buffer[] = [];
      req.on('data', (c: Buffer) => chunks.push(c));
      req.on('end', () => resolve(JSON.parse(Buffer.concat(chunks).toString()) as Echo));
      req.on('error', reject);
      req.end();
    });
    expect(echo.url).toBe('/h2');
    expect(echo.headers['x-drop']).toBeUndefined();
    expect(echo.headers['x-added']).toBe('by-filter');
    expect(echo.headers['x-replaced']).toBe('new');
    expect(echo.headers['x-request-id']).toBe('client-id');
    const later = seenByLater.get('/h2')!;
    expect(later.filter((_, i) => i % 2 === 0 && later[i].startsWith(':'))).toEqual([]);
    expect(later).toEqual(expect.arrayContaining(['x-request-id', 'client-id', 'x-added', 'by-filter']));
  } finally {
    session.close();
  }
});
