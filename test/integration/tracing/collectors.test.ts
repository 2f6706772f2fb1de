/**
 * Where spans go, 127.0.146.x: with MeshConfig `enableTracing: true` and no Telemetry, to the
 * collector the `OTEL_*` environment variables name, sampled at `defaultConfig.tracing.sampling`;
 * a collector that accepts connections and never answers costs no request (every request is
 * answered while exports hang), and the spans it loses are counted on `/stats/prometheus`.
 */
import net from 'node:net';
import { afterAll, beforeAll, expect, test, vi } from 'vitest';
import { servicePort, telemetry, toService } from '../../helpers/mesh.ts';
import { startOtlpReceiver, type OtlpReceiver } from '../../helpers/otlp-receiver.ts';
import { samplesOf, scrape } from '../../helpers/prometheus.ts';
import { addEntry, echoService, type TestTopology } from '../../helpers/topology.ts';
import { get, otelProvider, spansOf, traceparent, tracedTopology } from './rig.ts';

let rx: OtlpReceiver;
let topo: TestTopology;
let silent: net.Server;
const held: net.Socket[] = [];
let viaSilent: { host: string; port: number; close(): Promise<void> };

beforeAll(async () => {
  rx = await startOtlpReceiver('127.0.146.201');
  // A collector that accepts and then says nothing.
  silent = net.createServer((s) => held.push(s));
  await new Promise<void>((r) => silent.listen(0, '127.0.146.200', () => r()));
  const silentPort = (silent.address() as net.AddressInfo).port;
  process.env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT = `http://127.0.146.201:${rx.httpPort}/v1/traces`;
  process.env.OTEL_SERVICE_NAME = 'waypoint-from-env';
  topo = await tracedTopology(
    146,
    {
      enableTracing: true,
      defaultConfig: { tracing: { sampling: 100 } },
      extensionProviders: [otelProvider('silent', '127.0.146.200', silentPort, true, { http: { path: '/v1/traces', timeout: '0.3s' } })],
    },
    [echoService('slow-traces', '127.0.146.101', servicePort('http', 80, 'http')), telemetry('silent', 'demo', { targetRefs: toService('slow-traces'), tracing: [{ providers: [{ name: 'silent' }], randomSamplingPercentage: 100 }] })],
  );
  viaSilent = await addEntry(topo, '127.0.146.101:80');
});

afterAll(async () => {
  delete process.env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT;
  delete process.env.OTEL_SERVICE_NAME;
  await viaSilent?.close();
  await topo?.close();
  for (const s of held) s.destroy();
  await new Promise((r) => silent?.close(r));
  await rx?.close();
});

test('enableTracing without a Telemetry provider: spans go to OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, named by OTEL_SERVICE_NAME', async () => {
  const seen = await get(topo.entry, '/');
  const app = traceparent(seen.headers.traceparent);
  expect(app.sampled).toBe(true);
  const [span] = await spansOf(rx, app.traceId);
  expect(span.resource['service.name']).toBe('waypoint-from-env');
  expect(span.via).toBe('http');
});

test('a collector that never answers: every request is answered, the lost spans are counted', async () => {
  const n = 20;
  const answers = await Promise.all(Array.from({ length: n }, () => get(viaSilent, '/')));
  expect(answers.map((a) => a.status)).toEqual(Array(n).fill(200));
  expect(answers.every((a) => traceparent(a.headers.traceparent).sampled)).toBe(true);
  const dropped = await vi.waitFor(
    async () => {
      const s = samplesOf(await scrape(topo.waypoint!.addresses.admin), 'waypoint_tracing_spans_dropped_total').find((x) => x.labels.provider === 'silent' && x.labels.reason === 'export_failed');
      expect(s?.value).toBeGreaterThanOrEqual(n);
      return s!.value;
    },
    { timeout: 15_000, interval: 200 },
  );
  expect(dropped).toBe(n);
  expect(held.length).toBeGreaterThan(0); // the exporter did reach the silent collector
});
