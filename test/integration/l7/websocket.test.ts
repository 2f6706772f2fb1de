/**
 * WebSocket (HTTP/1.1 Upgrade) through the whole path, pitfall D1: `ws` client → tunnel role →
 * waypoint (filter chain, router's dedicated upstream tunnel) → inbound role → `ws` server.
 * The 101 and Sec-WebSocket-Accept are relayed unchanged, frames flow both ways, close and reset
 * tear both sides down, a filter can deny the upgrade, `Upgrade: h2c` is stripped, and a port
 * declared `http2` still upgrades over HTTP/1.1. Addresses: 127.0.80.x and 127.0.81.x.
 */
import http from 'node:http';
import http2 from 'node:http2';
import net from 'node:net';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import WebSocket, { WebSocketServer, type RawData } from 'ws';
import { FilterStatus, sendLocalReply, type FilterFactory } from '../../../src/pipeline/index.ts';
import { recorder } from '../../helpers/recorder.ts';
import { startTestTopology, type TestTopology } from '../../helpers/topology.ts';

interface Rec {
  readonly path: string;
  readonly code: number;
  readonly flags: string;
  readonly details: string;
  readonly bytesReceived: number;
  readonly bytesSent: number;
}

/** Records completed streams and tunnels; denies `/deny*`; stamps every response head. */
function guard() {
  const streams: Rec[] = [];
  const tunnels = { opened: 0, completed: 0 };
  const factory: FilterFactory<unknown> = {
    name: 'test.ws_guard',
    parseConfig: () => ({}),
    create: () => ({
      name: 'test.ws_guard',
      onConnection() {
        tunnels.opened++;
        return FilterStatus.Continue;
      },
      onRequestHeaders(s) {
        if (s.path.startsWith('/deny')) {
          sendLocalReply(s, 403, 'RBAC: access denied', '-', 'rbac_access_denied_matched_policy[none]');
          return FilterStatus.StopAndReply;
        }
        return FilterStatus.Continue;
      },
      onResponseHeaders(s, headers) {
        headers.set('x-waypoint-saw', String(s.responseCode));
      },
      onStreamComplete(s) {
        streams.push({ path: s.path, code: s.responseCode, flags: s.responseFlags, details: s.responseCodeDetails, bytesReceived: s.bytesReceived, bytesSent: s.bytesSent });
      },
      onConnectionComplete() {
        tunnels.completed++;
      },
    }),
  };
  return { factory, streams, tunnels, filters: [{ name: 'test.ws_guard' }, { name: 'envoy.filters.http.router' }] };
}

interface Seen {
  readonly path: string;
  readonly httpVersion: string;
  readonly rawHeaders: string[];
}

interface Backend {
  readonly server: http.Server;
  readonly wss: WebSocketServer;
  close(): Promise<void>;
}

/**
 * A `ws` server on `ip:8080` behind an http.Server that records what reaches it. `h2c`: the same
 * port also speaks HTTP/2 with prior knowledge (the preface picks the server), answering
 * `h2 got <body bytes>`; otherwise it speaks only HTTP/1.1.
 */
async function wsBackend(ip: string, seen: Seen[], serverCloses: { path: string; code: number }[], h2c = false): Promise<Backend> {
  const server = http.createServer((req, res) => {
    seen.push({ path: req.url ?? '', httpVersion: req.httpVersion, rawHeaders: req.rawHeaders });
    const body = JSON.stringify({ pod: ip, url: req.url, headers: req.headers });
    res.writeHead(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) });
    res.end(body);
  });
  const wss = new WebSocketServer({
    server,
    verifyClient: (info: { req: http.IncomingMessage }, cb: (ok: boolean, code?: number, msg?: string) => void) => {
      seen.push({ path: info.req.url ?? '', httpVersion: info.req.httpVersion, rawHeaders: info.req.rawHeaders });
      if (info.req.url === '/missing') cb(false, 404);
      else cb(true);
    },
  });
  // A header with its own spelling on the 101, to see it arrive as sent.
  wss.on('headers', (headers: string[]) => headers.push('X-Backend-Case: Kept'));
  wss.on('connection', (ws, req) => {
    const path = req.url ?? '';
    ws.on('message', (data: RawData, isBinary: boolean) => {
      if (path === '/reset') {
        // The application vanishes mid-session: the pod's TCP connection is reset.
        req.socket.resetAndDestroy();
        return;
      }
      const buf = Buffer.isBuffer(data) ? data : Buffer.concat(data as Buffer[]);
      if (isBinary) ws.send(Buffer.concat([Buffer.from([0xff]), buf]), { binary: true });
      else if (buf.toString() === 'bye') ws.close(4001, 'server says bye');
      else ws.send(`echo:${buf.toString()}`);
    });
    ws.on('close', (code) => serverCloses.push({ path, code }));
  });
  const sessions = new Set<http2.ServerHttp2Session>();
  let front: net.Server = server;
  if (h2c) {
    const h2 = http2.createServer();
    h2.on('session', (session) => {
      sessions.add(session);
      session.once('close', () => sessions.delete(session));
    });
    h2.on('request', (req, res) => {
      seen.push({ path: req.url, httpVersion: req.httpVersion, rawHeaders: req.rawHeaders });
      let n = 0;
      req.on('data', (c: Buffer) => (n += c.length));
      req.on('end', () => {
        const body = `h2 got ${n}`;
        res.writeHead(200, { 'content-length': body.length });
        res.end(body);
      });
    });
    front = net.createServer((socket) => {
      socket.once('data', (first: Buffer) => {
        socket.pause();
        socket.unshift(first);
        if (first.subarray(0, 3).toString() === 'PRI') {
          // Node's h2 session reads what is already buffered, then consumes the socket itself.
          h2.emit('connection', socket);
        } else {
          server.emit('connection', socket);
          socket.resume();
        }
      });
    });
  }
  await new Promise<void>((resolve, reject) => {
    front.once('error', reject);
    front.listen(8080, ip, () => resolve());
  });
  const close = async () => {
    for (const c of wss.clients) c.terminate();
    wss.close();
    for (const x of sessions) x.destroy();
    server.closeAllConnections();
    await new Promise((r) => front.close(r));
  };
  return { server, wss, close };
}

async function closeBackend(b: Backend): Promise<void> {
  await b.close();
}

function within<T>(p: Promise<T>, ms: number, what: string): Promise<T> {
  let t: NodeJS.Timeout;
  return Promise.race([p.finally(() => clearTimeout(t)), new Promise<never>((_, reject) => (t = setTimeout(() => reject(new Error(`timed out: ${what}`)), ms)))]);
}

async function waitFor<T>(what: string, fn: () => T | undefined | false, ms = 5000): Promise<T> {
  const end = Date.now() + ms;
  for (;;) {
    const v = fn();
    if (v !== undefined && v !== false) return v;
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

/** Open a WebSocket; resolves with the socket and the 101 response, rejects on any other answer. */
function open(url: string): Promise<{ ws: WebSocket; res: http.IncomingMessage }> {
  return new Promise((resolve, reject) => {
    const ws = new WebSocket(url);
    let res: http.IncomingMessage | undefined;
    ws.once('upgrade', (r) => (res = r));
    ws.once('open', () => resolve({ ws, res: res! }));
    ws.once('unexpected-response', (_req, r) => reject(Object.assign(new Error(`unexpected ${r.statusCode}`), { statusCode: r.statusCode, res: r })));
    ws.once('error', reject);
  });
}

/** The next message on `ws`. */
function nextMessage(ws: WebSocket): Promise<{ data: Buffer; isBinary: boolean }> {
  return within(
    new Promise((resolve) => ws.once('message', (data: RawData, isBinary: boolean) => resolve({ data: data as Buffer, isBinary }))),
    5000,
    'a message',
  );
}

function closed(ws: WebSocket): Promise<{ code: number; reason: string }> {
  return within(new Promise((resolve) => ws.once('close', (code, reason) => resolve({ code, reason: reason.toString() }))), 5000, 'the close');
}

/** A raw HTTP/1.1 exchange: write `head`, read one Content-Length response. */
function rawExchange(socket: net.Socket, head: string): Promise<{ status: number; head: string; body: string }> {
  return within(
    new Promise((resolve, reject) => {
      let buf = Buffer.alloc(0);
      const onData = (c: Buffer) => {
        buf = Buffer.concat([buf, c]);
        const end = buf.indexOf('\r\n\r\n');
        if (end < 0) return;
        const h = buf.subarray(0, end).toString('latin1');
        const len = Number(/\r\ncontent-length:\s*(\d+)/i.exec(h)?.[1] ?? 0);
        if (buf.length < end + 4 + len) return;
        socket.off('data', onData);
        resolve({ status: Number(h.split(' ')[1]), head: h, body: buf.subarray(end + 4, end + 4 + len).toString() });
      };
      socket.on('data', onData);
      socket.once('error', reject);
      socket.write(head);
    }),
    5000,
    'a raw response',
  );
}

describe('WebSocket on an `http` service port', () => {
  const rec = guard();
  const seen: Seen[] = [];
  const serverCloses: { path: string; code: number }[] = [];
  const backends: Backend[] = [];
  let topo: TestTopology;
  let base: string;

  beforeAll(async () => {
    topo = await startTestTopology(80, { backends: false, extraFilters: [rec.factory], bootstrap: { filters: rec.filters } });
    for (const ip of ['127.0.80.11', '127.0.80.12']) backends.push(await wsBackend(ip, seen, serverCloses));
    base = `ws://${topo.entry.host}:${topo.entry.port}`;
  });
  afterAll(async () => {
    for (const b of backends) await closeBackend(b);
    await topo?.close();
  });

  test('101 with Sec-WebSocket-Accept unchanged, text and binary frames both ways, close handshake, one completion', async () => {
    const { ws, res } = await within(open(`${base}/chat?room=1`), 5000, 'the upgrade');
    // ws itself checks Sec-WebSocket-Accept against its key: `open` means it arrived unchanged.
    expect(res.statusCode).toBe(101);
    expect(res.headers.upgrade?.toLowerCase()).toBe('websocket');
    expect(res.rawHeaders).toContain('X-Backend-Case');
    expect(res.headers['x-waypoint-saw']).toBe('101');
    // Relayed as the pod sent it: no Date (or anything else) added by the waypoint's HTTP stack.
    expect(res.statusMessage).toBe('Switching Protocols');
    expect(res.headers.date).toBeUndefined();
    const up = seen.find((s) => s.path === '/chat?room=1')!;
    expect(up.httpVersion).toBe('1.1');
    const h = (n: string) => {
      const values: string[] = [];
      for (let i = 0; i < up.rawHeaders.length; i += 2) if (up.rawHeaders[i].toLowerCase() === n) values.push(up.rawHeaders[i + 1]);
      return values;
    };
    expect(h('upgrade')).toEqual(['websocket']);
    expect(h('connection')).toEqual(['Upgrade']);
    expect(h('sec-websocket-version')).toEqual(['13']);
    expect(h('sec-websocket-key')).toHaveLength(1);
    expect(h('x-request-id')).toHaveLength(1);

    ws.send('hello');
    expect((await nextMessage(ws)).data.toString()).toBe('echo:hello');
    const bin = Buffer.from([0, 1, 2, 250, 251]);
    ws.send(bin, { binary: true });
    const m = await nextMessage(ws);
    expect(m.isBinary).toBe(true);
    expect([...m.data]).toEqual([0xff, ...bin]);
    const big = 'x'.repeat(200_000);
    ws.send(big);
    expect((await nextMessage(ws)).data.toString()).toBe(`echo:${big}`);

    const c = closed(ws);
    ws.close(1000, 'client done');
    expect(await c).toEqual({ code: 1000, reason: 'client done' });
    await waitFor('the server-side close', () => serverCloses.find((x) => x.path === '/chat?room=1'));
    expect(serverCloses.find((x) => x.path === '/chat?room=1')!.code).toBe(1000);

    const r = await waitFor('the completion', () => rec.streams.find((s) => s.path === '/chat?room=1'));
    expect(r.code).toBe(101);
    expect(r.flags).toBe('-');
    expect(r.details).toBe('via_upstream');
    expect(r.bytesReceived).toBeGreaterThan(200_000);
    expect(r.bytesSent).toBeGreaterThan(200_000);
    await waitFor('every tunnel to complete', () => rec.tunnels.completed === rec.tunnels.opened);
    await new Promise((r) => setTimeout(r, 100));
    expect(rec.streams.filter((s) => s.path === '/chat?room=1')).toHaveLength(1);
  });

  test('the server closes the session: close frame reaches the client, both tunnels end', async () => {
    const before = rec.tunnels.opened;
    const { ws } = await within(open(`${base}/server-closes`), 5000, 'the upgrade');
    const c = closed(ws);
    ws.send('bye');
    expect(await c).toEqual({ code: 4001, reason: 'server says bye' });
    const r = await waitFor('the completion', () => rec.streams.find((s) => s.path === '/server-closes'));
    expect([r.code, r.flags]).toEqual([101, '-']);
    await waitFor('the tunnel to complete', () => rec.tunnels.opened > before && rec.tunnels.completed === rec.tunnels.opened);
  });

  test('a filter answering 403 denies the upgrade; the backend never sees it', async () => {
    const err = (await within(
      open(`${base}/deny/chat`).then(
        () => undefined,
        (e: { statusCode?: number }) => e,
      ),
      5000,
      'the denial',
    )) as { statusCode?: number };
    expect(err?.statusCode).toBe(403);
    expect(seen.some((s) => s.path.startsWith('/deny'))).toBe(false);
    const r = await waitFor('the completion', () => rec.streams.find((s) => s.path === '/deny/chat'));
    expect(r.code).toBe(403);
    expect(r.details).toBe('rbac_access_denied_matched_policy[none]');
    await waitFor('every tunnel to complete', () => rec.tunnels.completed === rec.tunnels.opened);
  });

  test('a non-101 answer from the backend is passed through and the tunnel closes', async () => {
    const sock = net.connect(topo.entry.port, topo.entry.host);
    await new Promise((r) => sock.once('connect', r));
    const ended = new Promise<void>((r) => sock.once('end', () => r()));
    const res = await rawExchange(
      sock,
      'GET /missing HTTP/1.1\r\nHost: echo\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n',
    );
    expect(res.status).toBe(404);
    expect(res.head).toMatch(/^HTTP\/1\.1 404 Not Found\r\n/);
    expect(res.head).toMatch(/\r\nConnection: close/i);
    await within(ended, 5000, 'the tunnel to end after a refused upgrade');
    sock.destroy();
    const r = await waitFor('the completion', () => rec.streams.find((s) => s.path === '/missing'));
    expect([r.code, r.flags]).toEqual([404, '-']);
  });

  test('the pod resets mid-session: both sides are torn down, flag UC, one completion', async () => {
    const before = rec.tunnels.opened;
    const { ws } = await within(open(`${base}/reset`), 5000, 'the upgrade');
    const c = closed(ws);
    ws.send('boom');
    expect((await c).code).toBe(1006);
    const r = await waitFor('the completion', () => rec.streams.find((s) => s.path === '/reset'));
    expect(r.code).toBe(101);
    expect(r.flags).toBe('UC');
    await waitFor('the tunnel to complete', () => rec.tunnels.opened > before && rec.tunnels.completed === rec.tunnels.opened);
    await new Promise((r) => setTimeout(r, 100));
    expect(rec.streams.filter((s) => s.path === '/reset')).toHaveLength(1);
  });

  test('the client vanishes mid-session: the pod side is closed too', async () => {
    const { ws } = await within(open(`${base}/vanish`), 5000, 'the upgrade');
    ws.send('ping');
    await nextMessage(ws);
    ws.terminate();
    const s = await waitFor('the server-side close', () => serverCloses.find((x) => x.path === '/vanish'), 5000);
    expect(s.code).toBe(1006);
    const r = await waitFor('the completion', () => rec.streams.find((x) => x.path === '/vanish'));
    expect(r.code).toBe(101);
    await waitFor('every tunnel to complete', () => rec.tunnels.completed === rec.tunnels.opened);
  });

  test('`Upgrade: h2c` on HTTP/1.1 is not an upgrade: stripped, proxied normally, the connection stays usable', async () => {
    const sock = net.connect(topo.entry.port, topo.entry.host);
    await new Promise((r) => sock.once('connect', r));
    const a = await rawExchange(sock, 'GET /h2c HTTP/1.1\r\nHost: echo\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQCAAAAAAIAAAAA\r\n\r\n');
    // The backend has a `ws` server on the same http.Server: had the upgrade reached it, it would have answered 400.
    expect(a.status).toBe(200);
    const got = JSON.parse(a.body) as { headers: Record<string, string> };
    expect(got.headers.upgrade).toBeUndefined();
    expect(got.headers['http2-settings']).toBeUndefined();
    expect(got.headers.connection).not.toMatch(/upgrade/i);
    const b = await rawExchange(sock, 'GET /after-h2c HTTP/1.1\r\nHost: echo\r\n\r\n');
    expect(b.status).toBe(200);
    sock.destroy();
    const r = await waitFor('the completion', () => rec.streams.find((s) => s.path === '/h2c'));
    expect(r.code).toBe(200);
  });
});

describe('WebSocket on a port declared `http2`', () => {
  const rec = guard();
  const seen: Seen[] = [];
  const serverCloses: { path: string; code: number }[] = [];
  const backends: Backend[] = [];
  let topo: TestTopology;

  beforeAll(async () => {
    topo = await startTestTopology(81, { backends: false, portName: 'http2', extraFilters: [rec.factory], bootstrap: { filters: rec.filters } });
    for (const ip of ['127.0.81.11', '127.0.81.12']) backends.push(await wsBackend(ip, seen, serverCloses, true));
  });
  afterAll(async () => {
    for (const b of backends) await closeBackend(b);
    await topo?.close();
  });

  test('ordinary requests go upstream as h2c (the backend speaks both)', async () => {
    const sock = net.connect(topo.entry.port, topo.entry.host);
    await new Promise((r) => sock.once('connect', r));
    const res = await rawExchange(sock, 'POST /plain HTTP/1.1\r\nHost: echo\r\nContent-Length: 3\r\n\r\nabc');
    sock.destroy();
    expect([res.status, res.body]).toEqual([200, 'h2 got 3']);
    expect(seen.find((s) => s.path === '/plain')?.httpVersion).toBe('2.0');
  });

  test('the upgrade still goes upstream over HTTP/1.1', async () => {
    const { ws, res } = await within(open(`ws://${topo.entry.host}:${topo.entry.port}/h2port`), 5000, 'the upgrade');
    expect(res.statusCode).toBe(101);
    expect(seen.find((s) => s.path === '/h2port')?.httpVersion).toBe('1.1');
    ws.send('over h1');
    expect((await nextMessage(ws)).data.toString()).toBe('echo:over h1');
    const c = closed(ws);
    ws.close(1000);
    expect((await c).code).toBe(1000);
    const r = await waitFor('the completion', () => rec.streams.find((s) => s.path === '/h2port'));
    expect([r.code, r.flags]).toEqual([101, '-']);
  });

  test('HTTP/1.1 `Expect: 100-continue` toward the h2c upstream: the waypoint answers 100 itself and drops Expect', async () => {
    const sock = net.connect(topo.entry.port, topo.entry.host);
    await new Promise((r) => sock.once('connect', r));
    const interim = await rawExchange(sock, 'POST /expect-h2 HTTP/1.1\r\nHost: echo\r\nContent-Length: 4\r\nExpect: 100-continue\r\n\r\n');
    expect(interim.status).toBe(100);
    const res = await rawExchange(sock, 'abcd');
    sock.destroy();
    expect([res.status, res.body]).toEqual([200, 'h2 got 4']);
    const up = seen.find((s) => s.path === '/expect-h2')!;
    expect(up.httpVersion).toBe('2.0');
    expect(up.rawHeaders.map((h) => h.toLowerCase())).not.toContain('expect');
  });
});

describe('an upgraded session and the stream idle timeout', () => {
  const rec = guard();
  const seen: Seen[] = [];
  const serverCloses: { path: string; code: number }[] = [];
  const backends: Backend[] = [];
  let topo: TestTopology;

  beforeAll(async () => {
    topo = await startTestTopology(83, { backends: false, extraFilters: [rec.factory], bootstrap: { filters: rec.filters, http: { streamIdleTimeoutMs: 600 } } });
    for (const ip of ['127.0.83.11', '127.0.83.12']) backends.push(await wsBackend(ip, seen, serverCloses));
  });
  afterAll(async () => {
    for (const b of backends) await closeBackend(b);
    await topo?.close();
  });

  test('traffic keeps it open; once idle for the timeout both sides are closed with flag SI', async () => {
    const { ws } = await within(open(`ws://${topo.entry.host}:${topo.entry.port}/idle`), 5000, 'the upgrade');
    // Twice the idle timeout with a message every 100 ms: still open.
    for (let i = 0; i < 12; i++) {
      ws.send(`tick ${i}`);
      expect((await nextMessage(ws)).data.toString()).toBe(`echo:tick ${i}`);
      await new Promise((r) => setTimeout(r, 100));
    }
    expect(ws.readyState).toBe(WebSocket.OPEN);
    // Then silence: the waypoint closes the session.
    expect((await closed(ws)).code).toBe(1006);
    await waitFor('the server-side close', () => serverCloses.find((x) => x.path === '/idle'));
    const r = await waitFor('the completion', () => rec.streams.find((s) => s.path === '/idle'));
    expect([r.code, r.flags, r.details]).toEqual([101, 'SI', 'stream_idle_timeout']);
  });
});

describe('an upgrade when one endpoint refuses connections', () => {
  let topo: TestTopology;
  const seen: Seen[] = [];
  const serverCloses: { path: string; code: number }[] = [];
  let backend: Backend;
  const rec = recorder();

  beforeAll(async () => {
    // Only .11 has an app; the inbound on .12 cannot reach one, so its CONNECTs fail.
    topo = await startTestTopology(84, { backends: false, extraFilters: [rec.factory], bootstrap: { filters: rec.filters, upstream: { loadBalancer: 'ROUND_ROBIN' } } });
    backend = await wsBackend('127.0.84.11', seen, serverCloses);
  });
  afterAll(async () => {
    await closeBackend(backend);
    await topo?.close();
  });

  test('connect failures are retried on the other endpoint (Istio default connect-failure retry), every upgrade succeeds', async () => {
    for (let i = 0; i < 6; i++) {
      const { ws, res } = await within(open(`ws://${topo.entry.host}:${topo.entry.port}/retry?i=${i}`), 10_000, `upgrade ${i}`);
      expect(res.statusCode).toBe(101);
      ws.terminate();
    }
    await waitFor('six completions', () => rec.streams.filter((s) => s.path.startsWith('/retry')).length === 6 || undefined);
    const retried = rec.streams.filter((s) => s.path.startsWith('/retry') && s.attempts === 2);
    // Round robin sends every other first attempt to the dead endpoint.
    expect(retried.length).toBeGreaterThan(0);
    for (const s of rec.streams.filter((x) => x.path.startsWith('/retry'))) expect(s.upstreamHost).toBe('127.0.84.11:8080');
  });
});
