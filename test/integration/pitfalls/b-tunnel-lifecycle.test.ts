/**
 * Pitfalls B (tunnel lifecycle: half-close, FIN, early close), HTTP/1.1 inside the tunnel and a
 * TCP port (istio/ztunnel#1065).
 * Addresses: 127.0.60.x (HTTP service), 127.0.61.x (TCP service).
 */
import net from 'node:net';
import type { ClientHttp2Session, ClientHttp2Stream } from 'node:http2';
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from 'vitest';
import { log } from '../../../src/util/log.ts';
import { connect, hboneSession, readAll, type ClientIdentity } from '../../helpers/hbone-client.ts';
import { identityFrom } from '../../helpers/identity.ts';
import { dispatchBackend, HttpReader, KiB, MiB, pattern, readHead } from '../../helpers/pitfalls.ts';
import { recorder } from '../../helpers/recorder.ts';
import { closeServer, listen, sleep, within } from '../../helpers/servers.ts';
import { openEntry, startTestTopology, type TestTopology } from '../../helpers/topology.ts';

/** Write `total` bytes of `chunk` to `stream` with back-pressure until done or the stream is gone; resolves with bytes written. */
async function pump(stream: ClientHttp2Stream | net.Socket, total: number, chunk = Buffer.alloc(64 * KiB, 'u')): Promise<number> {
  let sent = 0;
  while (sent < total && !stream.destroyed && stream.writable) {
    const c = total - sent >= chunk.length ? chunk : chunk.subarray(0, total - sent);
    sent += c.length;
    if (!stream.write(c)) {
      const ok = await new Promise<boolean>((resolve) => {
        const done = (v: boolean) => {
          stream.off('drain', onDrain);
          stream.off('close', onClose);
          resolve(v);
        };
        const onDrain = () => done(true);
        const onClose = () => done(false);
        stream.once('drain', onDrain);
        stream.once('close', onClose);
      });
      if (!ok) break;
    }
  }
  return sent;
}

const EARLY_BODY = Buffer.from('request entity too large; '.repeat(4000)); // ~100 KB

describe('HTTP service (127.0.60.x)', () => {
  let topo: TestTopology;
  let client: ClientIdentity;
  let session: ClientHttp2Session;
  const rec = recorder();
  const backends: Awaited<ReturnType<typeof dispatchBackend>>[] = [];
  const errorLog = vi.spyOn(log, 'error');

  beforeAll(async () => {
    topo = await startTestTopology(60, { backends: false, extraFilters: [rec.factory], bootstrap: { filters: rec.filters } });
    for (const ip of ['127.0.60.11', '127.0.60.12']) {
      backends.push(
        await dispatchBackend(
          ip,
          8080,
          (req, res) => {
            let n = 0;
            req.on('data', (c: Buffer) => (n += c.length));
            req.on('end', () => {
              const delay = Number(new URL(req.url ?? '/', 'http://x').searchParams.get('delay') ?? 0);
              setTimeout(() => res.end(`ok ${req.url} ${n}`), delay);
            });
          },
          (path) => {
            // Answer at once without reading the body, `Connection: close`, FIN, then discard what
            // still arrives (nginx's lingering close).
            if (path === '/b1/413-fin') {
              return async (socket) => {
                await readHead(socket);
                await sleep(50); // the upload is in flight and back-pressured by now
                socket.write(`HTTP/1.1 413 Payload Too Large\r\nContent-Length: ${EARLY_BODY.length}\r\nConnection: close\r\n\r\n`);
                socket.end(EARLY_BODY);
                socket.resume();
              };
            }
            // Answer at once without reading the body, then close with the body unread (a TCP RST).
            if (path === '/b1/200-rst') {
              return async (socket) => {
                await readHead(socket);
                await sleep(50);
                socket.write(`HTTP/1.1 200 OK\r\nContent-Length: ${EARLY_BODY.length}\r\n\r\n`);
                socket.write(EARLY_BODY);
                await sleep(50);
                socket.destroy();
              };
            }
            return undefined;
          },
        ),
      );
    }
    client = await identityFrom(topo.caDir);
    session = await hboneSession('127.0.60.1', topo.waypoint!.addresses.hbone.port, client);
  });
  afterAll(async () => {
    session?.destroy();
    for (const b of backends) await b.close();
    await topo?.close();
  });
  afterEach(() => {
    expect(errorLog).not.toHaveBeenCalled();
  });

  for (const variant of ['413-fin', '200-rst'] as const) {
    it(`B1: early response during a large upload arrives intact (${variant === '413-fin' ? '413, Connection: close, FIN' : '200, then close with the body unread (RST)'})`, async () => {
      const path = `/b1/${variant}`;
      const { status, stream } = await connect(session, '127.0.60.100:80');
      expect(status).toBe(200);
      stream.on('error', () => {});
      const reader = new HttpReader(stream);
      // Far more than every window and buffer on the path can take (HTTP/2 windows of 4 MiB per
      // stream on both tunnels, socket buffers): the upload is still going when the answer comes.
      const upload = 64 * MiB;
      stream.write(Buffer.from(`POST ${path} HTTP/1.1\r\nHost: echo\r\nContent-Length: ${upload}\r\n\r\n`));
      let uploaded = false;
      void pump(stream, upload).then((n) => (uploaded = n === upload));
      const res = await within(reader.next(), 15_000, 'early response');
      // The answer came mid-upload, so the upstream connection is closed (undici client-h1
      // `onMessageComplete`, like Envoy's HTTP/1 pool, drops one whose response beat its request).
      // A request done before the 200 would leave it pooled while the backend resets it 50 ms
      // later: the next test's request could be sent on it and get 503 UC (not retried under
      // Istio's default retry_on, as in Envoy's router).
      expect(uploaded).toBe(false);
      expect(res.status).toBe(variant === '413-fin' ? 413 : 200);
      expect(res.body.equals(EARLY_BODY)).toBe(true);
      stream.destroy();
      await expect.poll(() => rec.streams.find((s) => s.path === path), { timeout: 10_000 }).toBeDefined();
      const seen = rec.streams.find((s) => s.path === path)!;
      // The backend's status is what was recorded; the proxy produced no 5xx of its own.
      expect(seen.code).toBe(res.status);
      expect(seen.details).toBe('via_upstream');
    });
  }

  it('B3: Connection: close then END_STREAM at once is still answered in full, then END_STREAM', async () => {
    const { stream } = await connect(session, '127.0.60.100:80');
    const reader = new HttpReader(stream);
    // The backend answers 300 ms later: the half-close is long seen by then.
    stream.end(Buffer.from('GET /b3/get?delay=300 HTTP/1.1\r\nHost: echo\r\nConnection: close\r\n\r\n'));
    const res = await within(reader.next(), 10_000, 'response after half-close');
    expect(res.status).toBe(200);
    expect(res.body.toString()).toBe('ok /b3/get?delay=300 0');
    await within(reader.ended, 10_000, 'END_STREAM after the response');
    expect(reader.endedCleanly).toBe(true);
    await new Promise((r) => (stream.closed ? r(undefined) : stream.once('close', r)));
    expect(stream.rstCode).toBe(0);
    expect(rec.streams.find((s) => s.path === '/b3/get?delay=300')).toMatchObject({ code: 200, flags: '-' });
  });

  it('B3: a POST with its body, Connection: close and END_STREAM at once is answered in full', async () => {
    const { stream } = await connect(session, '127.0.60.100:80');
    const reader = new HttpReader(stream);
    const body = Buffer.alloc(200 * KiB, 'p');
    stream.end(Buffer.concat([Buffer.from(`POST /b3/post?delay=200 HTTP/1.1\r\nHost: echo\r\nContent-Length: ${body.length}\r\nConnection: close\r\n\r\n`), body]));
    const res = await within(reader.next(), 10_000, 'response after half-close');
    expect(res.status).toBe(200);
    expect(res.body.toString()).toBe(`ok /b3/post?delay=200 ${body.length}`);
    await within(reader.ended, 10_000, 'END_STREAM after the response');
    expect(rec.streams.find((s) => s.path === '/b3/post?delay=200')).toMatchObject({ code: 200, flags: '-' });
  });

  it('B3: through the source ztunnel, a client that half-closes its TCP connection gets the whole response, then FIN', async () => {
    const socket = await openEntry(topo);
    socket.end('GET /b3/tcp?delay=300 HTTP/1.1\r\nHost: echo\r\nConnection: close\r\n\r\n');
    const reader = new HttpReader(socket);
    const res = await within(reader.next(), 10_000, 'response after half-close');
    expect(res.status).toBe(200);
    expect(res.body.toString()).toBe('ok /b3/tcp?delay=300 0');
    await within(reader.ended, 10_000, 'FIN after the response');
    expect(rec.streams.find((s) => s.path === '/b3/tcp?delay=300')).toMatchObject({ code: 200, flags: '-' });
  });
});

describe('TCP service (127.0.61.x)', () => {
  let topo: TestTopology;
  let client: ClientIdentity;
  const N = 3 * MiB;
  const greeting = pattern(N);
  const servers: net.Server[] = [];
  const sockets = new Set<net.Socket>();

  beforeAll(async () => {
    topo = await startTestTopology(61, { portName: 'tcp', backends: false });
    for (const ip of ['127.0.61.11', '127.0.61.12']) {
      // Writes N bytes then FIN, and never reads what the client sends.
      const s = net.createServer({ allowHalfOpen: true, pauseOnConnect: true }, (socket) => {
        sockets.add(socket);
        socket.on('error', () => {});
        socket.once('close', () => sockets.delete(socket));
        socket.end(greeting);
      });
      servers.push(await listen(s, ip, 8080));
    }
    client = await identityFrom(topo.caDir);
  });
  afterAll(async () => {
    for (const s of servers) await closeServer(s, sockets);
    await topo?.close();
  });

  it('B1: TCP variant: the backend writes N bytes then FIN while the client is still uploading; all N bytes arrive, then END_STREAM', async () => {
    const session = await hboneSession('127.0.61.1', topo.waypoint!.addresses.hbone.port, client);
    try {
      const { status, stream } = await connect(session, '127.0.61.100:80');
      expect(status).toBe(200);
      stream.on('error', () => {});
      // Upload far more than every window and buffer on the path can take: it stays back-pressured.
      void pump(stream, 64 * MiB);
      const got = await within(readAll(stream), 15_000, 'N bytes then END_STREAM');
      expect(got.length).toBe(N);
      expect(got.equals(greeting)).toBe(true);
      // Ended by END_STREAM, not by a reset.
      expect(stream.rstCode ?? 0).toBe(0);
      stream.destroy();
    } finally {
      session.destroy();
    }
  });
});
