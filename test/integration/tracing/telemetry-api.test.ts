/**
 * The Telemetry API's metrics and access logs on the waypoint, end to end, 127.0.147.x:
 * `metrics[].overrides` (a metric disabled, a tag upserted from a CEL value, a tag removed; every
 * metric off for another service) seen on `/stats/prometheus`, and `accessLogging[]` (file
 * providers with a `logFormat`, a `filter.expression`, the narrower Telemetry replacing the
 * mesh-wide providers) seen in the files.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, test, vi } from 'vitest';
import { authorizationPolicy, servicePort, telemetry, toGateway, toService } from '../../helpers/mesh.ts';
import { samplesOf, scrape } from '../../helpers/prometheus.ts';
import { addEntry, echoService, type TestTopology } from '../../helpers/topology.ts';
import { get, tracedTopology } from './rig.ts';

let dir: string;
let topo: TestTopology;
let quiet: { host: string; port: number; close(): Promise<void> };
const file = (name: string) => path.join(dir, name);
const lines = (name: string): string[] => (fs.existsSync(file(name)) ? fs.readFileSync(file(name), 'utf8').split('\n').filter(Boolean) : []);

beforeAll(async () => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'wp-telemetry-api-'));
  topo = await tracedTopology(
    147,
    {
      extensionProviders: [
        { name: 'all', envoyFileAccessLog: { path: file('all.log') } },
        { name: 'errors', envoyFileAccessLog: { path: file('errors.log'), logFormat: { labels: { code: '%RESPONSE_CODE%', method: '%REQ(:METHOD)%', path: '%REQ(X-ENVOY-ORIGINAL-PATH?:PATH)%', flags: '%RESPONSE_FLAGS%' } } } },
      ],
    },
    [
      echoService('quiet', '127.0.147.101', servicePort('http', 80, 'http')),
      telemetry('mesh', 'istio-system', { accessLogging: [{ providers: [{ name: 'all' }] }] }),
      telemetry('echo', 'demo', {
        targetRefs: toService('echo'),
        accessLogging: [{ providers: [{ name: 'errors' }], filter: { expression: 'response.code >= 400' } }],
        metrics: [
          {
            providers: [{ name: 'prometheus' }],
            overrides: [
              { match: { metric: 'REQUEST_SIZE' }, disabled: true },
              { match: { metric: 'REQUEST_COUNT' }, tagOverrides: { request_host: { value: 'request.host' }, source_app: { operation: 'REMOVE' }, response_code: { value: "'2xx-or-not'" } } },
            ],
          },
        ],
      }),
      telemetry('quiet', 'demo', { targetRefs: toService('quiet'), metrics: [{ overrides: [{ match: { metric: 'ALL_METRICS' }, disabled: true }] }] }),
      authorizationPolicy('deny', { targetRefs: toGateway(), action: 'DENY', rules: [{ to: [{ operation: { paths: ['/denied'] } }] }] }, { namespace: 'demo' }),
    ],
  );
  quiet = await addEntry(topo, '127.0.147.101:80');
  expect((await get(topo.entry, '/fine')).status).toBe(200);
  expect((await get(topo.entry, '/denied')).status).toBe(403);
  expect((await get(quiet, '/q')).status).toBe(200);
});

afterAll(async () => {
  await quiet?.close();
  await topo?.close();
  fs.rmSync(dir, { recursive: true, force: true });
});

describe('metrics overrides', () => {
  const series = async (name: string, service: string) =>
    samplesOf(await scrape(topo.waypoint!.addresses.admin), name).filter((s) => s.name === name && s.labels.destination_service_name === service);

  test('REQUEST_COUNT: request_host upserted from request.host, source_app removed, response_code replaced', async () => {
    const got = await series('istio_requests_total', 'echo');
    // The 200 and the 403 (denied before any upstream: destination workload unknown).
    expect(got.map((s) => s.labels.destination_workload).sort()).toEqual(['echo-1', 'unknown']);
    for (const s of got) {
      expect(s.value).toBe(1);
      expect(s.labels).toMatchObject({ request_host: 'echo.demo.svc.cluster.local', response_code: '2xx-or-not', destination_service_name: 'echo', reporter: 'waypoint' });
      expect(s.labels.source_app).toBeUndefined();
    }
  });

  test('REQUEST_SIZE disabled; the other metrics keep their standard labels', async () => {
    expect(await series('istio_request_bytes_count', 'echo')).toEqual([]);
    const response = await series('istio_response_bytes_count', 'echo');
    expect(response.map((s) => s.labels.response_code).sort()).toEqual(['200', '403']);
    expect(response[0].labels.source_app).toBe('client');
    expect(response[0].labels.request_host).toBeUndefined();
  });

  test('ALL_METRICS disabled for Service quiet: none of its series', async () => {
    const text = await scrape(topo.waypoint!.addresses.admin);
    expect(samplesOf(text, 'istio_').filter((s) => s.labels.destination_service_name === 'quiet')).toEqual([]);
  });
});

describe('access logging', () => {
  test('echo: only the errors provider (narrower Telemetry), only the 403 (filter), in its JSON format', async () => {
    const got = await vi.waitFor(() => {
      const l = lines('errors.log');
      expect(l.length).toBe(1);
      return l;
    });
    expect(JSON.parse(got[0])).toEqual({ code: 403, method: 'GET', path: '/denied', flags: '-' });
  });

  test('quiet: the mesh-wide provider, Istio TEXT line', async () => {
    const got = await vi.waitFor(() => {
      const l = lines('all.log');
      expect(l.length).toBe(1);
      return l;
    });
    expect(got[0]).toMatch(/^\[[^\]]+\] "GET \/q HTTP\/1\.1" 200 - via_upstream /);
  });
});
