/**
 * DestinationRule traffic policy end to end (client → tunnel → waypoint → HBONE → 3 pods):
 * round robin order, random spread, consistent hashing on a header (stable across requests and a
 * mesh reload), a cookie (generated with Set-Cookie when absent, then sticky), the source IP and a
 * query parameter; circuit breaking answering 503 `UO` (http2MaxRequests, http1MaxPendingRequests
 * with maxConnections, TCP maxConnections); maxRequestsPerConnection; outlier ejection after
 * consecutive 5xx and return after baseEjectionTime, maxEjectionPercent respected;
 * portLevelSettings; a DestinationRule change applied live without cutting an in-flight request.
 * Each scenario has its own Service (same pods) and DestinationRule. Addresses: 127.0.53.x.
 */
import http from 'node:http';
import net from 'node:net';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { servicePort, type Doc } from '../../helpers/mesh.ts';
import { recorder } from '../../helpers/recorder.ts';
import { closeServer, listen, sleep, track } from '../../helpers/servers.ts';
import { addEntry, addToMesh, echoService, startTestTopology, type TestTopology } from '../../helpers/topology.ts';
import { httpBackend, send, type Entry, type Reply } from './dr-helpers.ts';

const NET = 53;
const PODS = [`127.0.${NET}.11`, `127.0.${NET}.12`, `127.0.${NET}.13`];
const rec = recorder();
let topo: TestTopology;
const closers: (() => Promise<unknown>)[] = [];
/** Pods whose `/flaky` answers 500. */
const failing = new Set<string>();
/** TCP connections accepted per pod on 8080 (one per upstream HBONE CONNECT stream). */
const connections = new Map<string, number>();

const entries = new Map<string, Entry>();

async function tcpBackend(ip: string): Promise<void> {
  const server = net.createServer((s) => {
    s.on('error', () => {});
    s.on('data', (c: Buffer) => s.write(`${ip}:${c.toString()}`));
  });
  const sockets = track(server);
  await listen(server, ip, 9000);
  closers.push(() => closeServer(server, sockets));
}

/** A Service (all three pods) with HTTP port 80 (and 81) → 8080, or a TCP port 90 → 9000. */
function service(name: string, vip: string, kind: 'http' | 'http2ports' | 'tcp'): Doc {
  if (kind === 'tcp') return echoService(name, vip, servicePort('tcp', 90, 9000));
  const http = servicePort('http', 80, 8080);
  return kind === 'http' ? echoService(name, vip, http) : echoService(name, vip, servicePort('http-alt', 81, 8080), http);
}

function drYaml(name: string, host: string, trafficPolicy: string): string {
  return `apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: { name: ${name}, namespace: demo }
spec:
  host: ${host}
  trafficPolicy:
${trafficPolicy
  .trim()
  .split('\n')
  .map((l) => `    ${l}`)
  .join('\n')}
`;
}

const SERVICES: [string, number, 'http' | 'http2ports' | 'tcp'][] = [
  ['rr', 101, 'http'],
  ['random', 102, 'http'],
  ['header', 103, 'http'],
  ['cookie', 104, 'http'],
  ['source', 105, 'http'],
  ['query', 106, 'http'],
  ['maxreq', 107, 'http'],
  ['pending', 108, 'http'],
  ['perconn', 109, 'http'],
  ['outlier', 110, 'http'],
  ['ejectpct', 111, 'http'],
  ['ports', 112, 'http2ports'],
  ['live', 113, 'http'],
  ['tcplimit', 114, 'tcp'],
];

const RULES = [
  drYaml('rr', 'rr', 'loadBalancer: { simple: ROUND_ROBIN }'),
  drYaml('random', 'random.demo.svc.cluster.local', 'loadBalancer: { simple: RANDOM }'),
  drYaml('header', 'header', 'loadBalancer: { consistentHash: { httpHeaderName: x-user } }'),
  drYaml('cookie', 'cookie', 'loadBalancer: { consistentHash: { httpCookie: { name: sticky, path: /, ttl: 60s } } }'),
  drYaml('source', 'source', 'loadBalancer: { consistentHash: { useSourceIp: true } }'),
  drYaml('query', 'query', 'loadBalancer: { consistentHash: { httpQueryParameterName: u, maglev: { tableSize: 65537 } } }'),
  drYaml('maxreq', 'maxreq', 'connectionPool: { http: { http2MaxRequests: 1 } }'),
  drYaml('pending', 'pending', `
loadBalancer: { consistentHash: { httpHeaderName: x-k } }
connectionPool: { tcp: { maxConnections: 1 }, http: { http1MaxPendingRequests: 1 } }`),
  drYaml('perconn', 'perconn', `
loadBalancer: { consistentHash: { httpHeaderName: x-k } }
connectionPool: { http: { maxRequestsPerConnection: 1 } }`),
  drYaml('outlier', 'outlier', `
loadBalancer: { simple: ROUND_ROBIN }
outlierDetection: { consecutive5xxErrors: 2, interval: 50ms, baseEjectionTime: 400ms, maxEjectionPercent: 100 }`),
  drYaml('ejectpct', 'ejectpct', `
loadBalancer: { simple: ROUND_ROBIN }
outlierDetection: { consecutive5xxErrors: 2, interval: 50ms, baseEjectionTime: 30s, maxEjectionPercent: 33 }`),
  drYaml('ports', 'ports', `
loadBalancer: { simple: ROUND_ROBIN }
portLevelSettings:
- port: { number: 81 }
  loadBalancer: { consistentHash: { httpHeaderName: x-user } }`),
  drYaml('live', 'live', 'connectionPool: { tcp: { maxConnections: 5 } }'),
  drYaml('tcplimit', 'tcplimit', 'connectionPool: { tcp: { maxConnections: 1 } }'),
];

beforeAll(async () => {
  topo = await startTestTopology(NET, { podIps: PODS, backends: false, extraFilters: [rec.factory], bootstrap: { filters: rec.filters } });
  for (const ip of PODS) {
    await httpBackend(ip, failing, closers, () => connections.set(ip, (connections.get(ip) ?? 0) + 1));
    await tcpBackend(ip);
  }
  await addToMesh(topo, ...SERVICES.map(([n, o, k]) => service(n, `127.0.${NET}.${o}`, k)), ...RULES);
  for (const [name, octet, kind] of SERVICES) {
    const ports = kind === 'tcp' ? [90] : kind === 'http2ports' ? [80, 81] : [80];
    for (const port of ports) {
      const e = await addEntry(topo, `127.0.${NET}.${octet}:${port}`);
      closers.push(e.close);
      entries.set(port === 80 || port === 90 ? name : `${name}:${port}`, e);
    }
  }
});

afterAll(async () => {
  for (const c of closers.reverse()) await c().catch(() => {});
  await topo?.close();
});

const entry = (name: string): Entry => entries.get(name)!;

describe('load balancing', () => {
  test('ROUND_ROBIN cycles through the three pods in a fixed order', async () => {
    const hosts: string[] = [];
    for (let i = 0; i < 9; i++) hosts.push((await send(entry('rr'), `/rr?i=${i}`)).host);
    expect(new Set(hosts.slice(0, 3)).size).toBe(3);
    for (let i = 3; i < 9; i++) expect(hosts[i]).toBe(hosts[i - 3]);
  });

  test('RANDOM spreads over every pod', async () => {
    const count = new Map<string, number>();
    for (let i = 0; i < 60; i++) {
      const r = await send(entry('random'), `/random?i=${i}`);
      count.set(r.host, (count.get(r.host) ?? 0) + 1);
    }
    expect(count.size).toBe(3);
    for (const n of count.values()) expect(n).toBeGreaterThan(5);
  });
});

describe('consistent hashing', () => {
  async function mapping(users: number): Promise<Map<string, string>> {
    const m = new Map<string, string>();
    for (let u = 0; u < users; u++) m.set(`user-${u}`, (await send(entry('header'), '/h', { 'x-user': `user-${u}` })).host);
    return m;
  }

  test('httpHeaderName: a key always reaches the same pod, keys spread, and a mesh reload keeps the mapping', async () => {
    const first = await mapping(15);
    expect(new Set(first.values()).size).toBeGreaterThan(1);
    for (let round = 0; round < 3; round++) expect(await mapping(15)).toEqual(first);
    // A reload with unchanged endpoints (an unrelated object added): same ring, same pods.
    const before = topo.waypoint!.mesh.current.version;
    await addToMesh(topo, 'apiVersion: v1\nkind: ConfigMap\nmetadata: { name: unrelated, namespace: demo }\ndata: { a: b }\n');
    expect(topo.waypoint!.mesh.current.version).toBeGreaterThan(before);
    expect(await mapping(15)).toEqual(first);
  });

  test('httpCookie with a ttl: a request without the cookie gets Set-Cookie, and the cookie then sticks to one pod', async () => {
    const first = await send(entry('cookie'), '/c');
    expect(first.status).toBe(200);
    const set = first.setCookie?.[0] ?? '';
    expect(set).toMatch(/^sticky="[0-9a-f]{16}"; Max-Age=60; Path=\/; HttpOnly$/);
    const value = /^sticky=("[0-9a-f]{16}")/.exec(set)![1];
    for (let i = 0; i < 8; i++) {
      const r = await send(entry('cookie'), `/c?i=${i}`, { cookie: `sticky=${value}` });
      expect(r.host).toBe(first.host);
      expect(r.setCookie).toBeUndefined();
    }
    // Other cookie values spread over the pods.
    const hosts = new Set<string>();
    for (let i = 0; i < 20; i++) hosts.add((await send(entry('cookie'), '/c', { cookie: `sticky=v${i}` })).host);
    expect(hosts.size).toBeGreaterThan(1);
  });

  test('useSourceIp: every request of the one client reaches the same pod', async () => {
    const hosts = new Set<string>();
    for (let i = 0; i < 12; i++) hosts.add((await send(entry('source'), `/s?i=${i}`)).host);
    expect(hosts.size).toBe(1);
  });

  test('httpQueryParameterName (maglev): a value sticks to a pod; values spread', async () => {
    const seen = new Map<string, Set<string>>();
    for (let round = 0; round < 3; round++) {
      for (let u = 0; u < 12; u++) {
        const r = await send(entry('query'), `/q?u=${u}&round=${round}`);
        const s = seen.get(String(u)) ?? new Set<string>();
        s.add(r.host);
        seen.set(String(u), s);
      }
    }
    for (const s of seen.values()) expect(s.size).toBe(1);
    expect(new Set([...seen.values()].map((s) => [...s][0])).size).toBeGreaterThan(1);
  });
});

describe('circuit breaking', () => {
  test('http2MaxRequests 1: a second concurrent request is answered 503 UO while the first is in flight', async () => {
    const slow = send(entry('maxreq'), '/maxreq-slow?ms=600');
    await sleep(150);
    const second = await send(entry('maxreq'), '/maxreq-second');
    expect(second.status).toBe(503);
    expect(second.body).toBe('upstream connect error or disconnect/reset before headers. reset reason: overflow');
    const r = await rec.find('/maxreq-second');
    expect(r.flags).toBe('UO');
    expect(r.details).toBe('upstream_reset_before_response_started{overflow}');
    expect(r.attempts).toBe(1); // overflow is never retried
    expect((await slow).status).toBe(200);
    // Once it is done, requests pass again.
    expect((await send(entry('maxreq'), '/maxreq-after')).status).toBe(200);
  });

  test('maxConnections 1 + http1MaxPendingRequests 1: one active, one queued, the third 503 UO; the queued one is served', async () => {
    const key = { 'x-k': 'same-pod' };
    const first = send(entry('pending'), '/pending-1?ms=600', key);
    await sleep(150);
    const queued = send(entry('pending'), '/pending-2', key);
    await sleep(100);
    const third = await send(entry('pending'), '/pending-3', key);
    expect(third.status).toBe(503);
    expect((await rec.find('/pending-3')).flags).toBe('UO');
    expect((await first).status).toBe(200);
    expect((await queued).status).toBe(200);
  });

  test('TCP maxConnections 1: a second tunnel is refused while the first is open, allowed after it closed', async () => {
    const open = (): Promise<net.Socket> =>
      new Promise((resolve, reject) => {
        const s = net.connect(entry('tcplimit').port, entry('tcplimit').host, () => resolve(s));
        s.once('error', reject);
      });
    const echo = (s: net.Socket, text: string): Promise<string> =>
      new Promise((resolve) => {
        let got = '';
        s.on('data', (c: Buffer) => {
          got += c.toString();
          if (got.endsWith(text)) resolve(got);
        });
        s.once('close', () => resolve(got));
        s.write(text);
      });
    const a = await open();
    expect(await echo(a, 'one')).toMatch(/^127\.0\.53\.1[123]:one$/);
    const b = await open();
    expect(await echo(b, 'two')).toBe(''); // closed without reaching a pod
    a.destroy();
    await sleep(200);
    const c = await open();
    expect(await echo(c, 'three')).toMatch(/:three$/);
    c.destroy();
    b.destroy();
  });

  test('maxRequestsPerConnection 1: every request to a pod opens a new upstream connection', async () => {
    const key = { 'x-k': 'per-conn' };
    const pod = (await send(entry('perconn'), '/perconn-0', key)).host;
    const before = connections.get(pod) ?? 0;
    for (let i = 1; i <= 4; i++) expect((await send(entry('perconn'), `/perconn-${i}`, key)).host).toBe(pod);
    expect((connections.get(pod) ?? 0) - before).toBe(4);
  });

  test('without maxRequestsPerConnection the connection is reused (control)', async () => {
    const pod = (await send(entry('header'), '/reuse', { 'x-user': 'reuse' })).host;
    const before = connections.get(pod) ?? 0;
    for (let i = 0; i < 4; i++) await send(entry('header'), '/reuse', { 'x-user': 'reuse' });
    expect((connections.get(pod) ?? 0) - before).toBeLessThanOrEqual(1);
  });
});

describe('outlier detection', () => {
  test('a pod answering 5xx twice in a row is ejected, then returns after baseEjectionTime', async () => {
    const bad = PODS[0];
    failing.add(bad);
    try {
      // Round robin reaches the bad pod every third request: two 500s from it eject it.
      let fromBad = 0;
      for (let i = 0; i < 12 && fromBad < 2; i++) if ((await send(entry('outlier'), '/flaky')).host === bad) fromBad++;
      expect(fromBad).toBe(2);
      const t0 = Date.now();
      const during: string[] = [];
      for (let i = 0; i < 9; i++) during.push((await send(entry('outlier'), '/flaky')).host);
      if (Date.now() - t0 < 350) expect(during).not.toContain(bad);
      // After 400 ms (+ a 50 ms sweep) it is offered again.
      await sleep(600);
      const after: string[] = [];
      for (let i = 0; i < 6; i++) after.push((await send(entry('outlier'), '/flaky')).host);
      expect(after).toContain(bad);
    } finally {
      failing.delete(bad);
    }
  });

  test('maxEjectionPercent 33: of two failing pods only one is ejected', async () => {
    failing.add(PODS[1]);
    failing.add(PODS[2]);
    try {
      for (let i = 0; i < 15; i++) await send(entry('ejectpct'), '/flaky');
      const last: Reply[] = [];
      for (let i = 0; i < 6; i++) last.push(await send(entry('ejectpct'), '/flaky'));
      const failingHosts = new Set(last.filter((r) => r.status === 500).map((r) => r.host));
      // One failing pod is out; the other is still being used (and failing).
      expect(failingHosts.size).toBe(1);
      expect(last.some((r) => r.host === PODS[0])).toBe(true);
    } finally {
      failing.delete(PODS[1]);
      failing.delete(PODS[2]);
    }
  });
});

test('portLevelSettings: port 81 hashes on x-user, port 80 keeps round robin', async () => {
  const on81 = new Set<string>();
  const on80 = new Set<string>();
  for (let i = 0; i < 6; i++) {
    on81.add((await send(entry('ports:81'), `/p81?i=${i}`, { 'x-user': 'u1' })).host);
    on80.add((await send(entry('ports'), `/p80?i=${i}`, { 'x-user': 'u1' })).host);
  }
  expect(on81.size).toBe(1);
  expect(on80.size).toBe(3);
});

test('a DestinationRule change applies live without cutting an in-flight request', async () => {
  const inflight = send(entry('live'), '/live-slow?ms=800');
  await sleep(200);
  // New pool settings (the old pool is closed gracefully) and a circuit breaker of 1 request.
  const text = (await import('node:fs')).readFileSync(topo.meshFile, 'utf8');
  const updated = text.replace(drYaml('live', 'live', 'connectionPool: { tcp: { maxConnections: 5 } }'), drYaml('live', 'live', 'connectionPool: { tcp: { maxConnections: 4 }, http: { http2MaxRequests: 1 } }'));
  expect(updated).not.toBe(text);
  (await import('node:fs')).writeFileSync(topo.meshFile, updated);
  await topo.waypoint!.mesh.reload();
  // The new limit counts the request already in flight: a second one overflows.
  const second = await send(entry('live'), '/live-second');
  expect(second.status).toBe(503);
  expect((await rec.find('/live-second')).flags).toBe('UO');
  const r = await inflight;
  expect(r.status).toBe(200);
  expect((await rec.find('/live-slow?ms=800')).flags).toBe('-');
  expect((await send(entry('live'), '/live-after')).status).toBe(200);
});

test('an invalid DestinationRule in a reload is refused; the last good policy stays', async () => {
  const before = topo.waypoint!.mesh.current.version;
  await addToMesh(topo, drYaml('broken', 'rr', 'connectionPool: { http: { http2MaxRequests: -1 } }'));
  expect(topo.waypoint!.mesh.current.version).toBe(before);
  const hosts: string[] = [];
  for (let i = 0; i < 6; i++) hosts.push((await send(entry('rr'), `/rr-after-refusal?i=${i}`)).host);
  expect(hosts[3]).toBe(hosts[0]);
  expect(new Set(hosts).size).toBe(3);
});
