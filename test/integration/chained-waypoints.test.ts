/**
 * Chained waypoints over real HBONE on loopback: waypoint A (`demo/waypoint-a`, this file's first
 * waypoint) routes `front` to backends; `back` and `back2` use their own waypoint B
 * (`infra/waypoint-b`, a second instance of this waypoint in the same process, with its own
 * identity). A's requests to them go to B's instance (HBONE to B:15008, CONNECT `:authority` the
 * backend's VIP:port), and B serves them to the pods: the pods see B's identity. `direct`
 * (`use-waypoint: none`) and `own` (served by A) are reached directly. The pods are small HBONE
 * servers recording who connected and with which authority. Addresses: 127.0.225.x only.
 */
import fs from 'node:fs';
import http from 'node:http';
import http2, { type ClientHttp2Session, type ServerHttp2Stream } from 'node:http2';
import os from 'node:os';
import path from 'node:path';
import type { TLSSocket } from 'node:tls';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { Waypoint } from '../../src/app.ts';
import { defaultBootstrap, overrideBootstrap } from '../../src/config/bootstrap.ts';
import { LocalCa } from '../../src/identity/ca.ts';
import { spiffeUrisOf } from '../../src/identity/spiffe.ts';
import { FilterStatus, type FilterFactory } from '../../src/pipeline/filter.ts';
import { connect, hboneSession, parseHttpResponse, type ClientIdentity } from '../helpers/hbone-client.ts';
import { samplesOf, scrape } from '../helpers/prometheus.ts';

const NET = '127.0.225';
const IP = (n: number) => `${NET}.${n}`;
const TD = 'cluster.local';
const A_ID = `spiffe://${TD}/ns/demo/sa/waypoint-a`;
const B_ID = `spiffe://${TD}/ns/infra/sa/waypoint-b`;
const VIP = { front: IP(100), back: IP(101), direct: IP(102), own: IP(103), back2: IP(104) };
const POD = { back: IP(11), direct: IP(12), own: IP(13), back2: IP(14) };

const svc = (name: string, vip: string, labels = '{}') => `---
apiVersion: v1
kind: Service
metadata: { name: ${name}, namespace: demo, labels: ${labels} }
spec:
  clusterIP: ${vip}
  selector: { app: ${name} }
  ports: [{ name: http, port: 80, targetPort: 8080 }]
`;
const pod = (name: string, ip: string) => `---
apiVersion: v1
kind: Pod
metadata: { name: ${name}-1, namespace: demo, labels: { app: ${name} } }
spec: { serviceAccountName: ${name} }
status: { podIP: ${ip} }
`;
const USE_B = '{ istio.io/use-waypoint: waypoint-b, istio.io/use-waypoint-namespace: infra }';

const MESH = `apiVersion: v1
kind: Namespace
metadata: { name: demo, labels: { istio.io/use-waypoint: waypoint-a } }
---
apiVersion: v1
kind: Namespace
metadata: { name: infra }
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: { name: waypoint-a, namespace: demo }
spec:
  gatewayClassName: istio-waypoint
  listeners: [{ name: mesh, port: 15008, protocol: HBONE }]
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: { name: waypoint-b, namespace: infra }
spec:
  gatewayClassName: istio-waypoint
  listeners: [{ name: mesh, port: 15008, protocol: HBONE, allowedRoutes: { namespaces: { from: All } } }]
---
apiVersion: v1
kind: Service
metadata: { name: waypoint-b, namespace: infra, labels: { gateway.istio.io/managed: istio.io-mesh-controller } }
spec:
  clusterIP: ${IP(200)}
  selector: { gateway.networking.k8s.io/gateway-name: waypoint-b }
  ports: [{ name: mesh, port: 15008 }]
---
apiVersion: v1
kind: Pod
metadata:
  name: waypoint-b-7c9d8f5b6d-x2x9q
  namespace: infra
  labels: { gateway.networking.k8s.io/gateway-name: waypoint-b, pod-template-hash: 7c9d8f5b6d }
  ownerReferences: [{ apiVersion: apps/v1, kind: ReplicaSet, name: waypoint-b-7c9d8f5b6d, uid: x }]
spec: { serviceAccountName: waypoint-b }
status: { podIP: ${IP(2)} }
${svc('front', VIP.front)}${svc('back', VIP.back, USE_B)}${svc('back2', VIP.back2, USE_B)}${svc('direct', VIP.direct, '{ istio.io/use-waypoint: none }')}${svc('own', VIP.own)}${pod('back', POD.back)}${pod('back2', POD.back2)}${pod('direct', POD.direct)}${pod('own', POD.own)}---
apiVersion: v1
kind: Pod
metadata: { name: client, namespace: demo, labels: { app: client } }
spec: { serviceAccountName: client }
status: { podIP: ${IP(50)} }
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: { name: front, namespace: demo }
spec:
  parentRefs: [{ group: "", kind: Service, name: front, port: 80 }]
  rules:
  - matches: [{ path: { type: PathPrefix, value: /chained2 } }]
    backendRefs: [{ name: back2, port: 80 }]
  - matches: [{ path: { type: PathPrefix, value: /chained } }]
    backendRefs: [{ name: back, port: 80 }]
  - matches: [{ path: { type: PathPrefix, value: /none } }]
    backendRefs: [{ name: direct, port: 80 }]
  - matches: [{ path: { type: PathPrefix, value: /own } }]
    backendRefs: [{ name: own, port: 80 }]
`;

/** One CONNECT a pod accepted: who presented which identity, for which authority. */
interface PodConnect {
  readonly pod: string;
  readonly peer: string[];
  readonly authority: string;
}
/** One request or tunnel as a waypoint's recording filter saw it at completion. */
interface Seen {
  readonly path: string;
  readonly authority: string;
  readonly peer: string;
  readonly code: number;
  readonly cluster: string;
  readonly upstreamHost: string;
  readonly endpointWorkload: string;
  readonly routeService: string;
}

let dir: string;
let ca: LocalCa;
let wpA: Waypoint;
let wpB: Waypoint;
let client: ClientIdentity;
let session: ClientHttp2Session;
const closers: (() => unknown)[] = [];
const podConnects: PodConnect[] = [];
const seenBy: Record<'a' | 'b', Seen[]> = { a: [], b: [] };

function recorder(which: 'a' | 'b'): FilterFactory<unknown> {
  const name = `test.chain_rec_${which}`;
  return {
    name,
    parseConfig: () => ({}),
    create: () => ({
      name,
      onConnection: () => FilterStatus.Continue,
      onStreamComplete: (s) =>
        void seenBy[which].push({
          path: s.path,
          authority: s.conn.info.authority,
          peer: s.conn.info.peer.uri,
          code: s.responseCode,
          cluster: s.upstreamCluster,
          upstreamHost: s.upstreamHost,
          endpointWorkload: s.endpoint?.workload.name ?? '',
          routeService: s.routeTarget?.kind === 'service' ? s.routeTarget.service.hostname : '',
        }),
    }),
  };
}

/**
 * A pod `name` at `ip`: an HBONE server on :15008 presenting `name`'s identity, recording each
 * CONNECT, serving HTTP/1.1 inside it (JSON: pod, url, the CONNECT's peer and authority). A
 * WebSocket upgrade is answered 101 and its bytes echoed upper-cased.
 */
async function startPod(name: string, ip: string): Promise<void> {
  const leaf = await ca.issue(`spiffe://${TD}/ns/demo/sa/${name}`, 3600_000);
  const app = http.createServer((req, res) => {
    const tunnel = (req.socket as unknown as { connect?: PodConnect }).connect;
    req.resume();
    req.on('end', () => {
      const body = JSON.stringify({ pod: name, url: req.url, peer: tunnel?.peer, authority: tunnel?.authority, xff: req.headers['x-forwarded-for'] });
      res.writeHead(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body), 'x-served-by': name });
      res.end(body);
    });
  });
  app.on('upgrade', (_req, socket) => {
    socket.write('HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nx-served-by: ' + name + '\r\n\r\n');
    socket.on('data', (d: Buffer) => socket.write(d.toString().toUpperCase()));
    socket.on('end', () => socket.end());
  });
  const server = http2.createSecureServer({ cert: leaf.certPem, key: leaf.keyPem, ca: ca.rootCertPem, requestCert: true, rejectUnauthorized: true });
  server.on('stream', (stream: ServerHttp2Stream, headers) => {
    if (headers[':method'] !== 'CONNECT') return stream.close(http2.constants.NGHTTP2_PROTOCOL_ERROR);
    const rec: PodConnect = { pod: name, peer: spiffeUrisOf((stream.session!.socket as TLSSocket).getPeerX509Certificate()), authority: String(headers[':authority']) };
    podConnects.push(rec);
    stream.respond({ ':status': 200 });
    (stream as unknown as { connect: PodConnect }).connect = rec;
    app.emit('connection', stream);
  });
  const sessions = new Set<http2.ServerHttp2Session>();
  server.on('session', (s) => {
    sessions.add(s);
    s.once('close', () => sessions.delete(s));
  });
  await new Promise<void>((resolve) => server.listen(15008, ip, resolve));
  closers.push(() => {
    for (const s of sessions) s.destroy();
    return new Promise((r) => server.close(r));
  });
}

function startWaypoint(ip: string, gateway: string, which: 'a' | 'b'): Promise<Waypoint> {
  const bootstrap = overrideBootstrap(defaultBootstrap(), {
    listeners: { hbone: `${ip}:15008`, admin: `${ip}:0`, readiness: '' },
    upstream: { connectTimeoutMs: 3000, hbonePort: 15008 },
    drain: { delayMs: 0, timeoutMs: 200 },
    filters: [{ name: `test.chain_rec_${which}` }, { name: 'istio.peer_metadata' }, { name: 'istio.stats' }, { name: 'envoy.filters.http.router' }],
  });
  return Waypoint.start({ bootstrap, meshFile: path.join(dir, 'mesh.yaml'), gateway, caDir: path.join(dir, 'ca'), watch: false, extraFilters: [recorder(which)] });
}

beforeAll(async () => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'wp-chained-'));
  ({ ca } = await LocalCa.ensure(path.join(dir, 'ca'), TD));
  for (const [name, ip] of Object.entries(POD)) await startPod(name, ip);
  fs.writeFileSync(path.join(dir, 'mesh.yaml'), MESH);
  wpA = await startWaypoint(IP(1), 'demo/waypoint-a', 'a');
  wpB = await startWaypoint(IP(2), 'infra/waypoint-b', 'b');
  const leaf = await ca.issue(`spiffe://${TD}/ns/demo/sa/client`, 3600_000);
  client = { certPem: leaf.certPem, keyPem: leaf.keyPem, caPem: ca.rootCertPem };
  session = await hboneSession(IP(1), 15008, client, { localAddress: IP(50) });
});

afterAll(async () => {
  session?.close();
  await wpA?.shutdown();
  await wpB?.shutdown();
  for (const c of closers.reverse()) await c();
  fs.rmSync(dir, { recursive: true, force: true });
});

/** One HTTP/1.1 request to `front` through waypoint A (its own CONNECT). */
async function get(urlPath: string): Promise<{ status: number; headers: Record<string, string>; body: Record<string, unknown> }> {
  const { status, stream } = await connect(session, `${VIP.front}:80`);
  expect(status).toBe(200);
  const chunks: Buffer[] = [];
  stream.on('data', (c: Buffer) => chunks.push(c));
  stream.write(`GET ${urlPath} HTTP/1.1\r\nHost: front.demo.svc.cluster.local\r\nConnection: close\r\n\r\n`);
  await new Promise<void>((resolve, reject) => {
    stream.once('end', () => resolve());
    stream.once('close', () => resolve());
    stream.once('error', reject);
  });
  const r = parseHttpResponse(Buffer.concat(chunks));
  return { status: r.status, headers: r.headers, body: r.body.length ? (JSON.parse(r.body.toString()) as Record<string, unknown>) : {} };
}

/** Records of `which` waypoint for `urlPath`, once its stream completed. */
async function seen(which: 'a' | 'b', urlPath: string): Promise<Seen[]> {
  for (let i = 0; i < 200 && !seenBy[which].some((s) => s.path === urlPath); i++) await new Promise((r) => setTimeout(r, 10));
  return seenBy[which].filter((s) => s.path === urlPath);
}

describe('a route to a service with its own waypoint', () => {
  test('goes to that waypoint (CONNECT authority the VIP), which serves it: the pod sees the second waypoint', async () => {
    const r = await get('/chained/1');
    expect(r.status).toBe(200);
    expect(r.body).toMatchObject({ pod: 'back', url: '/chained/1', peer: [B_ID], authority: `${POD.back}:8080` });
    // Waypoint B got A's CONNECT for the backend's VIP, with A's identity, and served it.
    const [b] = await seen('b', '/chained/1');
    expect(b).toMatchObject({ authority: `${VIP.back}:80`, peer: A_ID, code: 200, cluster: `inbound-vip|80|http|back.demo.svc.cluster.local`, upstreamHost: `${POD.back}:8080`, endpointWorkload: 'back-1' });
    // Waypoint A: the backend's outbound cluster, B's instance as the upstream host.
    const [a] = await seen('a', '/chained/1');
    expect(a).toMatchObject({ authority: `${VIP.front}:80`, code: 200, cluster: 'outbound|80||back.demo.svc.cluster.local', upstreamHost: `${IP(2)}:15008`, endpointWorkload: 'waypoint-b-7c9d8f5b6d-x2x9q', routeService: 'back.demo.svc.cluster.local' });
  });

  test('one instance of the other waypoint fronting two services keeps their authorities apart', async () => {
    for (const [p, pod] of [['/chained2/x', 'back2'], ['/chained/y', 'back'], ['/chained2/z', 'back2']] as const) {
      const r = await get(p);
      expect([r.status, r.body.pod, r.body.peer]).toEqual([200, pod, [B_ID]]);
    }
    expect((await seen('b', '/chained2/x'))[0].authority).toBe(`${VIP.back2}:80`);
    expect((await seen('b', '/chained/y'))[0].authority).toBe(`${VIP.back}:80`);
  });

  test('use-waypoint: none and a service this waypoint serves are reached directly', async () => {
    const before = seenBy.b.length;
    const none = await get('/none');
    expect(none.body).toMatchObject({ pod: 'direct', peer: [A_ID], authority: `${POD.direct}:8080` });
    const own = await get('/own');
    expect(own.body).toMatchObject({ pod: 'own', peer: [A_ID], authority: `${POD.own}:8080` });
    expect((await seen('a', '/none'))[0]).toMatchObject({ cluster: 'outbound|80||direct.demo.svc.cluster.local', upstreamHost: `${POD.direct}:8080` });
    expect((await seen('a', '/own'))[0]).toMatchObject({ cluster: 'inbound-vip|80|http|own.demo.svc.cluster.local', upstreamHost: `${POD.own}:8080` });
    expect(seenBy.b.length).toBe(before);
  });

  test('a WebSocket upgrade (a dedicated upstream tunnel) goes through the other waypoint too', async () => {
    const { status, stream } = await connect(session, `${VIP.front}:80`);
    expect(status).toBe(200);
    let acc = '';
    stream.on('data', (c: Buffer) => (acc += c.toString()));
    stream.write('GET /chained/ws HTTP/1.1\r\nHost: front\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n');
    for (let i = 0; i < 300 && !acc.includes('\r\n\r\n'); i++) await new Promise((r) => setTimeout(r, 10));
    expect(acc.split('\r\n')[0]).toBe('HTTP/1.1 101 Switching Protocols');
    expect(acc.toLowerCase()).toContain('x-served-by: back');
    stream.write('hello through two waypoints');
    for (let i = 0; i < 300 && !acc.includes('HELLO THROUGH TWO WAYPOINTS'); i++) await new Promise((r) => setTimeout(r, 10));
    expect(acc).toContain('HELLO THROUGH TWO WAYPOINTS');
    stream.end();
    stream.close();
    const viaB = podConnects.filter((c) => c.pod === 'back' && c.peer[0] === B_ID);
    const direct = podConnects.filter((c) => c.pod === 'back' && c.peer[0] !== B_ID);
    expect(viaB.length).toBeGreaterThan(0);
    expect(direct).toEqual([]);
  });

  test('stats: destination_service is the backend, destination_workload the other waypoint (its verified identity)', async () => {
    const samples = samplesOf(await scrape(wpA.addresses.admin), 'istio_requests_total').filter((s) => s.labels.destination_service === 'back.demo.svc.cluster.local');
    expect(samples.length).toBeGreaterThan(0);
    for (const s of samples) {
      expect(s.labels).toMatchObject({
        destination_service_name: 'back',
        destination_service_namespace: 'demo',
        destination_workload: 'waypoint-b',
        destination_workload_namespace: 'infra',
        destination_principal: B_ID,
      });
    }
  });
});
