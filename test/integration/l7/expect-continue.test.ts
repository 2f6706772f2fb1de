/**
 * `Expect: 100-continue` relayed end to end (pitfall C3): raw HTTP/1.1 client → tunnel role →
 * waypoint (router's dedicated upstream tunnel) → inbound role → a backend that decides itself
 * whether and when to send 100 (`checkContinue`). Cases (a)–(d) of the pitfall, the header
 * reaching the backend, keep-alive after a relayed 100, and an HTTP/2 client (Node's h2 layer
 * answers 100 there). Addresses: 127.0.82.x.
 */
import http from 'node:http';
import http2 from 'node:http2';
import net from 'node:net';
import { afterAll, beforeAll, expect, test } from 'vitest';
import { recorder } from '../../helpers/recorder.ts';
import { sleep } from '../../helpers/servers.ts';
import { startTestTopology, type TestTopology } from '../../helpers/topology.ts';

const REQUEST_TIMEOUT_MS = 2500;

const rec = recorder();

/** What the backend saw per path: the Expect header and the body bytes it read. */
const seen = new Map<string, { expect: string | undefined; bytes: number }>();
const backends: http.Server[] = [];
let topo: TestTopology;

/** Answers each path its own way; `checkContinue` is registered, so Node sends no 100 by itself. */
function handle(req: http.IncomingMessage, res: http.ServerResponse): void {
  const path = req.url ?? '';
  const rec = { expect: req.headers.expect, bytes: 0 };
  seen.set(path, rec);
  const readAll = (then: () => void) => {
    req.on('data', (c: Buffer) => (rec.bytes += c.length));
    req.once('end', then);
  };
  const answer = (status: number, body: string) => {
    res.writeHead(status, { 'content-type': 'text/plain', 'content-length': Buffer.byteLength(body) });
    res.end(body);
  };
  switch (path) {
    case '/slow': // (a) 100, read the body, then never answer.
      res.writeContinue();
      readAll(() => {});
      return;
    case '/reject417': // (b) a final answer straight away, the body unread.
      return answer(417, 'expectation failed');
    case '/reject401':
      res.setHeader('WWW-Authenticate', 'Basic realm="x"');
      return answer(401, 'who are you');
    case '/ignore': // (c) no 100: the client must send the body on its own.
      return readAll(() => answer(200, `got ${rec.bytes}`));
    case '/twice': // (d) two 100s.
      res.writeContinue();
      res.writeContinue();
      return readAll(() => answer(200, `got ${rec.bytes}`));
    default:
      if (req.headers.expect !== undefined) res.writeContinue();
      return readAll(() => answer(200, `got ${rec.bytes} at ${path}`));
  }
}

beforeAll(async () => {
  topo = await startTestTopology(82, {
    backends: false,
    extraFilters: [rec.factory],
    bootstrap: { http: { requestTimeoutMs: REQUEST_TIMEOUT_MS }, filters: rec.filters },
  });
  for (const ip of ['127.0.82.11', '127.0.82.12']) {
    const server = http.createServer(handle);
    server.on('checkContinue', handle);
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(8080, ip, () => resolve());
    });
    backends.push(server);
  }
});
afterAll(async () => {
  for (const b of backends) {
    b.closeAllConnections();
    await new Promise((r) => b.close(r));
  }
  await topo?.close();
});

interface Res {
  readonly status: number;
  readonly head: string;
  readonly body: string;
}

/** A raw HTTP/1.1 client on one tunnel: every response (1xx included) in order, and all bytes received. */
class RawClient {
  readonly socket: net.Socket;
  private buf = Buffer.alloc(0);
  /** Every byte received so far (to count interim responses). */
  all = '';
  ended = false;
  private wake: (() => void) | undefined;

  private constructor(socket: net.Socket) {
    this.socket = socket;
    socket.on('data', (c: Buffer) => {
      this.buf = Buffer.concat([this.buf, c]);
      this.all += c.toString('latin1');
      this.poke();
    });
    socket.on('end', () => {
      this.ended = true;
      this.poke();
    });
    socket.on('close', () => {
      this.ended = true;
      this.poke();
    });
    socket.on('error', () => {});
  }

  static async open(): Promise<RawClient> {
    const s = net.connect(topo.entry.port, topo.entry.host);
    await new Promise((r) => s.once('connect', r));
    return new RawClient(s);
  }

  private poke(): void {
    const w = this.wake;
    this.wake = undefined;
    w?.();
  }

  /** The next response (interim or final); rejects after `ms` or when the tunnel ends first. */
  async next(ms = 5000): Promise<Res> {
    const deadline = Date.now() + ms;
    for (;;) {
      const end = this.buf.indexOf('\r\n\r\n');
      if (end >= 0) {
        const head = this.buf.subarray(0, end).toString('latin1');
        const status = Number(head.split(' ')[1]);
        const len = status < 200 ? 0 : Number(/\r\ncontent-length:\s*(\d+)/i.exec(head)?.[1] ?? 0);
        if (this.buf.length >= end + 4 + len) {
          const body = this.buf.subarray(end + 4, end + 4 + len).toString();
          this.buf = this.buf.subarray(end + 4 + len);
          return { status, head, body };
        }
      }
      if (this.ended) throw new Error(`tunnel ended before a response; got ${JSON.stringify(this.all)}`);
      const left = deadline - Date.now();
      if (left <= 0) throw new Error(`no response within ${ms} ms; got ${JSON.stringify(this.all)}`);
      await new Promise<void>((r) => {
        const t = setTimeout(r, left);
        this.wake = () => {
          clearTimeout(t);
          r();
        };
      });
    }
  }

  /** Resolves when the tunnel has ended (rejects after `ms`). */
  async closed(ms = 5000): Promise<void> {
    const deadline = Date.now() + ms;
    while (!this.ended) {
      if (Date.now() > deadline) throw new Error('the tunnel did not end');
      await new Promise((r) => setTimeout(r, 20));
    }
  }

  write(s: string | Buffer): void {
    this.socket.write(s);
  }
}

const post = (path: string, length: number) => `POST ${path} HTTP/1.1\r\nHost: echo.demo\r\nContent-Type: application/octet-stream\r\nContent-Length: ${length}\r\nExpect: 100-continue\r\n\r\n`;

const completion = (path: string) => rec.find(path);

test('the upstream 100 is relayed, Expect reaches the backend, and the connection stays usable', async () => {
  const c = await RawClient.open();
  c.write(post('/ok', 5));
  const first = await c.next();
  expect(first.status).toBe(100);
  c.write('hello');
  const final = await c.next();
  expect(final.status).toBe(200);
  expect(final.body).toBe('got 5 at /ok');
  expect(seen.get('/ok')?.expect).toBe('100-continue');
  c.write('GET /after HTTP/1.1\r\nHost: echo.demo\r\n\r\n');
  expect((await c.next()).body).toBe('got 0 at /after');
  c.socket.destroy();
  const r = await completion('/ok');
  expect([r.code, r.flags, r.bytesReceived]).toEqual([200, '-', 5]);
});

test('(a) a request timeout after a relayed 100 still answers 504 UT, not an empty reply', async () => {
  const c = await RawClient.open();
  c.write(post('/slow', 5));
  expect((await c.next()).status).toBe(100);
  c.write('hello');
  const final = await c.next(REQUEST_TIMEOUT_MS + 5000);
  expect(final.status).toBe(504);
  expect(final.body).toBe('upstream request timeout');
  expect(seen.get('/slow')?.bytes).toBe(5);
  c.socket.destroy();
  const r = await completion('/slow');
  expect([r.code, r.flags, r.details]).toEqual([504, 'UT', 'response_timeout']);
});

test('(b) a final 417 or 401 without 100 is passed through; the upload is not needed and the connection closes', async () => {
  for (const [path, status] of [
    ['/reject417', 417],
    ['/reject401', 401],
  ] as const) {
    const c = await RawClient.open();
    c.write(post(path, 1_000_000));
    const final = await c.next();
    expect(final.status).toBe(status);
    if (status === 401) expect(final.head).toMatch(/\r\nWWW-Authenticate: Basic realm="x"/);
    expect(final.head).toMatch(/\r\nConnection: close/i);
    await c.closed();
    expect(c.all).not.toMatch(/^HTTP\/1\.1 100/);
    expect(seen.get(path)?.bytes).toBe(0);
    c.socket.destroy();
    const r = await completion(path);
    expect([r.code, r.flags]).toEqual([status, '-']);
  }
});

test('(c) the backend ignores Expect: no 100 comes, and a client that sends its body after 1 s succeeds', async () => {
  const c = await RawClient.open();
  c.write(post('/ignore', 11));
  // curl's wait. Before this change Node answered 100 at once, whatever the backend wanted.
  await sleep(1000);
  expect(c.all).toBe('');
  c.write('hello world');
  const final = await c.next();
  expect(final.status).toBe(200);
  expect(final.body).toBe('got 11');
  c.socket.destroy();
  expect((await completion('/ignore')).code).toBe(200);
});

test('(d) the backend sends 100 twice: the client sees one', async () => {
  const c = await RawClient.open();
  c.write(post('/twice', 3));
  expect((await c.next()).status).toBe(100);
  // Give a second 100 time to arrive before the body goes.
  await sleep(200);
  c.write('abc');
  const final = await c.next();
  expect(final.status).toBe(200);
  expect(final.body).toBe('got 3');
  expect(c.all.match(/HTTP\/1\.1 100 /g)).toHaveLength(1);
  c.socket.destroy();
});

test('an HTTP/2 client with Expect gets Node’s 100 and its request through', async () => {
  const session = http2.connect(`http://${topo.entry.host}:${topo.entry.port}`);
  try {
    const req = session.request({ ':method': 'POST', ':path': '/h2expect', expect: '100-continue', 'content-type': 'text/plain' }, { endStream: false });
    let continued = false;
    req.once('continue', () => {
      continued = true;
      req.end('four');
    });
    const [status, body] = await h2Answer(req);
    expect(continued).toBe(true);
    expect(status).toBe(200);
    expect(body).toBe('got 4 at /h2expect');
  } finally {
    session.close();
  }
});

test('an HTTP/2 client with another expectation is proxied as an ordinary request (no 417 of Node’s)', async () => {
  const session = http2.connect(`http://${topo.entry.host}:${topo.entry.port}`);
  try {
    const req = session.request({ ':method': 'POST', ':path': '/h2other', expect: 'x-something', 'content-type': 'text/plain' });
    req.end('five!');
    const [status, body] = await h2Answer(req);
    expect(status).toBe(200);
    expect(body).toBe('got 5 at /h2other');
  } finally {
    session.close();
  }
});

/** The status and body an HTTP/2 request got. */
function h2Answer(req: http2.ClientHttp2Stream): Promise<[number, string]> {
  return new Promise<[number, string]>((resolve, reject) => {
    let st = 0;
    let b = '';
    req.on('response', (h) => (st = Number(h[':status'])));
    req.setEncoding('utf8');
    req.on('data', (d: string) => (b += d));
    req.on('end', () => resolve([st, b]));
    req.on('error', reject);
    setTimeout(() => reject(new Error('no h2 response')), 5000);
  });
}
