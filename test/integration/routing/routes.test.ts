/**
 * HTTPRoute / GRPCRoute at the waypoint, end to end over HBONE: client → tunnel → waypoint →
 * backends. The `echo` service (VIP .100:80, HBONE pods echo-1/echo-2 behind inbound roles) gets
 * routes; other backends are plain-TCP pods (`istio.io/dataplane-mode: none`) of this file's own
 * servers. Each test sets the routes it needs by rewriting the mesh file (live reload).
 * Addresses: 127.0.40.x only.
 */
import fs from 'node:fs';
import http from 'node:http';
import * as grpc from '@grpc/grpc-js';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { routesFor } from '../../../src/routing/index.ts';
import { samplesOf, scrape } from '../../helpers/prometheus.ts';
import { spiffe } from '../../helpers/identity.ts';
import { DATAPLANE_MODE, meshText, namespace, pod as podDoc, service, servicePort } from '../../helpers/mesh.ts';
import { RECORDER, recorder, startBackend, type Received } from '../../helpers/recorder.ts';
import { sleep } from '../../helpers/servers.ts';
import { addEntry, startTestTopology, type TestTopology } from '../../helpers/topology.ts';

const NET = 40;
const IP = (n: number) => `127.0.${NET}.${n}`;
const rec = recorder();
let topo: TestTopology;
let baseMesh = '';
const closers: (() => Promise<unknown>)[] = [];
/** Requests each plain backend saw: pod → [{method, url, headers, body}]. */
const seen = new Map<string, Received[]>();
const flaky = new Map<string, number>();
let otherEntry: { host: string; port: number };
let grpcEntry: { host: string; port: number };

/** A plain HTTP backend on `ip:8080` named `pod`: records requests; /slow?ms=N waits; /never never answers; /flaky?k= answers 500 on a key's first hit. */
async function backend(pod: string, ip: string, opts: { silent?: boolean } = {}): Promise<void> {
  const b = await startBackend(
    ip,
    8080,
    (r) => {
      if (opts.silent) return undefined; // a mirror that never answers
      const url = new URL(r.url, 'http://x');
      if (url.pathname === '/never') return undefined;
      let status = 200;
      if (url.pathname === '/flaky') {
        const k = url.searchParams.get('k') ?? '';
        const n = (flaky.get(k) ?? 0) + 1;
        flaky.set(k, n);
        if (n === 1) status = 500;
      }
      return {
        status,
        headers: { 'x-served-by': pod, 'x-drop-me': 'x' },
        body: { pod, url: r.url, host: r.headers.host, headers: r.headers },
        delayMs: url.pathname === '/slow' ? Number(url.searchParams.get('ms') ?? 500) : 0,
      };
    },
    { afterBody: true },
  );
  seen.set(pod, b.received);
  closers.push(b.close);
}

const id = (b: Buffer) => b;
const grpcDef = {
  a: { path: '/test.Echo/A', requestStream: false, responseStream: false, requestSerialize: id, requestDeserialize: id, responseSerialize: id, responseDeserialize: id },
  b: { path: '/test.Echo/B', requestStream: false, responseStream: false, requestSerialize: id, requestDeserialize: id, responseSerialize: id, responseDeserialize: id },
};
const EchoClient = grpc.makeGenericClientConstructor(grpcDef as unknown as grpc.ServiceDefinition, 'Echo');

async function grpcBackend(pod: string, ip: string): Promise<void> {
  const server = new grpc.Server();
  const answer = (_call: unknown, cb: grpc.sendUnaryData<Buffer>) => cb(null, Buffer.from(pod));
  server.addService(grpcDef as unknown as grpc.ServiceDefinition, { a: answer, b: answer });
  await new Promise<void>((resolve, reject) => server.bindAsync(`${ip}:9090`, grpc.ServerCredentials.createInsecure(), (err) => (err ? reject(err) : resolve())));
  closers.push(async () => server.forceShutdown());
}

function grpcCall(method: 'a' | 'b'): Promise<string> {
  const client = new EchoClient(`${grpcEntry.host}:${grpcEntry.port}`, grpc.credentials.createInsecure()) as unknown as Record<string, (req: Buffer, opts: object, cb: (err: Error | null, res?: Buffer) => void) => void> & grpc.Client;
  return new Promise((resolve, reject) => {
    client[method](Buffer.from('hi'), { deadline: Date.now() + 5000 }, (err, res) => {
      client.close();
      if (err) reject(err);
      else resolve(res!.toString());
    });
  });
}

interface Res {
  status: number;
  headers: http.IncomingHttpHeaders;
  body: string;
  json: { pod?: string; url?: string; host?: string; headers?: Record<string, string> };
}

function send(path: string, opts: { method?: string; headers?: Record<string, string>; body?: string; entry?: { host: string; port: number } } = {}): Promise<Res> {
  const entry = opts.entry ?? topo.entry;
  return new Promise((resolve, reject) => {
    const headers: Record<string, string> = { host: 'echo.demo.svc.cluster.local', ...opts.headers };
    if (opts.body) headers['content-length'] = String(Buffer.byteLength(opts.body));
    const req = http.request({ host: entry.host, port: entry.port, method: opts.method ?? 'GET', path, headers, agent: false }, (res) => {
      let b = '';
      res.on('data', (c) => (b += c));
      res.on('end', () => {
        let json = {};
        try {
          json = JSON.parse(b);
        } catch {
          // not JSON
        }
        resolve({ status: res.statusCode!, headers: res.headers, body: b, json });
      });
    });
    req.setTimeout(8000, () => req.destroy(new Error(`hang: ${path}`)));
    req.on('error', reject);
    req.end(opts.body);
  });
}

/** Replace the routes of the mesh file and make the waypoint apply them now. */
async function setRoutes(yaml: string): Promise<void> {
  fs.writeFileSync(topo.meshFile, yaml ? `${baseMesh}---\n${yaml}` : baseMesh);
  await topo.waypoint!.mesh.reload();
}

function route(name: string, rules: string, opts: { kind?: string; namespace?: string; parent?: string } = {}): string {
  return `apiVersion: gateway.networking.k8s.io/v1
kind: ${opts.kind ?? 'HTTPRoute'}
metadata: { name: ${name}, namespace: ${opts.namespace ?? 'demo'} }
spec:
  parentRefs: [{ group: "", kind: Service, name: ${opts.parent ?? 'echo'}, namespace: demo, port: ${opts.parent === 'grpc' ? 9090 : 80} }]
  rules:
${rules}
`;
}

/** The served pod name from an answer (`x-served-by`). */
const pod = (r: Res) => String(r.headers['x-served-by'] ?? '');

beforeAll(async () => {
  const filters = [{ name: RECORDER }, { name: 'istio.peer_metadata' }, { name: 'istio.stats' }, { name: 'envoy.filters.http.router' }];
  topo = await startTestTopology(NET, { extraFilters: [rec.factory], bootstrap: { filters } });
  await backend('v2', IP(21));
  await backend('slow', IP(22));
  await backend('mirror', IP(23), { silent: true });
  await backend('ext', IP(26));
  await grpcBackend('grpc-v1', IP(24));
  await grpcBackend('grpc-v2', IP(25));
  const plainPod = (name: string, ns: string, ip: string, app: string) => podDoc({ name, namespace: ns, labels: { app, [DATAPLANE_MODE]: 'none' }, ip, ports: { http: 8080 } });
  const svc = (name: string, ns: string, vip: string, app: string, port = servicePort('http', 80, 8080)) => service({ name, namespace: ns, vip, selector: { app }, ports: [port] });
  const extra = [
    plainPod('v2', 'demo', IP(21), 'echo-v2'),
    svc('echo-v2', 'demo', IP(101), 'echo-v2'),
    plainPod('slow', 'demo', IP(22), 'slow'),
    svc('slow', 'demo', IP(102), 'slow'),
    plainPod('mirror', 'demo', IP(23), 'mirror'),
    svc('mirror', 'demo', IP(103), 'mirror'),
    plainPod('grpc-v1', 'demo', IP(24), 'grpc-v1'),
    svc('grpc', 'demo', IP(105), 'grpc-v1', servicePort('grpc', 9090)),
    plainPod('grpc-v2', 'demo', IP(25), 'grpc-v2'),
    svc('grpc-v2', 'demo', IP(106), 'grpc-v2', servicePort('grpc', 9090)),
    namespace('ext'),
    plainPod('ext', 'ext', IP(26), 'ext'),
    svc('ext', 'ext', IP(107), 'ext'),
    namespace('other'),
    podDoc({ name: 'client', namespace: 'other', labels: { app: 'other-client' }, sa: 'client', ip: IP(51) }),
  ];
  baseMesh = `${fs.readFileSync(topo.meshFile, 'utf8')}---\n${meshText(...extra)}`;
  await setRoutes('');
  // A client in namespace `other` (its own identity and pod IP), for consumer routes.
  const other = await addEntry(topo, `${IP(100)}:80`, { principal: spiffe('other', 'client'), clientIp: IP(51) });
  closers.push(other.close);
  otherEntry = other;
  const g = await addEntry(topo, `${IP(105)}:9090`);
  closers.push(g.close);
  grpcEntry = g;
}, 30_000);

afterAll(async () => {
  for (const c of closers.reverse()) await c().catch(() => {});
  await topo?.close();
});

describe('routing', () => {
  test('no routes: the service itself (default route)', async () => {
    await setRoutes('');
    const r = await send('/x');
    expect(r.status).toBe(200);
    expect(pod(r)).toMatch(/^echo-/);
  });

  test('canary split 80/20 over 400 requests (6 sigma), and destination_service names the backend in the stats', async () => {
    await setRoutes(route('split', `  - backendRefs: [{ name: echo, port: 80, weight: 80 }, { name: echo-v2, port: 80, weight: 20 }]`));
    const before = await v2Requests();
    let v2 = 0;
    for (let i = 0; i < 400; i += 20) {
      const batch = await Promise.all(Array.from({ length: 20 }, (_, j) => send(`/split/${i + j}`)));
      for (const r of batch) {
        expect(r.status).toBe(200);
        if (pod(r) === 'v2') v2++;
      }
    }
    // n=400, p=0.2: mean 80, sigma 8.
    expect(v2).toBeGreaterThanOrEqual(32);
    expect(v2).toBeLessThanOrEqual(128);
    await sleep(50);
    expect((await v2Requests()) - before).toBe(v2);
  });

  test('matches: header, exact path, method, query; unmatched → 404 NR', async () => {
    await setRoutes(
      route(
        'm',
        `  - matches: [{ headers: [{ name: x-canary, value: "on" }] }]
    backendRefs: [{ name: echo-v2, port: 80 }]
  - matches: [{ path: { type: Exact, value: /exact } }]
    backendRefs: [{ name: echo-v2, port: 80 }]
  - matches: [{ path: { value: /m }, method: POST }]
    backendRefs: [{ name: echo-v2, port: 80 }]
  - matches: [{ path: { value: /q }, queryParams: [{ name: v, value: "2" }] }]
    backendRefs: [{ name: echo-v2, port: 80 }]
  - matches: [{ path: { value: /app } }]
    backendRefs: [{ name: echo, port: 80 }]`,
      ),
    );
    expect(pod(await send('/other', { headers: { 'x-canary': 'on' } }))).toBe('v2');
    // The longer path prefix outranks the header match (Gateway API precedence).
    expect(pod(await send('/app/a', { headers: { 'x-canary': 'on' } }))).toMatch(/^echo-/);
    expect(pod(await send('/exact'))).toBe('v2');
    expect(pod(await send('/m', { method: 'POST', body: 'x' }))).toBe('v2');
    expect(pod(await send('/q?v=2'))).toBe('v2');
    const nr = await send('/nothing-here');
    expect(nr.status).toBe(404);
    expect((await rec.find('/nothing-here')).flags).toBe('NR');
    expect((await rec.find('/nothing-here')).details).toBe('route_not_found');
  });

  test('header modifiers: the backend sees the request edits, the client the response edits', async () => {
    await setRoutes(
      route(
        'h',
        `  - filters:
    - type: RequestHeaderModifier
      requestHeaderModifier: { set: [{ name: x-set, value: s }], add: [{ name: x-added, value: a }], remove: [x-remove-me] }
    - type: ResponseHeaderModifier
      responseHeaderModifier: { add: [{ name: x-resp, value: r }], remove: [x-drop-me] }
    backendRefs: [{ name: echo-v2, port: 80 }]`,
      ),
    );
    const r = await send('/hdr', { headers: { 'x-set': 'old', 'x-remove-me': '1' } });
    expect(r.status).toBe(200);
    expect(r.json.headers!['x-set']).toBe('s');
    expect(r.json.headers!['x-added']).toBe('a');
    expect(r.json.headers!['x-remove-me']).toBeUndefined();
    expect(r.headers['x-resp']).toBe('r');
    expect(r.headers['x-drop-me']).toBeUndefined();
  });

  test('RequestRedirect: status and Location', async () => {
    await setRoutes(
      route(
        'r',
        `  - matches: [{ path: { value: /old } }]
    filters: [{ type: RequestRedirect, requestRedirect: { scheme: https, hostname: new.example.com, path: { type: ReplacePrefixMatch, replacePrefixMatch: /new }, statusCode: 301 } }]
  - matches: [{ path: { value: /temp } }]
    filters: [{ type: RequestRedirect, requestRedirect: { port: 8080 } }]`,
      ),
    );
    const a = await send('/old/page?x=1');
    expect(a.status).toBe(301);
    expect(a.headers.location).toBe('https://new.example.com/new/page?x=1');
    const b = await send('/temp');
    expect(b.status).toBe(302);
    expect(b.headers.location).toBe('http://echo.demo.svc.cluster.local:8080/temp');
  });

  test('URLRewrite: the backend sees the rewritten path and host', async () => {
    await setRoutes(
      route(
        'w',
        `  - matches: [{ path: { value: /api } }]
    filters: [{ type: URLRewrite, urlRewrite: { hostname: rewritten.example, path: { type: ReplacePrefixMatch, replacePrefixMatch: /v2 } } }]
    backendRefs: [{ name: echo-v2, port: 80 }]`,
      ),
    );
    const r = await send('/api/items?id=7');
    expect(r.status).toBe(200);
    expect(r.json.url).toBe('/v2/items?id=7');
    expect(r.json.host).toBe('rewritten.example');
  });

  test('RequestMirror: the primary answers although the mirror never does; the mirror gets the copy with a -shadow host', async () => {
    await setRoutes(
      route(
        'mir',
        `  - filters: [{ type: RequestMirror, requestMirror: { backendRef: { name: mirror, port: 80 } } }]
    backendRefs: [{ name: echo-v2, port: 80 }]`,
      ),
    );
    const before = seen.get('mirror')?.length ?? 0;
    const r = await send('/mirrored', { method: 'POST', body: 'payload' });
    expect(r.status).toBe(200);
    expect(pod(r)).toBe('v2');
    for (let i = 0; i < 100 && (seen.get('mirror')?.length ?? 0) === before; i++) await sleep(20);
    const copy = seen.get('mirror')![before];
    expect(copy.url).toBe('/mirrored');
    expect(copy.body.toString()).toBe('payload');
    expect(copy.headers.host).toBe('echo.demo.svc.cluster.local-shadow');
  });

  test('backends all invalid: 500; weight 0 only: 500', async () => {
    await setRoutes(
      route(
        'bad',
        `  - matches: [{ path: { value: /missing } }]
    backendRefs: [{ name: no-such-service, port: 80 }]
  - matches: [{ path: { value: /zero } }]
    backendRefs: [{ name: echo-v2, port: 80, weight: 0 }]
  - matches: [{ path: { value: /xns } }]
    backendRefs: [{ name: ext, namespace: ext, port: 80 }]`,
      ),
    );
    for (const p of ['/missing', '/zero', '/xns']) {
      const r = await send(p);
      expect(r.status, p).toBe(500);
      expect((await rec.find(p)).flags).toBe('NC');
    }
  });

  test('a backend outside the waypoint (cross-namespace with a ReferenceGrant) is reached directly; its cluster is outbound', async () => {
    await setRoutes(
      [
        route('x', `  - backendRefs: [{ name: ext, namespace: ext, port: 80 }]`),
        `apiVersion: gateway.networking.k8s.io/v1beta1
kind: ReferenceGrant
metadata: { name: from-demo, namespace: ext }
spec:
  from: [{ group: gateway.networking.k8s.io, kind: HTTPRoute, namespace: demo }]
  to: [{ group: "", kind: Service, name: ext }]
`,
      ].join('---\n'),
    );
    const r = await send('/outside');
    expect(r.status).toBe(200);
    expect(pod(r)).toBe('ext');
    await sleep(50);
    const text = await scrape(topo.waypoint!.addresses.admin);
    const s = samplesOf(text, 'istio_requests_total').find((x) => x.labels.destination_service === 'ext.ext.svc.cluster.local');
    expect(s?.labels.destination_service_namespace).toBe('ext');
  });

  test('per-route timeout: 504 UT; per-try timeout: 504 UT', async () => {
    await setRoutes(
      route(
        't',
        `  - matches: [{ path: { value: /never } }]
    timeouts: { request: 300ms }
    backendRefs: [{ name: slow, port: 80 }]
  - matches: [{ path: { value: /slow } }]
    timeouts: { request: 5s, backendRequest: 200ms }
    backendRefs: [{ name: slow, port: 80 }]`,
      ),
    );
    const a = await send('/never');
    expect(a.status).toBe(504);
    expect((await rec.find('/never')).flags).toBe('UT');
    const b = await send('/slow?ms=3000');
    expect(b.status).toBe(504);
    const rb = await rec.find('/slow?ms=3000');
    expect(rb.flags).toBe('UT');
    expect(rb.details).toBe('upstream_per_try_timeout');
  });

  test('per-route retry: codes and attempts', async () => {
    await setRoutes(
      route(
        'rt',
        `  - matches: [{ path: { value: /flaky }, headers: [{ name: x-retry, value: "yes" }] }]
    retry: { codes: [500], attempts: 2, backoff: 10ms }
    backendRefs: [{ name: slow, port: 80 }]
  - matches: [{ path: { value: /flaky } }]
    backendRefs: [{ name: slow, port: 80 }]`,
      ),
    );
    const a = await send('/flaky?k=with-retry', { headers: { 'x-retry': 'yes' } });
    expect(a.status).toBe(200);
    expect((await rec.find('/flaky?k=with-retry')).attempts).toBe(2);
    const b = await send('/flaky?k=no-retry');
    expect(b.status).toBe(500);
    expect((await rec.find('/flaky?k=no-retry')).attempts).toBe(1);
  });

  test('GRPCRoute: service/method match with a grpc-js client', async () => {
    await setRoutes(
      route(
        'g',
        `  - matches: [{ method: { service: test.Echo, method: B } }]
    backendRefs: [{ name: grpc-v2, port: 9090 }]
  - backendRefs: [{ name: grpc, port: 9090 }]`,
        { kind: 'GRPCRoute', parent: 'grpc' },
      ),
    );
    expect(await grpcCall('a')).toBe('grpc-v1');
    expect(await grpcCall('b')).toBe('grpc-v2');
  });

  test('consumer route (namespace other) for its clients only; producer route for the rest', async () => {
    await setRoutes(
      [
        route('producer', `  - backendRefs: [{ name: echo, port: 80 }]`),
        route('consumer', `  - backendRefs: [{ name: echo-v2, namespace: demo, port: 80 }]`, { namespace: 'other' }),
        `apiVersion: gateway.networking.k8s.io/v1beta1
kind: ReferenceGrant
metadata: { name: from-other, namespace: demo }
spec:
  from: [{ group: gateway.networking.k8s.io, kind: HTTPRoute, namespace: other }]
  to: [{ group: "", kind: Service }]
`,
      ].join('---\n'),
    );
    expect(pod(await send('/who'))).toMatch(/^echo-/);
    expect(pod(await send('/who', { entry: otherEntry }))).toBe('v2');
  });

  test('route change applied live: the in-flight request keeps its route, the next one takes the new one', async () => {
    await setRoutes(route('live', `  - backendRefs: [{ name: slow, port: 80 }]`));
    const inFlight = send('/slow?ms=800');
    await sleep(200);
    await setRoutes(route('live', `  - backendRefs: [{ name: echo-v2, port: 80 }]`));
    const next = await send('/after');
    expect(pod(next)).toBe('v2');
    const old = await inFlight;
    expect(old.status).toBe(200);
    expect(pod(old)).toBe('slow');
  });

  test('an invalid route is ignored with its reason; the service keeps the default route', async () => {
    await setRoutes(route('broken', `  - matches: [{ path: { type: Exact, value: relative } }]\n    backendRefs: [{ name: echo-v2, port: 80 }]`));
    const compiled = routesFor(topo.waypoint!.mesh.current);
    expect(compiled.rejected.map((r) => r.route)).toEqual(['HTTPRoute/demo/broken']);
    expect(compiled.rejected[0].reason).toMatch(/spec\.rules\[0\]\.matches\[0\]\.path\.value/);
    expect(pod(await send('/default'))).toMatch(/^echo-/);
  });
});

/** istio_requests_total summed over series whose destination is echo-v2. */
async function v2Requests(): Promise<number> {
  const text = await scrape(topo.waypoint!.addresses.admin);
  return samplesOf(text, 'istio_requests_total')
    .filter((s) => s.name === 'istio_requests_total' && s.labels.destination_service_name === 'echo-v2')
    .reduce((a, s) => a + s.value, 0);
}
