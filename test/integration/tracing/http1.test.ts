/**
 * The waypoint's span of HTTP/1.1 requests, end to end (tunnel → waypoint → inbound → echo app,
 * spans exported over OTLP/HTTP to an in-process collector), 127.0.144.x: parentage client →
 * waypoint → app, the attribute set, sampling (100 %, 0 %, an incoming decision either way, forced),
 * B3 in → B3 out, and the ERROR status of a local reply (an RBAC denial).
 */
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { addEntry, echoService } from '../../helpers/topology.ts';
import { authorizationPolicy, servicePort, telemetry, toGateway, toService } from '../../helpers/mesh.ts';
import { startOtlpReceiver, type OtlpReceiver } from '../../helpers/otlp-receiver.ts';
import type { TestTopology } from '../../helpers/topology.ts';
import { get, otelProvider, randomHex, spansOf, traceparent, tracedTopology } from './rig.ts';

let rx: OtlpReceiver;
let topo: TestTopology;
/** An entry toward Service `zero` (sampling 0 %). */
let zero: { host: string; port: number; close(): Promise<void> };

beforeAll(async () => {
  rx = await startOtlpReceiver('127.0.144.200');
  topo = await tracedTopology(144, { extensionProviders: [otelProvider('otel', '127.0.144.200', rx.httpPort, true)] }, [
    telemetry('mesh', 'istio-system', { tracing: [{ providers: [{ name: 'otel' }], randomSamplingPercentage: 100, customTags: { team: { literal: { value: 'blue' } }, tenant: { header: { name: 'x-tenant', defaultValue: 'none' } }, route: { formatter: { value: '%REQ(:METHOD)% %REQ(:PATH)%' } } } }] }),
    echoService('zero', '127.0.144.101', servicePort('http', 80, 'http')),
    telemetry('zero', 'demo', { targetRefs: toService('zero'), tracing: [{ randomSamplingPercentage: 0 }] }),
    authorizationPolicy('deny-admin', { targetRefs: toGateway(), action: 'DENY', rules: [{ to: [{ operation: { paths: ['/admin'] } }] }] }, { namespace: 'demo' }),
  ]);
  zero = await addEntry(topo, '127.0.144.101:80');
});

afterAll(async () => {
  await zero?.close();
  await topo?.close();
  await rx?.close();
});

describe('parentage and attributes', () => {
  test("the waypoint's span is the client span's child and the app's parent (W3C)", async () => {
    const traceId = randomHex(16);
    const client = randomHex(8);
    const seen = await get(topo.entry, '/items?id=7', { traceparent: `00-${traceId}-${client}-01`, tracestate: 'vendor=1', 'x-tenant': 'acme' });
    expect(seen.status).toBe(200);
    const [span] = await spansOf(rx, traceId);
    expect(span.parentSpanId).toBe(client);
    const app = traceparent(seen.headers.traceparent);
    expect(app).toEqual({ traceId, spanId: span.spanId, sampled: true });
    expect(seen.headers.tracestate).toBe('vendor=1');
    expect(span.name).toBe('echo.demo.svc.cluster.local:80/*');
    expect(span.kind).toBe(2); // SERVER
    expect(span.status).toBe(0);
    expect(span.resource['service.name']).toBe('waypoint.demo');
    expect(span.attributes).toMatchObject({
      component: 'proxy',
      'http.method': 'GET',
      'http.url': 'http://echo.demo.svc.cluster.local/items?id=7',
      'http.protocol': 'HTTP/1.1',
      'http.status_code': '200',
      response_flags: '-',
      user_agent: 'tracing-test',
      downstream_cluster: '-',
      'peer.address': '127.0.144.50',
      request_size: '0',
      upstream_cluster: 'inbound-vip|80|http|echo.demo.svc.cluster.local',
      'upstream_cluster.name': 'inbound-vip|80|http|echo.demo.svc.cluster.local',
      upstream_address: '127.0.144.11:8080',
      'guid:x-request-id': seen.headers['x-request-id'],
      'istio.canonical_service': 'waypoint',
      'istio.canonical_revision': 'latest',
      'istio.namespace': 'demo',
      'istio.mesh_id': 'cluster.local',
      'istio.cluster_id': 'Kubernetes',
      'istio.source_workload': 'client',
      'istio.source_namespace': 'demo',
      'istio.destination_workload': 'echo-1',
      'istio.destination_canonical_service': 'echo',
      'istio.destination_app_version': 'v1',
      team: 'blue',
      tenant: 'acme',
      route: 'GET /items?id=7',
    });
    expect(Number(span.attributes.response_size)).toBeGreaterThan(0);
    expect(span.attributes.error).toBeUndefined();
  });

  test('no parent: a new trace, sampled at 100 %, propagated as W3C', async () => {
    const seen = await get(topo.entry, '/');
    const app = traceparent(seen.headers.traceparent);
    expect(app.sampled).toBe(true);
    const [span] = await spansOf(rx, app.traceId);
    expect(span.spanId).toBe(app.spanId);
    expect(span.parentSpanId).toBe('');
    expect(span.attributes.tenant).toBe('none');
  });

  test('a local reply (RBAC denial, 403) has the ERROR status', async () => {
    const traceId = randomHex(16);
    const seen = await get(topo.entry, '/admin', { traceparent: `00-${traceId}-${randomHex(8)}-01` });
    expect(seen.status).toBe(403);
    const [span] = await spansOf(rx, traceId);
    expect(span.status).toBe(2);
    expect(span.attributes['http.status_code']).toBe('403');
  });
});

describe('sampling', () => {
  test('0 %: no span, yet the app gets the context with the unsampled flag', async () => {
    const seen = await get(zero, '/');
    const app = traceparent(seen.headers.traceparent);
    expect(app.sampled).toBe(false);
    // A sampled request after it goes through the same queue: once its span is in, the other would be too.
    const marker = traceparent((await get(topo.entry, '/')).headers.traceparent);
    await spansOf(rx, marker.traceId);
    expect(rx.spans.filter((s) => s.traceId === app.traceId)).toEqual([]);
  });

  test('an incoming sampled flag is respected at 0 %, an incoming unsampled one at 100 %', async () => {
    const sampled = randomHex(16);
    const seen = await get(zero, '/', { traceparent: `00-${sampled}-${randomHex(8)}-01` });
    expect(traceparent(seen.headers.traceparent).sampled).toBe(true);
    const unsampled = randomHex(16);
    const seen2 = await get(topo.entry, '/', { traceparent: `00-${unsampled}-${randomHex(8)}-00` });
    const app = traceparent(seen2.headers.traceparent);
    expect(app).toMatchObject({ traceId: unsampled, sampled: false });
    await spansOf(rx, sampled);
    const marker = traceparent((await get(topo.entry, '/')).headers.traceparent);
    await spansOf(rx, marker.traceId);
    expect(rx.spans.filter((s) => s.traceId === unsampled)).toEqual([]);
  });

  test('x-envoy-force-trace samples at 0 %', async () => {
    const seen = await get(zero, '/', { 'x-envoy-force-trace': 'true' });
    const app = traceparent(seen.headers.traceparent);
    expect(app.sampled).toBe(true);
    await spansOf(rx, app.traceId);
  });
});

describe('B3 in → B3 out', () => {
  test('multi-header: the app gets x-b3-* naming the waypoint span, no traceparent added', async () => {
    const traceId = randomHex(16);
    const client = randomHex(8);
    const seen = await get(topo.entry, '/', { 'x-b3-traceid': traceId, 'x-b3-spanid': client, 'x-b3-sampled': '1' });
    const [span] = await spansOf(rx, traceId);
    expect(span.parentSpanId).toBe(client);
    expect(seen.headers).toMatchObject({ 'x-b3-traceid': traceId, 'x-b3-spanid': span.spanId, 'x-b3-parentspanid': client, 'x-b3-sampled': '1' });
    expect(seen.headers.traceparent).toBeUndefined();
  });

  test('single header with a 64-bit trace id: written back 64-bit', async () => {
    const short = randomHex(8);
    const client = randomHex(8);
    const seen = await get(topo.entry, '/', { b3: `${short}-${client}-1` });
    const [span] = await spansOf(rx, `0000000000000000${short}`);
    expect(span.parentSpanId).toBe(client);
    expect(seen.headers.b3).toBe(`${short}-${span.spanId}-1-${client}`);
  });
});
