/**
 * Cancelled requests release their upstream side (found by a fresh-user trial): an HTTP/2 client
 * that resets a stream mid-request, HTTP/1.1 clients that reset before the upstream connection is
 * up, and a request timeout firing before the connect. Each must close the upstream request (the
 * app sees its connection end), record `DC`, and leave nothing that stops a graceful shutdown.
 * Addresses: 127.0.38.x.
 */
import http from 'node:http';
import http2 from 'node:http2';
import net from 'node:net';
import { afterAll, beforeAll, expect, test } from 'vitest';
import { recorder } from '../../helpers/recorder.ts';
import { sleep } from '../../helpers/servers.ts';
import { startTestTopology, type TestTopology } from '../../helpers/topology.ts';

let topo: TestTopology;
const apps: http.Server[] = [];
/** Requests the apps received and whether each one's connection is still open. */
const open = new Set<http.IncomingMessage>();
const rec = recorder();

beforeAll(async () => {
  topo = await startTestTopology(38, { backends: false, extraFilters: [rec.factory], bootstrap: { filters: rec.filters, drain: { timeoutMs: 500 } } });
  for (const ip of ['127.0.38.11', '127.0.38.12']) {
    const app = http.createServer((req, res) => {
      open.add(req);
      res.once('close', () => open.delete(req));
      const ms = Number(new URL(req.url ?? '/', 'http://x').searchParams.get('ms') ?? 0);
      setTimeout(() => res.end('done'), ms);
    });
    // No keep-alive timeout of its own: an upstream request left open by the waypoint would stay open.
    app.keepAliveTimeout = 0;
    await new Promise<void>((r) => app.listen(8080, ip, r));
    apps.push(app);
  }
});

afterAll(async () => {
  for (const a of apps) a.closeAllConnections();
  for (const a of apps) a.close();
  await topo?.close();
});

test('an HTTP/2 client resetting its stream mid-request cancels the upstream request and records DC', async () => {
  const client = http2.connect(`http://${topo.entry.host}:${topo.entry.port}`);
  try {
    const req = client.request({ ':path': '/slow?ms=3000&h2' });
    req.on('error', () => {});
    req.end();
    await expect.poll(() => open.size, { timeout: 5000 }).toBe(1);
    req.close(http2.constants.NGHTTP2_CANCEL);
    await expect.poll(() => open.size, { timeout: 5000 }).toBe(0);
    const r = await rec.find('/slow?ms=3000&h2');
    expect(r.flags).toBe('DC');
  } finally {
    client.close();
  }
});

test('a request timeout firing before the upstream connection is up cancels the request there too', async () => {
  // A second waypoint on 127.0.39.x with a 5 ms request timeout: it fires while the first
  // upstream connection is still being set up.
  const quick = await startTestTopology(39, { backends: false, bootstrap: { http: { requestTimeoutMs: 5 } } });
  const seen: http.IncomingMessage[] = [];
  const held = new Set<http.IncomingMessage>();
  const app = http.createServer((req, res) => {
    seen.push(req);
    held.add(req);
    res.once('close', () => held.delete(req));
    setTimeout(() => res.end('late'), 20_000).unref();
  });
  app.keepAliveTimeout = 0;
  await new Promise<void>((r) => app.listen(8080, '127.0.39.11', r));
  const app2 = http.createServer(app.listeners('request')[0] as http.RequestListener);
  await new Promise<void>((r) => app2.listen(8080, '127.0.39.12', r));
  try {
    const statuses = await Promise.all(
      [1, 2, 3, 4].map(
        (i) =>
          new Promise<number>((resolve) => {
            const s = net.connect(quick.entry.port, quick.entry.host);
            s.on('error', () => resolve(0));
            s.write(`GET /t${i} HTTP/1.1\r\nhost: echo\r\nconnection: close\r\n\r\n`);
            let acc = '';
            s.on('data', (c) => (acc += c));
            s.on('close', () => resolve(Number(acc.split(' ')[1] ?? 0)));
          }),
      ),
    );
    expect(statuses).toEqual([504, 504, 504, 504]);
    // Give a leaked request time to reach the app, then require none is held open there.
    await sleep(500);
    await expect.poll(() => held.size, { timeout: 5000 }).toBe(0);
    const started = Date.now();
    await quick.waypoint!.shutdown();
    expect(Date.now() - started).toBeLessThan(10_000);
  } finally {
    app.closeAllConnections();
    app2.closeAllConnections();
    app.close();
    app2.close();
    await quick.close();
  }
});

test('after those cancellations a graceful shutdown completes', async () => {
  const started = Date.now();
  await topo.waypoint!.shutdown();
  // drain.timeoutMs is 500 ms: the bound only catches a hang.
  expect(Date.now() - started).toBeLessThan(10_000);
});
