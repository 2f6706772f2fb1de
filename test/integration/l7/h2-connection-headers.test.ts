/**
 * Connection-specific headers never reach an HTTP/2 client (RFC 9113 §8.2.2; Envoy strips them
 * when encoding HTTP/2), whatever the upstream sends: a `connection: close` / `keep-alive`
 * response header of an HTTP/1.1 upstream is dropped, and Node never gets the chance to print its
 * unstructured `UnsupportedWarning` about a connection header into our log (found by a user trial).
 * Addresses: 127.0.49.x.
 */
import http from 'node:http';
import http2 from 'node:http2';
import { afterAll, beforeAll, expect, test } from 'vitest';
import { startTestTopology, type TestTopology } from '../../helpers/topology.ts';

const NET = 49;
let topo: TestTopology;
const apps: http.Server[] = [];
const warnings: Error[] = [];
const onWarning = (w: Error) => warnings.push(w);

beforeAll(async () => {
  process.on('warning', onWarning);
  topo = await startTestTopology(NET, { backends: false });
  for (const ip of [`127.0.${NET}.11`, `127.0.${NET}.12`]) {
    const app = http.createServer((req, res) => {
      const url = new URL(req.url ?? '/', 'http://x');
      const headers: http.OutgoingHttpHeaders = { 'content-type': 'text/plain', 'x-kept': 'yes' };
      if (url.pathname === '/close') headers.connection = 'close';
      if (url.pathname === '/keepalive') Object.assign(headers, { connection: 'keep-alive, x-hop', 'keep-alive': 'timeout=5', 'x-hop': 'dropped', 'proxy-connection': 'keep-alive' });
      if (url.pathname === '/upgrade') Object.assign(headers, { upgrade: 'h2c', 'transfer-encoding': 'chunked' });
      res.writeHead(200, headers);
      res.end('ok');
    });
    await new Promise<void>((r) => app.listen(8080, ip, r));
    apps.push(app);
  }
});

afterAll(async () => {
  process.off('warning', onWarning);
  for (const a of apps) a.closeAllConnections();
  for (const a of apps) a.close();
  await topo?.close();
});

function get(client: http2.ClientHttp2Session, path: string): Promise<{ headers: http2.IncomingHttpHeaders; body: string }> {
  return new Promise((resolve, reject) => {
    const req = client.request({ ':path': path, ':authority': 'echo' });
    let body = '';
    let headers: http2.IncomingHttpHeaders = {};
    req.on('response', (h) => (headers = h));
    req.on('data', (c: Buffer) => (body += c.toString()));
    req.on('end', () => resolve({ headers, body }));
    req.on('error', reject);
    req.end();
  });
}

test('connection-specific upstream response headers are stripped for an HTTP/2 client, with no Node warning', async () => {
  const client = http2.connect(`http://${topo.entry.host}:${topo.entry.port}`);
  try {
    for (const path of ['/close', '/keepalive', '/upgrade']) {
      const r = await get(client, path);
      expect(r.body).toBe('ok');
      expect(r.headers['x-kept']).toBe('yes');
      for (const h of ['connection', 'keep-alive', 'proxy-connection', 'x-hop', 'upgrade', 'transfer-encoding']) expect(r.headers[h], `${path}: ${h}`).toBeUndefined();
    }
  } finally {
    client.close();
  }
  // Node emits its warning on the next tick: give it the chance.
  await new Promise((r) => setTimeout(r, 50));
  expect(warnings.map((w) => `${w.name}: ${w.message}`)).toEqual([]);
});
