/**
 * The filter harness itself (test/helpers/filter-harness.ts): a factory is built as the waypoint's
 * registry builds it (parseConfig, dependsOn/after, create with a FilterEnv), and the terminal
 * answers forwarded requests so the response-header and completion phases run through the chain.
 */
import { describe, expect, test } from 'vitest';
import { peerMetadataFactory } from '../../../filters/peer-metadata/index.ts';
import { statsFactory } from '../../../filters/stats/index.ts';
import { FilterStatus, type Filter, type FilterFactory, type StreamContext } from '../../../src/pipeline/index.ts';
import { ConfigError } from '../../../src/util/index.ts';
import { FilterHarness, filterEnv } from '../../helpers/filter-harness.ts';
import { parsePrometheus } from '../../helpers/prometheus.ts';

/** A factory recording the phases its filter saw. */
function recording(seen: string[], extra: Partial<FilterFactory<string>> = {}): FilterFactory<string> {
  return {
    name: 'test.recording',
    parseConfig: (raw) => {
      if (raw !== undefined && typeof raw !== 'string') throw new ConfigError('config must be a string', { field: 'tag' });
      return raw ?? 'none';
    },
    create: (config, env): Filter => {
      seen.push(`create:${config}:${env.mesh.current === undefined ? 'no mesh' : 'mesh'}`);
      return {
        name: 'test.recording',
        onRequestHeaders: () => (seen.push('request'), FilterStatus.Continue),
        onResponseHeaders: (s: StreamContext, h) => (seen.push(`response:${s.responseCode}`), h.set('x-seen', config)),
        onStreamComplete: (s: StreamContext) => void seen.push(`complete:${s.responseCode}`),
      };
    },
    ...extra,
  };
}

describe('FilterHarness.fromFactory', () => {
  test('parseConfig and create run; the terminal answers 200 and every phase runs through the chain', async () => {
    const seen: string[] = [];
    const h = FilterHarness.fromFactory(recording(seen), 'cfg');
    const { status, response } = await h.request(h.connection(), { headers: { host: 'echo.demo:8080' } });
    expect(status).toBe(FilterStatus.Continue);
    expect([response.status, response.body, response.headers.get('x-seen')]).toEqual([200, 'ok', 'cfg']);
    expect(seen).toEqual(['create:cfg:mesh', 'request', 'response:200', 'complete:200']);
    expect(h.forwarded).toHaveLength(1);
  });

  test('the terminal answer is configurable, HTTP/2 included', async () => {
    const seen: string[] = [];
    const h = FilterHarness.fromFactory(recording(seen), undefined, { answer: { status: 503, body: 'down' } });
    try {
      const s = await h.h2Stream(h.connection(), { headers: { host: 'echo.demo:8080' } });
      expect(await h.run(s)).toBe(FilterStatus.Continue);
      const r = await h.response(s);
      expect([r.status, r.body]).toEqual([503, 'down']);
      await new Promise((resolve) => setImmediate(resolve));
      expect(seen).toEqual(['create:none:mesh', 'request', 'response:503', 'complete:503']);
    } finally {
      h.close();
    }
  });

  test('a config error comes back as the registry reports it', () => {
    expect(() => FilterHarness.fromFactory(recording([]), 7)).toThrow(ConfigError);
    expect(() => FilterHarness.fromFactory(recording([]), 7)).toThrow(expect.objectContaining({ location: expect.objectContaining({ field: 'filters[0].config.tag' }) }));
  });

  test('dependsOn and after are checked against the filters listed before', () => {
    const needsPeers = recording([], { dependsOn: ['istio.peer_metadata'] });
    expect(() => FilterHarness.fromFactory(needsPeers, undefined)).toThrow(/needs "istio.peer_metadata" earlier/);
    expect(FilterHarness.fromFactory(needsPeers, undefined, { before: [[peerMetadataFactory, undefined]] }).chain.filters.map((f) => f.name)).toEqual([
      'istio.peer_metadata',
      'test.recording',
      'envoy.filters.http.router',
    ]);
  });

  test('istio.stats counts a forwarded request through the real completion phase', async () => {
    const h = FilterHarness.fromFactory(statsFactory, { istioVersion: '1.24' }, { before: [[peerMetadataFactory, undefined]] });
    expect((await h.request(h.connection(), { url: '/x', headers: { host: 'echo.demo:8080' } })).response.status).toBe(200);
    const totals = parsePrometheus(await h.env!.metrics.metrics()).filter((s) => s.name === 'istio_requests_total');
    expect(totals.map((t) => [t.labels.response_code, t.value])).toEqual([['200', 1]]);
  });
});

test('filterEnv: a store stub with subscribe, a silent logger, a registry', () => {
  const env = filterEnv();
  const seen: unknown[] = [];
  const off = env.mesh.subscribe((next, prev) => seen.push([next, prev]));
  const first = env.mesh.current;
  env.mesh.publish(first);
  off();
  env.mesh.publish(first);
  expect(seen).toEqual([[first, first]]);
  expect(env.log.level).toBe('silent');
  expect(env.metrics.getMetricsAsArray()).toEqual([]);
});
