/**
 * Protocol detection on undeclared ports (port name `foo`) and server-first protocols (pitfall G1),
 * with the waypoint serving services and workloads (`istio.io/waypoint-for: all`, the scope in
 * which G1 was reported):
 *  - an HTTP/1.1 client is proxied as HTTP (x-request-id added), an h2c client as HTTP/2 (the
 *    upstream speaks the client's protocol), arbitrary bytes are relayed as TCP;
 *  - a server-first backend's greeting reaches a client that sends nothing: after the detection
 *    timeout on an undeclared port, at once on a `tcp` port; then client and server talk and the
 *    server's close reaches the client;
 *  - a workload-addressed CONNECT (pod IP:port) is sniffed the same way.
 * Addresses: 127.0.87.x.
 */
import http from 'node:http';
import http2 from 'node:http2';
import net from 'node:net';
import { afterAll, beforeAll, expect, test } from 'vitest';
import { connect, hboneSession, parseHttpResponse, readAll } from '../../helpers/hbone-client.ts';
import { identityFrom } from '../../helpers/identity.ts';
import { servicePort } from '../../helpers/mesh.ts';
import { recorder } from '../../helpers/recorder.ts';
import { closeServer, listen, track } from '../../helpers/servers.ts';
import { addEntry, addToMesh, echoService, openEntry, startTestTopology, type TestTopology } from '../../helpers/topology.ts';
import { serverFirst, serverFirstExchange } from './server-first.ts';

const NET = 87;
const PODS = [`127.0.${NET}.11`, `127.0.${NET}.12`];
const UUID_V4 = /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/;
/** Undeclared-port server-first service (port 5000) and a `tcp` one (port 5001). */
const FOO_FIRST = `127.0.${NET}.101:5000`;
const TCP_FIRST = `127.0.${NET}.102:5001`;

let topo: TestTopology;
const rec = recorder();
const closers: (() => Promise<unknown>)[] = [];
let greeting = '';
let fooEntry: { host: string; port: number };
let tcpEntry: { host: string; port: number };
/** What the multi-protocol backend saw: protocol, path, x-request-id. */
const seen: { proto: string; path: string; xrid: string | undefined }[] = [];

/**
 * A backend on :8080 that speaks whatever its client speaks first: HTTP/1.1, h2c (prior
 * knowledge), or anything else echoed back as `echo:<bytes>` (ending when the client ends).
 */
async function multiBackend(ip: string): Promise<void> {
  const reply = (proto: string, path: string, xrid: string | undefined) => {
    seen.push({ proto, path, xrid });
    return JSON.stringify({ proto, path, xrid: xrid ?? null });
  };
  const h1 = http.createServer((req, res) => {
    const body = reply(req.httpVersion, req.url ?? '', req.headers['x-request-id'] as string | undefined);
    res.writeHead(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) });
    res.end(body);
  });
  const h2 = http2.createServer();
  h2.on('stream', (stream, headers) => {
    const body = reply('2', String(headers[':path']), headers['x-request-id'] as string | undefined);
    stream.respond({ ':status': 200, 'content-type': 'application/json', 'content-length': String(Buffer.byteLength(body)) });
    stream.end(body);
  });
  const front = net.createServer({ allowHalfOpen: true }, (sock) => {
    sock.on('error', () => {});
    sock.once('data', (first: Buffer) => {
      sock.pause();
      sock.unshift(first);
      const text = first.toString('latin1');
      if (text.startsWith('PRI * HTTP/2.0')) h2.emit('connection', sock);
      else if (/^[A-Z]+ \S+ HTTP\/1\.[01]\r\n/.test(text)) {
        h1.emit('connection', sock);
        sock.resume();
      } else {
        sock.on('data', (c: Buffer) => sock.write(Buffer.concat([Buffer.from('echo:'), c])));
        sock.once('end', () => sock.end());
        sock.resume();
      }
    });
  });
  const sockets = track(front);
  await listen(front, ip, 8080);
  closers.push(() => closeServer(front, sockets));
}

beforeAll(async () => {
  // The detection timeout is 15 s by default (Istio's waypoint waits that long): 1 s keeps the
  // server-first cases, which wait it out, short.
  topo = await startTestTopology(NET, { portName: 'foo', backends: false, extraFilters: [rec.factory], bootstrap: { filters: rec.filters, http: { protocolDetectionTimeoutMs: 1000 } } });
  for (const ip of PODS) {
    await multiBackend(ip);
    for (const port of [5000, 5001]) {
      const sf = serverFirst();
      greeting = sf.greeting;
      await listen(sf.server, ip, port);
      closers.push(() => closeServer(sf.server, sf.sockets));
    }
  }
  // Serve workloads too (the G1 report's "service+workload" scope) and add the server-first services.
  const fs = await import('node:fs');
  const mesh = fs.readFileSync(topo.meshFile, 'utf8').replace(
    'metadata: { name: waypoint, namespace: demo }',
    "metadata: { name: waypoint, namespace: demo, labels: { istio.io/waypoint-for: all } }",
  );
  fs.writeFileSync(topo.meshFile, mesh);
  await addToMesh(topo, echoService('first-foo', `127.0.${NET}.101`, servicePort('foo', 5000)), echoService('first-tcp', `127.0.${NET}.102`, servicePort('tcp', 5001)));
  expect(topo.waypoint!.mesh.current.resolveTarget(PODS[0], 8080)?.kind).toBe('workload');
  const e1 = await addEntry(topo, FOO_FIRST);
  const e2 = await addEntry(topo, TCP_FIRST);
  closers.push(e1.close, e2.close);
  fooEntry = e1;
  tcpEntry = e2;
});

afterAll(async () => {
  for (const c of closers.reverse()) await c().catch(() => {});
  await topo?.close();
});

test('undeclared port: an HTTP/1.1 client is proxied as HTTP (x-request-id added)', async () => {
  const res = await new Promise<{ status: number; body: string }>((resolve, reject) => {
    http
      .get({ host: topo.entry.host, port: topo.entry.port, path: '/sniff/h1', agent: false }, (r) => {
        let b = '';
        r.on('data', (c) => (b += c));
        r.on('end', () => resolve({ status: r.statusCode!, body: b }));
      })
      .on('error', reject);
  });
  expect(res.status).toBe(200);
  const body = JSON.parse(res.body);
  expect(body.proto).toBe('1.1');
  expect(body.xrid).toMatch(UUID_V4);
  expect((await rec.find('/sniff/h1')).protocol).toBe('HTTP/1.1');
});

test('undeclared port: an h2c client is proxied as HTTP/2 end to end', async () => {
  const client = http2.connect(`http://${topo.entry.host}:${topo.entry.port}`);
  try {
    const res = await new Promise<{ status: number; body: string }>((resolve, reject) => {
      const req = client.request({ ':path': '/sniff/h2' });
      let status = 0;
      let b = '';
      req.on('response', (h) => (status = Number(h[':status'])));
      req.on('data', (c) => (b += c));
      req.on('end', () => resolve({ status, body: b }));
      req.on('error', reject);
    });
    expect(res.status).toBe(200);
    const body = JSON.parse(res.body);
    expect(body.proto).toBe('2');
    expect(body.xrid).toMatch(UUID_V4);
  } finally {
    client.close();
  }
  expect((await rec.find('/sniff/h2')).protocol).toBe('HTTP/2');
});

test('undeclared port: bytes that are not HTTP are relayed as TCP, half-close included', async () => {
  for (const payload of [Buffer.from('hello there, not http\r\n'), Buffer.from([0, 1, 2, 3, 0xff, 0x16, 0x03])]) {
    const s = await openEntry(topo);
    const all = readAll(s);
    s.write(payload);
    // Let the echo come back before half-closing: the backend answers while the client is still open.
    await new Promise((r) => setTimeout(r, 200));
    s.end();
    expect(await all).toEqual(Buffer.concat([Buffer.from('echo:'), payload]));
  }
  expect(seen.some((x) => x.path.includes('hello'))).toBe(false);
});

test('G1: a server-first backend on an undeclared port greets a silent client, then talks and closes', async () => {
  const s = net.connect(fooEntry.port, fooEntry.host);
  const r = await serverFirstExchange(s, greeting.length);
  expect(r.greeting).toBe(greeting);
  expect(r.rest).toBe('reply:HELO client\r\n');
  expect(r.ended).toBe(true);
  s.destroy();
}, 10_000);

test('an HTTP request to an app that answers something other than HTTP gets 502 UPE, as Envoy', async () => {
  // The server-first app greets with a non-HTTP line: the upstream HTTP/1 parser fails.
  const s = net.connect(fooEntry.port, fooEntry.host);
  const all = readAll(s);
  s.write('GET /not-http-upstream HTTP/1.1\r\nhost: first-foo\r\nconnection: close\r\n\r\n');
  const res = parseHttpResponse(await all);
  expect(res.status).toBe(502);
  const r = await rec.find('/not-http-upstream');
  expect(r.flags).toBe('UPE');
  expect(r.details).toBe('upstream_reset_before_response_started{protocol_error}');
}, 10_000);

test('G1: the same on a port declared tcp', async () => {
  const s = net.connect(tcpEntry.port, tcpEntry.host);
  const r = await serverFirstExchange(s, greeting.length);
  expect(r.greeting).toBe(greeting);
  expect(r.rest).toBe('reply:HELO client\r\n');
  expect(r.ended).toBe(true);
  s.destroy();
}, 10_000);

test('workload-addressed CONNECTs (pod IP:port) are sniffed: HTTP is proxied, a server-first protocol greets', async () => {
  const session = await hboneSession(`127.0.${NET}.1`, topo.waypoint!.addresses.hbone.port, await identityFrom(topo.caDir));
  try {
    const { status, stream } = await connect(session, `${PODS[0]}:8080`);
    expect(status).toBe(200);
    const all = readAll(stream);
    stream.end('GET /sniff/workload HTTP/1.1\r\nHost: pod\r\nConnection: close\r\n\r\n');
    const res = parseHttpResponse(await all);
    expect(res.status).toBe(200);
    const body = JSON.parse(res.body.toString());
    expect(body).toMatchObject({ proto: '1.1', path: '/sniff/workload' });
    expect(body.xrid).toMatch(UUID_V4);
    expect((await rec.find('/sniff/workload')).upstreamHost).toBe(`${PODS[0]}:8080`);

    const first = await connect(session, `${PODS[1]}:5000`);
    expect(first.status).toBe(200);
    const r = await serverFirstExchange(first.stream, greeting.length);
    expect(r.greeting).toBe(greeting);
    expect(r.rest).toBe('reply:HELO client\r\n');
  } finally {
    session.close();
  }
}, 10_000);
