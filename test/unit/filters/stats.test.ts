/**
 * `istio.stats` with fake contexts: label derivation as Envoy's waypoint does it (§4.2), the
 * exported series with their full label sets, TCP periodic reports, and bounded label sets.
 */
import { Registry } from 'prom-client';
import { afterAll, describe, expect, test } from 'vitest';
import {
  DEFAULT_STATS_CONFIG,
  ENVOY_DEFAULT_BUCKETS,
  StatsFilter,
  instrumentsFor,
  parseStatsConfig,
  statsFactory,
  type StatsConfig,
} from '../../../filters/stats/index.ts';
import { destinationLabels, grpcStatusLabel, isGrpcContentType, principalNamespace, sourceLabels } from '../../../filters/stats/labels.ts';
import { DOWNSTREAM_PEER, TCP_UPSTREAM_PEER, UPSTREAM_PEER, type PeerInfo } from '../../../src/peer/peer-info.ts';
import type { ConnectInfo, ConnectionContext, StreamContext } from '../../../src/pipeline/index.ts';
import type { Service, Target } from '../../../src/state/index.ts';
import { parsePrometheus, type Sample } from '../../helpers/prometheus.ts';
import { CLIENT_INFO, FilterHarness, filterEnv } from '../../helpers/filter-harness.ts';

const CLIENT: PeerInfo = Object.freeze({
  name: 'client-7d9f-x2',
  namespace: 'shop',
  cluster: 'c1',
  workload: 'client',
  type: 'deployment',
  service: 'client-svc',
  revision: 'v3',
  app: 'client-app',
  version: 'v3a',
  identity: 'spiffe://cluster.local/ns/shop/sa/client',
  region: '',
  availabilityZone: '',
  labels: {},
});
const SERVER: PeerInfo = Object.freeze({
  name: 'web-5c4-abc',
  namespace: 'demo',
  cluster: 'c2',
  workload: 'web',
  type: 'deployment',
  service: 'web',
  revision: 'v1',
  app: 'web',
  version: 'v1',
  identity: 'spiffe://cluster.local/ns/demo/sa/web',
  region: '',
  availabilityZone: '',
  labels: {},
});

const WEB: Service = { kind: 'Service', name: 'web', namespace: 'demo', hostname: 'web.demo.svc.cluster.local' } as Service;
const WEB_TARGET: Target = { kind: 'service', service: WEB, port: { name: 'http', port: 80, targetPort: 8080, appProtocol: '', protocol: 'HTTP' } };
const WORKLOAD_TARGET = { kind: 'workload', workload: {}, port: 8080 } as unknown as Target;

describe('label derivation', () => {
  test('source labels from the downstream peer, principal and namespace from the client certificate', () => {
    expect(sourceLabels(CLIENT, 'spiffe://cluster.local/ns/shop/sa/client')).toEqual([
      'waypoint',
      'client',
      'client-svc',
      'v3',
      'shop',
      'spiffe://cluster.local/ns/shop/sa/client',
      'client-app',
      'v3a',
      'c1',
    ]);
  });

  test('without a downstream peer: unknown, revision latest, namespace from the principal (Istio without peer info)', () => {
    expect(sourceLabels(undefined, 'spiffe://cluster.local/ns/demo/sa/client')).toEqual([
      'waypoint',
      'unknown',
      'unknown',
      'latest',
      'demo',
      'spiffe://cluster.local/ns/demo/sa/client',
      'unknown',
      'unknown',
      'unknown',
    ]);
    expect(sourceLabels(undefined, '')).toEqual(['waypoint', 'unknown', 'unknown', 'latest', 'unknown', 'unknown', 'unknown', 'unknown', 'unknown']);
  });

  test("the principal's namespace wins over the peer's; the peer's is used when the principal has none", () => {
    expect(sourceLabels(CLIENT, 'spiffe://td/ns/other/sa/x')[4]).toBe('other');
    expect(sourceLabels(CLIENT, '')[4]).toBe('shop');
    expect(principalNamespace('spiffe://td/ns/a')).toBe('a');
    expect(principalNamespace('spiffe://td/sa/x')).toBe('');
  });

  test('destination labels: workload side from the upstream peer, service side from the target', () => {
    expect(destinationLabels(SERVER, WEB_TARGET)).toEqual([
      'web',
      'demo',
      'spiffe://cluster.local/ns/demo/sa/web',
      'web',
      'v1',
      'web.demo.svc.cluster.local',
      'web',
      'v1',
      'web',
      'demo',
      'c2',
    ]);
  });

  test('no upstream peer (no endpoint answered): unknown everywhere but the service labels; revision unknown too', () => {
    expect(destinationLabels(undefined, WEB_TARGET)).toEqual([
      'unknown',
      'unknown',
      'unknown',
      'unknown',
      'unknown',
      'web.demo.svc.cluster.local',
      'unknown',
      'unknown',
      'web',
      'demo',
      'unknown',
    ]);
  });

  test('workload-addressed traffic has no service: destination_service* unknown, as Istio', () => {
    const l = destinationLabels(SERVER, WORKLOAD_TARGET);
    expect([l[5], l[8], l[9]]).toEqual(['unknown', 'unknown', 'unknown']);
    expect(l[0]).toBe('web');
  });

  test("a ServiceEntry's service name is its host (Istio's service attributes)", () => {
    const se = { kind: 'ServiceEntry', name: 'ext', namespace: 'demo', hostname: 'api.example.com' } as Service;
    const l = destinationLabels(undefined, { ...WEB_TARGET, service: se } as Target);
    expect([l[5], l[8], l[9]]).toEqual(['api.example.com', 'api.example.com', 'demo']);
  });

  test('gRPC status: trailers/headers value, else mapped from the HTTP status, bounded', () => {
    expect(grpcStatusLabel('7', 200)).toBe('7');
    expect(grpcStatusLabel('0', 200)).toBe('0');
    expect(grpcStatusLabel('', 200)).toBe('2');
    expect(grpcStatusLabel('', 503)).toBe('14');
    expect(grpcStatusLabel('', 0)).toBe('');
    expect(grpcStatusLabel('17', 200)).toBe('-1');
    expect(grpcStatusLabel('x'.repeat(100), 200)).toBe('-1');
  });

  test('gRPC content types as Envoy', () => {
    expect(isGrpcContentType('application/grpc')).toBe(true);
    expect(isGrpcContentType('application/grpc+proto')).toBe(true);
    expect(isGrpcContentType('application/grpc;charset=utf-8')).toBe(true);
    expect(isGrpcContentType('application/grpc-web')).toBe(false);
    expect(isGrpcContentType('application/grpcx')).toBe(false);
    expect(isGrpcContentType('application/json')).toBe(false);
    expect(isGrpcContentType(undefined)).toBe(false);
  });
});

describe('config', () => {
  test('defaults and validation', () => {
    expect(parseStatsConfig(undefined)).toEqual({ tcpReportingDurationMs: 5000, maxSeries: 10000, istioVersion: 'unknown' });
    expect(parseStatsConfig({ tcpReportingDurationMs: 0 }).tcpReportingDurationMs).toBe(0);
    expect(() => parseStatsConfig({ tcpReportingDurationMs: -1 })).toThrow(/tcpReportingDurationMs/);
    expect(() => parseStatsConfig({ maxSeries: 0 })).toThrow(/maxSeries/);
    expect(() => parseStatsConfig({ nope: 1 })).toThrow();
  });
});

// ---- the filter over fake contexts ------------------------------------------------------------

const harness = new FilterHarness([]);
afterAll(() => harness.close());

function conn(target: Target = WEB_TARGET, info: ConnectInfo = CLIENT_INFO): ConnectionContext {
  return harness.connection({ target, info });
}

function stream(c: ConnectionContext, opts: { url?: string; headers?: Record<string, string> } = {}): StreamContext {
  return harness.stream(c, opts);
}

/** A gRPC request (HTTP/2, content-type application/grpc). */
function grpcStream(c: ConnectionContext): Promise<StreamContext> {
  return harness.h2Stream(c, { grpc: true });
}

function setup(config: Partial<StatsConfig> = {}): { registry: Registry; filter: StatsFilter } {
  const registry = new Registry();
  const cfg = { ...DEFAULT_STATS_CONFIG, ...config };
  return { registry, filter: new StatsFilter(cfg, instrumentsFor(registry, cfg)) };
}

async function istio(registry: Registry): Promise<Sample[]> {
  return parsePrometheus(await registry.metrics()).filter((s) => s.name.startsWith('istio_') && s.name !== 'istio_build');
}

const PEERS = {
  reporter: 'waypoint',
  source_workload: 'client',
  source_canonical_service: 'client-svc',
  source_canonical_revision: 'v3',
  source_workload_namespace: 'demo',
  source_principal: 'spiffe://cluster.local/ns/demo/sa/client',
  source_app: 'client-app',
  source_version: 'v3a',
  source_cluster: 'c1',
  destination_workload: 'web',
  destination_workload_namespace: 'demo',
  destination_principal: 'spiffe://cluster.local/ns/demo/sa/web',
  destination_app: 'web',
  destination_version: 'v1',
  destination_service: 'web.demo.svc.cluster.local',
  destination_canonical_service: 'web',
  destination_canonical_revision: 'v1',
  destination_service_name: 'web',
  destination_service_namespace: 'demo',
  destination_cluster: 'c2',
};

describe('the filter', () => {
  test('an HTTP request: one series per metric with the full label set in Istio order, values recorded', async () => {
    const { registry, filter } = setup();
    const c = conn();
    c.set(DOWNSTREAM_PEER, CLIENT);
    const s = stream(c);
    s.set(UPSTREAM_PEER, SERVER);
    s.responseCode = 200;
    s.bytesReceived = 1024;
    s.bytesSent = 7;
    filter.onStreamComplete(s);
    const all = await istio(registry);
    const labels = { ...PEERS, request_protocol: 'http', response_code: '200', grpc_response_status: '', response_flags: '-', connection_security_policy: 'mutual_tls' };
    const total = all.filter((x) => x.name === 'istio_requests_total');
    expect(total).toHaveLength(1);
    expect(total[0].labels).toEqual(labels);
    expect(total[0].order).toEqual(Object.keys(labels));
    expect(total[0].value).toBe(1);
    for (const h of ['istio_request_duration_milliseconds', 'istio_request_bytes', 'istio_response_bytes']) {
      const buckets = all.filter((x) => x.name === `${h}_bucket`);
      expect(buckets.map((b) => b.labels.le)).toEqual([...ENVOY_DEFAULT_BUCKETS.map(String), '+Inf']);
      for (const b of buckets) expect(b.labels).toEqual({ ...labels, le: b.labels.le });
      expect(all.find((x) => x.name === `${h}_count`)?.labels).toEqual(labels);
    }
    const bytes = (name: string) => all.find((x) => x.name === `${name}_sum`)?.value;
    expect(bytes('istio_request_bytes')).toBe(1024);
    expect(bytes('istio_response_bytes')).toBe(7);
    // 1024 B falls in le=1000? no: in le=2500 and above; 7 B in le=10 and above.
    const le = (name: string, bound: string) => all.find((x) => x.name === `${name}_bucket` && x.labels.le === bound)?.value;
    expect([le('istio_request_bytes', '1000'), le('istio_request_bytes', '2500')]).toEqual([0, 1]);
    expect([le('istio_response_bytes', '5'), le('istio_response_bytes', '10')]).toEqual([0, 1]);
    // Nothing else: no TCP or message series for an HTTP request.
    expect(new Set(all.map((x) => x.name.replace(/_(bucket|sum|count)$/, '')))).toEqual(
      new Set(['istio_requests_total', 'istio_request_duration_milliseconds', 'istio_request_bytes', 'istio_response_bytes']),
    );
  });

  test('a gRPC request with a non-OK status: protocol grpc, its status, and message counters with the peer labels only', async () => {
    const { registry, filter } = setup({ tcpReportingDurationMs: 0 });
    const c = conn();
    c.set(DOWNSTREAM_PEER, CLIENT);
    const s = await grpcStream(c);
    s.set(UPSTREAM_PEER, SERVER);
    s.responseCode = 200;
    s.grpcStatus = '7';
    s.requestMessages = 3;
    s.responseMessages = 5;
    filter.onStreamComplete(s);
    const all = await istio(registry);
    expect(all.find((x) => x.name === 'istio_requests_total')?.labels).toEqual({
      ...PEERS,
      request_protocol: 'grpc',
      response_code: '200',
      grpc_response_status: '7',
      response_flags: '-',
      connection_security_policy: 'mutual_tls',
    });
    const req = all.filter((x) => x.name === 'istio_request_messages_total');
    const res = all.filter((x) => x.name === 'istio_response_messages_total');
    expect(req.map((x) => [x.labels, x.value])).toEqual([[PEERS, 3]]);
    expect(res.map((x) => [x.labels, x.value])).toEqual([[PEERS, 5]]);
  });

  test('gRPC message counts are reported periodically while the stream is open, then the rest at its end', async () => {
    const { registry, filter } = setup({ tcpReportingDurationMs: 60_000 });
    const c = conn();
    const s = await grpcStream(c);
    filter.onRequestHeaders(s);
    s.set(UPSTREAM_PEER, SERVER);
    s.requestMessages = 2;
    s.responseMessages = 4;
    filter.reportLive();
    const value = async (name: string) => (await istio(registry)).find((x) => x.name === name)?.value;
    expect(await value('istio_request_messages_total')).toBe(2);
    expect(await value('istio_response_messages_total')).toBe(4);
    s.requestMessages = 5;
    s.responseMessages = 9;
    s.responseCode = 200;
    s.grpcStatus = '0';
    filter.onStreamComplete(s);
    expect(await value('istio_request_messages_total')).toBe(5);
    expect(await value('istio_response_messages_total')).toBe(9);
    filter.reportLive(); // nothing open: the timer stops, counts unchanged
    expect(await value('istio_response_messages_total')).toBe(9);
  });

  test('a failed request (no endpoint, 503 UH) without peers: Istio without peer info, flag and code', async () => {
    const { registry, filter } = setup();
    const s = stream(conn());
    s.responseCode = 503;
    s.addFlag('UH');
    filter.onStreamComplete(s);
    const total = (await istio(registry)).find((x) => x.name === 'istio_requests_total');
    expect(total?.labels).toEqual({
      reporter: 'waypoint',
      source_workload: 'unknown',
      source_canonical_service: 'unknown',
      source_canonical_revision: 'latest',
      source_workload_namespace: 'demo',
      source_principal: 'spiffe://cluster.local/ns/demo/sa/client',
      source_app: 'unknown',
      source_version: 'unknown',
      source_cluster: 'unknown',
      destination_workload: 'unknown',
      destination_workload_namespace: 'unknown',
      destination_principal: 'unknown',
      destination_app: 'unknown',
      destination_version: 'unknown',
      destination_service: 'web.demo.svc.cluster.local',
      destination_canonical_service: 'unknown',
      destination_canonical_revision: 'unknown',
      destination_service_name: 'web',
      destination_service_namespace: 'demo',
      destination_cluster: 'unknown',
      request_protocol: 'http',
      response_code: '503',
      grpc_response_status: '',
      response_flags: 'UH',
      connection_security_policy: 'mutual_tls',
    });
  });

  test('same labels, one series: requests on many tunnels add up; another code is another series', async () => {
    const { registry, filter } = setup();
    for (let i = 0; i < 50; i++) {
      const c = conn();
      c.set(DOWNSTREAM_PEER, Object.freeze({ ...CLIENT })); // a fresh peer object per tunnel, as peer_metadata makes
      const s = stream(c);
      s.set(UPSTREAM_PEER, SERVER);
      s.responseCode = i % 5 === 0 ? 404 : 200;
      filter.onStreamComplete(s);
    }
    const totals = (await istio(registry)).filter((x) => x.name === 'istio_requests_total');
    expect(totals.map((t) => [t.labels.response_code, t.value]).sort()).toEqual([
      ['200', 40],
      ['404', 10],
    ]);
  });

  test('TCP: opened when connected, bytes reported periodically and at close equal the bytes moved, closed at the end', async () => {
    const { registry, filter } = setup({ tcpReportingDurationMs: 60_000 });
    const c = conn({ kind: 'service', service: WEB, port: { name: 'tcp', port: 80, targetPort: 8080, appProtocol: '', protocol: 'TCP' } });
    c.set(DOWNSTREAM_PEER, CLIENT);
    c.set(TCP_UPSTREAM_PEER, SERVER);
    c.innerProtocol = 'TCP';
    filter.onUpstreamConnected(c);
    const get = async () => {
      const all = await istio(registry);
      const v = (n: string) => all.filter((x) => x.name === n).map((x) => x.value);
      return { all, opened: v('istio_tcp_connections_opened_total'), closed: v('istio_tcp_connections_closed_total'), sent: v('istio_tcp_sent_bytes_total'), received: v('istio_tcp_received_bytes_total') };
    };
    let m = await get();
    expect([m.opened, m.closed, m.sent, m.received]).toEqual([[1], [0], [0], [0]]);
    c.bytesReceived = 100;
    c.bytesSent = 40;
    filter.reportLive();
    m = await get();
    expect([m.opened, m.closed, m.sent, m.received]).toEqual([[1], [0], [40], [100]]);
    c.bytesReceived = 150;
    c.bytesSent = 1040;
    filter.onConnectionComplete(c);
    m = await get();
    expect([m.opened, m.closed, m.sent, m.received]).toEqual([[1], [1], [1040], [150]]);
    const labels = { ...PEERS, request_protocol: 'tcp', response_flags: '-', connection_security_policy: 'mutual_tls' };
    for (const s of m.all) {
      expect(s.labels).toEqual(labels);
      expect(s.order).toEqual(Object.keys(labels));
    }
  });

  test('a TCP tunnel that never connected (UF) is counted opened and closed at its end with its flag', async () => {
    const { registry, filter } = setup();
    const c = conn();
    c.innerProtocol = 'TCP';
    c.responseFlags = 'UF';
    filter.onConnectionComplete(c);
    const all = await istio(registry);
    expect(all.map((x) => [x.name, x.value, x.labels.response_flags, x.labels.destination_workload]).sort()).toEqual([
      ['istio_tcp_connections_closed_total', 1, 'UF', 'unknown'],
      ['istio_tcp_connections_opened_total', 1, 'UF', 'unknown'],
      ['istio_tcp_received_bytes_total', 0, 'UF', 'unknown'],
      ['istio_tcp_sent_bytes_total', 0, 'UF', 'unknown'],
    ]);
  });

  test('HTTP tunnels produce no TCP metrics', async () => {
    const { registry, filter } = setup();
    const c = conn();
    c.innerProtocol = 'HTTP/1.1';
    filter.onConnectionComplete(c);
    expect(await istio(registry)).toEqual([]);
  });

  test('20k requests with random paths and headers neither add series nor grow the caches', async () => {
    const { registry, filter } = setup({ maxSeries: 100_000 });
    const run = (n: number) => {
      for (let i = 0; i < n; i++) {
        const c = conn();
        c.set(DOWNSTREAM_PEER, Object.freeze({ ...CLIENT }));
        const r = Math.random().toString(36).slice(2);
        const s = stream(c, { url: `/${r}?q=${r}`, headers: { host: `${r}.example`, 'x-random': r, 'user-agent': r, baggage: `k8s.deployment.name=${r}` } });
        s.set(UPSTREAM_PEER, SERVER);
        s.responseCode = 200;
        s.bytesSent = i;
        filter.onStreamComplete(s);
      }
    };
    run(1000);
    const before = (await istio(registry)).length;
    run(20_000);
    const after = await istio(registry);
    expect(after.length).toBe(before);
    expect(after.find((x) => x.name === 'istio_requests_total')?.value).toBe(21_000);
  });

  test('past the cache bound the caches start over and counting stays exact', async () => {
    const { registry, filter } = setup({ maxSeries: 100_000 });
    const peers = Array.from({ length: 9000 }, (_, i) => Object.freeze({ ...CLIENT, workload: `w${i}` }));
    for (let round = 0; round < 2; round++) {
      for (const p of peers) {
        const c = conn();
        c.set(DOWNSTREAM_PEER, p);
        const s = stream(c);
        s.responseCode = 200;
        filter.onStreamComplete(s);
      }
    }
    // (Only the counter is read: formatting 27k histogram series would dominate the test.)
    const totals = (await registry.getSingleMetric('istio_requests_total')!.get()).values;
    expect(totals).toHaveLength(9000);
    expect(totals.every((t) => t.value === 2)).toBe(true);
  });

  test('series are capped per metric: new label sets past maxSeries are not exported', async () => {
    const { registry, filter } = setup({ maxSeries: 3 });
    for (let code = 200; code < 210; code++) {
      const s = stream(conn());
      s.responseCode = code;
      filter.onStreamComplete(s);
    }
    const totals = (await istio(registry)).filter((x) => x.name === 'istio_requests_total');
    expect(totals.map((t) => t.labels.response_code)).toEqual(['200', '201', '202']);
  });

  test('two chains on one registry share the instruments (no double registration)', () => {
    const registry = new Registry();
    const env = filterEnv({ mesh: harness.mesh, metrics: registry });
    statsFactory.create(DEFAULT_STATS_CONFIG, env);
    expect(() => statsFactory.create(DEFAULT_STATS_CONFIG, env)).not.toThrow();
    expect(registry.getMetricsAsArray().filter((m) => m.name.startsWith('istio_'))).toHaveLength(11);
  });

  test('istio_build is 1 with component proxy', async () => {
    const { registry } = setup();
    const b = parsePrometheus(await registry.metrics()).filter((s) => s.name === 'istio_build');
    expect(b.map((x) => [x.labels, x.value])).toEqual([[{ component: 'proxy', tag: 'unknown' }, 1]]);
  });
});

describe('label values from client-supplied peer metadata', () => {
  test('are capped in length, so one series stays small whatever a peer claims', async () => {
    const { sourceLabels, MAX_LABEL_VALUE } = await import('../../../filters/stats/labels.ts');
    const huge = 'w'.repeat(60_000);
    const labels = sourceLabels({ name: '', namespace: '', cluster: '', workload: huge, type: 'deployment', service: huge, revision: '', app: huge, version: '', identity: '', region: '', availabilityZone: '', labels: {} }, 'spiffe://cluster.local/ns/demo/sa/client');
    for (const v of labels) expect(v.length).toBeLessThanOrEqual(MAX_LABEL_VALUE);
    expect(labels[1]).toBe('w'.repeat(MAX_LABEL_VALUE));
  });
});
