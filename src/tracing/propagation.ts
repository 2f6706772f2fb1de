/**
 * Trace context in an inner request's headers: read (the parent of the waypoint's span) and
 * written back for the upstream request (the waypoint's span as the app's parent), in the
 * format(s) it arrived in:
 *
 * - W3C Trace Context `traceparent` / `tracestate` (www.w3.org/TR/trace-context; what Envoy's
 *   OpenTelemetry tracer reads and writes, envoyproxy/envoy
 *   source/extensions/tracers/opentelemetry/span_context_extractor.cc);
 * - B3 single (`b3: {trace}-{span}-{sampled}-{parent}`) and multi (`x-b3-traceid`,
 *   `x-b3-spanid`, `x-b3-parentspanid`, `x-b3-sampled`, `x-b3-flags`) headers
 *   (github.com/openzipkin/b3-propagation; what Envoy's Zipkin tracer reads and writes).
 *
 * Never the CONNECT's `traceparent`: ztunnel sets that per connection, not per request. Parsing
 * is @opentelemetry/core's (`parseTraceParent`, `TraceState`) and @opentelemetry/propagator-b3's;
 * writing is done here, so a 64-bit B3 trace id and the arrival format are kept.
 */
import { ROOT_CONTEXT, TraceFlags, trace, type SpanContext, type TextMapGetter } from '@opentelemetry/api';
import { parseTraceParent, TraceState } from '@opentelemetry/core';
import { B3Propagator } from '@opentelemetry/propagator-b3';
import type { HeaderList } from '../pipeline/index.ts';

/** Formats (a bit set): which headers carried the context. */
export const W3C = 1;
export const B3_SINGLE = 2;
export const B3_MULTI = 4;

/** A parent context read from a request. */
export interface IncomingContext {
  readonly parent: SpanContext;
  /** {@link W3C} | {@link B3_SINGLE} | {@link B3_MULTI}. */
  readonly formats: number;
  /** The headers carried no sampling decision (B3 "defer"): the waypoint decides. */
  readonly deferred: boolean;
  /** The B3 trace id was 64-bit (16 hex digits); written back the same way. */
  readonly b3Short: boolean;
}

const getter: TextMapGetter<HeaderList> = {
  get: (headers, key) => headers.get(key),
  keys: () => [],
};
const b3 = new B3Propagator();

/**
 * The parent context of a request: undefined when no trace header is present, null when one is
 * present but malformed (Envoy's OpenTelemetry tracer then makes no span: `NullSpan`).
 */
export function extractContext(headers: HeaderList): IncomingContext | null | undefined {
  const tp = headers.get('traceparent');
  const single = headers.get('b3');
  const multi = headers.get('x-b3-traceid');
  if (tp === undefined && single === undefined && multi === undefined) return undefined;
  let formats = 0;
  let parent: SpanContext | undefined;
  let deferred = false;
  if (tp !== undefined) {
    const p = parseTraceParent(tp);
    if (!p) return null;
    const ts = headers.get('tracestate');
    parent = { ...p, isRemote: true, ...(ts ? { traceState: new TraceState(ts) } : {}) };
    formats |= W3C;
  }
  let b3Short = false;
  if (single !== undefined || multi !== undefined) {
    const ctx = trace.getSpanContext(b3.extract(ROOT_CONTEXT, headers, getter));
    if (ctx) {
      b3Short = (single !== undefined ? single.split('-')[0] : multi!).length === 16;
      if (single !== undefined) formats |= B3_SINGLE;
      if (multi !== undefined) formats |= B3_MULTI;
      if (parent === undefined) {
        parent = ctx;
        deferred = single !== undefined ? single.split('-').length < 3 : headers.get('x-b3-sampled') === undefined && headers.get('x-b3-flags') !== '1';
      }
    } else if (parent === undefined) return null;
  }
  return { parent: parent!, formats, deferred, b3Short };
}

/**
 * Write `ctx` (the waypoint's span, `parentSpanId` its parent's id) into `headers` in every
 * format of `formats` (W3C when none), replacing what the request carried.
 */
export function injectContext(headers: HeaderList, ctx: SpanContext, formats: number, parentSpanId: string | undefined, b3Short: boolean): void {
  const sampled = (ctx.traceFlags & TraceFlags.SAMPLED) !== 0;
  if (formats === 0 || (formats & W3C) !== 0) {
    headers.set('traceparent', `00-${ctx.traceId}-${ctx.spanId}-${sampled ? '01' : '00'}`);
    const ts = ctx.traceState?.serialize();
    if (ts) headers.set('tracestate', ts);
  }
  const traceId = b3Short ? ctx.traceId.slice(16) : ctx.traceId;
  if ((formats & B3_SINGLE) !== 0) {
    headers.set('b3', `${traceId}-${ctx.spanId}-${sampled ? '1' : '0'}${parentSpanId ? `-${parentSpanId}` : ''}`);
  }
  if ((formats & B3_MULTI) !== 0) {
    headers.set('x-b3-traceid', traceId);
    headers.set('x-b3-spanid', ctx.spanId);
    if (parentSpanId) headers.set('x-b3-parentspanid', parentSpanId);
    else headers.remove('x-b3-parentspanid');
    headers.set('x-b3-sampled', sampled ? '1' : '0');
    headers.remove('x-b3-flags');
  }
}
