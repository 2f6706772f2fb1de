/**
 * The waypoint's HBONE listener and its failure answers, on real mTLS HTTP/2: who may connect,
 * what is tunnelled, what each bad CONNECT gets, and that an unreachable endpoint yields a
 * prompt 503 instead of a hang. Addresses: 127.0.22.x.
 */
import tls from 'node:tls';
import { afterAll, beforeAll, expect, test } from 'vitest';
import { connect, hboneSession, parseHttpResponse, readAll, type ClientIdentity } from '../helpers/hbone-client.ts';
import { identityFrom, spiffe, TestCa } from '../helpers/identity.ts';
import { startTestTopology, type TestTopology } from '../helpers/topology.ts';

let topo: TestTopology;
let client: ClientIdentity;
const WP = '127.0.22.1';
let port: number;

beforeAll(async () => {
  topo = await startTestTopology(22);
  port = topo.waypoint!.addresses.hbone.port;
  client = await identityFrom(topo.caDir);
});
afterAll(async () => {
  await topo?.close();
});

test('CONNECT to the service VIP tunnels HTTP/1.1 to an endpoint (pitfall A1: no automatic 405)', async () => {
  const session = await hboneSession(WP, port, client);
  try {
    const { status, stream } = await connect(session, '127.0.22.100:80', { forwarded: 'for="127.0.22.50:5555"', traceparent: '00-0123456789abcdef0123456789abcdef-0123456789abcdef-00' });
    expect(status).toBe(200);
    stream.end('GET /via-hbone HTTP/1.1\r\nhost: echo\r\nconnection: close\r\n\r\n');
    const res = parseHttpResponse(await readAll(stream));
    expect(res.status).toBe(200);
    expect(JSON.parse(res.body.toString()).url).toBe('/via-hbone');
  } finally {
    session.close();
  }
});

test('a method other than CONNECT is answered 400', async () => {
  const session = await hboneSession(WP, port, client);
  try {
    const status = await new Promise<number>((resolve, reject) => {
      const req = session.request({ ':method': 'GET', ':path': '/', ':authority': '127.0.22.100:80' });
      req.once('response', (h) => resolve(Number(h[':status'])));
      req.once('error', reject);
      req.resume();
    });
    expect(status).toBe(400);
  } finally {
    session.close();
  }
});

test.each(['echo.demo.svc.cluster.local', '127.0.22.100', '[::1]', '127.0.22.100:99999', '127.0.22.100:http', '999.0.0.1:80'])(
  'malformed :authority %s is answered 400',
  async (authority) => {
    const session = await hboneSession(WP, port, client);
    try {
      expect((await connect(session, authority)).status).toBe(400);
    } finally {
      session.close();
    }
  },
);

test('a target this waypoint does not serve is answered 503', async () => {
  const session = await hboneSession(WP, port, client);
  try {
    expect((await connect(session, '127.0.22.200:80')).status).toBe(503);
    // A served VIP on a port the service does not have.
    expect((await connect(session, '127.0.22.100:81')).status).toBe(503);
  } finally {
    session.close();
  }
});

test('a client certificate from another CA is refused', async () => {
  const other = await TestCa.create();
  try {
    const leaf = await other.fresh(spiffe('demo', 'client'));
    const bad = { ...leaf, caPem: client.caPem };
    // TLS 1.3: the client may finish its side of the handshake before the server's verdict,
    // so accept either a failed connect or a session that dies before any CONNECT is answered.
    const outcome = await hboneSession(WP, port, bad).then(
      (s) => connect(s, '127.0.22.100:80').then((r) => `answered ${r.status}`, () => 'closed'),
      () => 'refused',
    );
    expect(['refused', 'closed']).toContain(outcome);
  } finally {
    other.close();
  }
});

test('HTTP/1.1 over TLS (no h2 ALPN) is never tunnelled (pitfall A1)', async () => {
  const socket = tls.connect({
    host: WP,
    port,
    cert: client.certPem,
    key: client.keyPem,
    ca: client.caPem,
    ALPNProtocols: ['http/1.1'],
    checkServerIdentity: () => undefined,
  });
  socket.on('error', () => {});
  socket.on('secureConnect', () => socket.write('CONNECT 127.0.22.100:80 HTTP/1.1\r\nhost: 127.0.22.100:80\r\n\r\n'));
  const got = await new Promise<string>((resolve) => {
    let data = '';
    socket.on('data', (c) => (data += c.toString('latin1')));
    socket.once('close', () => resolve(data));
  });
  expect(got).not.toMatch(/^HTTP\/1\.1 200/);
});
