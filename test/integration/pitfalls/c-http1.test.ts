/**
 * Pitfalls C (HTTP/1.x semantics inside the tunnel): HTTP/1.0 upstreams and clients, header case,
 * header size limits (in bytes; the field count is raised out of the way).
 * Addresses: 127.0.62.x (default limits), 127.0.63.x (http.maxRequestHeadersBytes raised).
 */
import type http from 'node:http';
import type net from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { dispatchBackend, HttpReader, KiB, readHead, type RawResponse } from '../../helpers/pitfalls.ts';
import { recorder } from '../../helpers/recorder.ts';
import { within } from '../../helpers/servers.ts';
import { openEntry, startTestTopology, type TestTopology } from '../../helpers/topology.ts';

type Backend = Awaited<ReturnType<typeof dispatchBackend>>;

/** Connections the HTTP/1.0 backend accepted (each serves one request, then closes). */
let http10Connections = 0;
/** Raw request headers the app saw, by path. */
const seenHeaders = new Map<string, string[]>();

/** `n` KiB of header lines (`name: value\r\n` bytes) as one cookie or as many small headers. */
function headerBlock(kib: number, shape: 'cookie' | 'many'): [string, string][] {
  const total = kib * KiB;
  if (shape === 'cookie') return [['Cookie', `c=${'k'.repeat(total - 'Cookie: c=\r\n'.length)}`]];
  const count = Math.max(128, Math.ceil(total / 256));
  const out: [string, string][] = [];
  let used = 0;
  for (let i = 0; i < count; i++) {
    const name = `X-Small-${String(i).padStart(4, '0')}`;
    const room = Math.floor((total - used) / (count - i)) - name.length - 4;
    out.push([name, 'v'.repeat(Math.max(1, room))]);
    used += name.length + 4 + Math.max(1, room);
  }
  return out;
}

const app: http.RequestListener = (req, res) => {
  seenHeaders.set(req.url ?? '', req.rawHeaders);
  const url = new URL(req.url ?? '/', 'http://x');
  req.resume();
  req.on('end', () => {
    if (url.pathname === '/c2/len') return res.end('hello');
    if (url.pathname === '/c2/nolen') {
      // No Content-Length: chunked toward the (HTTP/1.1) waypoint.
      res.write('part1-');
      setTimeout(() => res.end('part2'), 20);
      return;
    }
    if (url.pathname === '/c5') {
      res.writeHead(302, ['Location', 'http://Echo.Demo.svc/Somewhere/Else?Q=1&r=%2F', 'X-Backend-MiXeD', 'Some  Value', 'Set-Cookie', 'a=1; Path=/', 'Set-Cookie', 'B=2', 'Content-Length', '0']);
      return res.end();
    }
    if (url.pathname === '/c6/req') {
      // The test's header lines as received (the waypoint adds its own, e.g. x-request-id).
      let bytes = 0;
      let count = 0;
      for (let i = 0; i < req.rawHeaders.length; i += 2) {
        if (!/^(X-Small-|Cookie$)/.test(req.rawHeaders[i])) continue;
        count++;
        bytes += req.rawHeaders[i].length + req.rawHeaders[i + 1].length + 4;
      }
      return res.end(JSON.stringify({ bytes, count }));
    }
    if (url.pathname === '/c6/res') {
      const block = headerBlock(Number(url.searchParams.get('kib')), url.searchParams.get('shape') as 'cookie' | 'many');
      const raw = block.flatMap(([n, v]) => [n === 'Cookie' ? 'Set-Cookie' : n, v]);
      res.writeHead(200, [...raw, 'Content-Length', '2']);
      return res.end('ok');
    }
    res.end('default');
  });
};

/** `/c1/...`: an HTTP/1.0 server without keep-alive: one response (Content-Length, no Connection header), then close shortly after. */
const raw = (path: string) =>
  path.startsWith('/c1/')
    ? async (socket: net.Socket) => {
        http10Connections++;
        await readHead(socket);
        socket.write('HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 7\r\n\r\nhttp1.0');
        socket.resume();
        setTimeout(() => socket.end(), 100);
      }
    : undefined;

async function startC(net3: number, bootstrap: Record<string, unknown> = {}) {
  const rec = recorder();
  // C6 is about header bytes: its blocks of hundreds of small headers stay under the field count
  // (Envoy's max_headers_count, 100 by default, has its own test: test/integration/l7/header-count.test.ts).
  const http2 = { maxHeaderCount: 4096 };
  const topo = await startTestTopology(net3, { backends: false, extraFilters: [rec.factory], bootstrap: { filters: rec.filters, http2, ...bootstrap } });
  const backends: Backend[] = [];
  for (const ip of [`127.0.${net3}.11`, `127.0.${net3}.12`]) backends.push(await dispatchBackend(ip, 8080, app, raw));
  return {
    topo,
    rec,
    close: async () => {
      for (const b of backends) await b.close();
      await topo.close();
    },
  };
}

/** Send `request` on a new entry connection and read one response. */
async function once(topo: TestTopology, request: string | Buffer, end = false): Promise<{ res: RawResponse; reader: HttpReader; socket: net.Socket }> {
  const socket = await openEntry(topo);
  socket.on('error', () => {});
  const reader = new HttpReader(socket);
  if (end) socket.end(request);
  else socket.write(request);
  const res = await within(reader.next(request.toString().startsWith('HEAD')), 10_000, 'response');
  return { res, reader, socket };
}

function requestWith(path: string, headers: [string, string][]): string {
  return `GET ${path} HTTP/1.1\r\nHost: echo\r\n${headers.map(([n, v]) => `${n}: ${v}\r\n`).join('')}Connection: close\r\n\r\n`;
}

describe('default limits (127.0.62.x)', () => {
  let c: Awaited<ReturnType<typeof startC>>;
  beforeAll(async () => {
    c = await startC(62);
  });
  afterAll(async () => {
    await c?.close();
  });

  it('C1: HTTP/1.0 upstream without keep-alive: three requests on one tunnel, three upstream connections, all 200', async () => {
    const socket = await openEntry(c.topo);
    const reader = new HttpReader(socket);
    const before = http10Connections;
    for (let i = 0; i < 3; i++) {
      socket.write(`GET /c1/${i} HTTP/1.1\r\nHost: echo\r\n\r\n`);
      const res = await within(reader.next(), 10_000, `request ${i}`);
      expect(res.status).toBe(200);
      expect(res.body.toString()).toBe('http1.0');
    }
    socket.destroy();
    expect(http10Connections - before).toBe(3);
    expect(c.rec.streams.filter((s) => s.path.startsWith('/c1/')).map((s) => s.code)).toEqual([200, 200, 200]);
  });

  it('C2: HTTP/1.0 client asking for keep-alive gets Connection: keep-alive with a length, and a second request works', async () => {
    const socket = await openEntry(c.topo);
    const reader = new HttpReader(socket);
    for (let i = 0; i < 2; i++) {
      socket.write('GET /c2/len HTTP/1.0\r\nHost: echo\r\nConnection: keep-alive\r\n\r\n');
      const res = await within(reader.next(), 10_000, `keep-alive request ${i}`);
      expect(res.status).toBe(200);
      expect(res.headers.connection?.toLowerCase()).toBe('keep-alive');
      expect(res.framing).toBe('length');
      expect(res.body.toString()).toBe('hello');
    }
    socket.destroy();
  });

  it('C2: HTTP/1.0 client without keep-alive: the tunnel ends right after the response', async () => {
    const { res, reader } = await once(c.topo, 'GET /c2/len HTTP/1.0\r\nHost: echo\r\n\r\n');
    expect(res.status).toBe(200);
    expect(res.body.toString()).toBe('hello');
    expect(res.headers['transfer-encoding']).toBeUndefined();
    await within(reader.ended, 10_000, 'close after an HTTP/1.0 response');
  });

  for (const keepAlive of [true, false]) {
    it(`C2: a body without length is never sent chunked to an HTTP/1.0 client (${keepAlive ? 'keep-alive asked' : 'no keep-alive'})`, async () => {
      const { res, reader } = await once(c.topo, `GET /c2/nolen HTTP/1.0\r\nHost: echo\r\n${keepAlive ? 'Connection: keep-alive\r\n' : ''}\r\n`);
      expect(res.status).toBe(200);
      expect(res.headers['transfer-encoding']).toBeUndefined();
      expect(res.framing).not.toBe('chunked');
      expect(res.body.toString()).toBe('part1-part2');
      if (res.framing === 'close') expect(reader.endedCleanly).toBe(true);
      else await within(reader.ended, 10_000, 'close after the response');
    });
  }

  it('C5: header names keep their spelling both ways (h1→h1), values arrive intact, Location from the backend is untouched', async () => {
    // Documented policy (src/router/router.ts, src/pipeline/headers.ts): HTTP/1.1 ↔ HTTP/1.1 keeps
    // each header name as the sender spelled it; lookups inside the waypoint are case-insensitive.
    // One exception: undici writes the Host header itself, as `host` (value kept).
    const { res } = await once(
      c.topo,
      'GET /c5 HTTP/1.1\r\nHost: echo\r\nX-Custom-Header: v\r\nContent-Type: application/x-Thing; Charset=UTF-8\r\nx-MiXeD-CaSe: Value  With   Spaces\r\nACCEPT: */*\r\nConnection: close\r\n\r\n',
    );
    const got = seenHeaders.get('/c5')!;
    const pairs = (raw: string[]) => raw.reduce<[string, string][]>((a, v, i) => (i % 2 ? a : [...a, [v, raw[i + 1]]]), []);
    expect(pairs(got)).toEqual(
      expect.arrayContaining([
        ['X-Custom-Header', 'v'],
        ['Content-Type', 'application/x-Thing; Charset=UTF-8'],
        ['x-MiXeD-CaSe', 'Value  With   Spaces'],
        ['ACCEPT', '*/*'],
      ]),
    );
    expect(pairs(got).filter(([n]) => n.toLowerCase() === 'host')).toEqual([['host', 'echo']]);
    expect(res.status).toBe(302);
    expect(res.rawHeaders).toEqual(
      expect.arrayContaining([
        ['Location', 'http://Echo.Demo.svc/Somewhere/Else?Q=1&r=%2F'],
        ['X-Backend-MiXeD', 'Some  Value'],
        ['Set-Cookie', 'a=1; Path=/'],
        ['Set-Cookie', 'B=2'],
      ]),
    );
  });

  for (const shape of ['cookie', 'many'] as const) {
    for (const kib of [8, 15, 17, 59, 61, 100]) {
      const over = kib * KiB > 64 * KiB;
      it(`C6: ${kib} KiB of request headers as ${shape === 'cookie' ? 'one cookie' : 'many small headers'} → ${over ? '431' : 'passes end to end'}`, async () => {
        const block = headerBlock(kib, shape);
        const path = `/c6/req?kib=${kib}&shape=${shape}`;
        const { res } = await once(c.topo, requestWith(path, block));
        if (over) {
          expect(res.status).toBe(431);
          expect(seenHeaders.has(path)).toBe(false);
          return;
        }
        expect(res.status).toBe(200);
        const seen = JSON.parse(res.body.toString()) as { bytes: number; count: number };
        // Every header line arrived, byte for byte.
        expect(seen.count).toBe(block.length);
        expect(seen.bytes).toBe(block.reduce((n, [k, v]) => n + k.length + v.length + 4, 0));
        expect(seen.bytes).toBeGreaterThanOrEqual(kib * KiB - 8);
        if (shape === 'cookie') expect(seenHeaders.get(path)).toContain(block[0][1]);
      });
      it(`C6: ${kib} KiB of response headers as ${shape === 'cookie' ? 'one Set-Cookie' : 'many small headers'} → ${over ? '502, no hang' : 'pass intact'}`, async () => {
        const { res } = await once(c.topo, requestWith(`/c6/res?kib=${kib}&shape=${shape}`, []));
        if (over) {
          // Upstream response headers beyond the limit: Envoy's 502 (UPE), promptly.
          expect(res.status).toBe(502);
          return;
        }
        expect(res.status).toBe(200);
        const block = headerBlock(kib, shape);
        const names = new Set(block.map(([n]) => (n === 'Cookie' ? 'Set-Cookie' : n)));
        const got = res.rawHeaders.filter(([n]) => names.has(n));
        expect(got.length).toBe(block.length);
        expect(got.map(([, v]) => v)).toEqual(block.map(([, v]) => v));
      });
    }
  }
});

describe('http.maxRequestHeadersBytes raised to 128 KiB (127.0.63.x)', () => {
  let c: Awaited<ReturnType<typeof startC>>;
  beforeAll(async () => {
    c = await startC(63, { http: { maxRequestHeadersBytes: 128 * KiB } });
  });
  afterAll(async () => {
    await c?.close();
  });

  for (const shape of ['cookie', 'many'] as const) {
    it(`C6: the raised limit takes effect: 100 KiB of request headers as ${shape === 'cookie' ? 'one cookie' : 'many small headers'} pass, 140 KiB get 431`, async () => {
      const ok = await once(c.topo, requestWith(`/c6/req?kib=100&shape=${shape}`, headerBlock(100, shape)));
      expect(ok.res.status).toBe(200);
      expect((JSON.parse(ok.res.body.toString()) as { bytes: number }).bytes).toBeGreaterThanOrEqual(100 * KiB);
      const big = await once(c.topo, requestWith(`/c6/req?kib=140&shape=${shape}`, headerBlock(140, shape)));
      expect(big.res.status).toBe(431);
    });
    it(`C6: the raised limit takes effect upstream: 100 KiB of response headers as ${shape === 'cookie' ? 'one Set-Cookie' : 'many small headers'} pass, 140 KiB give 502`, async () => {
      const ok = await once(c.topo, requestWith(`/c6/res?kib=100&shape=${shape}`, []));
      expect(ok.res.status).toBe(200);
      expect(ok.res.body.toString()).toBe('ok');
      const big = await once(c.topo, requestWith(`/c6/res?kib=140&shape=${shape}`, []));
      expect(big.res.status).toBe(502);
    });
  }
});
