/**
 * Istio's default waypoint retry policy (pitfall F4): 2 retries on connect-failure,
 * refused-stream, unavailable, cancelled and 503, on another host when there is one:
 *  - one endpoint refusing connections: every request still succeeds, at most one attempt each on the bad host;
 *  - a 500 is not retried; a 503 is, on the other host; a gRPC trailers-only UNAVAILABLE is;
 *  - a POST with a small body is retried; a large streamed body is not, once sent;
 *  - retries exhausted: the upstream's 503 with `URX`, or 503 `UF,URX` when nothing accepts connections.
 * Addresses: 127.0.88.x.
 */
import http from 'node:http';
import * as grpc from '@grpc/grpc-js';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { servicePort } from '../../helpers/mesh.ts';
import { recorder, startBackend } from '../../helpers/recorder.ts';
import { addEntry, addToMesh, echoService, startTestTopology, type TestTopology } from '../../helpers/topology.ts';

const NET = 88;
const PODS = [`127.0.${NET}.11`, `127.0.${NET}.12`];
const rec = recorder();
let topo: TestTopology;
const closers: (() => Promise<unknown>)[] = [];
/** Hosts that served each key, in order. */
const hits = new Map<string, string[]>();
let grpcEntry: { host: string; port: number };
let deadEntry: { host: string; port: number };
let grpcHalfEntry: { host: string; port: number };

function hit(key: string, host: string): number {
  const list = hits.get(key) ?? [];
  list.push(host);
  hits.set(key, list);
  return list.length;
}

/** The HTTP backend of pod `ip`: /ok, /status/500, /once503 (503 on a key's first hit), /always503. */
async function httpBackend(ip: string): Promise<void> {
  const b = await startBackend(ip, 8080, (r) => {
    const url = new URL(r.url, 'http://x');
    const key = url.searchParams.get('k') ?? '';
    const n = key ? hit(key, ip) : 0;
    let status = 200;
    if (url.pathname === '/status/500') status = 500;
    else if (url.pathname === '/always503') status = 503;
    else if (url.pathname === '/once503' && n === 1) status = 503;
    return { status, body: { host: ip, length: r.body.length } };
  });
  closers.push(b.close);
}

const id = (b: Buffer) => b;
const definition = {
  unary: { path: '/test.Retry/Unary', requestStream: false, responseStream: false, requestSerialize: id, requestDeserialize: id, responseSerialize: id, responseDeserialize: id },
};
const RetryClient = grpc.makeGenericClientConstructor(definition as unknown as grpc.ServiceDefinition, 'Retry');

async function grpcBackend(ip: string, port = 9090): Promise<void> {
  const server = new grpc.Server();
  server.addService(definition as unknown as grpc.ServiceDefinition, {
    // UNAVAILABLE (trailers-only: no metadata sent first) on a key's first call, then OK.
    unary: (call: grpc.ServerUnaryCall<Buffer, Buffer>, cb: grpc.sendUnaryData<Buffer>) => {
      const n = hit(`grpc:${call.request.toString()}`, ip);
      if (n === 1) cb({ code: grpc.status.UNAVAILABLE, details: 'try elsewhere' });
      else cb(null, Buffer.from(ip));
    },
  });
  await new Promise<void>((resolve, reject) => server.bindAsync(`${ip}:${port}`, grpc.ServerCredentials.createInsecure(), (err) => (err ? reject(err) : resolve())));
  closers.push(async () => server.forceShutdown());
}

function send(entry: { host: string; port: number }, path: string, opts: { method?: string; body?: Buffer; chunked?: boolean } = {}): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const headers: Record<string, string> = { host: 'echo.demo' };
    if (opts.body && !opts.chunked) headers['content-length'] = String(opts.body.length);
    const req = http.request({ host: entry.host, port: entry.port, method: opts.method ?? 'GET', path, headers, agent: false }, (res) => {
      let b = '';
      res.on('data', (c) => (b += c));
      res.on('end', () => resolve({ status: res.statusCode!, body: b }));
    });
    req.on('error', reject);
    req.end(opts.body);
  });
}

beforeAll(async () => {
  topo = await startTestTopology(NET, { portName: 'http', backends: false, extraFilters: [rec.factory], bootstrap: { filters: rec.filters } });
  // Only the first pod has an application; the second's inbound refuses (503 to the CONNECT).
  await httpBackend(PODS[0]);
  for (const ip of PODS) await grpcBackend(ip);
  // A second gRPC port served by the first pod only.
  await grpcBackend(PODS[0], 9091);
  await addToMesh(
    topo,
    echoService('grpc', `127.0.${NET}.102`, servicePort('grpc', 9090)),
    echoService('dead', `127.0.${NET}.103`, servicePort('http', 81, 8181)),
    echoService('grpc-half', `127.0.${NET}.104`, servicePort('grpc', 9091)),
  );
  const g = await addEntry(topo, `127.0.${NET}.102:9090`);
  const d = await addEntry(topo, `127.0.${NET}.103:81`);
  const h = await addEntry(topo, `127.0.${NET}.104:9091`);
  closers.push(g.close, d.close, h.close);
  grpcEntry = g;
  deadEntry = d;
  grpcHalfEntry = h;
});

afterAll(async () => {
  for (const c of closers.reverse()) await c().catch(() => {});
  await topo?.close();
});

test('one endpoint refusing connections: 20 requests all 200, at most one attempt each on the bad host', async () => {
  for (let i = 0; i < 20; i++) {
    const r = await send(topo.entry, `/ok?i=${i}`);
    expect(r.status).toBe(200);
    expect(JSON.parse(r.body).host).toBe(PODS[0]);
  }
  const mine = rec.streams.filter((s) => s.path.startsWith('/ok?i='));
  expect(mine).toHaveLength(20);
  for (const s of mine) {
    expect(s.code).toBe(200);
    expect(s.attempts).toBeLessThanOrEqual(2);
    expect(s.upstreamHost).toBe(`${PODS[0]}:8080`);
    expect(s.flags).toBe('-');
  }
  // The bad host was picked first at least once (each first pick is a coin toss) and retried away from.
  expect(mine.some((s) => s.attempts === 2)).toBe(true);
});

test('a large streamed POST whose attempt could not connect is retried with its body intact', async () => {
  const body = Buffer.alloc(100 * 1024, 3);
  for (let i = 0; i < 12; i++) {
    const r = await send(topo.entry, `/ok?big=${i}`, { method: 'POST', body });
    expect(r.status).toBe(200);
    expect(JSON.parse(r.body)).toEqual({ host: PODS[0], length: body.length });
  }
  const mine = rec.streams.filter((s) => s.path.startsWith('/ok?big='));
  expect(mine.some((s) => s.attempts === 2)).toBe(true);
});

test('gRPC (bodies without content-length) with one endpoint refusing connections: 20 calls all OK', async () => {
  const client = new RetryClient(`${grpcHalfEntry.host}:${grpcHalfEntry.port}`, grpc.credentials.createInsecure()) as unknown as grpc.Client & {
    unary(b: Buffer, cb: (e: grpc.ServiceError | null, v?: Buffer) => void): void;
  };
  try {
    for (let i = 0; i < 20; i++) {
      // The backend answers a key's first call UNAVAILABLE: count one here so these are all answered OK.
      hit(`grpc:half${i}`, 'test');
      const { err, value } = await new Promise<{ err: grpc.ServiceError | null; value?: Buffer }>((resolve) => client.unary(Buffer.from(`half${i}`), (e, v) => resolve({ err: e, value: v })));
      expect(err).toBeNull();
      expect(value!.toString()).toBe(PODS[0]);
    }
  } finally {
    client.close();
  }
  const mine = rec.streams.filter((s) => s.path === '/test.Retry/Unary' && s.upstreamHost === `${PODS[0]}:9091`);
  expect(mine.length).toBe(20);
  expect(mine.some((s) => s.attempts === 2)).toBe(true);
});

describe('with both endpoints up', () => {
  beforeAll(async () => {
    await httpBackend(PODS[1]);
  });

  test('a backend 500 is not retried', async () => {
    const r = await send(topo.entry, '/status/500?k=s500');
    expect(r.status).toBe(500);
    expect(hits.get('s500')).toHaveLength(1);
    expect((await rec.find('/status/500?k=s500')).attempts).toBe(1);
  });

  test('a 503 is retried on the other host', async () => {
    const r = await send(topo.entry, '/once503?k=s503');
    expect(r.status).toBe(200);
    const h = hits.get('s503')!;
    expect(h).toHaveLength(2);
    expect(h[0]).not.toBe(h[1]);
    const s = await rec.find('/once503?k=s503');
    expect(s.attempts).toBe(2);
    expect(s.flags).toBe('-');
  });

  test('a gRPC trailers-only UNAVAILABLE is retried on the other host', async () => {
    const client = new RetryClient(`${grpcEntry.host}:${grpcEntry.port}`, grpc.credentials.createInsecure()) as unknown as grpc.Client & {
      unary(b: Buffer, cb: (e: grpc.ServiceError | null, v?: Buffer) => void): void;
    };
    try {
      const { err, value } = await new Promise<{ err: grpc.ServiceError | null; value?: Buffer }>((resolve) => client.unary(Buffer.from('g1'), (e, v) => resolve({ err: e, value: v })));
      expect(err).toBeNull();
      const h = hits.get('grpc:g1')!;
      expect(h).toHaveLength(2);
      expect(h[0]).not.toBe(h[1]);
      expect(value!.toString()).toBe(h[1]);
    } finally {
      client.close();
    }
  });

  test('a POST with a small body is retried, body and all', async () => {
    const r = await send(topo.entry, '/once503?k=post', { method: 'POST', body: Buffer.alloc(1024, 1) });
    expect(r.status).toBe(200);
    expect(JSON.parse(r.body).length).toBe(1024);
    expect(hits.get('post')).toHaveLength(2);
    // The same without a length (chunked): kept for replay since it ended within 64 KiB.
    const c = await send(topo.entry, '/once503?k=postc', { method: 'POST', body: Buffer.alloc(1024, 1), chunked: true });
    expect(c.status).toBe(200);
    expect(JSON.parse(c.body).length).toBe(1024);
    expect(hits.get('postc')).toHaveLength(2);
  });

  test('a large streamed body (> 64 KiB) is not retried once sent', async () => {
    const r = await send(topo.entry, '/once503?k=big', { method: 'POST', body: Buffer.alloc(100 * 1024, 2) });
    expect(r.status).toBe(503);
    expect(JSON.parse(r.body).length).toBe(100 * 1024);
    expect(hits.get('big')).toHaveLength(1);
    expect((await rec.find('/once503?k=big')).attempts).toBe(1);
  });

  test("retries exhausted: the upstream's 503 with URX after 3 attempts", async () => {
    const r = await send(topo.entry, '/always503?k=ex');
    expect(r.status).toBe(503);
    expect(JSON.parse(r.body).host).toMatch(/^127\.0\.88\.1[12]$/);
    expect(hits.get('ex')).toHaveLength(3);
    const s = await rec.find('/always503?k=ex');
    expect(s.attempts).toBe(3);
    expect(s.flags).toBe('URX');
  });

  test('retries exhausted on connect failures: 503 with UF,URX', async () => {
    const r = await send(deadEntry, '/dead');
    expect(r.status).toBe(503);
    const s = await rec.find('/dead');
    expect(s.attempts).toBe(3);
    expect(s.flags).toBe('UF,URX');
  });
});
