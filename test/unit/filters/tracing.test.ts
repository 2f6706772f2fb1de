/**
 * `istio.tracing` when tracing is off for the target: the runtime is not asked for a tracer, no
 * span is made, the request headers are left alone; and the filter's config.
 */
import { describe, expect, test, vi } from 'vitest';
import { TRACING_FILTER_NAME, parseTracingConfig, tracingFilterFactory } from '../../../filters/tracing/index.ts';
import { compileMesh } from '../../../src/state/compile.ts';
import { TELEMETRY, type TracingRuntime } from '../../../src/tracing/index.ts';
import { DEFAULT_MESH_TEXT, FilterHarness } from '../../helpers/filter-harness.ts';
import { meshText, telemetry } from '../../helpers/mesh.ts';

function harness(text: string, runtime: Partial<TracingRuntime>) {
  const mesh = compileMesh({ text, file: 'm.yaml', parts: [TELEMETRY] });
  return FilterHarness.fromFactory(tracingFilterFactory(runtime as TracingRuntime), undefined, { mesh });
}

describe('tracing off', () => {
  test('no Telemetry, no enableTracing: no tracer asked for, headers untouched, upstream request unchanged', async () => {
    const tracerFor = vi.fn();
    const h = harness(DEFAULT_MESH_TEXT, { tracerFor, samplingPercent: vi.fn() });
    const { stream } = await h.request(undefined, { headers: { host: 'echo.demo', traceparent: '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01' } });
    expect(h.forwarded).toEqual([stream]);
    const up = stream.requestHeaders;
    h.chain.runUpstreamRequest(stream, up);
    h.chain.completeStream(stream);
    expect(tracerFor).not.toHaveBeenCalled();
    expect(up.getAll('traceparent')).toEqual(['00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01']);
  });

  test('disableSpanReporting for the target: the same', async () => {
    const tracerFor = vi.fn();
    const text = meshText(DEFAULT_MESH_TEXT, telemetry('off', 'demo', { tracing: [{ disableSpanReporting: true }] }));
    const h = harness(text, { tracerFor, samplingPercent: vi.fn() });
    const { stream } = await h.request(undefined, { headers: { host: 'echo.demo' } });
    expect(h.forwarded).toEqual([stream]);
    h.chain.completeStream(stream);
    expect(tracerFor).not.toHaveBeenCalled();
    expect(stream.requestHeaders.get('traceparent')).toBeUndefined();
  });

  test('on, but the collector is not running (being replaced): no span, nothing written', async () => {
    const tracerFor = vi.fn(() => undefined);
    const text = meshText(DEFAULT_MESH_TEXT, telemetry('on', 'istio-system', { tracing: [{ randomSamplingPercentage: 100 }] }));
    const h = harness(text, { tracerFor, samplingPercent: vi.fn(() => 100) });
    const { stream } = await h.request(undefined, { headers: { host: 'echo.demo' } });
    h.chain.runUpstreamRequest(stream, stream.requestHeaders);
    expect(tracerFor).toHaveBeenCalledOnce();
    expect(stream.requestHeaders.get('traceparent')).toBeUndefined();
  });
});

test('config: spawnUpstreamSpan only; unknown fields refused', () => {
  expect(parseTracingConfig(undefined)).toEqual({ spawnUpstreamSpan: false });
  expect(parseTracingConfig({ spawnUpstreamSpan: true })).toEqual({ spawnUpstreamSpan: true });
  expect(() => parseTracingConfig({ spawnUpstreamSpans: true })).toThrow(/spawnUpstreamSpans/);
  expect(TRACING_FILTER_NAME).toBe('istio.tracing');
});
