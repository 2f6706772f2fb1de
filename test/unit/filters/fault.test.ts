/**
 * `istio.fault` on real contexts with a seeded random source: aborts and delays at their
 * configured percentage (binomial bound over many requests), Envoy's order (delay, then abort
 * rolled after it), HTTP and gRPC aborts, `maxActiveFaults`, and the config's validation.
 */
import { afterEach, describe, expect, test } from 'vitest';
import { faultFactoryWith, parseFaultConfig } from '../../../filters/fault/index.ts';
import { FilterStatus } from '../../../src/pipeline/index.ts';
import { ConfigError } from '../../../src/util/index.ts';
import { FilterHarness } from '../../helpers/filter-harness.ts';
import { thrown } from '../../helpers/thrown.ts';

/** mulberry32: a small seeded PRNG, so a run is reproducible. */
function seeded(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

let h: FilterHarness | undefined;
afterEach(() => h?.close());

const host: [string, string][] = [['host', 'echo.demo']];

describe('aborts', () => {
  test.each([5, 25, 50, 90])('%i percent of 2000 requests are aborted (binomial bound, ±5 standard deviations)', async (percent) => {
    h = FilterHarness.fromFactory(faultFactoryWith(seeded(percent)), { abort: { httpStatus: 503, percentage: { value: percent } } });
    let aborted = 0;
    const n = 2000;
    for (let i = 0; i < n; i++) {
      const stream = h.stream(h.connection(), { headers: host });
      const status = await h.run(stream);
      if (status === FilterStatus.StopAndReply) {
        aborted++;
        expect([stream.responseCode, stream.responseFlags, stream.responseCodeDetails]).toEqual([503, 'FI', 'fault_filter_abort']);
      }
    }
    const p = percent / 100;
    const sd = Math.sqrt(n * p * (1 - p));
    expect(Math.abs(aborted - n * p)).toBeLessThanOrEqual(5 * sd);
  });

  test('a gRPC request aborted with grpcStatus gets HTTP 200 and that grpc-status in trailers', async () => {
    h = FilterHarness.fromFactory(faultFactoryWith(Math.random), { abort: { grpcStatus: 'RESOURCE_EXHAUSTED' } });
    const stream = await h.h2Stream(h.connection(), { grpc: true, headers: host });
    expect(await h.run(stream)).toBe(FilterStatus.StopAndReply);
    const r = await h.response(stream);
    expect([r.status, r.trailers['grpc-status'], r.trailers['grpc-message']]).toEqual([200, '8', 'fault filter abort']);
    expect([stream.grpcStatus, stream.responseFlags]).toEqual(['8', 'FI']);
  });

  test('an HTTP status abort of a gRPC request is mapped to grpc-status, as every local reply', async () => {
    h = FilterHarness.fromFactory(faultFactoryWith(Math.random), { abort: { httpStatus: 503 } });
    const stream = await h.h2Stream(h.connection(), { grpc: true, headers: host });
    await h.run(stream);
    expect((await h.response(stream)).trailers['grpc-status']).toBe('14');
  });
});

describe('delays', () => {
  test('a delayed request waits, is flagged DI, then the abort is rolled', async () => {
    h = FilterHarness.fromFactory(faultFactoryWith(Math.random), { delay: { fixedDelay: '30ms', percentage: 100 }, abort: { httpStatus: 418, percentage: 100 } });
    const stream = h.stream(h.connection(), { headers: host });
    const started = performance.now();
    expect(await h.run(stream)).toBe(FilterStatus.StopAndReply);
    expect(performance.now() - started).toBeGreaterThanOrEqual(25);
    expect([stream.responseCode, stream.responseFlags]).toEqual([418, 'DI,FI']);
  });

  test('about the configured share of requests is delayed (binomial bound)', async () => {
    h = FilterHarness.fromFactory(faultFactoryWith(seeded(7)), { delay: { fixedDelay: '1ms', percentage: { value: 20 } } });
    const n = 400;
    let delayed = 0;
    for (let i = 0; i < n; i++) {
      const stream = h.stream(h.connection(), { headers: host });
      expect(await h.run(stream)).toBe(FilterStatus.Continue);
      if (stream.responseFlags === 'DI') delayed++;
    }
    expect(Math.abs(delayed - 80)).toBeLessThanOrEqual(5 * Math.sqrt(n * 0.2 * 0.8));
  });

  test('maxActiveFaults: past it, requests pass unfaulted (Envoy counts faults_overflow)', async () => {
    h = FilterHarness.fromFactory(faultFactoryWith(Math.random), { delay: { fixedDelay: '50ms' }, maxActiveFaults: 1 });
    const a = h.stream(h.connection(), { headers: host });
    const b = h.stream(h.connection(), { headers: host });
    const [ra, rb] = await Promise.all([h.run(a), h.run(b)]);
    expect([ra, rb]).toEqual([FilterStatus.Continue, FilterStatus.Continue]);
    expect([a.responseFlags, b.responseFlags]).toEqual(['DI', '-']);
  });
});

test.each([
  [{}, ''],
  [{ abort: { percentage: 10 } }, 'abort'],
  [{ abort: { httpStatus: 503, grpcStatus: 14 } }, 'abort'],
  [{ abort: { grpcStatus: 'NOPE' } }, 'abort.grpcStatus'],
  [{ delay: { fixedDelay: 'later' } }, 'delay.fixedDelay'],
  [{ delay: { fixedDelay: '1s', percentage: { value: 101 } } }, 'delay.percentage'],
  [{ abort: { httpStatus: 99 } }, 'abort.httpStatus'],
])('config %j is refused (field %s)', (raw, field) => {
  const err = thrown(() => parseFaultConfig(raw));
  expect(err).toBeInstanceOf(ConfigError);
  expect((err as ConfigError).location.field ?? '').toBe(field);
});
