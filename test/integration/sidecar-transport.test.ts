/**
 * The upstream transport toward workloads that run an Istio sidecar (Pods annotated
 * `sidecar.istio.io/status`): mutual TLS to `podIP:targetPort` with Istio's ALPN, the
 * `istio-peer-exchange` on TCP ports, the learned peer on the connection context. Small TLS
 * servers play the sidecars (certificates from the mesh CA). Addresses: 127.0.121.x.
 */
import fs from 'node:fs';
import http2, { type ClientHttp2Session } from 'node:http2';
import https from 'node:https';
import os from 'node:os';
import path from 'node:path';
import tls, { type TLSSocket } from 'node:tls';
import type { Duplex } from 'node:stream';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { Waypoint } from '../../src/app.ts';
import { defaultBootstrap, overrideBootstrap } from '../../src/config/bootstrap.ts';
import { LocalCa } from '../../src/identity/ca.ts';
import { spiffeUrisOf } from '../../src/identity/spiffe.ts';
import { PeerExchangeDecoder, encodePeerExchange } from '../../src/peer/peer-exchange.ts';
import { upstreamExchangePeerOf, type PeerInfo } from '../../src/peer/index.ts';
import { FilterStatus, type FilterFactory } from '../../src/pipeline/filter.ts';
import { SIDECAR_ALPN, SidecarTransport } from '../../src/upstream/sidecar-transport.ts';
import { connect, hboneSession, parseHttpResponse, readAll, type ClientIdentity } from '../helpers/hbone-client.ts';

const NET = '127.0.121';
const TD = 'cluster.local';
const spiffe = (sa: string) => `spiffe://${TD}/ns/demo/sa/${sa}`;
const ANNOTATION = `annotations: { sidecar.istio.io/status: '{"containers":["istio-proxy"]}' }`;

const service = (name: string, vip: string, port: number, portName: string, targetPort: number) => `---
apiVersion: v1
kind: Service
metadata: { name: ${name}, namespace: demo }
spec:
  clusterIP: ${vip}
  selector: { app: ${name} }
  ports: [{ name: ${portName}, port: ${port}, targetPort: ${targetPort} }]
`;
const pod = (name: string, app: string, ip: string, sa: string, extraLabels = '') => `---
apiVersion: v1
kind: Pod
metadata:
  name: ${name}
  namespace: demo
  labels: { app: ${app}${extraLabels} }
  ${ANNOTATION}
spec: { serviceAccountName: ${sa} }
status: { podIP: ${ip} }
`;

// One Service per case; the imposter Pod backs two Services (a TCP and an HTTP port).
const MESH = `apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: { name: waypoint, namespace: demo }
spec:
  gatewayClassName: istio-waypoint
  listeners: [{ name: mesh, port: 15008, protocol: HBONE }]
---
apiVersion: v1
kind: Namespace
metadata: { name: demo, labels: { istio.io/use-waypoint: waypoint } }
${service('tcp-echo', `${NET}.100`, 9000, 'tcp', 9000)}${service('web', `${NET}.101`, 80, 'http', 8443)}${service('h2web', `${NET}.102`, 80, 'http2', 8443)}${service('mute', `${NET}.103`, 9000, 'tcp', 9000)}${service('imposter', `${NET}.104`, 9000, 'tcp', 9000)}${service('imposter-web', `${NET}.105`, 80, 'http', 8443)}${pod('tcp-echo-1', 'tcp-echo', `${NET}.11`, 'tcp-echo', ', istio.io/dataplane-mode: none')}${pod('web-1', 'web', `${NET}.12`, 'web')}${pod('h2web-1', 'h2web', `${NET}.13`, 'h2web')}${pod('mute-1', 'mute', `${NET}.14`, 'mute')}---
apiVersion: v1
kind: Pod
metadata:
  name: imposter-1
  namespace: demo
  labels: { app: imposter }
  ${ANNOTATION}
spec: { serviceAccountName: imposter }
status: { podIP: ${NET}.15 }
---
apiVersion: v1
kind: Pod
metadata:
  name: imposter-web-1
  namespace: demo
  labels: { app: imposter-web }
  ${ANNOTATION}
spec: { serviceAccountName: imposter }
status: { podIP: ${NET}.15 }
`;

/** What the sidecar of tcp-echo-1 says about itself. */
const SIDECAR_PEER: PeerInfo = {
  name: 'tcp-echo-1',
  namespace: 'demo',
  cluster: 'Kubernetes',
  workload: 'tcp-echo',
  type: 'deployment',
  service: 'tcp-echo',
  revision: 'v7',
  app: 'tcp-echo',
  version: 'v7',
  identity: spiffe('tcp-echo'),
  region: '',
  availabilityZone: '',
  // As the codec carries them (Istio's label keys only).
  labels: { app: 'tcp-echo', version: 'v7', 'service.istio.io/canonical-name': 'tcp-echo', 'service.istio.io/canonical-revision': 'v7' },
};
const SIDECAR_NODE_ID = `sidecar~${NET}.11~tcp-echo-1.demo~demo.svc.cluster.local`;

/** What one test sidecar saw of one connection. */
interface Seen {
  offered: string[];
  clientIds: string[];
  exchange?: { peer: PeerInfo | undefined; nodeId: string };
}

let dir: string;
let ca: LocalCa;
let waypoint: Waypoint;
let client: ClientIdentity;
let session: ClientHttp2Session;
const closers: (() => unknown)[] = [];
const seen: Record<string, Seen[]> = { tcp: [], web: [], h2: [], mute: [], imposter: [] };
const tunnels: { authority: string; phase: string; peer: PeerInfo | undefined }[] = [];
const streams: { path: string; code: number; flags: string }[] = [];

const recorder: FilterFactory<unknown> = {
  name: 'test.sidecar_rec',
  parseConfig: () => ({}),
  create: () => ({
    name: 'test.sidecar_rec',
    onConnection: () => FilterStatus.Continue,
    onUpstreamConnected: (c) => void tunnels.push({ authority: c.info.authority, phase: 'connected', peer: upstreamExchangePeerOf(c) }),
    onConnectionComplete: (c) => void tunnels.push({ authority: c.info.authority, phase: 'complete', peer: upstreamExchangePeerOf(c) }),
    onStreamComplete: (s) => void streams.push({ path: s.path, code: s.responseCode, flags: s.responseFlags }),
  }),
};

/** TLS options of a test sidecar presenting `sa`'s identity, requiring a mesh client certificate. */
async function sidecarTls(sa: string, record: Seen[], choose: (offered: string[]) => string | undefined) {
  const leaf = await ca.issue(spiffe(sa), 3600_000);
  return {
    cert: leaf.certPem,
    key: leaf.keyPem,
    ca: ca.rootCertPem,
    requestCert: true,
    rejectUnauthorized: true,
    ALPNCallback: ({ protocols }: { protocols: string[] }) => {
      record.push({ offered: protocols, clientIds: [] });
      return choose(protocols);
    },
  };
}

function listen(server: tls.Server | https.Server | http2.Http2SecureServer, ip: string, port: number): Promise<void> {
  const sockets = new Set<Duplex>();
  server.on('connection', (s: Duplex) => {
    sockets.add(s);
    s.once('close', () => sockets.delete(s));
  });
  closers.push(() => {
    for (const s of sockets) s.destroy();
    return new Promise((r) => server.close(r));
  });
  return new Promise((resolve) => server.listen(port, ip, () => resolve()));
}

const pick = (want: string) => (offered: string[]) => (offered.includes(want) ? want : undefined);
const clientIdsOf = (s: TLSSocket) => spiffeUrisOf(s.getPeerX509Certificate());

beforeAll(async () => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'wp-sidecar-'));
  ({ ca } = await LocalCa.ensure(path.join(dir, 'ca'), TD));

  // tcp-echo-1: speaks the exchange after reading ours (as Envoy does), sends its frame and a greeting
  // in one write, then answers each chunk upper-cased and `BYE` after the client's FIN.
  const tcpEcho = tls.createServer({ ...(await sidecarTls('tcp-echo', seen.tcp, pick('istio-peer-exchange'))), allowHalfOpen: true }, (s) => {
    const rec = seen.tcp[seen.tcp.length - 1];
    rec.clientIds = clientIdsOf(s);
    const decoder = new PeerExchangeDecoder();
    s.on('data', (c: Buffer) => {
      const r = decoder.push(c);
      if (r.state === 'need-more') return;
      if (r.state === 'done' && !rec.exchange) {
        rec.exchange = { peer: r.peer, nodeId: r.nodeId };
        s.write(Buffer.concat([encodePeerExchange(SIDECAR_PEER, SIDECAR_NODE_ID), Buffer.from('WELCOME\n')]));
      }
      if (r.rest.length > 0) s.write(r.rest.toString().toUpperCase());
    });
    s.on('end', () => s.end('BYE\n'));
  });
  await listen(tcpEcho, `${NET}.11`, 9000);

  // mute-1: negotiates istio-peer-exchange but greets with application bytes instead of a frame.
  const mute = tls.createServer({ ...(await sidecarTls('mute', seen.mute, pick('istio-peer-exchange'))), allowHalfOpen: true }, (s) => {
    s.write('HELLO\n');
    const decoder = new PeerExchangeDecoder();
    s.on('data', (c: Buffer) => {
      const r = decoder.push(c);
      if (r.state !== 'need-more' && r.rest.length > 0) s.write(r.rest.toString().toUpperCase());
    });
    s.on('end', () => s.end());
  });
  await listen(mute, `${NET}.14`, 9000);

  // web-1: HTTPS choosing istio-http/1.1; answers what it saw.
  const web = https.createServer(await sidecarTls('web', seen.web, pick('istio-http/1.1')), (req, res) => {
    const s = req.socket as TLSSocket;
    req.resume();
    req.on('end', () => {
      res.setHeader('content-type', 'application/json');
      res.end(JSON.stringify({ url: req.url, alpn: s.alpnProtocol, client: clientIdsOf(s), expect: req.headers.expect ?? '' }));
    });
  });
  await listen(web, `${NET}.12`, 8443);

  // h2web-1: HTTP/2 over TLS choosing istio-h2.
  const h2web = http2.createSecureServer(await sidecarTls('h2web', seen.h2, pick('istio-h2')), (req, res) => {
    const s = req.socket as unknown as TLSSocket;
    const body = JSON.stringify({ url: req.url, alpn: s.alpnProtocol, version: req.httpVersion, client: clientIdsOf(s) });
    res.setHeader('content-type', 'application/json');
    res.setHeader('content-length', Buffer.byteLength(body));
    res.end(body);
  });
  await listen(h2web, `${NET}.13`, 8443);

  // imposter-1 / imposter-web-1 (one IP, service account `imposter`): present someone else's identity.
  let imposterRequests = 0;
  // The TCP one speaks the exchange well, so only the identity check can refuse it.
  const imposterTcp = tls.createServer(await sidecarTls('someone-else', seen.imposter, pick('istio-peer-exchange')), (s) => {
    s.write(encodePeerExchange({ ...SIDECAR_PEER, name: 'imposter-1' }, ''));
    s.on('data', () => imposterRequests++);
    s.on('error', () => {});
  });
  await listen(imposterTcp, `${NET}.15`, 9000);
  const imposterWeb = https.createServer(await sidecarTls('someone-else', seen.imposter, pick('istio-http/1.1')), (_req, res) => {
    imposterRequests++;
    res.end('should not be reached');
  });
  await listen(imposterWeb, `${NET}.15`, 8443);
  closers.push(() => expect(imposterRequests).toBe(0));

  const meshFile = path.join(dir, 'mesh.yaml');
  fs.writeFileSync(meshFile, MESH);
  const bootstrap = overrideBootstrap(defaultBootstrap(), {
    listeners: { hbone: `${NET}.1:15008`, admin: `${NET}.1:0`, readiness: '' },
    upstream: { connectTimeoutMs: 3000 },
    drain: { delayMs: 0, timeoutMs: 200 },
    filters: [{ name: 'test.sidecar_rec' }, { name: 'envoy.filters.http.router' }],
  });
  waypoint = await Waypoint.start({ bootstrap, meshFile, caDir: path.join(dir, 'ca'), watch: false, extraFilters: [recorder] });
  const leaf = await ca.issue(spiffe('client'), 3600_000);
  client = { certPem: leaf.certPem, keyPem: leaf.keyPem, caPem: ca.rootCertPem };
  session = await hboneSession(`${NET}.1`, waypoint.addresses.hbone.port, client);
});

afterAll(async () => {
  session?.close();
  await waypoint?.shutdown();
  for (const c of closers.reverse()) await c();
  fs.rmSync(dir, { recursive: true, force: true });
});

/** Tunnel records for `authority`, waiting until its tunnel completed. */
async function tunnelRecords(authority: string) {
  for (let i = 0; i < 200 && !tunnels.some((t) => t.authority === authority && t.phase === 'complete'); i++) await new Promise((r) => setTimeout(r, 10));
  return tunnels.filter((t) => t.authority === authority);
}

/** One HTTP/1.1 request (Connection: close) inside a CONNECT to `authority`. */
async function httpThrough(authority: string, head: string, body = '') {
  const { status, stream } = await connect(session, authority);
  expect(status).toBe(200);
  stream.end(`${head}\r\nhost: svc\r\nconnection: close\r\n${body ? `content-length: ${body.length}\r\n` : ''}\r\n${body}`);
  let raw = await readAll(stream as Duplex);
  // A 100 Continue precedes the final response of an Expect request.
  if (raw.toString('latin1').startsWith('HTTP/1.1 100')) raw = raw.subarray(raw.indexOf('\r\n\r\n') + 4);
  return parseHttpResponse(raw);
}

describe('TCP port of a sidecar workload', () => {
  test('mTLS with ALPN istio-peer-exchange, the exchange both ways, bytes and half-close relayed, the learned peer on the connection context', async () => {
    const { status, stream } = await connect(session, `${NET}.100:9000`);
    expect(status).toBe(200);
    stream.write('ping\n');
    stream.end('pong\n');
    expect((await readAll(stream as Duplex)).toString()).toBe('WELCOME\nPING\nPONG\nBYE\n');

    // What the sidecar saw: Istio's TCP ALPN list, the waypoint's certificate and its exchange frame.
    const rec = seen.tcp.at(-1)!;
    expect(rec.offered).toEqual(['istio-peer-exchange', 'istio']);
    expect(rec.clientIds).toEqual([spiffe('waypoint')]);
    expect(rec.exchange?.peer).toMatchObject({ namespace: 'demo', workload: 'waypoint', service: 'waypoint', identity: spiffe('waypoint'), type: 'deployment' });
    expect(rec.exchange?.peer?.labels['service.istio.io/canonical-name']).toBe('waypoint');
    expect(rec.exchange?.nodeId).toMatch(/^waypoint~127\.\d+\.\d+\.\d+~[^~]+\.demo~demo\.svc\.cluster\.local$/);

    // What the filters saw: the sidecar's own description, already at upstream-connected time.
    const recs = await tunnelRecords(`${NET}.100:9000`);
    expect(recs.map((t) => t.phase)).toEqual(['connected', 'complete']);
    for (const t of recs) expect(t.peer).toEqual(SIDECAR_PEER);
  });

  test('a sidecar whose first bytes are not the exchange magic: bytes still flow, the peer stays unknown', async () => {
    const { status, stream } = await connect(session, `${NET}.103:9000`);
    expect(status).toBe(200);
    stream.end('ping\n');
    expect((await readAll(stream as Duplex)).toString()).toBe('HELLO\nPING\n');
    expect(seen.mute.at(-1)!.offered).toEqual(['istio-peer-exchange', 'istio']);
    const recs = await tunnelRecords(`${NET}.103:9000`);
    expect(recs.map((t) => t.phase)).toEqual(['connected', 'complete']);
    for (const t of recs) expect(t.peer).toBeUndefined();
  });

  test('a server presenting another identity than the workload: the CONNECT fails with 503 and nothing is sent', async () => {
    const before = seen.imposter.length;
    expect((await connect(session, `${NET}.104:9000`)).status).toBe(503);
    expect(seen.imposter.length).toBeGreaterThan(before); // the TLS handshake did reach it
    const recs = await tunnelRecords(`${NET}.104:9000`);
    expect(recs.map((t) => t.phase)).toEqual(['complete']);
  });
});

describe('HTTP ports of sidecar workloads', () => {
  test('HTTP/1.1 over mTLS with ALPN istio-http/1.1', async () => {
    const res = await httpThrough(`${NET}.101:80`, 'GET /hello?x=1 HTTP/1.1');
    expect(res.status).toBe(200);
    expect(JSON.parse(res.body.toString())).toEqual({ url: '/hello?x=1', alpn: 'istio-http/1.1', client: [spiffe('waypoint')], expect: '' });
    expect(seen.web.at(-1)!.offered).toEqual(['istio-http/1.1', 'istio', 'http/1.1']);
  });

  test('the dedicated upstream (Expect: 100-continue) offers the HTTP/1.1 ALPN too', async () => {
    const res = await httpThrough(`${NET}.101:80`, 'POST /expect HTTP/1.1\r\nexpect: 100-continue', 'hi');
    expect(res.status).toBe(200);
    expect(JSON.parse(res.body.toString())).toMatchObject({ url: '/expect', alpn: 'istio-http/1.1', expect: '100-continue' });
    expect(seen.web.at(-1)!.offered).toEqual(['istio-http/1.1', 'istio', 'http/1.1']);
  });

  test('an http2 port speaks HTTP/2 over mTLS with ALPN istio-h2', async () => {
    const res = await httpThrough(`${NET}.102:80`, 'GET /h2 HTTP/1.1');
    expect(res.status).toBe(200);
    expect(JSON.parse(res.body.toString())).toEqual({ url: '/h2', alpn: 'istio-h2', version: '2.0', client: [spiffe('waypoint')] });
    expect(seen.h2.at(-1)!.offered).toEqual(['istio-h2', 'istio', 'h2']);
  });

  test('a server presenting another identity: 503 with flag UF', async () => {
    const res = await httpThrough(`${NET}.105:80`, 'GET /imposter HTTP/1.1');
    expect(res.status).toBe(503);
    for (let i = 0; i < 100 && !streams.some((s) => s.path === '/imposter'); i++) await new Promise((r) => setTimeout(r, 10));
    const rec = streams.find((s) => s.path === '/imposter');
    expect(rec?.code).toBe(503);
    expect(rec?.flags.split(',')).toContain('UF');
    expect(seen.imposter.at(-1)!.offered).toEqual(['istio-http/1.1', 'istio', 'http/1.1']);
  });
});

describe('SidecarTransport', () => {
  test('a frame arriving a byte at a time, with application bytes behind it: the peer is learned and the bytes are kept in order', async () => {
    const leaf = await ca.issue(spiffe('slow'), 3600_000);
    const server = tls.createServer({ cert: leaf.certPem, key: leaf.keyPem, ca: ca.rootCertPem, requestCert: true, ALPNCallback: () => 'istio-peer-exchange' }, async (s) => {
      const bytes = Buffer.concat([encodePeerExchange(SIDECAR_PEER, 'id-1'), Buffer.from('AFTER')]);
      for (const b of bytes) {
        s.write(Buffer.of(b));
        await new Promise((r) => setImmediate(r));
      }
      s.end('!');
    });
    await listen(server, `${NET}.20`, 9100);
    const me = await ca.issue(spiffe('waypoint'), 3600_000);
    const transport = new SidecarTransport({
      material: () => ({ certPem: me.certPem, keyPem: me.keyPem, caPem: ca.rootCertPem }),
      local: (ip) => ({ peer: { ...SIDECAR_PEER, name: 'me' }, nodeId: `waypoint~${ip}~me.demo~demo.svc.cluster.local` }),
      connectTimeoutMs: 3000,
    });
    const c = await transport.connect({ ip: `${NET}.20`, port: 9100, identity: spiffe('slow') }, 'tcp');
    expect(c.alpn).toBe('istio-peer-exchange');
    expect(c.peer).toEqual(SIDECAR_PEER);
    expect(c.peerNodeId).toBe('id-1');
    // Handed over paused after an exchange (no byte may be emitted before the reader attaches).
    expect(c.socket.isPaused()).toBe(true);
    const all = readAll(c.socket);
    c.socket.resume();
    expect((await all).toString()).toBe('AFTER!');
  });

  test('a frame that starts with the magic but declares an oversized payload fails the connect', async () => {
    const leaf = await ca.issue(spiffe('big'), 3600_000);
    const server = tls.createServer({ cert: leaf.certPem, key: leaf.keyPem, ca: ca.rootCertPem, requestCert: true, ALPNCallback: () => 'istio-peer-exchange' }, (s) => {
      const head = Buffer.alloc(8);
      head.writeUInt32BE(0x3d230467, 0);
      head.writeUInt32BE(1 << 30, 4);
      s.write(head);
      s.on('error', () => {});
    });
    await listen(server, `${NET}.21`, 9100);
    const me = await ca.issue(spiffe('waypoint'), 3600_000);
    const transport = new SidecarTransport({
      material: () => ({ certPem: me.certPem, keyPem: me.keyPem, caPem: ca.rootCertPem }),
      local: () => ({ peer: SIDECAR_PEER, nodeId: '' }),
      connectTimeoutMs: 3000,
    });
    await expect(transport.connect({ ip: `${NET}.21`, port: 9100, identity: spiffe('big') }, 'tcp')).rejects.toMatchObject({ reason: 'PEER_EXCHANGE' });
  });

  test('ALPN lists are Istio’s', () => {
    expect(SIDECAR_ALPN).toEqual({ tcp: ['istio-peer-exchange', 'istio'], 'http/1.1': ['istio-http/1.1', 'istio', 'http/1.1'], h2: ['istio-h2', 'istio', 'h2'] });
  });
});
