/**
 * HTTPRoute findings of a user trial, end to end over HBONE (client → tunnel → waypoint →
 * plain-TCP backends of this file): a catastrophic-backtracking regex cannot freeze the proxy
 * (RE2), a `Host` header edit reaches HTTP/2 clients' upstreams, connection-specific and framing
 * header edits are ignored instead of breaking the exchange, `replacePrefixMatch: ""`, mirror
 * bounds per target cluster, and `retry.attempts: 0` never flags `URX`.
 * Addresses: 127.0.41.x only.
 */
import fs from 'node:fs';
import http from 'node:http';
import http2 from 'node:http2';
import { afterAll, beforeAll, describe, expect, test, vi } from 'vitest';
import { log } from '../../../src/util/log.ts';
import { DATAPLANE_MODE, meshText, pod, service, servicePort, type Doc } from '../../helpers/mesh.ts';
import { recorder, startBackend, type Received } from '../../helpers/recorder.ts';
import { sleep } from '../../helpers/servers.ts';
import { startTestTopology, type TestTopology } from '../../helpers/topology.ts';

const NET = 41;
const IP = (n: number) => `127.0.${NET}.${n}`;
const rec = recorder();
let topo: TestTopology;
let baseMesh = '';
const closers: (() => Promise<unknown>)[] = [];
/** Requests each backend saw. */
const seen = new Map<string, Received[]>();

/** A plain HTTP backend on `ip:8080`: answers its name, path and headers as JSON (`/status/N` with status N); `silent` never answers. */
async function backend(pod: string, ip: string, silent = false): Promise<void> {
  const b = await startBackend(
    ip,
    8080,
    (r) =>
      silent
        ? undefined
        : { status: r.url.startsWith('/status/') ? Number(r.url.slice(8)) : 200, body: { pod, url: r.url, host: r.headers.host, headers: r.headers, pad: 'x'.repeat(2000) } },
    { afterBody: true },
  );
  seen.set(pod, b.received);
  closers.push(b.close);
}

interface Res {
  status: number;
  headers: http.IncomingHttpHeaders;
  body: string;
  json: { pod?: string; url?: string; host?: string; headers?: Record<string, string> };
}

function parse(b: string): Res['json'] {
  try {
    return JSON.parse(b);
  } catch {
    return {};
  }
}

function send(path: string, opts: { headers?: Record<string, string>; body?: string } = {}): Promise<Res> {
  return new Promise((resolve, reject) => {
    const headers: Record<string, string> = { host: 'echo.demo.svc.cluster.local', ...opts.headers };
    if (opts.body) headers['content-length'] = String(Buffer.byteLength(opts.body));
    const req = http.request({ host: topo.entry.host, port: topo.entry.port, method: opts.body ? 'POST' : 'GET', path, headers, agent: false }, (res) => {
      let b = '';
      res.on('data', (c) => (b += c));
      res.on('end', () => resolve({ status: res.statusCode!, headers: res.headers, body: b, json: parse(b) }));
      res.on('error', reject);
    });
    req.setTimeout(4000, () => req.destroy(new Error(`hang: ${path}`)));
    req.on('error', reject);
    req.end(opts.body);
  });
}

/** One HTTP/2 (prior knowledge) request through the entry. */
async function sendH2(path: string): Promise<Res> {
  const client = http2.connect(`http://${topo.entry.host}:${topo.entry.port}`);
  try {
    return await new Promise<Res>((resolve, reject) => {
      const req = client.request({ ':path': path, ':authority': 'echo.demo.svc.cluster.local' });
      let status = 0;
      let b = '';
      req.on('response', (h) => (status = Number(h[':status'])));
      req.on('data', (c) => (b += c));
      req.on('end', () => resolve({ status, headers: {}, body: b, json: parse(b) }));
      req.on('error', reject);
      req.setTimeout(4000, () => req.close(http2.constants.NGHTTP2_CANCEL));
    });
  } finally {
    client.close();
  }
}

async function setRoutes(yaml: string): Promise<void> {
  fs.writeFileSync(topo.meshFile, yaml ? `${baseMesh}---\n${yaml}` : baseMesh);
  await topo.waypoint!.mesh.reload();
}

function route(name: string, rules: string): string {
  return `apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: { name: ${name}, namespace: demo }
spec:
  parentRefs: [{ group: "", kind: Service, name: echo, namespace: demo, port: 80 }]
  rules:
${rules}
`;
}

beforeAll(async () => {
  topo = await startTestTopology(NET, { extraFilters: [rec.factory], bootstrap: { filters: rec.filters } });
  const pods: [string, number, boolean][] = [
    ['plain', 21, false],
    ['mslow', 22, true],
    ['mok', 23, false],
  ];
  const docs: Doc[] = [];
  for (const [name, n, silent] of pods) {
    await backend(name, IP(n), silent);
    docs.push(
      pod({ name, namespace: 'demo', labels: { app: name, [DATAPLANE_MODE]: 'none' }, ip: IP(n), ports: { http: 8080 } }),
      service({ name, namespace: 'demo', vip: IP(100 + n), ports: [servicePort('http', 80, 8080)] }),
    );
  }
  baseMesh = `${fs.readFileSync(topo.meshFile, 'utf8')}---\n${meshText(...docs)}`;
  await setRoutes('');
}, 30_000);

afterAll(async () => {
  for (const c of closers.reverse()) await c().catch(() => {});
  await topo?.close();
});

describe('routing: trial findings', () => {
  // A backtracking engine needs ~2^30 steps for this value and stalls the whole event loop.
  test('a catastrophic-backtracking header regex answers promptly (RE2)', { timeout: 6000 }, async () => {
    await setRoutes(
      route(
        'redos',
        `  - matches: [{ headers: [{ type: RegularExpression, name: x-user, value: "(a+)+b" }] }]
    backendRefs: [{ name: plain, port: 80 }]
  - matches: [{ path: { type: RegularExpression, value: "/(a+)+b" } }]
    backendRefs: [{ name: plain, port: 80 }]`,
      ),
    );
    const evil = `${'a'.repeat(30)}c`;
    const [byHeader, byPath] = await Promise.all([send('/x', { headers: { 'x-user': evil } }), send(`/${evil}`)]);
    expect(byHeader.status).toBe(404);
    expect(byPath.status).toBe(404);
    expect((await send('/x', { headers: { 'x-user': 'aab' } })).json.pod).toBe('plain');
  });

  test('a RequestHeaderModifier `set Host` reaches the upstream for HTTP/1.1 and HTTP/2 clients', async () => {
    await setRoutes(
      route(
        'host',
        `  - filters: [{ type: RequestHeaderModifier, requestHeaderModifier: { set: [{ name: Host, value: rewritten.example }, { name: x-set, value: s }] } }]
    backendRefs: [{ name: plain, port: 80 }]`,
      ),
    );
    const h1 = await send('/h1');
    expect(h1.json.host).toBe('rewritten.example');
    expect(h1.json.headers!['x-set']).toBe('s');
    const h2 = await sendH2('/h2');
    expect(h2.status).toBe(200);
    expect(h2.json.host).toBe('rewritten.example');
    expect(h2.json.headers!['x-set']).toBe('s');
  });

  test('connection-specific and framing header edits are ignored: the exchange stays intact', async () => {
    await setRoutes(
      route(
        'hop',
        `  - filters:
    - type: RequestHeaderModifier
      requestHeaderModifier: { set: [{ name: connection, value: close }, { name: te, value: gzip }, { name: x-ok, value: "1" }], add: [{ name: content-length, value: "2" }, { name: upgrade, value: h2c }], remove: [host] }
    - type: ResponseHeaderModifier
      responseHeaderModifier: { set: [{ name: transfer-encoding, value: chunked }, { name: content-length, value: "5" }, { name: keep-alive, value: "timeout=1" }] }
    backendRefs: [{ name: plain, port: 80 }]`,
      ),
    );
    for (const body of [undefined, 'payload-of-some-length']) {
      const r = await send('/hop', { body });
      expect(r.status).toBe(200);
      expect(r.json.pod).toBe('plain');
      expect(r.json.headers!['x-ok']).toBe('1');
      expect(r.json.headers!.upgrade).toBeUndefined();
      expect(r.json.host).toBe('echo.demo.svc.cluster.local');
      expect(r.headers['keep-alive']).toBeUndefined();
    }
  });

  test('replacePrefixMatch "" removes the matched prefix', async () => {
    await setRoutes(
      route(
        'strip',
        `  - matches: [{ path: { value: /foo } }]
    filters: [{ type: URLRewrite, urlRewrite: { path: { type: ReplacePrefixMatch, replacePrefixMatch: "" } } }]
    backendRefs: [{ name: plain, port: 80 }]`,
      ),
    );
    expect((await send('/foo/bar?x=1')).json.url).toBe('/bar?x=1');
    expect((await send('/foo')).json.url).toBe('/');
  });

  test('mirror copies are bounded per target: a stuck target does not stop mirroring to another; the drop is a warning', async () => {
    await setRoutes(
      route(
        'mir',
        `  - matches: [{ path: { value: /to-slow } }]
    filters: [{ type: RequestMirror, requestMirror: { backendRef: { name: mslow, port: 80 } } }]
    backendRefs: [{ name: plain, port: 80 }]
  - matches: [{ path: { value: /to-ok } }]
    filters: [{ type: RequestMirror, requestMirror: { backendRef: { name: mok, port: 80 } } }]
    backendRefs: [{ name: plain, port: 80 }]`,
      ),
    );
    const warned: string[] = [];
    const spy = vi.spyOn(log, 'warn').mockImplementation(((_o: unknown, msg?: string) => void warned.push(String(msg))) as never);
    try {
      // 70 copies to the target that never answers: 64 stay in flight, the rest are dropped.
      for (let i = 0; i < 70; i += 10) {
        const batch = await Promise.all(Array.from({ length: 10 }, (_, j) => send(`/to-slow/${i + j}`)));
        for (const r of batch) expect(r.status).toBe(200);
      }
      for (let i = 0; i < 100 && (seen.get('mslow')?.length ?? 0) < 64; i++) await sleep(20);
      const before = seen.get('mok')?.length ?? 0;
      expect((await send('/to-ok/1')).status).toBe(200);
      for (let i = 0; i < 100 && (seen.get('mok')?.length ?? 0) === before; i++) await sleep(20);
      expect(seen.get('mok')?.[before]?.url).toBe('/to-ok/1');
    } finally {
      spy.mockRestore();
    }
    expect(seen.get('mslow')).toHaveLength(64);
    expect(warned.filter((m) => /mirrored requests to \S+\|mslow\.demo\.svc\.cluster\.local dropped/.test(m))).toHaveLength(1);
  });

  test('retry attempts 0: no retry and no URX on a 503', async () => {
    await setRoutes(
      route(
        'noretry',
        `  - retry: { attempts: 0 }
    backendRefs: [{ name: plain, port: 80 }]`,
      ),
    );
    const r = await send('/status/503');
    expect(r.status).toBe(503);
    const rec503 = await rec.find('/status/503');
    expect(rec503.attempts).toBe(1);
    expect(rec503.flags).not.toContain('URX');
  });
});
