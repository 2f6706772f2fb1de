/**
 * Spans of h2c and gRPC requests, exported over OTLP/gRPC, 127.0.145.x: a `grpc` service port
 * (HTTP/2 to the app), an app that answers with the trace context it received, parentage client →
 * waypoint → app for an h2c request and a gRPC call (grpc-js on both ends of the path), the gRPC
 * tags, and `spawnUpstreamSpan`: a CLIENT span per attempt between the waypoint's span and the app.
 */
import http2 from 'node:http2';
import * as grpc from '@grpc/grpc-js';
import { afterAll, beforeAll, expect, test } from 'vitest';
import { telemetry } from '../../helpers/mesh.ts';
import { startOtlpReceiver, type OtlpReceiver } from '../../helpers/otlp-receiver.ts';
import type { TestTopology } from '../../helpers/topology.ts';
import { otelProvider, randomHex, spansOf, traceparent, tracedTopology } from './rig.ts';

let rx: OtlpReceiver;
let topo: TestTopology;
let app: http2.Http2Server;

/** The app: gRPC calls get their `traceparent` as the reply message, other requests in a header. */
function startApp(): Promise<http2.Http2Server> {
  const server = http2.createServer((req, res) => {
    const tp = String(req.headers.traceparent ?? '');
    req.resume();
    req.on('end', () => {
      if (String(req.headers['content-type']).startsWith('application/grpc')) {
        res.writeHead(200, { 'content-type': 'application/grpc' });
        const msg = Buffer.from(tp);
        const frame = Buffer.alloc(5 + msg.length);
        frame.writeUInt32BE(msg.length, 1);
        msg.copy(frame, 5);
        res.addTrailers({ 'grpc-status': '0' });
        res.end(frame);
      } else {
        res.writeHead(200, { 'x-seen-traceparent': tp, 'content-type': 'text/plain' });
        res.end('ok');
      }
    });
  });
  return new Promise((resolve) => server.listen(8080, '127.0.145.11', () => resolve(server)));
}

beforeAll(async () => {
  rx = await startOtlpReceiver('127.0.145.200');
  app = await startApp();
  const filters = [
    { name: 'istio.peer_metadata' },
    { name: 'istio.tracing', config: { spawnUpstreamSpan: true } },
    { name: 'istio.authz' },
    { name: 'istio.stats' },
    { name: 'envoy.filters.http.router' },
  ];
  topo = await tracedTopology(
    145,
    { extensionProviders: [otelProvider('otel-grpc', '127.0.145.200', rx.grpcPort, false)] },
    [telemetry('mesh', 'istio-system', { tracing: [{ providers: [{ name: 'otel-grpc' }], randomSamplingPercentage: 100 }] })],
    { portName: 'grpc', backends: false, bootstrap: { filters } },
  );
});

afterAll(async () => {
  await topo?.close();
  await new Promise((r) => app?.close(r));
  await rx?.close();
});

/** Server span, its upstream (CLIENT) child, and what the app saw, for trace `traceId`. */
async function chain(traceId: string, client: string, seenByApp: string) {
  const spans = await spansOf(rx, traceId, 2);
  const server = spans.find((s) => s.kind === 2)!;
  const upstream = spans.find((s) => s.kind === 3)!;
  expect(server.parentSpanId).toBe(client);
  expect(upstream.parentSpanId).toBe(server.spanId);
  expect(traceparent(seenByApp)).toEqual({ traceId, spanId: upstream.spanId, sampled: true });
  expect(upstream.name).toBe('router inbound-vip|80|http|echo.demo.svc.cluster.local egress');
  expect(upstream.attributes).toMatchObject({ upstream_address: '127.0.145.11:8080', 'http.status_code': '200' });
  expect(spans.every((s) => s.via === 'grpc')).toBe(true);
  return { server, upstream };
}

test('h2c: client → waypoint → upstream span → app', async () => {
  const traceId = randomHex(16);
  const client = randomHex(8);
  const session = http2.connect(`http://${topo.entry.host}:${topo.entry.port}`);
  const seen = await new Promise<string>((resolve, reject) => {
    const req = session.request({ ':path': '/h2', ':authority': 'echo.demo.svc.cluster.local', traceparent: `00-${traceId}-${client}-01` });
    req.on('response', (h) => resolve(String(h['x-seen-traceparent'])));
    req.on('error', reject);
    req.resume();
    req.end();
  });
  session.close();
  const { server } = await chain(traceId, client, seen);
  expect(server.attributes).toMatchObject({ 'http.protocol': 'HTTP/2', 'http.method': 'GET', 'http.status_code': '200' });
});

test('gRPC: the call is traced with its gRPC tags', async () => {
  const traceId = randomHex(16);
  const client = randomHex(8);
  const Client = grpc.makeGenericClientConstructor(
    { echo: { path: '/test.Echo/Echo', requestStream: false, responseStream: false, requestSerialize: (b: Buffer) => b, requestDeserialize: (b: Buffer) => b, responseSerialize: (b: Buffer) => b, responseDeserialize: (b: Buffer) => b } },
    'Echo',
  );
  const c = new Client(`${topo.entry.host}:${topo.entry.port}`, grpc.credentials.createInsecure()) as unknown as grpc.Client & { echo(b: Buffer, md: grpc.Metadata, cb: (e: grpc.ServiceError | null, v?: Buffer) => void): void };
  const md = new grpc.Metadata();
  md.set('traceparent', `00-${traceId}-${client}-01`);
  const reply = await new Promise<Buffer>((resolve, reject) => c.echo(Buffer.from('hi'), md, (e, v) => (e ? reject(e) : resolve(v!))));
  c.close();
  const { server } = await chain(traceId, client, reply.toString());
  expect(server.attributes).toMatchObject({ 'grpc.path': '/test.Echo/Echo', 'grpc.content_type': 'application/grpc', 'grpc.status_code': '0', 'http.protocol': 'HTTP/2' });
  expect(server.name).toBe('echo.demo.svc.cluster.local:80/*');
});
