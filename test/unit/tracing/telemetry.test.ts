/**
 * The Telemetry API compiled for a waypoint: validation (object, field, line), attachment as
 * istiod's for a waypoint (root, waypoint namespace, service namespace, targetRefs; never
 * selector), and the merge of tracing, metrics overrides and access logging per served service.
 */
import { describe, expect, test, vi } from 'vitest';
import type { Target } from '../../../src/state/index.ts';
import { compileTelemetry, ISTIO_METRICS, NO_METRIC_OVERRIDES, NO_TELEMETRY } from '../../../src/tracing/index.ts';
import { ConfigError } from '../../../src/util/errors.ts';
import { log } from '../../../src/util/index.ts';
import { caught } from '../../helpers/config-error.ts';
import { meshConfig, namespace, service, servicePort, snapshotOf, telemetry, toGateway, toService, usesWaypoint, waypointGateway, type Doc } from '../../helpers/mesh.ts';

const PROVIDERS = {
  extensionProviders: [
    { name: 'otel', opentelemetry: { service: 'otel-collector.observability.svc.cluster.local', port: 4317 } },
    { name: 'otel-http', opentelemetry: { service: 'observability/otel.example', port: 4318, http: { path: '/v1/traces', timeout: '2s', headers: [{ name: 'x-tenant', value: 't1' }] } } },
    { name: 'zipkin', zipkin: { service: 'zipkin.istio-system.svc.cluster.local', port: 9411 } },
    { name: 'errors-log', envoyFileAccessLog: { path: '/tmp/errors.log', logFormat: { labels: { code: '%RESPONSE_CODE%', path: '%REQ(:PATH)%' } } } },
  ],
};

/** Waypoint demo/waypoint serving demo/web (same namespace) and shop/api (another namespace). */
function mesh(...extra: Doc[]) {
  return snapshotOf(
    meshConfig(PROVIDERS),
    waypointGateway('demo'),
    namespace('demo', usesWaypoint()),
    namespace('shop', usesWaypoint({ waypointNamespace: 'demo' })),
    service({ name: 'web', namespace: 'demo', vip: '10.96.0.10', ports: [servicePort('http', 80)] }),
    service({ name: 'api', namespace: 'shop', vip: '10.96.0.20', ports: [servicePort('http', 80)] }),
    ...extra,
  );
}

function target(snapshot: ReturnType<typeof mesh>, name: string): Target {
  const svc = snapshot.services.find((s) => s.name === name)!;
  return { kind: 'service', service: svc, port: svc.ports[0] };
}

const forService = (docs: Doc[], name: string) => {
  const s = mesh(...docs);
  return compileTelemetry(s, { POD_NAME: 'wp-1' }).forTarget(target(s, name));
};

describe('validation', () => {
  test('refused like istiod: sampling out of range, both selector and targetRefs, unknown fields; object, field and line named', () => {
    const err = caught(() => compileTelemetry(mesh(telemetry('t', 'demo', { tracing: [{ randomSamplingPercentage: 101 }] }))));
    expect(err).toBeInstanceOf(ConfigError);
    expect(String(err)).toMatch(/test-mesh\.yaml:\d+: document \d+: Telemetry\/demo\/t: field spec\.tracing\[0\]\.randomSamplingPercentage: randomSamplingPercentage must be in range \[0\.0, 100\.0\]/);
    expect(String(caught(() => compileTelemetry(mesh(telemetry('t', 'demo', { selector: { matchLabels: { a: 'b' } }, targetRefs: toGateway() })))))).toContain(
      'only one of targetRefs or workloadSelector can be set',
    );
    expect(String(caught(() => compileTelemetry(mesh(telemetry('t', 'demo', { tracing: [{ randomSamplingPercentag: 5 }] })))))).toContain('unknown field "randomSamplingPercentag"');
  });

  test('a provider MeshConfig does not define, a filter outside the CEL subset, a bad tag override', () => {
    expect(String(caught(() => compileTelemetry(mesh(telemetry('t', 'demo', { tracing: [{ providers: [{ name: 'otle' }] }] })))))).toMatch(
      /field spec\.tracing\[0\]\.providers\[0\]\.name: no extensionProviders entry named "otle" in MeshConfig \(known: prometheus, envoy, otel, otel-http, zipkin, errors-log\)/,
    );
    const cel = String(caught(() => compileTelemetry(mesh(telemetry('t', 'demo', { accessLogging: [{ filter: { expression: "response.duration > duration('1s')" } }] })))));
    expect(cel).toContain('field spec.accessLogging[0].filter.expression: unknown attribute response.duration');
    expect(cel).toContain('supported:');
    const upsert = String(caught(() => compileTelemetry(mesh(telemetry('t', 'demo', { metrics: [{ overrides: [{ tagOverrides: { request_host: { operation: 'UPSERT' } } }] }] })))));
    expect(upsert).toContain('tagOverrides.value must be set when operation is UPSERT');
    const label = String(caught(() => compileTelemetry(mesh(telemetry('t', 'demo', { metrics: [{ overrides: [{ tagOverrides: { 'bad-name': { value: 'request.host' } } }] }] })))));
    expect(label).toContain('is not a Prometheus label name');
  });

  test('MeshConfig: defaultProviders must name a provider; providers are typed (grpc by default, http with path, namespace stripped)', () => {
    expect(String(caught(() => compileTelemetry(snapshotOf(meshConfig({ defaultProviders: { tracing: ['nope'] } }), waypointGateway('demo')))))).toContain(
      'MeshConfig: field defaultProviders.tracing[0]: no extensionProviders entry named "nope"',
    );
    const m = mesh().meshConfig.telemetry;
    expect(m.extensionProviders.find((p) => p.name === 'otel')).toEqual({
      name: 'otel',
      kind: 'opentelemetry',
      opentelemetry: expect.objectContaining({ host: 'otel-collector.observability.svc.cluster.local', port: 4317, protocol: 'grpc' }),
    });
    expect(m.extensionProviders.find((p) => p.name === 'otel-http')).toMatchObject({
      opentelemetry: { host: 'otel.example', protocol: 'http', path: '/v1/traces', timeoutMs: 2000, headers: { 'x-tenant': 't1' } },
    });
  });
});

describe('attachment (istiod applicableTelemetries for a waypoint)', () => {
  const sampling = (t: ReturnType<typeof forService>) => t.tracing?.samplingPercent;

  test('nothing configured: no tracing, no overrides, MeshConfig access log', () => {
    expect(forService([], 'web')).toBe(NO_TELEMETRY);
  });

  test('root namespace = mesh-wide; the waypoint namespace overrides it; a service namespace overrides both', () => {
    const root = telemetry('mesh', 'istio-system', { tracing: [{ providers: [{ name: 'otel' }], randomSamplingPercentage: 10 }] });
    const demo = telemetry('ns', 'demo', { tracing: [{ randomSamplingPercentage: 20 }] });
    const shop = telemetry('ns', 'shop', { tracing: [{ randomSamplingPercentage: 30 }] });
    expect(sampling(forService([root], 'web'))).toBe(10);
    expect(sampling(forService([root, demo], 'web'))).toBe(20);
    expect(sampling(forService([root, demo], 'api'))).toBe(20);
    expect(sampling(forService([root, demo, shop], 'api'))).toBe(30);
    expect(sampling(forService([root, demo, shop], 'web'))).toBe(20);
  });

  test('targetRefs: the Service (from its namespace), the Gateway (services of the waypoint namespace), the GatewayClass (root)', () => {
    const root = telemetry('mesh', 'istio-system', { tracing: [{ providers: [{ name: 'otel' }], randomSamplingPercentage: 1 }] });
    const toWeb = telemetry('web', 'demo', { targetRefs: toService('web'), tracing: [{ randomSamplingPercentage: 50 }] });
    const toApi = telemetry('api', 'shop', { targetRefs: toService('api'), tracing: [{ randomSamplingPercentage: 60 }] });
    const wrongNs = telemetry('api', 'demo', { targetRefs: toService('api'), tracing: [{ randomSamplingPercentage: 70 }] });
    const gw = telemetry('gw', 'demo', { targetRefs: toGateway(), tracing: [{ randomSamplingPercentage: 80 }] });
    const cls = telemetry('cls', 'istio-system', { targetRefs: [{ group: 'gateway.networking.k8s.io', kind: 'GatewayClass', name: 'istio-waypoint' }], tracing: [{ randomSamplingPercentage: 90 }] });
    expect(sampling(forService([root, toWeb, toApi], 'web'))).toBe(50);
    expect(sampling(forService([root, toWeb, toApi], 'api'))).toBe(60);
    expect(sampling(forService([root, wrongNs], 'api'))).toBe(1);
    expect(sampling(forService([root, gw], 'web'))).toBe(80);
    // As istiod: a Gateway-attached Telemetry is read only for services of the waypoint's namespace.
    expect(sampling(forService([root, gw], 'api'))).toBe(1);
    // GatewayClass from the root namespace: istiod looks in the service's namespace, so not for these.
    expect(sampling(forService([root, cls], 'web'))).toBe(1);
  });

  test('selector Telemetries never apply to a waypoint; the oldest namespace-wide one wins', () => {
    const sel = telemetry('sel', 'demo', { selector: { matchLabels: { app: 'web' } }, tracing: [{ providers: [{ name: 'otel' }] }] });
    expect(forService([sel], 'web').tracing).toBeUndefined();
    const older = telemetry('b', 'istio-system', { tracing: [{ providers: [{ name: 'otel' }], randomSamplingPercentage: 5 }] }, { created: '2024-01-01T00:00:00Z' });
    const newer = telemetry('a', 'istio-system', { tracing: [{ providers: [{ name: 'otel' }], randomSamplingPercentage: 6 }] }, { created: '2025-01-01T00:00:00Z' });
    expect(sampling(forService([newer, older], 'web'))).toBe(5);
  });
});

describe('tracing merge', () => {
  test('provider, sampling precedence and Istio defaults; disableSpanReporting; CLIENT-mode entries ignored', () => {
    const t = forService([telemetry('mesh', 'istio-system', { tracing: [{ providers: [{ name: 'otel-http' }], customTags: { env: { literal: { value: 'prod' } }, pod: { environment: { name: 'POD_NAME' } } } }] })], 'web').tracing!;
    expect(t.exporter).toMatchObject({ kind: 'provider', name: 'otel-http' });
    expect(t.samplingPercent).toBeUndefined(); // → defaultConfig.tracing.sampling, else 1 % (runtime)
    expect(t.useRequestIdForTraceSampling).toBe(true);
    expect(t.attributes).toMatchObject({ component: 'proxy', env: 'prod', pod: 'wp-1', 'istio.canonical_service': 'waypoint', 'istio.namespace': 'demo', 'istio.mesh_id': 'cluster.local' });
    const off = forService([telemetry('mesh', 'istio-system', { tracing: [{ providers: [{ name: 'otel' }] }] }), telemetry('ns', 'demo', { tracing: [{ disableSpanReporting: true }] })], 'web');
    expect(off.tracing).toBeUndefined();
    const client = forService([telemetry('mesh', 'istio-system', { tracing: [{ match: { mode: 'CLIENT' }, providers: [{ name: 'otel' }] }] })], 'web');
    expect(client.tracing?.exporter).toEqual({ kind: 'env' }); // no SERVER provider: the OTEL_* collector
  });

  test('a Zipkin provider cannot be exported to: no tracing for that traffic', () => {
    expect(forService([telemetry('mesh', 'istio-system', { tracing: [{ providers: [{ name: 'zipkin' }] }] })], 'web').tracing).toBeUndefined();
  });

  test('a provider kind of Istio node-waypoint does not implement is warned about by name, ext_authz ones are not', () => {
    const warn = vi.spyOn(log, 'warn').mockImplementation(() => undefined);
    try {
      compileTelemetry(snapshotOf(meshConfig({ extensionProviders: [...PROVIDERS.extensionProviders, { name: 'authz', envoyExtAuthzGrpc: { service: 'a', port: 9000 } }] }), waypointGateway('demo')));
      const lines = warn.mock.calls.map((c) => String(c[1]));
      expect(lines).toContain('telemetry: MeshConfig extensionProviders zipkin: zipkin is not supported by node-waypoint (it implements opentelemetry, envoyFileAccessLog, prometheus and ext_authz providers); ignored');
      expect(lines.filter((l) => l.includes('not supported by node-waypoint'))).toHaveLength(1);
    } finally {
      warn.mockRestore();
    }
  });

  test('without Telemetry: MeshConfig enableTracing: true exports to the OTEL_* collector at defaultConfig.tracing.sampling', () => {
    const s = snapshotOf(meshConfig({ enableTracing: true, defaultConfig: { tracing: { sampling: 25 } } }), waypointGateway('demo'), namespace('demo', usesWaypoint()), service({ name: 'web', namespace: 'demo', vip: '10.96.0.10', ports: [servicePort('http', 80)] }));
    const t = compileTelemetry(s).forTarget(target(s, 'web')).tracing!;
    expect(t.exporter).toEqual({ kind: 'env' });
    expect(t.samplingPercent).toBe(25);
  });
});

describe('metrics merge', () => {
  test('disable one metric, override tags (upsert, remove), later entries win', () => {
    const t = forService(
      [
        telemetry('mesh', 'istio-system', { metrics: [{ providers: [{ name: 'prometheus' }], overrides: [{ match: { metric: 'REQUEST_COUNT' }, tagOverrides: { request_host: { value: 'request.host' }, source_app: { operation: 'REMOVE' } } }] }] }),
        telemetry('ns', 'demo', { metrics: [{ overrides: [{ match: { metric: 'REQUEST_SIZE' }, disabled: true }, { match: { metric: 'REQUEST_COUNT' }, tagOverrides: { request_host: { value: "'fixed'" } } }] }] }),
      ],
      'web',
    ).metrics;
    expect(t.disabled).toBe(false);
    expect(t.overrides.get(ISTIO_METRICS.REQUEST_SIZE)).toEqual({ drop: true, tags: [] });
    const count = t.overrides.get('istio_requests_total')!;
    expect(count.drop).toBe(false);
    expect(count.tags.map((x) => [x.name, x.remove, x.value?.text])).toEqual([
      ['request_host', false, "'fixed'"],
      ['source_app', true, undefined],
    ]);
  });

  test('ALL_METRICS disabled turns the metrics off; no prometheus provider in scope does too', () => {
    expect(forService([telemetry('mesh', 'istio-system', { metrics: [{ overrides: [{ disabled: true }] }] })], 'web').metrics.disabled).toBe(true);
    const s = snapshotOf(meshConfig({ defaultProviders: { accessLogging: ['envoy'] } }), waypointGateway('demo'), namespace('demo', usesWaypoint()), service({ name: 'web', namespace: 'demo', vip: '10.96.0.10', ports: [servicePort('http', 80)] }));
    expect(compileTelemetry(s).forTarget(target(s, 'web')).metrics.disabled).toBe(true);
    expect(forService([telemetry('mesh', 'istio-system', { metrics: [{ providers: [{ name: 'prometheus' }] }] })], 'web').metrics).toBe(NO_METRIC_OVERRIDES);
  });
});

describe('access logging merge', () => {
  test('providers with a filter; disabled by a narrower Telemetry; unset leaves MeshConfig in charge', () => {
    const root = telemetry('mesh', 'istio-system', { accessLogging: [{ providers: [{ name: 'errors-log' }], filter: { expression: 'response.code >= 400' } }] });
    const logs = forService([root], 'web').accessLogs!;
    expect(logs.map((l) => [l.provider, l.file.path, l.filter?.text])).toEqual([['errors-log', '/tmp/errors.log', 'response.code >= 400']]);
    expect(forService([root, telemetry('ns', 'shop', { accessLogging: [{ disabled: true }] })], 'api').accessLogs).toEqual([]);
    expect(forService([telemetry('mesh', 'istio-system', { tracing: [{ providers: [{ name: 'otel' }] }] })], 'web').accessLogs).toBeUndefined();
    expect(forService([telemetry('mesh', 'istio-system', { accessLogging: [{ providers: [{ name: 'envoy' }] }] })], 'web').accessLogs?.[0].file).toEqual({ path: '/dev/stdout', format: undefined });
  });
});
