/**
 * Trace context in and out of an inner request (W3C, B3 single, B3 multi, the arrival format
 * kept), Envoy's sampling decision, and the span processor's bounds (a full queue and a failing
 * collector drop and count spans; nothing waits on the collector).
 */
import { TraceFlags, type SpanContext } from '@opentelemetry/api';
import { ExportResultCode } from '@opentelemetry/core';
import type { ReadableSpan, SpanExporter } from '@opentelemetry/sdk-trace';
import { describe, expect, test, vi } from 'vitest';
import { HeaderList } from '../../../src/pipeline/index.ts';
import { B3_MULTI, B3_SINGLE, envSamplingPercent, extractContext, injectContext, sampleRequest, W3C } from '../../../src/tracing/index.ts';
import { BoundedBatchProcessor } from '../../../src/tracing/processor.ts';

const TRACE = '0af7651916cd43dd8448eb211c80319c';
const PARENT = 'b7ad6b7169203331';
const MINE: SpanContext = { traceId: TRACE, spanId: '00f067aa0ba902b7', traceFlags: TraceFlags.SAMPLED };
const h = (...kv: string[]) => new HeaderList(kv);

describe('extract', () => {
  test('W3C traceparent and tracestate', () => {
    const c = extractContext(h('traceparent', `00-${TRACE}-${PARENT}-01`, 'tracestate', 'a=1,b=2'))!;
    expect(c.parent).toMatchObject({ traceId: TRACE, spanId: PARENT, traceFlags: 1, isRemote: true });
    expect(c.parent.traceState?.serialize()).toBe('a=1,b=2');
    expect([c.formats, c.deferred]).toEqual([W3C, false]);
  });

  test('B3 single and multi, 64-bit trace ids, deferred decisions', () => {
    const single = extractContext(h('b3', `${TRACE.slice(16)}-${PARENT}-1`))!;
    expect(single.parent.traceId).toBe(`0000000000000000${TRACE.slice(16)}`);
    expect([single.formats, single.b3Short, single.deferred]).toEqual([B3_SINGLE, true, false]);
    expect(extractContext(h('b3', `${TRACE}-${PARENT}`))!.deferred).toBe(true);
    const multi = extractContext(h('x-b3-traceid', TRACE, 'x-b3-spanid', PARENT, 'x-b3-sampled', '0'))!;
    expect([multi.formats, multi.parent.traceFlags, multi.deferred]).toEqual([B3_MULTI, 0, false]);
    expect(extractContext(h('x-b3-traceid', TRACE, 'x-b3-spanid', PARENT, 'x-b3-flags', '1'))!.parent.traceFlags).toBe(1);
    expect(extractContext(h('x-b3-traceid', TRACE, 'x-b3-spanid', PARENT))!.deferred).toBe(true);
  });

  test('nothing: undefined; malformed: null (no span, as Envoy)', () => {
    expect(extractContext(h('x-other', '1'))).toBeUndefined();
    expect(extractContext(h('traceparent', 'garbage'))).toBeNull();
    expect(extractContext(h('b3', 'zz-yy-1'))).toBeNull();
  });
});

describe('inject (the arrival format kept)', () => {
  test('W3C by default and for W3C requests, with the tracestate', () => {
    const headers = h('traceparent', 'old');
    injectContext(headers, { ...MINE, traceState: extractContext(h('traceparent', `00-${TRACE}-${PARENT}-01`, 'tracestate', 'k=v'))!.parent.traceState }, 0, PARENT, false);
    expect(headers.get('traceparent')).toBe(`00-${TRACE}-00f067aa0ba902b7-01`);
    expect(headers.get('tracestate')).toBe('k=v');
    expect(headers.getAll('traceparent').length).toBe(1);
  });

  test('B3 single and multi are rewritten in place (parent span id = the incoming span), 64-bit ids stay 64-bit', () => {
    const single = h('b3', 'x');
    injectContext(single, { ...MINE, traceFlags: TraceFlags.NONE }, B3_SINGLE, PARENT, true);
    expect(single.get('b3')).toBe(`${TRACE.slice(16)}-00f067aa0ba902b7-0-${PARENT}`);
    expect(single.get('traceparent')).toBeUndefined();
    const multi = h('x-b3-traceid', TRACE, 'x-b3-spanid', PARENT, 'x-b3-flags', '1');
    injectContext(multi, MINE, B3_MULTI, PARENT, false);
    expect(multi.toRecord()).toEqual({ 'x-b3-traceid': TRACE, 'x-b3-spanid': '00f067aa0ba902b7', 'x-b3-parentspanid': PARENT, 'x-b3-sampled': '1' });
  });
});

describe('sampling (Envoy with Istio settings)', () => {
  const sampledParent = extractContext(h('traceparent', `00-${TRACE}-${PARENT}-01`))!;
  const unsampledParent = extractContext(h('traceparent', `00-${TRACE}-${PARENT}-00`))!;
  const deferred = extractContext(h('b3', `${TRACE}-${PARENT}`))!;
  const none = h();

  test('a decided parent wins at 0 % and at 100 %', () => {
    expect(sampleRequest(sampledParent, none, 'r', 0, true)).toBe(true);
    expect(sampleRequest(unsampledParent, none, 'r', 100, true)).toBe(false);
  });

  test('x-client-trace-id / x-envoy-force-trace force sampling without a decided parent', () => {
    expect(sampleRequest(undefined, h('x-client-trace-id', 'abc'), 'r', 0, true)).toBe(true);
    expect(sampleRequest(deferred, h('x-envoy-force-trace', 'true'), 'r', 0, true)).toBe(true);
  });

  test('random sampling is stable per x-request-id (first 8 hex digits % 10000 < percent × 100)', () => {
    // 0x00000063 = 99 → sampled at 1 %; 0x00000064 = 100 → not.
    expect(sampleRequest(undefined, none, '00000063-aaaa-4bbb-8ccc-dddddddddddd', 1, true)).toBe(true);
    expect(sampleRequest(undefined, none, '00000064-aaaa-4bbb-8ccc-dddddddddddd', 1, true)).toBe(false);
    expect(sampleRequest(deferred, none, '00000064-aaaa-4bbb-8ccc-dddddddddddd', 100, true)).toBe(true);
    const random = vi.spyOn(Math, 'random').mockReturnValue(0);
    expect(sampleRequest(undefined, none, '00000064-aaaa-4bbb-8ccc-dddddddddddd', 1, false)).toBe(true);
    random.mockRestore();
  });

  test('OTEL_TRACES_SAMPLER as a percentage', () => {
    expect(envSamplingPercent({})).toBeUndefined();
    expect(envSamplingPercent({ OTEL_TRACES_SAMPLER: 'always_on' })).toBe(100);
    expect(envSamplingPercent({ OTEL_TRACES_SAMPLER: 'parentbased_always_off' })).toBe(0);
    expect(envSamplingPercent({ OTEL_TRACES_SAMPLER: 'parentbased_traceidratio', OTEL_TRACES_SAMPLER_ARG: '0.25' })).toBe(25);
    expect(envSamplingPercent({ OTEL_TRACES_SAMPLER: 'jaeger_remote' })).toBeUndefined();
  });
});

describe('BoundedBatchProcessor', () => {
  const span = (sampled = true) => ({ spanContext: () => ({ ...MINE, traceFlags: sampled ? 1 : 0 }) }) as unknown as ReadableSpan;
  const settings = { maxQueueSize: 3, maxExportBatchSize: 2, scheduledDelayMillis: 10_000, exportTimeoutMillis: 50 };

  test('a full queue drops and counts; unsampled spans are not queued; batches go one at a time', async () => {
    const pending: ((ok: boolean) => void)[] = [];
    const exporter: SpanExporter = {
      export: (spans, done) => pending.push((ok) => done({ code: ok ? ExportResultCode.SUCCESS : ExportResultCode.FAILED })),
      shutdown: async () => {},
    };
    const counts = { exported: 0, queue_full: 0, export_failed: 0 };
    const p = new BoundedBatchProcessor(exporter, settings, { exported: (n) => (counts.exported += n), dropped: (r, n) => (counts[r] += n) });
    p.onEnd(span(false));
    for (let i = 0; i < 6; i++) p.onEnd(span()); // 2 go out at once (a batch), 3 wait, 1 dropped
    expect(pending.length).toBe(1);
    expect(counts.queue_full).toBe(1);
    pending[0](true);
    await vi.waitFor(() => expect(pending.length).toBe(2));
    pending[1](false);
    await vi.waitFor(() => expect(counts).toEqual({ exported: 2, queue_full: 1, export_failed: 2 }));
  });

  test('an exporter that never answers times out as a failed export; shutdown flushes the rest', async () => {
    let calls = 0;
    const exporter: SpanExporter = { export: () => void calls++, shutdown: vi.fn(async () => {}) };
    const failed: number[] = [];
    const p = new BoundedBatchProcessor(exporter, settings, { exported: () => {}, dropped: (_r, n) => failed.push(n) });
    p.onEnd(span());
    p.onEnd(span());
    p.onEnd(span());
    await p.shutdown();
    expect(calls).toBe(2);
    expect(failed).toEqual([2, 1]);
    expect(exporter.shutdown).toHaveBeenCalled();
  });
});
