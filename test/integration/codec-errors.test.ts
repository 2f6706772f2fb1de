/**
 * Requests the connection manager refuses before any filter (Node's HTTP/1 codec: a malformed
 * request line 400, headers over the limit 431; a CONNECT inside the tunnel 405, HTTP/1 or h2c; HTTP/1.1 without
 * Host 400) are accounted like every local reply, as Envoy's codec errors are: an access-log line
 * with the `DPE` flag and Envoy's details, and an `istio_requests_total` sample. Also: a codec
 * error behind a request still being answered does not cut that response, and an absolute-form
 * target is logged in origin form with the URI's authority. Addresses: 127.0.210.x.
 */
import fs from 'node:fs';
import http2 from 'node:http2';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, expect, test, vi } from 'vitest';
import { parseHttpResponse, readAll } from '../helpers/hbone-client.ts';
import { samplesOf, scrape } from '../helpers/prometheus.ts';
import { openEntry, startTestTopology, type TestTopology } from '../helpers/topology.ts';

const NET = 210;
let topo: TestTopology;
let dir: string;
let logFile: string;

beforeAll(async () => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'wp-codec-errors-'));
  logFile = path.join(dir, 'access.log');
  topo = await startTestTopology(NET, { bootstrap: { accessLog: { file: logFile, encoding: 'JSON' }, http: { maxRequestHeadersBytes: 8192 } } });
});
afterAll(async () => {
  await topo?.close();
  fs.rmSync(dir, { recursive: true, force: true });
});

type Line = Record<string, unknown>;
const lines = (): Line[] => (fs.existsSync(logFile) ? fs.readFileSync(logFile, 'utf8').split('\n').filter(Boolean).map((l) => JSON.parse(l) as Line) : []);

/** `istio_requests_total` summed over the series with this response code and flags. */
async function requests(code: string, flags: string): Promise<number> {
  const samples = samplesOf(await scrape(topo.waypoint!.addresses.admin), 'istio_requests_total');
  return samples.filter((s) => s.labels.response_code === code && s.labels.response_flags === flags).reduce((n, s) => n + s.value, 0);
}

/** Send `raw` on a fresh tunnel, read until the waypoint closes it, and wait for `n` new log lines. */
async function send(raw: string | Buffer, n = 1): Promise<{ responses: Buffer; logged: Line[] }> {
  const before = lines().length;
  const socket = await openEntry(topo);
  socket.on('error', () => undefined);
  socket.write(raw);
  const responses = await readAll(socket);
  const logged = await vi.waitFor(
    () => {
      const now = lines().slice(before);
      expect(now.length).toBe(n);
      return now;
    },
    { timeout: 5000 },
  );
  return { responses, logged };
}

test('a malformed request line: 400 from the codec, logged with DPE and counted', async () => {
  const counted = await requests('400', 'DPE');
  const { responses, logged } = await send('GET /a b c\r\nhost: echo\r\n\r\n');
  expect(parseHttpResponse(responses).status).toBe(400);
  expect(logged[0]).toMatchObject({ response_code: 400, response_flags: 'DPE', response_code_details: 'http1.codec_error', protocol: 'HTTP/1.1', method: null, path: null });
  expect(logged[0].downstream_local_address).toBe(`127.0.${NET}.100:80`);
  expect(await requests('400', 'DPE')).toBe(counted + 1);
});

test('request headers over the limit: 431, logged with DPE and counted', async () => {
  const counted = await requests('431', 'DPE');
  const { responses, logged } = await send(`GET /big HTTP/1.1\r\nhost: echo\r\nx-big: ${'a'.repeat(16 * 1024)}\r\n\r\n`);
  expect(parseHttpResponse(responses).status).toBe(431);
  expect(logged[0]).toMatchObject({ response_code: 431, response_flags: 'DPE', response_code_details: 'http1.headers_too_large' });
  expect(await requests('431', 'DPE')).toBe(counted + 1);
});

test('CONNECT inside the tunnel: 405, logged with DPE and counted', async () => {
  const counted = await requests('405', 'DPE');
  const { responses, logged } = await send('CONNECT 127.0.0.1:22 HTTP/1.1\r\nhost: 127.0.0.1:22\r\n\r\n');
  expect(parseHttpResponse(responses).status).toBe(405);
  expect(logged[0]).toMatchObject({ response_code: 405, response_flags: 'DPE', response_code_details: 'method_not_allowed', method: 'CONNECT', authority: '127.0.0.1:22' });
  expect(logged[0].request_id).toMatch(/^[0-9a-f-]{36}$/);
  expect(await requests('405', 'DPE')).toBe(counted + 1);
});

test('CONNECT on an h2c stream inside the tunnel: the same 405, logged with DPE and counted; the session stays usable', async () => {
  const counted = await requests('405', 'DPE');
  const before = lines().length;
  const socket = await openEntry(topo);
  const session = http2.connect('http://echo', { createConnection: () => socket });
  session.on('error', () => undefined);
  try {
    const status = (headers: http2.OutgoingHttpHeaders) =>
      new Promise<number>((resolve, reject) => {
        const req = session.request(headers);
        req.on('response', (h) => resolve(Number(h[':status'])));
        req.on('error', reject);
        req.resume();
      });
    expect(await status({ ':method': 'CONNECT', ':authority': '127.0.0.1:22' })).toBe(405);
    expect(await status({ ':method': 'GET', ':path': '/after', ':authority': 'echo' })).toBe(200);
    const logged = await vi.waitFor(
      () => {
        const now = lines().slice(before);
        expect(now.length).toBe(2);
        return now;
      },
      { timeout: 5000 },
    );
    expect(logged.find((l) => l.method === 'CONNECT')).toMatchObject({ response_code: 405, response_flags: 'DPE', response_code_details: 'method_not_allowed', authority: '127.0.0.1:22', protocol: 'HTTP/2' });
    expect(await requests('405', 'DPE')).toBe(counted + 1);
  } finally {
    session.destroy();
  }
});

test('HTTP/1.1 without Host: 400 from the connection manager, logged and counted', async () => {
  const counted = await requests('400', 'DPE');
  const { responses, logged } = await send('GET /no-host HTTP/1.1\r\n\r\n');
  expect(parseHttpResponse(responses).status).toBe(400);
  expect(logged[0]).toMatchObject({ response_code: 400, response_flags: 'DPE', response_code_details: 'missing_host_header', method: 'GET', path: '/no-host' });
  expect(await requests('400', 'DPE')).toBe(counted + 1);
});

test('a codec error behind a request being answered: that response completes, the error is still logged, the tunnel closes', async () => {
  const { responses, logged } = await send('GET /first HTTP/1.1\r\nhost: echo\r\n\r\nNOT HTTP AT ALL\r\n\r\n', 2);
  const res = parseHttpResponse(responses);
  expect(res.status).toBe(200);
  expect(JSON.parse(res.body.toString()).url).toBe('/first');
  const byCode = [...logged].sort((a, b) => Number(a.response_code) - Number(b.response_code));
  expect(byCode[0]).toMatchObject({ response_code: 0, response_flags: 'DPE', response_code_details: 'http1.codec_error' });
  expect(byCode[1]).toMatchObject({ response_code: 200, response_flags: '-', path: '/first' });
});

test('an absolute-form target is logged in origin form, with the URI authority', async () => {
  const { responses, logged } = await send('GET http://echo.demo.svc.cluster.local/abs?q=1 HTTP/1.1\r\nhost: other\r\nconnection: close\r\n\r\n');
  expect(parseHttpResponse(responses).status).toBe(200);
  expect(logged[0]).toMatchObject({ response_code: 200, path: '/abs?q=1', authority: 'echo.demo.svc.cluster.local' });
});

test('an expectation other than 100-continue is forwarded (without Expect) and logged, not answered 417 by Node', async () => {
  const { responses, logged } = await send('GET /expect HTTP/1.1\r\nhost: echo\r\nexpect: something-else\r\nconnection: close\r\n\r\n');
  const res = parseHttpResponse(responses);
  expect(res.status).toBe(200);
  expect(JSON.parse(res.body.toString()).headers.expect).toBeUndefined();
  expect(logged[0]).toMatchObject({ response_code: 200, path: '/expect', response_flags: '-' });
});
