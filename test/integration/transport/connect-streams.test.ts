/**
 * CONNECT streams that are odd, malformed or too big, on long-lived sessions:
 * - a client that ends its side before sending a byte (END_STREAM on the HEADERS, or right after
 *   the 200) can carry no request on an HTTP port: the waypoint ends the tunnel at once, so such
 *   streams never pile up against the session's stream limit;
 * - CONNECTs that nghttp2 rejects as malformed (python3-h2 as the client) are counted and warned
 *   about, and the session keeps serving;
 * - header blocks over `http2.maxHeaderCount` (Envoy's `max_headers_count`, 100) or
 *   `maxHeaderListSize`, on the CONNECT or on an h2c request inside a tunnel, get their stream
 *   reset (ENHANCE_YOUR_CALM), not the session closed: Node resets such a stream before the
 *   waypoint sees it (node_http2.cc OnHeaderCallback), so it cannot be answered 431;
 * - PING and SETTINGS floods get the flooding session closed (nghttp2's limit on queued
 *   acknowledgements), other sessions are served;
 * - an HTTP/0.9 request (no version) on an HTTP port is answered 400 DPE and counted, never proxied as HTTP/1;
 * - on an undeclared port where TCP would be refused (an L7-only AuthorizationPolicy), a client
 *   slow to send its request is still served as HTTP rather than closed at the detection timeout.
 * Addresses: 127.0.231.x.
 */
import fs from 'node:fs';
import http2, { type ClientHttp2Session, type ClientHttp2Stream } from 'node:http2';
import path from 'node:path';
import { afterAll, beforeAll, expect, test, vi } from 'vitest';
import { LocalCa } from '../../../src/identity/ca.ts';
import { log } from '../../../src/util/log.ts';
import { exchange, hboneSession, type ClientIdentity } from '../../helpers/hbone-client.ts';
import { parseHttpResponse, readAll } from '../../helpers/hbone-client.ts';
import { parsePrometheus } from '../../helpers/prometheus.ts';
import { addToMesh, echoService, startTestTopology, type TestTopology } from '../../helpers/topology.ts';
import { h2peer } from './h2-peer.ts';

const NET = 231;
const VIP = `127.0.${NET}.100:80`;
let topo: TestTopology;
let client: ClientIdentity;
let session: ClientHttp2Session;

beforeAll(async () => {
  // A short detection timeout: the slow client below must outlast it (the default is 15 s).
  topo = await startTestTopology(NET, { bootstrap: { http: { protocolDetectionTimeoutMs: 100 } } });
  const ca = await LocalCa.load(topo.caDir);
  const leaf = await ca.issue('spiffe://cluster.local/ns/demo/sa/client', 3600_000);
  client = { certPem: leaf.certPem, keyPem: leaf.keyPem, caPem: ca.rootCertPem };
  session = await hboneSession(`127.0.${NET}.1`, topo.waypoint!.addresses.hbone.port, client);
  fs.writeFileSync(path.join(topo.dir, 'py-cert.pem'), leaf.certPem);
  fs.writeFileSync(path.join(topo.dir, 'py-key.pem'), leaf.keyPem);
});
afterAll(async () => {
  session?.destroy();
  await topo?.close();
});

/**
 * Open a CONNECT and end our side; resolves when the stream closes with its status, whether the
 * waypoint ended it cleanly and its reset code, or with `open: true` if it is still open after 5 s.
 */
function halfClosed(endOnHeaders: boolean): Promise<{ status: number | undefined; ended: boolean; rstCode: number | undefined; open?: true }> {
  return new Promise((resolve) => {
    const stream: ClientHttp2Stream = session.request({ ':method': 'CONNECT', ':authority': VIP }, { endStream: endOnHeaders });
    let status: number | undefined;
    let ended = false;
    stream.on('error', () => {});
    stream.once('response', (h) => {
      status = Number(h[':status']);
      if (!endOnHeaders) stream.end();
    });
    stream.on('data', () => {});
    stream.once('end', () => (ended = true));
    stream.once('close', () => resolve({ status, ended, rstCode: stream.rstCode }));
    setTimeout(() => resolve({ status, ended, rstCode: undefined, open: true }), 5000).unref();
  });
}

test('a CONNECT with END_STREAM on its HEADERS is answered and ended at once', async () => {
  expect(await halfClosed(true)).toEqual({ status: 200, ended: true, rstCode: 0 });
});

test('a client that ends its side right after the 200, before any byte, gets its tunnel ended', async () => {
  expect(await halfClosed(false)).toEqual({ status: 200, ended: true, rstCode: 0 });
});

test('a full stream limit of half-closed CONNECTs does not stop the session: the next request is served', async () => {
  // The waypoint advertises 200 concurrent streams (http2.maxConcurrentStreams).
  const all = await Promise.all(Array.from({ length: 200 }, (_, i) => halfClosed(i % 2 === 0)));
  expect(all.every((r) => r.status === 200 && r.ended)).toBe(true);
  const stream = session.request({ ':method': 'CONNECT', ':authority': VIP }, { endStream: false });
  await new Promise((r, j) => {
    stream.once('response', r);
    stream.once('error', j);
  });
  expect((await exchange(stream, '/after')).status).toBe(200);
  stream.close();
});

async function rejectedStreams(): Promise<number> {
  const res = await fetch(`http://127.0.${NET}.1:${topo.waypoint!.addresses.admin.port}/stats/prometheus`);
  return parsePrometheus(await res.text()).find((x) => x.name === 'waypoint_hbone_streams_rejected_total' && x.labels.reason === 'codec')?.value ?? 0;
}

test('malformed CONNECTs (with :scheme and :path) are reset by nghttp2, counted and warned about; the session keeps serving', async () => {
  const before = await rejectedStreams();
  const warn = vi.spyOn(log, 'warn');
  try {
    const r = await h2peer(topo.dir, [`127.0.${NET}.1`, topo.waypoint!.addresses.hbone.port], VIP, 'malformed', 5);
    const streams = r.streams as Record<string, { reset?: number; status?: number }>;
    // Streams 1..9 malformed (RST_STREAM PROTOCOL_ERROR), 11 the valid one.
    expect([1, 3, 5, 7, 9].map((id) => streams[id]?.reset)).toEqual([1, 1, 1, 1, 1]);
    expect(streams[11]?.status).toBe(200);
    expect(r.inner_status).toBe(200);
    expect(r.goaway).toBeNull();
    await expect.poll(rejectedStreams).toBe(before + 5);
    const line = warn.mock.calls.find((c) => c[1] === 'HBONE streams reset by the HTTP/2 layer (malformed, or over the stream limits)');
    expect(line?.[0]).toMatchObject({ peer: 'spiffe://cluster.local/ns/demo/sa/client', streams: 5 });
  } finally {
    warn.mockRestore();
  }
});

const hbone = (): [string, number] => [`127.0.${NET}.1`, topo.waypoint!.addresses.hbone.port];

test('a CONNECT with more than http2.maxHeaderCount header fields is reset (ENHANCE_YOUR_CALM); one within it is answered', async () => {
  // 2 pseudo-headers + 98 = 100 fields: accepted; + 120: reset, and no GOAWAY.
  const within = await h2peer(topo.dir, hbone(), VIP, 'headers', 98);
  expect((within.streams as Record<string, { status?: number }>)['1']?.status).toBe(200);
  const over = await h2peer(topo.dir, hbone(), VIP, 'headers', 120);
  expect((over.streams as Record<string, { reset?: number }>)['1']?.reset).toBe(http2.constants.NGHTTP2_ENHANCE_YOUR_CALM);
  expect(over.goaway).toBeNull();
});

test('a CONNECT header block over http2.maxHeaderListSize is reset, not the session', async () => {
  const r = await h2peer(topo.dir, hbone(), VIP, 'header-bytes', 70_000);
  expect((r.streams as Record<string, { reset?: number }>)['1']?.reset).toBe(http2.constants.NGHTTP2_ENHANCE_YOUR_CALM);
  expect(r.goaway).toBeNull();
  expect(r.eof).toBe(false);
});

test('an h2c request inside a tunnel with more than http2.maxHeaderCount header fields is reset; the h2c session serves the next one', async () => {
  const h2c = http2.connect(`http://${topo.entry.host}:${topo.entry.port}`);
  h2c.on('error', () => {});
  const send = (extra: number) =>
    new Promise<{ status?: number; rstCode?: number }>((resolve) => {
      const headers: Record<string, string> = { ':path': '/h2c', ':authority': 'echo' };
      for (let i = 0; i < extra; i++) headers[`x-h${i}`] = 'v';
      const req = h2c.request(headers, { endStream: true });
      let status: number | undefined;
      req.on('response', (h) => (status = Number(h[':status'])));
      req.on('data', () => {});
      req.on('error', () => {});
      req.once('close', () => resolve({ status, rstCode: status === undefined ? req.rstCode : undefined }));
    });
  try {
    // :method :path :scheme :authority + 120 > 100.
    expect(await send(120)).toEqual({ status: undefined, rstCode: http2.constants.NGHTTP2_ENHANCE_YOUR_CALM });
    expect((await send(10)).status).toBe(200);
  } finally {
    h2c.close();
  }
});

test.each(['ping-flood', 'settings-flood'])('a %s gets the flooding session closed; another session is served', async (mode) => {
  const r = await h2peer(topo.dir, hbone(), VIP, mode, 20_000);
  expect(r.eof || r.goaway !== null).toBe(true);
  const { stream } = await new Promise<{ stream: ClientHttp2Stream }>((resolve, reject) => {
    const st = session.request({ ':method': 'CONNECT', ':authority': VIP }, { endStream: false });
    st.once('response', () => resolve({ stream: st }));
    st.once('error', reject);
  });
  expect((await exchange(stream, '/after-flood')).status).toBe(200);
  stream.close();
});

/** Open a CONNECT on the test session and wait for its 200. */
function tunnelTo(authority: string): Promise<ClientHttp2Stream> {
  return new Promise((resolve, reject) => {
    const st = session.request({ ':method': 'CONNECT', ':authority': authority }, { endStream: false });
    st.once('response', (h) => (h[':status'] === 200 ? resolve(st) : reject(new Error(`CONNECT ${h[':status']}`))));
    st.once('error', reject);
  });
}

/** `istio_requests_total` summed over the series answered 400 with the `DPE` flag. */
async function protocolErrors(): Promise<number> {
  const res = await fetch(`http://127.0.${NET}.1:${topo.waypoint!.addresses.admin.port}/stats/prometheus`);
  return parsePrometheus(await res.text())
    .filter((x) => x.name === 'istio_requests_total' && x.labels.response_code === '400' && x.labels.response_flags === 'DPE')
    .reduce((n, x) => n + x.value, 0);
}

test('an HTTP/0.9 request (no version) on an HTTP port: 400 from the connection manager, counted with DPE, the tunnel closed (RST NO_ERROR, client side still open)', async () => {
  const counted = await protocolErrors();
  const st = await tunnelTo(VIP);
  const closed = new Promise<number | string>((r) => {
    st.once('close', () => r(st.rstCode ?? 'no code'));
    setTimeout(() => r('(tunnel still open after 5 s)'), 5000).unref();
  });
  st.write('GET /http09\r\n\r\n');
  const raw = await Promise.race([readAll(st), new Promise<Buffer>((r) => setTimeout(() => r(Buffer.from('(no answer in 5 s)')), 5000))]);
  const res = parseHttpResponse(raw);
  expect(res.status).toBe(400);
  expect(res.body.toString()).toBe('HTTP/0.9 requests are not supported\n');
  // The client never ended its side: the waypoint closed the stream (END_STREAM then RST_STREAM(NO_ERROR)).
  expect(await closed).toBe(http2.constants.NGHTTP2_NO_ERROR);
  await vi.waitFor(async () => expect(await protocolErrors()).toBe(counted + 1), { timeout: 5000 });
});

test('undeclared port with an L7-only AuthorizationPolicy: a request sent 300 ms after the CONNECT (past the detection timeout) is served as HTTP', async () => {
  const sniffed = `127.0.${NET}.101:8081`;
  await addToMesh(
    topo,
    echoService('sniffed', `127.0.${NET}.101`, { name: 'foo', port: 8081, targetPort: 8080 }),
    `apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: { name: get-only, namespace: demo }
spec:
  targetRefs: [{ kind: Service, group: "", name: sniffed }]
  action: ALLOW
  rules: [{ to: [{ operation: { methods: [GET] } }] }]
`,
  );
  const st = await tunnelTo(sniffed);
  // http.protocolDetectionTimeoutMs is 100 ms here.
  await new Promise((r) => setTimeout(r, 300));
  st.write('GET /late HTTP/1.1\r\nhost: sniffed\r\nconnection: close\r\n\r\n');
  const raw = await Promise.race([readAll(st).catch(() => Buffer.from('(reset)')), new Promise<Buffer>((r) => setTimeout(() => r(Buffer.from('(no answer in 5 s)')), 5000))]);
  expect(raw.toString('latin1')).toMatch(/^HTTP\/1\.1 200 /);
  expect(JSON.parse(parseHttpResponse(raw).body.toString()).url).toBe('/late');
  // A method the policy does not allow gets the L7 answer, 403, not a silent close.
  const st2 = await tunnelTo(sniffed);
  await new Promise((r) => setTimeout(r, 300));
  st2.write('DELETE /late HTTP/1.1\r\nhost: sniffed\r\nconnection: close\r\n\r\n');
  const raw2 = await Promise.race([readAll(st2).catch(() => Buffer.from('(reset)')), new Promise<Buffer>((r) => setTimeout(() => r(Buffer.from('(no answer in 5 s)')), 5000))]);
  expect(parseHttpResponse(raw2).status).toBe(403);
});
