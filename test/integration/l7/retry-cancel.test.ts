/**
 * A client that goes away stops the retries of its request (found by a user trial): Envoy cancels
 * the upstream request and the retry back-off timer when the downstream resets, and logs `DC`
 * (ENV:source/common/router/router.cc `Filter::onDestroy` → `resetAll`, `retry_state_.reset()`).
 *  - a client that closes its keep-alive connection (FIN, as `curl -m` does) is gone: DC, no more
 *    attempts; after `Connection: close` a half-close still gets the answer (pitfall B3);
 *  - a reset during the back-off of an HTTPRoute `retry` clears the timer: no further attempt;
 *  - a reset during an attempt aborts it (the backend sees its connection close), no new attempt;
 *  - a huge back-off (`99999h`) does not keep the request alive once the client is gone;
 *  - the record says `DC` with the code already sent (0 when nothing was).
 * Addresses: 127.0.46.x.
 */
import fs from 'node:fs';
import http from 'node:http';
import net from 'node:net';
import { afterAll, beforeAll, expect, test, vi } from 'vitest';
import { recorder } from '../../helpers/recorder.ts';
import { sleep } from '../../helpers/servers.ts';
import { startTestTopology, type TestTopology } from '../../helpers/topology.ts';

const NET = 46;
let topo: TestTopology;
let baseMesh = '';
const apps: http.Server[] = [];
const rec = recorder();
/** Requests the apps received, per path (query included). */
const hits = new Map<string, number>();
/** Requests whose connection is still open at the app. */
const open = new Set<http.IncomingMessage>();
/** Paths answered 200 once they were hit more than this many times. */
const okAfter = new Map<string, number>();

beforeAll(async () => {
  topo = await startTestTopology(NET, { backends: false, extraFilters: [rec.factory], bootstrap: { filters: rec.filters, drain: { timeoutMs: 500 } } });
  for (const ip of [`127.0.${NET}.11`, `127.0.${NET}.12`]) {
    const app = http.createServer((req, res) => {
      const url = new URL(req.url ?? '/', 'http://x');
      hits.set(req.url ?? '', (hits.get(req.url ?? '') ?? 0) + 1);
      open.add(req);
      res.once('close', () => open.delete(req));
      const ms = Number(url.searchParams.get('ms') ?? 0);
      const ok = okAfter.get(req.url ?? '');
      const status = ok !== undefined && (hits.get(req.url ?? '') ?? 0) > ok ? 200 : Number(url.searchParams.get('status') ?? 200);
      setTimeout(() => res.writeHead(status, { 'content-length': '4' }).end('done'), ms).unref();
    });
    app.keepAliveTimeout = 0;
    await new Promise<void>((r) => app.listen(8080, ip, r));
    apps.push(app);
  }
  baseMesh = fs.readFileSync(topo.meshFile, 'utf8');
  fs.writeFileSync(
    topo.meshFile,
    `${baseMesh}---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: { name: retries, namespace: demo }
spec:
  parentRefs: [{ group: "", kind: Service, name: echo, namespace: demo, port: 80 }]
  rules:
  - matches: [{ path: { type: PathPrefix, value: /slowbackoff } }]
    retry: { attempts: 5, codes: [500], backoff: 1s }
    backendRefs: [{ name: echo, port: 80 }]
  - matches: [{ path: { type: PathPrefix, value: /hugebackoff } }]
    retry: { attempts: 2, codes: [500], backoff: 99999h }
    backendRefs: [{ name: echo, port: 80 }]
  - matches: [{ path: { type: PathPrefix, value: /many } }]
    retry: { attempts: 100000, codes: [500], backoff: 1ms }
    backendRefs: [{ name: echo, port: 80 }]
`,
  );
  await topo.waypoint!.mesh.reload();
});

afterAll(async () => {
  for (const a of apps) a.closeAllConnections();
  for (const a of apps) a.close();
  await topo?.close();
});

/** Send `GET path` through the tunnel entry; resolves with the socket once the request is written. */
async function sendRaw(path: string, extra = ''): Promise<net.Socket & { text: string }> {
  const s = net.connect(topo.entry.port, topo.entry.host) as net.Socket & { text: string };
  s.text = '';
  s.on('error', () => {});
  s.on('data', (c: Buffer) => (s.text += c.toString()));
  await new Promise((r) => s.once('connect', r));
  s.write(`GET ${path} HTTP/1.1\r\nhost: echo\r\n${extra}\r\n`);
  return s;
}

test('a client that closes its keep-alive connection during the back-off (curl -m) stops the retries: DC, code 0', async () => {
  const path = '/slowbackoff?status=500&fin';
  const s = await sendRaw(path);
  await expect.poll(() => hits.get(path) ?? 0, { timeout: 5000 }).toBeGreaterThanOrEqual(1);
  // FIN after a request that asked to keep the connection: the client is gone (Envoy: DC).
  s.end();
  const r = await rec.find(path, 3000);
  const seen = hits.get(path) ?? 0;
  await sleep(2500);
  expect(hits.get(path)).toBe(seen);
  expect(r).toMatchObject({ flags: 'DC', code: 0, details: 'downstream_remote_disconnect' });
  expect(s.text).toBe('');
  // The waypoint resets the tunnel, so the client's half-open connection is closed too (a tunnel
  // left half-open would leak its CONNECT stream and hold a drain until its timeout).
  await expect.poll(() => s.destroyed || s.readableEnded, { timeout: 3000 }).toBe(true);
});

test('a client that half-closes after `Connection: close` still gets the answer after the retries (pitfall B3)', async () => {
  const path = '/many?status=500&k=b3';
  hits.set(path, 0);
  const s = await sendRaw(path, 'connection: close\r\n');
  // Retried 500s (1 ms back-off) until the backend turns to 200, well after the half-close.
  s.end();
  await expect.poll(() => hits.get(path) ?? 0, { timeout: 5000 }).toBeGreaterThanOrEqual(3);
  okAfter.set(path, 3);
  await new Promise((r) => s.once('close', r));
  expect(s.text).toMatch(/^HTTP\/1\.1 200 /);
  const r = await rec.find(path);
  expect(r).toMatchObject({ flags: '-', code: 200 });
});

test('a client reset during a huge back-off (99999h) clears the back-off timer', async () => {
  // The back-off timer is the only one this long: catch it as the router arms it.
  const long: NodeJS.Timeout[] = [];
  const real = globalThis.setTimeout;
  const spy = vi.spyOn(globalThis, 'setTimeout').mockImplementation(((fn: (...a: unknown[]) => void, ms?: number, ...args: unknown[]) => {
    const t = real(() => fn(...args), ms);
    if ((ms ?? 0) > 60_000) long.push(t);
    return t;
  }) as typeof setTimeout);
  try {
    const path = '/hugebackoff?status=500';
    const s = await sendRaw(path);
    await expect.poll(() => long.length, { timeout: 5000 }).toBe(1);
    s.resetAndDestroy();
    const r = await rec.find(path);
    expect(r).toMatchObject({ flags: 'DC', code: 0 });
    expect(hits.get(path)).toBe(1);
    // Cleared, not left to hold the request (and the event loop) for up to 24 days.
    expect((long[0] as unknown as { _destroyed: boolean })._destroyed).toBe(true);
  } finally {
    spy.mockRestore();
  }
});

test('a client reset with a 1 ms back-off and 100000 attempts stops the attempts at once', async () => {
  const path = '/many?status=500';
  const s = await sendRaw(path);
  await expect.poll(() => hits.get(path) ?? 0, { timeout: 5000 }).toBeGreaterThanOrEqual(20);
  s.resetAndDestroy();
  const r = await rec.find(path);
  await sleep(300);
  const seen = hits.get(path) ?? 0;
  await sleep(700);
  expect(hits.get(path)).toBe(seen);
  expect(r.flags).toBe('DC');
});

test('a client reset during an attempt aborts it and starts no other', async () => {
  const path = '/slowbackoff?status=500&ms=3000';
  const s = await sendRaw(path);
  await expect.poll(() => open.size, { timeout: 5000 }).toBe(1);
  s.resetAndDestroy();
  await expect.poll(() => open.size, { timeout: 5000 }).toBe(0);
  const r = await rec.find(path);
  await sleep(1500);
  expect(hits.get(path)).toBe(1);
  expect(r.flags).toBe('DC');
});

test('after those cancellations a graceful shutdown completes', async () => {
  const started = Date.now();
  await topo.waypoint!.shutdown();
  expect(Date.now() - started).toBeLessThan(10_000);
});
