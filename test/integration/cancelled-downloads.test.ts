/**
 * Cancelled downloads release everything they held (tunnel, h2c session, request, the upstream's
 * unread response), at once rather than when a timer fires minutes later:
 *  - a source that half-closes its CONNECT after a keep-alive request and stops reading (a client
 *    gone away) gets its tunnel reset and the upstream request cancelled, not after the 5-minute
 *    stream idle timeout with the upstream's 4 MiB window of unread body held meanwhile;
 *  - tunnels the waypoint destroys mid-response (the upstream reset) and h2c sessions whose
 *    client dropped the connection are not kept alive by their idle timers (Node does not clear
 *    the timer of an HTTP/2 stream or session destroyed while open).
 * Checked after forced GC: weak references to each request, tunnel and h2c session are cleared,
 * and buffer memory is back near its baseline. Addresses: 127.0.217.x.
 */
import http from 'node:http';
import http2 from 'node:http2';
import net from 'node:net';
import type { Duplex } from 'node:stream';
import v8 from 'node:v8';
import vm from 'node:vm';
import { afterAll, beforeAll, expect, test } from 'vitest';
import { FilterStatus, type FilterFactory, type StreamContext } from '../../src/pipeline/index.ts';
import { connect, hboneSession, type ClientIdentity } from '../helpers/hbone-client.ts';
import { startTestTopology, type TestTopology } from '../helpers/topology.ts';
import { clientIdentity, recorder, sleep } from './l7/l7-helpers.ts';

v8.setFlagsFromString('--expose-gc');
const gc = vm.runInNewContext('gc') as () => void;

const NET = 217;
const BODY = Buffer.alloc(8 * 1024 * 1024, 0x78);
const COUNT = 16;

let topo: TestTopology;
let id: ClientIdentity;
const apps: http.Server[] = [];
/** Responses the apps are still sending (their connection open). */
const sending = new Set<http.ServerResponse>();
const rec = recorder();
/** Weak references to what each request held at the waypoint, by kind. */
const held = { stream: [] as WeakRef<object>[], tunnel: [] as WeakRef<object>[], session: [] as WeakRef<object>[] };

const weakRefs: FilterFactory<unknown> = {
  name: 'test.weakrefs',
  parseConfig: () => ({}),
  create: () => ({
    name: 'test.weakrefs',
    onRequestHeaders(s: StreamContext) {
      held.stream.push(new WeakRef(s));
      if (s.http2) held.session.push(new WeakRef((s.req as http2.Http2ServerRequest).stream.session!));
      else held.tunnel.push(new WeakRef(s.req.socket));
      return FilterStatus.Continue;
    },
  }),
};

beforeAll(async () => {
  topo = await startTestTopology(NET, {
    backends: false,
    extraFilters: [weakRefs, rec.factory],
    bootstrap: { filters: [{ name: 'test.weakrefs' }, ...rec.filters] },
  });
  id = await clientIdentity(topo);
  for (const ip of [`127.0.${NET}.11`, `127.0.${NET}.12`]) {
    const app = http.createServer((req, res) => {
      sending.add(res);
      res.once('close', () => sending.delete(res));
      res.writeHead(200, { 'content-length': BODY.length });
      // `/cut`: half the body, then the connection is reset (the waypoint must reset downstream).
      if (req.url === '/cut') {
        res.write(BODY.subarray(0, BODY.length / 2), () => setTimeout(() => res.destroy(), 50));
        return;
      }
      res.end(BODY);
    });
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

async function collect(): Promise<void> {
  for (let i = 0; i < 4; i++) {
    await sleep(50);
    gc();
  }
}

function alive(refs: WeakRef<object>[]): number {
  return refs.filter((r) => r.deref() !== undefined).length;
}

/** Read from `s` until `bytes` arrived, then stop reading. */
function readSome(s: Duplex, bytes: number): Promise<void> {
  return new Promise((resolve, reject) => {
    let got = 0;
    const onData = (c: Buffer) => {
      got += c.length;
      if (got < bytes) return;
      s.off('data', onData);
      s.pause();
      resolve();
    };
    s.on('data', onData);
    s.once('error', reject);
  });
}

/** Warm up (pools, code) and return the buffer memory in use once collected. */
async function baseline(): Promise<number> {
  const s = net.connect(topo.entry.port, topo.entry.host, () => s.write('GET /warm HTTP/1.1\r\nHost: echo\r\nConnection: close\r\n\r\n'));
  s.resume();
  await new Promise((r) => s.once('close', r));
  for (const k of Object.values(held)) k.length = 0;
  await collect();
  return process.memoryUsage().arrayBuffers;
}

test('a source that half-closes after a keep-alive request and stops reading: tunnel reset and upstream cancelled now, nothing held', async () => {
  const base = await baseline();
  const sessions: http2.ClientHttp2Session[] = [];
  try {
    for (let i = 0; i < COUNT; i++) {
      const session = await hboneSession(`127.0.${NET}.1`, topo.waypoint!.addresses.hbone.port, id, { localAddress: `127.0.${NET}.50` });
      sessions.push(session);
      const { stream } = await connect(session, `127.0.${NET}.100:80`);
      stream.on('error', () => {});
      stream.write(`GET /gone-${i} HTTP/1.1\r\nHost: echo\r\n\r\n`);
      await readSome(stream, 64 * 1024);
      // END_STREAM (the client's FIN) and no more reading; the session stays open.
      stream.end();
    }
    // The upstream requests are cancelled: no app is still sending.
    await expect.poll(() => sending.size, { timeout: 5000 }).toBe(0);
    for (let i = 0; i < COUNT; i++) expect((await rec.find(`/gone-${i}`)).flags).toBe('DC');
    await collect();
    expect(alive(held.stream)).toBe(0);
    expect(alive(held.tunnel)).toBe(0);
    // Each held request kept up to the upstream's 4 MiB stream window of unread body.
    expect(process.memoryUsage().arrayBuffers - base).toBeLessThan(16 * 1024 * 1024);
  } finally {
    for (const s of sessions) s.destroy();
  }
});

test('tunnels reset by the waypoint mid-response (the upstream reset) are released, not held by their idle timer', async () => {
  await baseline();
  await Promise.all(
    Array.from({ length: COUNT }, async () => {
      const s = net.connect(topo.entry.port, topo.entry.host, () => s.write('GET /cut HTTP/1.1\r\nHost: echo\r\n\r\n'));
      s.on('error', () => {});
      s.resume();
      await new Promise((r) => s.once('close', r));
    }),
  );
  await expect.poll(() => sending.size, { timeout: 5000 }).toBe(0);
  await sleep(200);
  await collect();
  expect(held.tunnel.length).toBe(COUNT);
  expect(alive(held.stream)).toBe(0);
  expect(alive(held.tunnel)).toBe(0);
});

test('h2c clients that drop their connection mid-download: their sessions and requests are released', async () => {
  const base = await baseline();
  await Promise.all(
    Array.from({ length: COUNT }, async () => {
      const c = http2.connect(`http://${topo.entry.host}:${topo.entry.port}`);
      c.on('error', () => {});
      const r = c.request({ ':path': '/h2-drop' });
      r.on('error', () => {});
      r.end();
      await readSome(r, 64 * 1024);
      c.destroy();
    }),
  );
  await expect.poll(() => sending.size, { timeout: 5000 }).toBe(0);
  await sleep(200);
  await collect();
  expect(held.session.length).toBe(COUNT);
  expect(alive(held.stream)).toBe(0);
  expect(alive(held.session)).toBe(0);
  expect(process.memoryUsage().arrayBuffers - base).toBeLessThan(16 * 1024 * 1024);
});
