/**
 * gRPC-Web through the waypoint is reported as gRPC in istio_requests_total, with the status the
 * app put in the body's trailer frame (istio/istio#58430: Envoy reports 2 there), over HBONE:
 * `application/grpc-web`, `+proto` and `-text` (base64) answers, a trailers-only answer (status
 * in the headers), and an HTTP error answer (status mapped from the HTTP code). The answers reach
 * the client unchanged. Addresses: 127.0.218.x.
 */
import http from 'node:http';
import http2 from 'node:http2';
import { afterAll, beforeAll, expect, test } from 'vitest';
import { samplesOf, scrape } from '../helpers/prometheus.ts';
import { startTestTopology, type TestTopology } from '../helpers/topology.ts';

const NET = 218;
let topo: TestTopology;
const apps: http.Server[] = [];

/** One gRPC-Web frame: `flags` (0x80 = trailers) and payload. */
function frame(flags: number, payload: Buffer): Buffer {
  const b = Buffer.alloc(5 + payload.length);
  b[0] = flags;
  b.writeUInt32BE(payload.length, 1);
  payload.copy(b, 5);
  return b;
}

/** The body an app answers `/<status>` with: two messages and the trailer frame. */
function answer(status: string): Buffer {
  return Buffer.concat([frame(0, Buffer.from('hello')), frame(0, Buffer.alloc(70_000, 1)), frame(0x80, Buffer.from(`grpc-status:${status}\r\ngrpc-message:m\r\n`))]);
}

beforeAll(async () => {
  topo = await startTestTopology(NET, {
    backends: false,
    bootstrap: { filters: [{ name: 'istio.peer_metadata' }, { name: 'istio.stats' }, { name: 'envoy.filters.http.router' }] },
  });
  for (const ip of [`127.0.${NET}.11`, `127.0.${NET}.12`]) {
    const app = http.createServer((req, res) => {
      req.resume();
      req.on('end', () => {
        const [, kind, status] = (req.url ?? '').split('/');
        const ct = String(req.headers['content-type']);
        if (kind === 'trailers-only') {
          res.writeHead(200, { 'content-type': ct, 'grpc-status': status, 'grpc-message': 'none' }).end();
          return;
        }
        if (kind === 'http-error') {
          res.writeHead(Number(status), { 'content-type': 'text/plain' }).end('unavailable');
          return;
        }
        const body = answer(status);
        // The -text answer is base64, one padded segment per frame, written in odd-sized pieces.
        const out = ct.startsWith('application/grpc-web-text') ? Buffer.from([frame(0, Buffer.from('hello')), frame(0, Buffer.alloc(70_000, 1)), frame(0x80, Buffer.from(`grpc-status:${status}\r\n`))].map((f) => f.toString('base64')).join('')) : body;
        res.writeHead(200, { 'content-type': ct });
        for (let i = 0; i < out.length; i += 4099) res.write(out.subarray(i, i + 4099));
        res.end();
      });
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

/** POST a gRPC-Web call through the tunnel entry; resolves with the status and body the client got. */
function call(path: string, contentType: string): Promise<{ status: number; body: Buffer; contentType: string | undefined }> {
  return new Promise((resolve, reject) => {
    const req = http.request({ host: topo.entry.host, port: topo.entry.port, path, method: 'POST', agent: false, headers: { 'content-type': contentType, 'x-grpc-web': '1' } }, (r) => {
      const chunks: Buffer[] = [];
      r.on('data', (c: Buffer) => chunks.push(c));
      r.on('end', () => resolve({ status: r.statusCode!, body: Buffer.concat(chunks), contentType: r.headers['content-type'] }));
    });
    req.on('error', reject);
    req.end(frame(0, Buffer.from('request')));
  });
}

/** istio_requests_total values by (request_protocol, response_code, grpc_response_status). */
async function requests(): Promise<Map<string, number>> {
  const out = new Map<string, number>();
  for (const s of samplesOf(await scrape(topo.waypoint!.addresses.admin), 'istio_requests_total')) {
    const k = `${s.labels.request_protocol} ${s.labels.response_code} ${s.labels.grpc_response_status}`;
    out.set(k, (out.get(k) ?? 0) + s.value);
  }
  return out;
}

test('application/grpc-web and +proto: request_protocol grpc, grpc_response_status from the trailer frame', async () => {
  const r = await call('/frames/7', 'application/grpc-web');
  expect(r).toMatchObject({ status: 200, contentType: 'application/grpc-web' });
  expect(r.body.equals(answer('7'))).toBe(true);
  expect(await call('/frames/0', 'application/grpc-web+proto')).toMatchObject({ status: 200 });
  const m = await requests();
  expect(m.get('grpc 200 7')).toBe(1);
  expect(m.get('grpc 200 0')).toBe(1);
  expect([...m.keys()].filter((k) => k.startsWith('http'))).toEqual([]);
});

test('application/grpc-web-text: the base64 body is decoded to find the trailer', async () => {
  const r = await call('/frames/16', 'application/grpc-web-text');
  expect(r.status).toBe(200);
  expect(Buffer.from(r.body.toString('latin1'), 'base64').subarray(0, 10).equals(frame(0, Buffer.from('hello')))).toBe(true);
  expect((await requests()).get('grpc 200 16')).toBe(1);
});

test('a trailers-only answer: the status from its headers, which reach the client', async () => {
  const r = await call('/trailers-only/5', 'application/grpc-web+proto');
  expect(r.status).toBe(200);
  expect(r.body.length).toBe(0);
  expect((await requests()).get('grpc 200 5')).toBe(1);
});

test('over HTTP/2 too; a trailers-only answer keeps its status in the headers (a browser cannot read trailers)', async () => {
  const client = http2.connect(`http://${topo.entry.host}:${topo.entry.port}`);
  try {
    const headers = await new Promise<http2.IncomingHttpHeaders>((resolve, reject) => {
      const req = client.request({ ':method': 'POST', ':path': '/trailers-only/9', 'content-type': 'application/grpc-web' });
      req.once('response', resolve);
      req.once('error', reject);
      req.resume();
      req.end(frame(0, Buffer.from('request')));
    });
    expect(headers).toMatchObject({ ':status': 200, 'grpc-status': '9', 'grpc-message': 'none' });
  } finally {
    client.close();
  }
  await expect.poll(async () => (await requests()).get('grpc 200 9'), { timeout: 3000 }).toBe(1);
});

test('an HTTP error answer: grpc, the status mapped from the HTTP code (503 → 14 UNAVAILABLE)', async () => {
  expect((await call('/http-error/503', 'application/grpc-web')).status).toBe(503);
  expect((await requests()).get('grpc 503 14')).toBe(1);
});
