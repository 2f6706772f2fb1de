/**
 * Pitfalls F (the waypoint's pooled upstream HBONE connections): stale connections to a
 * destination that went silent or answers RST, endpoints leaving the mesh, and GOAWAY from the
 * destination (istio/ztunnel#1637, nodejs/undici#3140).
 * Addresses: 127.0.64.x–127.0.67.x, 127.0.69.x. A TCP middlebox on podIP:15009 (the waypoint's configured
 * upstream HBONE port) sits in front of each destination ztunnel (podIP:15008) in F1; F2 runs its
 * own HBONE server on podIP:15010.
 */
import fs from 'node:fs';
import http from 'node:http';
import http2, { type ServerHttp2Session, type ServerHttp2Stream } from 'node:http2';
import net from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { HboneServer } from '../../../src/hbone/server.ts';
import { relay } from '../../../src/hbone/relay.ts';
import { DEFAULT_HTTP2 } from '../../../src/hbone/settings.ts';
import type { ClientHttp2Session } from 'node:http2';
import { connect, hboneSession, readAll, type ClientIdentity } from '../../helpers/hbone-client.ts';
import { identityFrom, spiffe } from '../../helpers/identity.ts';
import { HttpReader, tcpMiddlebox } from '../../helpers/pitfalls.ts';
import { recorder } from '../../helpers/recorder.ts';
import { closeServer, listen, sleep, within } from '../../helpers/servers.ts';
import { openEntry, startTestTopology, type TestTopology } from '../../helpers/topology.ts';

/** An app on `ip:8080`: `ok <path>`; `?delay=ms` answers later; `?close=1` adds `Connection: close`. */
async function app(ip: string): Promise<http.Server> {
  const s = http.createServer((req, res) => {
    const q = new URL(req.url ?? '/', 'http://x').searchParams;
    req.resume();
    req.on('end', () =>
      setTimeout(() => {
        if (q.get('close')) res.setHeader('connection', 'close');
        res.end(`ok ${req.url}`);
      }, Number(q.get('delay') ?? 0)),
    );
  });
  s.keepAliveTimeout = 60_000;
  return listen(s, ip, 8080);
}

/** One request on a fresh entry connection (one tunnel): status and body, bounded. */
async function get(topo: TestTopology, path: string): Promise<{ status: number; body: string }> {
  const socket = await openEntry(topo);
  try {
    const reader = new HttpReader(socket);
    socket.write(`GET ${path} HTTP/1.1\r\nHost: echo\r\n\r\n`);
    const res = await within(reader.next(), 10_000, `GET ${path}`);
    return { status: res.status, body: res.body.toString() };
  } finally {
    socket.destroy();
  }
}

type Middlebox = Awaited<ReturnType<typeof tcpMiddlebox>>;

/** A topology whose waypoint dials podIP:15009, where a middlebox forwards to the destination ztunnel on :15008. */
async function startF1(net3: number, pods: string[], bootstrap: { upstream: Record<string, unknown>; http2: Record<string, unknown> }) {
  const rec = recorder();
  const topo = await startTestTopology(net3, {
    backends: false,
    podIps: pods,
    extraFilters: [rec.factory],
    bootstrap: { filters: rec.filters, upstream: { hbonePort: 15009, ...bootstrap.upstream }, http2: bootstrap.http2 },
  });
  const apps = await Promise.all(pods.map(app));
  const boxes = new Map<string, Middlebox>();
  for (const ip of pods) boxes.set(ip, await tcpMiddlebox(ip, 15009, ip, 15008));
  return {
    topo,
    rec,
    boxes,
    close: async () => {
      for (const b of boxes.values()) await b.close();
      for (const a of apps) await closeServer(a);
      await topo.close();
    },
  };
}

describe('F1: destination went silent; idle release (127.0.64.x)', () => {
  let f: Awaited<ReturnType<typeof startF1>>;
  beforeAll(async () => {
    // No PING: only the pool's idle timeout can notice. Inner HTTP keep-alive shorter than it.
    f = await startF1(64, ['127.0.64.11'], { upstream: { idleTimeoutMs: 400, httpKeepAliveMs: 100 }, http2: { keepaliveIntervalMs: 0 } });
  });
  afterAll(async () => {
    await f?.close();
  });

  it('F1: a pooled connection whose destination went silent (no FIN) is released after upstream.idleTimeoutMs; the next request gets 200 on a new connection', async () => {
    const box = f.boxes.get('127.0.64.11')!;
    expect(await get(f.topo, '/f1/silent/1')).toEqual({ status: 200, body: 'ok /f1/silent/1' });
    expect(box.conns.length).toBe(1);
    await sleep(250); // the inner HTTP connection (CONNECT stream) is released after httpKeepAliveMs
    box.conns[0].mode = 'silent';
    // The pool releases the idle connection (GOAWAY, close) once idleTimeoutMs passed.
    await within(box.conns[0].clientClosed, 5_000, 'the idle pooled connection is closed');
    expect(await get(f.topo, '/f1/silent/2')).toEqual({ status: 200, body: 'ok /f1/silent/2' });
    expect(box.conns.length).toBe(2);
    expect(f.rec.streams.filter((s) => s.path.startsWith('/f1/silent/')).map((s) => s.code)).toEqual([200, 200]);
  });
});

describe('F1: destination went silent; PING keepalive (127.0.65.x)', () => {
  let f: Awaited<ReturnType<typeof startF1>>;
  beforeAll(async () => {
    // Idle release and inner keep-alive far away: only the HTTP/2 PING keepalive can notice.
    f = await startF1(65, ['127.0.65.11'], { upstream: { idleTimeoutMs: 600_000, httpKeepAliveMs: 600_000 }, http2: { keepaliveIntervalMs: 200, keepaliveTimeoutMs: 500 } });
  });
  afterAll(async () => {
    await f?.close();
  });

  it('F1: a pooled connection (with a kept-alive CONNECT stream) to a silent destination is closed by the PING keepalive; the next request gets 200 on a new connection', async () => {
    const box = f.boxes.get('127.0.65.11')!;
    expect(await get(f.topo, '/f1/ping/1')).toEqual({ status: 200, body: 'ok /f1/ping/1' });
    expect(box.conns.length).toBe(1);
    box.conns[0].mode = 'silent';
    await within(box.conns[0].clientClosed, 5_000, 'the silent connection is closed by the keepalive');
    expect(await get(f.topo, '/f1/ping/2')).toEqual({ status: 200, body: 'ok /f1/ping/2' });
    expect(box.conns.length).toBe(2);
  });
});

describe('F1: endpoint removed; reused IP answers RST (127.0.66.x)', () => {
  let f: Awaited<ReturnType<typeof startF1>>;
  beforeAll(async () => {
    // A long idle timeout: nothing but the mesh update (or a retry) may fix things here.
    f = await startF1(66, ['127.0.66.11', '127.0.66.12'], { upstream: { idleTimeoutMs: 60_000, httpKeepAliveMs: 100 }, http2: { keepaliveIntervalMs: 0 } });
  });
  afterAll(async () => {
    await f?.close();
  });

  it('F1: an endpoint removed from the mesh state has its pooled HBONE connections closed (well before upstream.idleTimeoutMs)', async () => {
    const box12 = f.boxes.get('127.0.66.12')!;
    for (let i = 0; i < 40 && box12.conns.length === 0; i++) expect((await get(f.topo, `/f1/warm/${i}`)).status).toBe(200);
    expect(box12.open().length).toBeGreaterThan(0);
    const wp = f.topo.waypoint!;
    const updated = new Promise<void>((resolve) => wp.mesh.subscribe(() => resolve()));
    const text = fs.readFileSync(f.topo.meshFile, 'utf8').replace('  podIP: "127.0.66.12"', '  conditions: [{ type: Ready, status: "False" }]\n  podIP: "127.0.66.12"');
    expect(text).toContain('status: "False"');
    fs.writeFileSync(f.topo.meshFile, text);
    await within(updated, 5_000, 'mesh update');
    await within(Promise.all(box12.conns.map((c) => c.clientClosed)), 5_000, 'connections to the removed endpoint closed');
    for (let i = 0; i < 4; i++) expect(await get(f.topo, `/f1/after-removal/${i}`)).toEqual({ status: 200, body: `ok /f1/after-removal/${i}` });
    expect(box12.open().length).toBe(0);
  });

  it('F1: a new CONNECT on a pooled connection answered with a TCP RST (pod IP reused) is retried once on a new connection: 200, no 503', async () => {
    const box = f.boxes.get('127.0.66.11')!;
    expect((await get(f.topo, '/f1/rst/warm')).status).toBe(200);
    const before = box.conns.length;
    await sleep(250); // the inner HTTP connection is released; the HBONE connection stays pooled
    for (const c of box.open()) c.mode = 'rst';
    expect(box.open().length).toBeGreaterThan(0);
    expect(await get(f.topo, '/f1/rst/1')).toEqual({ status: 200, body: 'ok /f1/rst/1' });
    // Exactly one new connection: one retry (in the HBONE pool, or by the router's retry policy).
    expect(box.conns.length).toBe(before + 1);
    const seen = f.rec.streams.find((s) => s.path === '/f1/rst/1')!;
    expect(seen).toMatchObject({ code: 200 });
    expect(seen.attempts).toBeLessThanOrEqual(2);
  });
});

describe('F1: reused IP answers RST, TCP service port (127.0.69.x)', () => {
  let topo: TestTopology;
  let box: Middlebox;
  let client: ClientIdentity;
  let echo: net.Server;

  beforeAll(async () => {
    // A TCP port: no HTTP router (and no route retry policy) above the HBONE pool.
    topo = await startTestTopology(69, {
      backends: false,
      portName: 'tcp',
      podIps: ['127.0.69.11'],
      bootstrap: { upstream: { hbonePort: 15009, idleTimeoutMs: 60_000 }, http2: { keepaliveIntervalMs: 0 } },
    });
    echo = await listen(net.createServer((s) => s.on('error', () => {}).pipe(s)), '127.0.69.11', 8080);
    box = await tcpMiddlebox('127.0.69.11', 15009, '127.0.69.11', 15008);
    client = await identityFrom(topo.caDir);
  });
  afterAll(async () => {
    await box?.close();
    if (echo) await closeServer(echo);
    await topo?.close();
  });

  /** One TCP tunnel through the waypoint: CONNECT status, and the echo of `text` when 200. */
  async function tunnel(session: ClientHttp2Session, text: string): Promise<{ status: number; echoed: string }> {
    const { status, stream } = await within(connect(session, '127.0.69.100:80').catch(() => ({ status: 0, stream: undefined })), 10_000, 'CONNECT');
    if (status !== 200 || !stream) return { status, echoed: '' };
    stream.end(text);
    return { status, echoed: (await within(readAll(stream), 10_000, 'echo')).toString() };
  }

  it('F1: a TCP tunnel whose pooled upstream HBONE connection answers RST (pod IP reused) is opened on a new connection: CONNECT 200, bytes flow', async () => {
    const session = await hboneSession('127.0.69.1', topo.waypoint!.addresses.hbone.port, client);
    try {
      expect(await tunnel(session, 'first')).toEqual({ status: 200, echoed: 'first' });
      expect(box.conns.length).toBe(1);
      await sleep(200); // the upstream CONNECT stream is closed; its HBONE connection stays pooled
      box.conns[0].mode = 'rst';
      expect(await tunnel(session, 'second')).toEqual({ status: 200, echoed: 'second' });
      expect(box.conns.length).toBe(2);
    } finally {
      session.destroy();
    }
  });
});

describe('F2: GOAWAY from the destination (127.0.67.x)', () => {
  let topo: TestTopology;
  let appServer: http.Server;
  let dest: HboneServer;
  const sessions: ServerHttp2Session[] = [];
  /** CONNECT streams seen, as `sessionIndex:streamId`. */
  const streams: string[] = [];
  /** What the destination does with the n-th stream (0-based) of a session; return true when it answered. */
  let plan: (session: ServerHttp2Session, n: number, stream: ServerHttp2Stream) => boolean = () => false;
  const perSession = new Map<ServerHttp2Session, number>();

  beforeAll(async () => {
    topo = await startTestTopology(67, { backends: false, podIps: ['127.0.67.11'], bootstrap: { upstream: { hbonePort: 15010, httpKeepAliveMs: 60_000 } } });
    appServer = await app('127.0.67.11');
    dest = new HboneServer({
      name: 'f2-destination',
      material: await identityFrom(topo.caDir, spiffe('demo', 'echo')),
      http2: DEFAULT_HTTP2,
      verifyPeer: () => undefined,
      onConnect: (stream, req) => {
        const session = stream.session as ServerHttp2Session;
        const n = perSession.get(session) ?? 0;
        perSession.set(session, n + 1);
        streams.push(`${sessions.indexOf(session)}:${stream.id}`);
        if (plan(session, n, stream)) return;
        const socket = net.connect({ host: '127.0.67.11', port: req.port, allowHalfOpen: true });
        socket.on('error', () => stream.destroy());
        socket.once('connect', () => {
          if (stream.destroyed) return socket.destroy();
          stream.respond({ ':status': 200 });
          void relay(stream, socket);
        });
      },
    });
    dest.server.on('session', (s: ServerHttp2Session) => sessions.push(s));
    await dest.listen('127.0.67.11:15010');
  });
  afterAll(async () => {
    await dest?.drain(0);
    if (appServer) await closeServer(appServer);
    await topo?.close();
  });

  /** Start each test with no pooled connection: close every destination session and let the waypoint notice. */
  const reset = async () => {
    for (const s of sessions) s.destroy();
    await sleep(100);
    sessions.length = 0;
    streams.length = 0;
    perSession.clear();
  };

  it('F2: GOAWAY after the first response: the next request completes on a new connection, no hang', async () => {
    await reset();
    // After the first CONNECT stream of a session ends, the destination sends GOAWAY (NO_ERROR) and
    // keeps the connection open (as a server going idle would).
    plan = (session, n, stream) => {
      if (n === 0) stream.once('close', () => session.goaway(http2.constants.NGHTTP2_NO_ERROR, stream.id));
      return false;
    };
    expect(await get(topo, '/f2/a/1?close=1')).toEqual({ status: 200, body: 'ok /f2/a/1?close=1' });
    await sleep(100);
    expect(await get(topo, '/f2/a/2?close=1')).toEqual({ status: 200, body: 'ok /f2/a/2?close=1' });
    expect(sessions.length).toBe(2);
    expect(streams).toEqual(['0:1', '1:1']);
  });

  it('F2: GOAWAY while a request is in flight: that request completes, a concurrent one opens a new connection, no hang', async () => {
    await reset();
    // GOAWAY (NO_ERROR, last stream = this one) as soon as the first CONNECT arrives; the stream itself is served.
    plan = (session, n, stream) => {
      if (n === 0) session.goaway(http2.constants.NGHTTP2_NO_ERROR, stream.id);
      return false;
    };
    const slow = get(topo, '/f2/b/slow?delay=400');
    await sleep(150);
    expect(await get(topo, '/f2/b/2')).toEqual({ status: 200, body: 'ok /f2/b/2' });
    expect(await slow).toEqual({ status: 200, body: 'ok /f2/b/slow?delay=400' });
    expect(sessions.length).toBe(2);
  });

  it('F2: a CONNECT above the last-stream-id of a GOAWAY is retried once on a new connection: 200, no hang', async () => {
    await reset();
    // The second CONNECT of the first session is answered by GOAWAY(last = the first stream).
    plan = (session, n) => {
      if (sessions.indexOf(session) === 0 && n === 1) {
        session.goaway(http2.constants.NGHTTP2_NO_ERROR, 1);
        return true;
      }
      return false;
    };
    const slow = get(topo, '/f2/c/slow?delay=400');
    await sleep(150);
    expect(await get(topo, '/f2/c/2')).toEqual({ status: 200, body: 'ok /f2/c/2' });
    expect(await slow).toEqual({ status: 200, body: 'ok /f2/c/slow?delay=400' });
    expect(sessions.length).toBe(2);
    // One refused attempt on the old connection, one retry on the new one: no more.
    expect(streams).toEqual(['0:1', '0:3', '1:1']);
  });
});
