/**
 * HTTP/2 inside tunnels and the upstream protocol choice (pitfalls D2, D3):
 *  - a port named `http` with an HTTP/1.1-only backend: an h2c client's request reaches the backend
 *    as HTTP/1.1 (never the h2 preface) with Host = the client's :authority;
 *  - a port named `http2` with an h2c-only backend: HTTP/1.1 and h2c clients both reach it over
 *    HTTP/2, POST bodies and response trailers pass, many concurrent streams share one h2c connection;
 *  - connection-specific HTTP/1.1 headers never reach the h2 backend, and one bad `TE` does not
 *    disturb nine other requests multiplexed on the same upstream session.
 * Addresses: 127.0.85.x (`http`), 127.0.86.x (`http2`, one endpoint).
 */
import { createHash } from 'node:crypto';
import http from 'node:http';
import http2, { type IncomingHttpHeaders } from 'node:http2';
import net from 'node:net';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { parseHttpResponse } from '../../helpers/hbone-client.ts';
import { closeServer, listen, track } from '../../helpers/servers.ts';
import { startTestTopology, type TestTopology } from '../../helpers/topology.ts';

/** An h2c client session to a plain-TCP entry. */
function h2cClient(host: string, port: number, options: http2.ClientSessionOptions = {}): Promise<http2.ClientHttp2Session> {
  return new Promise((resolve, reject) => {
    const s = http2.connect(`http://${host}:${port}`, options);
    s.once('connect', () => resolve(s));
    s.once('error', reject);
  });
}

/** One h2 request: status, headers, body, trailers. */
function h2Request(
  session: http2.ClientHttp2Session,
  headers: http2.OutgoingHttpHeaders,
  body?: Buffer,
): Promise<{ status: number; headers: IncomingHttpHeaders; body: Buffer; trailers: IncomingHttpHeaders | undefined }> {
  return new Promise((resolve, reject) => {
    const req = session.request(headers, { endStream: body === undefined });
    let status = 0;
    let h: IncomingHttpHeaders = {};
    let trailers: IncomingHttpHeaders | undefined;
    const chunks: Buffer[] = [];
    req.on('response', (r) => {
      h = r;
      status = Number(r[':status']);
    });
    req.on('trailers', (t) => (trailers = t));
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => resolve({ status, headers: h, body: Buffer.concat(chunks), trailers }));
    req.on('error', reject);
    if (body) req.end(body);
  });
}

/** One raw HTTP/1.1 exchange on a fresh connection to host:port; the response must carry Content-Length. */
function rawRequest(host: string, port: number, text: string): Promise<{ status: number; headers: Record<string, string>; body: Buffer }> {
  return new Promise((resolve, reject) => {
    const s = net.connect(port, host);
    let acc = Buffer.alloc(0);
    const done = () => {
      const head = acc.indexOf('\r\n\r\n');
      if (head < 0) return false;
      const len = Number(/content-length: *(\d+)/i.exec(acc.subarray(0, head).toString())?.[1] ?? -1);
      if (len < 0 || acc.length < head + 4 + len) return false;
      s.destroy();
      resolve(parseHttpResponse(acc));
      return true;
    };
    s.on('data', (c: Buffer) => {
      acc = Buffer.concat([acc, c]);
      done();
    });
    s.once('end', () => {
      if (!done()) reject(new Error(`connection ended before a whole response: ${JSON.stringify(acc.toString())}`));
    });
    s.once('error', reject);
    s.write(text);
  });
}

describe('port named http, HTTP/1.1-only backend (D2)', () => {
  let topo: TestTopology;
  const backends: http.Server[] = [];
  const seen: { version: string; method: string; host: string | undefined; hosts: number; te: unknown; url: string }[] = [];
  let prefaceOrGarbage = 0;

  beforeAll(async () => {
    topo = await startTestTopology(85, { portName: 'http', backends: false });
    for (const ip of ['127.0.85.11', '127.0.85.12']) {
      const b = http.createServer((req, res) => {
        if (req.method === 'PRI') prefaceOrGarbage++;
        const hosts = req.rawHeaders.filter((_, i) => i % 2 === 0 && req.rawHeaders[i].toLowerCase() === 'host').length;
        seen.push({ version: req.httpVersion, method: req.method ?? '', host: req.headers.host, hosts, te: req.headers.te, url: req.url ?? '' });
        const body = JSON.stringify({ version: req.httpVersion, host: req.headers.host });
        res.writeHead(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) });
        res.end(body);
      });
      b.on('clientError', (_err, socket) => {
        prefaceOrGarbage++;
        socket.destroy();
      });
      await listen(b, ip, 8080);
      backends.push(b);
    }
  });
  afterAll(async () => {
    for (const b of backends) await closeServer(b);
    await topo?.close();
  });

  test('an h2c client is answered over HTTP/2 while the backend sees HTTP/1.1 with Host = :authority', async () => {
    const client = await h2cClient(topo.entry.host, topo.entry.port);
    try {
      for (let i = 0; i < 4; i++) {
        const r = await h2Request(client, { ':path': `/d2/h2c/${i}`, ':authority': 'echo.demo.svc.cluster.local:80' });
        expect(r.status).toBe(200);
        expect(JSON.parse(r.body.toString())).toEqual({ version: '1.1', host: 'echo.demo.svc.cluster.local:80' });
      }
    } finally {
      client.close();
    }
    const mine = seen.filter((s) => s.url.startsWith('/d2/h2c/'));
    expect(mine).toHaveLength(4);
    for (const s of mine) expect(s).toMatchObject({ version: '1.1', method: 'GET', host: 'echo.demo.svc.cluster.local:80', hosts: 1 });
    expect(prefaceOrGarbage).toBe(0);
  });

  test('an h2c request with a host header and te: trailers (as gRPC clients send) goes up with one Host, the :authority', async () => {
    const client = await h2cClient(topo.entry.host, topo.entry.port);
    try {
      const r = await h2Request(client, { ':method': 'POST', ':path': '/d2/extra', ':authority': 'svc.example', host: 'other.example', te: 'trailers' }, Buffer.from('x'));
      expect(r.status).toBe(200);
    } finally {
      client.close();
    }
    const s = seen.find((x) => x.url === '/d2/extra')!;
    expect(s).toMatchObject({ version: '1.1', host: 'svc.example', hosts: 1 });
  });

  test('an h2c header block over http.maxRequestHeadersBytes (64 KiB) is reset, never forwarded; the session serves on', async () => {
    // Node's client would refuse to send a block over its own 64 KiB default.
    const client = await h2cClient(topo.entry.host, topo.entry.port, { maxSendHeaderBlockLength: 1 << 20 });
    try {
      // 70,000 octets of value: the header list is over the waypoint's 64 KiB.
      const big = h2Request(client, { ':path': '/d2/oversized', ':authority': 'svc.example', 'x-big': 'a'.repeat(70_000) });
      const err = await big.then(() => undefined, (e: Error) => e);
      expect(err).toMatchObject({ code: 'ERR_HTTP2_STREAM_ERROR', message: expect.stringContaining('NGHTTP2_INTERNAL_ERROR') });
      // The next request on the same session is served.
      const ok = await h2Request(client, { ':path': '/d2/under-limit', ':authority': 'svc.example' });
      expect(ok.status).toBe(200);
    } finally {
      client.close();
    }
    expect(seen.some((x) => x.url === '/d2/oversized')).toBe(false);
    expect(seen.some((x) => x.url === '/d2/under-limit')).toBe(true);
  });

  test('an HTTP/1.1 client reaches the backend as HTTP/1.1 with its Host', async () => {
    const r = await rawRequest(topo.entry.host, topo.entry.port, 'GET /d2/h1 HTTP/1.1\r\nHost: h1.example\r\n\r\n');
    expect(r.status).toBe(200);
    expect(JSON.parse(r.body.toString())).toEqual({ version: '1.1', host: 'h1.example' });
    expect(prefaceOrGarbage).toBe(0);
  });
});

describe('port named http2, h2c-only backend', () => {
  let topo: TestTopology;
  let backend: http2.Http2Server;
  let sockets: Set<net.Socket>;
  const sessionIds = new WeakMap<object, number>();
  let sessions = 0;
  /** Headers and session of every request the backend got, by path. */
  const got = new Map<string, { headers: IncomingHttpHeaders; session: number }>();
  let d3Waiting: (() => void)[] = [];

  beforeAll(async () => {
    topo = await startTestTopology(86, { portName: 'http2', backends: false, podIps: ['127.0.86.11'] });
    backend = http2.createServer();
    sockets = track(backend);
    backend.on('session', (s) => sessionIds.set(s, ++sessions));
    backend.on('stream', (stream, headers) => {
      const path = String(headers[':path']);
      got.set(path, { headers, session: sessionIds.get(stream.session!) ?? 0 });
      const chunks: Buffer[] = [];
      stream.on('data', (c: Buffer) => chunks.push(c));
      stream.on('end', () => {
        const body = Buffer.concat(chunks);
        const sha = createHash('sha256').update(body).digest('hex');
        const reply = () => {
          if (stream.destroyed) return;
          if (path.startsWith('/trailers')) {
            stream.respond({ ':status': 200, 'content-type': 'text/plain' }, { waitForTrailers: true });
            stream.once('wantTrailers', () => stream.sendTrailers({ 'x-body-length': String(body.length), 'x-body-sha256': sha }));
            stream.end('trailers follow');
            return;
          }
          const out = JSON.stringify({ path, method: headers[':method'], authority: headers[':authority'], length: body.length, sha });
          stream.respond({ ':status': 200, 'content-type': 'application/json', 'content-length': String(Buffer.byteLength(out)) });
          stream.end(out);
        };
        if (path.startsWith('/d3/')) {
          // Hold the D3 requests until all ten are open at once on the upstream session.
          d3Waiting.push(reply);
          if (d3Waiting.length === 10) for (const f of d3Waiting.splice(0)) f();
          else setTimeout(reply, 3000);
        } else reply();
      });
    });
    await listen(backend, '127.0.86.11', 8080);
  });
  afterAll(async () => {
    await closeServer(backend, sockets);
    await topo?.close();
  });

  test('an HTTP/1.1 client reaches the h2c backend over HTTP/2 (Host becomes :authority)', async () => {
    const r = await rawRequest(topo.entry.host, topo.entry.port, 'GET /h1-to-h2 HTTP/1.1\r\nHost: web.example:80\r\n\r\n');
    expect(r.status).toBe(200);
    const body = JSON.parse(r.body.toString());
    expect(body).toMatchObject({ path: '/h1-to-h2', method: 'GET', authority: 'web.example:80' });
    expect(got.get('/h1-to-h2')!.headers.host).toBeUndefined();
  });

  test('an h2c client reaches the h2c backend', async () => {
    const client = await h2cClient(topo.entry.host, topo.entry.port);
    try {
      const r = await h2Request(client, { ':path': '/h2-to-h2', ':authority': 'web.example' });
      expect(r.status).toBe(200);
      expect(JSON.parse(r.body.toString())).toMatchObject({ path: '/h2-to-h2', authority: 'web.example' });
    } finally {
      client.close();
    }
  });

  test('a POST body goes up and response trailers come back (h2c and HTTP/1.1 clients)', async () => {
    const body = Buffer.alloc(200 * 1024);
    for (let i = 0; i < body.length; i++) body[i] = (i * 7) & 0xff;
    const sha = createHash('sha256').update(body).digest('hex');
    const client = await h2cClient(topo.entry.host, topo.entry.port);
    try {
      const r = await h2Request(client, { ':method': 'POST', ':path': '/trailers/h2', te: 'trailers' }, body);
      expect(r.status).toBe(200);
      expect(r.body.toString()).toBe('trailers follow');
      expect(r.trailers).toMatchObject({ 'x-body-length': String(body.length), 'x-body-sha256': sha });
    } finally {
      client.close();
    }
    const h1 = await new Promise<{ status: number; body: string; trailers: NodeJS.Dict<string> }>((resolve, reject) => {
      const req = http.request({ host: topo.entry.host, port: topo.entry.port, method: 'POST', path: '/trailers/h1', headers: { te: 'trailers', host: 'web.example' } }, (res) => {
        let text = '';
        res.setEncoding('utf8');
        res.on('data', (c: string) => (text += c));
        res.on('end', () => resolve({ status: res.statusCode!, body: text, trailers: res.trailers }));
      });
      req.on('error', reject);
      req.end(body);
    });
    expect(h1.status).toBe(200);
    expect(h1.body).toBe('trailers follow');
    expect(h1.trailers).toMatchObject({ 'x-body-length': String(body.length), 'x-body-sha256': sha });
  });

  test('100 concurrent streams on one h2c connection all complete', async () => {
    const client = await h2cClient(topo.entry.host, topo.entry.port);
    try {
      const results = await Promise.all(
        Array.from({ length: 100 }, (_, i) => h2Request(client, { ':method': 'POST', ':path': `/many/${i}` }, Buffer.from(`body-${i}`))),
      );
      results.forEach((r, i) => {
        expect(r.status).toBe(200);
        const j = JSON.parse(r.body.toString());
        expect(j.path).toBe(`/many/${i}`);
        expect(j.length).toBe(`body-${i}`.length);
      });
    } finally {
      client.close();
    }
  });

  test('D3: connection-specific headers never reach the h2 backend; one bad TE does not disturb 9 others on the session', async () => {
    const bad =
      'GET /d3/bad HTTP/1.1\r\nHost: web.example\r\nTE: gzip\r\nConnection: keep-alive, X-Hop\r\nX-Hop: 1\r\n' +
      'Keep-Alive: timeout=5\r\nProxy-Connection: keep-alive\r\nUpgrade: h2c\r\nX-Keep: yes\r\n\r\n';
    const trailersTe = 'GET /d3/te-trailers HTTP/1.1\r\nHost: web.example\r\nTE: trailers\r\nConnection: TE\r\n\r\n';
    const plain = (i: number) => `GET /d3/ok${i} HTTP/1.1\r\nHost: web.example\r\n\r\n`;
    d3Waiting = [];
    const results = await Promise.all([
      rawRequest(topo.entry.host, topo.entry.port, bad),
      rawRequest(topo.entry.host, topo.entry.port, trailersTe),
      ...Array.from({ length: 8 }, (_, i) => rawRequest(topo.entry.host, topo.entry.port, plain(i))),
    ]);
    for (const r of results) expect(r.status).toBe(200);
    const b = got.get('/d3/bad')!.headers;
    for (const h of ['te', 'connection', 'x-hop', 'keep-alive', 'proxy-connection', 'upgrade', 'transfer-encoding', 'host']) expect(b[h], h).toBeUndefined();
    expect(b['x-keep']).toBe('yes');
    expect(got.get('/d3/te-trailers')!.headers.te).toBe('trailers');
    // All ten were open together on one upstream h2c session.
    const ids = new Set([...got].filter(([p]) => p.startsWith('/d3/')).map(([, v]) => v.session));
    expect(ids.size).toBe(1);
  });
});
