/**
 * One `/stats/prometheus` over the workers (src/workers/metrics.ts): a counter is the sum of the
 * workers' series, while `istio_build`, one proxy's build info, stays 1 however many workers
 * register it.
 */
import { Counter, Registry } from 'prom-client';
import { expect, test } from 'vitest';
import { DEFAULT_STATS_CONFIG, instrumentsFor } from '../../../filters/stats/index.ts';
import { WorkersRegistry } from '../../../src/workers/metrics.ts';
import { samplesOf } from '../../helpers/prometheus.ts';

test('counters add up over the workers; istio_build stays one proxy', async () => {
  const workers = [new Registry(), new Registry()];
  for (const [i, registry] of workers.entries()) {
    instrumentsFor(registry, DEFAULT_STATS_CONFIG);
    new Counter({ name: 'waypoint_test_requests_total', help: 'test', registers: [registry] }).inc(i + 1);
  }
  const merged = new WorkersRegistry(new Registry(), () => Promise.all(workers.map((r) => r.getMetricsAsJSON())));
  const text = await merged.metrics();
  expect(samplesOf(text, 'waypoint_test_requests_total').map((s) => s.value)).toEqual([3]);
  expect(samplesOf(text, 'istio_build').map((s) => [s.labels, s.value])).toEqual([[{ component: 'proxy', tag: 'unknown' }, 1]]);
});
