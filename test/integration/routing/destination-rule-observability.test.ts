/**
 * Observability of routing and DestinationRule state, end to end (client → tunnel → waypoint →
 * HBONE → 2 pods): `/config_dump` shows the compiled routes per service port (attached routes,
 * rule counts, rejected routes with the reason), each cluster's DestinationRule policy and its
 * runtime state (active requests, ejected hosts with the time they return); outlier ejections are
 * logged at info on eject and on return and counted in Envoy's `envoy_cluster_outlier_detection_*`
 * stats; circuit-breaker overflows are counted in `envoy_cluster_upstream_*_overflow`.
 * Addresses: 127.0.55.x.
 */
import { afterAll, beforeAll, expect, test, vi } from 'vitest';
import { log } from '../../../src/util/log.ts';
import { servicePort } from '../../helpers/mesh.ts';
import { samplesOf, scrape } from '../../helpers/prometheus.ts';
import { sleep } from '../../helpers/servers.ts';
import { addEntry, addToMesh, echoService, startTestTopology, type TestTopology } from '../../helpers/topology.ts';
import { httpBackend, send as sendTo, type Entry } from './dr-helpers.ts';

const NET = 55;
const PODS = [`127.0.${NET}.11`, `127.0.${NET}.12`];
let topo: TestTopology;
const closers: (() => Promise<unknown>)[] = [];
/** Pods whose `/flaky` answers 500. */
const failing = new Set<string>();
const entries = new Map<string, Entry>();
const send = (name: string, path: string) => sendTo(entries.get(name)!, path);

function route(name: string, service: string, rules: string): string {
  return `apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: { name: ${name}, namespace: demo }
spec:
  parentRefs: [{ group: "", kind: Service, name: ${service}, port: 80 }]
  rules:
${rules}`;
}

const MESH = [
  echoService('obs', `127.0.${NET}.101`, servicePort('http', 80, 8080)),
  echoService('plain', `127.0.${NET}.102`, servicePort('http', 80, 8080)),
  `apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: { name: obs-policy, namespace: demo }
spec:
  host: obs
  trafficPolicy:
    loadBalancer: { simple: ROUND_ROBIN }
    connectionPool: { http: { http2MaxRequests: 1 } }
    outlierDetection: { consecutive5xxErrors: 2, interval: 50ms, baseEjectionTime: 500ms, maxEjectionPercent: 50 }`,
  route('obs-route', 'obs', `  - matches: [{ path: { type: PathPrefix, value: /a } }]
    backendRefs: [{ name: obs, port: 80 }]
  - backendRefs: [{ name: obs, port: 80 }]`),
  route('broken-route', 'plain', `  - matches: [{ path: { type: PathPrefix, value: no-slash } }]
    backendRefs: [{ name: plain, port: 80 }]`),
];

beforeAll(async () => {
  topo = await startTestTopology(NET, { podIps: PODS, backends: false });
  for (const ip of PODS) await httpBackend(ip, failing, closers);
  await addToMesh(topo, ...MESH);
  for (const [name, octet] of [['obs', 101], ['plain', 102]] as const) {
    const e = await addEntry(topo, `127.0.${NET}.${octet}:80`);
    closers.push(e.close);
    entries.set(name, e);
  }
});

afterAll(async () => {
  for (const c of closers.reverse()) await c().catch(() => {});
  await topo?.close();
});

const OBS_CLUSTER = 'inbound-vip|80|http|obs.demo.svc.cluster.local';

interface RoutingDump {
  rejectedRoutes: { route: string; reason: string }[];
  routes: { service: string; port: number; cluster: string; producer: { routes: string[]; rules: number } | null }[];
  destinationRules: { rules: string[]; clusters: { key: string; source: string; loadBalancer: unknown; connectionPool: Record<string, unknown>; outlierDetection: Record<string, unknown> | null }[] };
  clusters: { name: string; source: string; activeRequests: number; pendingRequests: number; ejectedHosts: { host: string; reason: string; until: string }[] }[];
}

async function configDump(): Promise<RoutingDump> {
  const a = topo.waypoint!.addresses.admin;
  const res = await fetch(`http://${a.address}:${a.port}/config_dump`);
  return ((await res.json()) as { routing: RoutingDump }).routing;
}

async function envoyStats(): Promise<Map<string, number>> {
  const out = new Map<string, number>();
  for (const s of samplesOf(await scrape(topo.waypoint!.addresses.admin), 'envoy_cluster_')) if (s.labels.envoy_cluster_name === OBS_CLUSTER) out.set(s.name, s.value);
  return out;
}

test('config_dump: routes per service port (attached, rule count), rejected routes with the reason, DestinationRule policy per cluster', async () => {
  const d = await configDump();
  const obs = d.routes.find((r) => r.service === 'obs.demo.svc.cluster.local' && r.port === 80)!;
  expect(obs.cluster).toBe(OBS_CLUSTER);
  expect(obs.producer).toEqual({ routes: ['HTTPRoute/demo/obs-route'], rules: 2 });
  expect(d.routes.find((r) => r.service === 'plain.demo.svc.cluster.local')!.producer).toBeNull();
  const rejected = d.rejectedRoutes.find((r) => r.route === 'HTTPRoute/demo/broken-route')!;
  expect(rejected.reason).toMatch(/path/);

  expect(d.destinationRules.rules).toContain('DestinationRule/demo/obs-policy');
  const policy = d.destinationRules.clusters.find((c) => c.key === 'demo/obs.demo.svc.cluster.local|80')!;
  expect(policy.source).toBe('DestinationRule/demo/obs-policy');
  expect(policy.loadBalancer).toEqual({ simple: 'ROUND_ROBIN' });
  expect(policy.connectionPool).toMatchObject({ maxRequests: 1, maxConnections: 'unlimited', maxPendingRequests: 'unlimited' });
  expect(policy.outlierDetection).toMatchObject({ consecutive5xx: 2, intervalMs: 50, baseEjectionTimeMs: 500, maxEjectionPercent: 50 });
});

test('overflow of http2MaxRequests is counted (upstream_rq_pending_overflow) and the active request shows in config_dump', async () => {
  const slow = send('obs', '/slow?ms=600');
  try {
    await sleep(150);
    expect((await send('obs', '/second')).status).toBe(503);
    const during = (await configDump()).clusters.find((c) => c.name === OBS_CLUSTER)!;
    expect(during).toMatchObject({ source: 'DestinationRule/demo/obs-policy', activeRequests: 1, pendingRequests: 0 });
    const stats = await envoyStats();
    expect(stats.get('envoy_cluster_upstream_rq_pending_overflow')).toBe(1);
    expect(stats.get('envoy_cluster_circuit_breakers_default_rq_open')).toBe(1);
    expect(stats.get('envoy_cluster_upstream_cx_overflow')).toBe(0);
    expect(stats.get('envoy_cluster_upstream_rq_retry_overflow')).toBe(0);
  } finally {
    // The next test needs the one request slot free.
    expect((await slow).status).toBe(200);
  }
  expect((await envoyStats()).get('envoy_cluster_circuit_breakers_default_rq_open')).toBe(0);
});

test('an ejection is logged, counted and shown with its end time; the return is logged and the gauge drops', async () => {
  const infos: { obj: Record<string, unknown>; msg: string }[] = [];
  const spy = vi.spyOn(log, 'info').mockImplementation(((obj: Record<string, unknown>, msg?: string) => void infos.push({ obj, msg: String(msg) })) as never);
  try {
    const bad = PODS[1];
    failing.add(bad);
    for (let i = 0, fromBad = 0; i < 8 && fromBad < 2; i++) if ((await send('obs', '/flaky')).host === bad) fromBad++;
    failing.delete(bad);

    const ejected = infos.find((l) => l.msg === 'outlier detection: host ejected');
    expect(ejected?.obj).toMatchObject({ cluster: OBS_CLUSTER, host: `${bad}:8080`, reason: 'consecutive_5xx', ejectionMs: 500 });
    const stats = await envoyStats();
    expect(stats.get('envoy_cluster_outlier_detection_ejections_active')).toBe(1);
    expect(stats.get('envoy_cluster_outlier_detection_ejections_enforced_total')).toBe(1);
    expect(stats.get('envoy_cluster_outlier_detection_ejections_enforced_consecutive_5xx')).toBe(1);
    expect(stats.get('envoy_cluster_outlier_detection_ejections_enforced_consecutive_gateway_failure')).toBe(0);
    const state = (await configDump()).clusters.find((c) => c.name === OBS_CLUSTER)!;
    expect(state.ejectedHosts).toHaveLength(1);
    expect(state.ejectedHosts[0]).toMatchObject({ host: `${bad}:8080`, reason: 'consecutive_5xx' });
    const until = Date.parse(state.ejectedHosts[0].until);
    expect(until).toBeGreaterThan(Date.now());
    expect(until).toBeLessThanOrEqual(Date.now() + 500);

    await vi.waitFor(() => expect(infos.some((l) => l.msg === 'outlier detection: host returned to service')).toBe(true), { timeout: 3000, interval: 50 });
    expect(infos.find((l) => l.msg === 'outlier detection: host returned to service')!.obj).toMatchObject({ cluster: OBS_CLUSTER, host: `${bad}:8080`, ejectedHosts: 0 });
    expect((await envoyStats()).get('envoy_cluster_outlier_detection_ejections_active')).toBe(0);
    expect((await configDump()).clusters.find((c) => c.name === OBS_CLUSTER)!.ejectedHosts).toEqual([]);
  } finally {
    spy.mockRestore();
  }
});
