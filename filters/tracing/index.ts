/**
 * `istio.tracing`: the waypoint's span of each inner HTTP request, as Envoy's HTTP connection
 * manager makes it for Istio's waypoint when the Telemetry API (or MeshConfig) turns tracing on
 * for the request's service (src/tracing: which targets, which collector, which sampling).
 *
 * - request headers: the parent comes from the inner request's `traceparent`/`tracestate` or B3
 *   headers (never from the CONNECT's), the sampling decision is made, the SERVER span starts;
 * - upstream request: the span's context goes into the request's headers, in the format it
 *   arrived in (W3C when none), unless the Telemetry disables context propagation;
 * - each attempt, with `spawnUpstreamSpan: true` (Envoy's `spawn_upstream_span`): a CLIENT
 *   child span per attempt, propagated in its place;
 * - completion (local replies included): tags and status, then the span ends and is queued for
 *   export (never blocking the request).
 *
 * List it before `istio.authz` so its span covers requests the authorization policy denies.
 * A target without tracing costs a slot read per phase: no span, no allocation.
 */
import { z } from 'zod';
import { defineSlot, FilterStatus, type Filter, type FilterFactory, type HeaderList, type StreamContext } from '../../src/pipeline/index.ts';
import { formatHostPort } from '../../src/state/index.ts';
import { extractContext, RequestTrace, sampleRequest, telemetryOf, type TracingRuntime } from '../../src/tracing/index.ts';

export const TRACING_FILTER_NAME = 'istio.tracing';

/** The filter's configuration (bootstrap `filters: [{ name: istio.tracing, config: {...} }]`). */
export interface TracingFilterConfig {
  /** A CLIENT span per upstream attempt, child of the server span (Envoy's HCM `spawn_upstream_span`; default off, as Istio's waypoint). */
  readonly spawnUpstreamSpan: boolean;
}

const schema = z.strictObject({ spawnUpstreamSpan: z.boolean().optional() });

/** Validate the filter's `config:` (absent = defaults). @throws Error naming the field. */
export function parseTracingConfig(raw: unknown): TracingFilterConfig {
  if (raw === undefined || raw === null) return Object.freeze({ spawnUpstreamSpan: false });
  const r = schema.safeParse(raw);
  if (!r.success) {
    const issue = r.error.issues[0];
    const at = issue.path.map(String).join('.');
    throw new Error(at ? `${at}: ${issue.message}` : issue.message);
  }
  return Object.freeze({ spawnUpstreamSpan: r.data.spawnUpstreamSpan ?? false });
}

const TRACE = defineSlot<RequestTrace>('istio.tracing', 'stream');

/** The factory, bound to the waypoint's tracing runtime (collectors); without one no span is made. */
export function tracingFilterFactory(runtime: TracingRuntime | undefined): FilterFactory<TracingFilterConfig> {
  return {
    name: TRACING_FILTER_NAME,
    // Its source peer tags read what istio.peer_metadata found.
    after: ['istio.peer_metadata'],
    parseConfig: parseTracingConfig,
    create: (config) => (config.spawnUpstreamSpan ? new AttemptTracingFilter(runtime) : new TracingFilter(runtime)),
  };
}

/** The default registration (no runtime: requests pass untraced); the waypoint registers its own. */
export const tracingFactory = tracingFilterFactory(undefined);

class TracingFilter implements Filter {
  readonly name = TRACING_FILTER_NAME;
  private readonly runtime: TracingRuntime | undefined;

  constructor(runtime: TracingRuntime | undefined) {
    this.runtime = runtime;
  }

  onRequestHeaders(stream: StreamContext): FilterStatus {
    const policy = telemetryOf(stream.conn).tracing;
    if (policy === undefined || this.runtime === undefined) return FilterStatus.Continue;
    const tracer = this.runtime.tracerFor(policy.exporter);
    if (tracer === undefined) return FilterStatus.Continue;
    const headers = stream.requestHeaders;
    const incoming = extractContext(headers);
    // A malformed trace header: no span, headers untouched (Envoy's tracer returns a NullSpan).
    if (incoming === null) return FilterStatus.Continue;
    const percent = this.runtime.samplingPercent(policy.samplingPercent, policy.exporter);
    const sampled = sampleRequest(incoming, headers, stream.requestId, percent, policy.useRequestIdForTraceSampling);
    stream.set(TRACE, new RequestTrace(tracer, policy, stream, operationName(stream), incoming, sampled));
    return FilterStatus.Continue;
  }

  onUpstreamRequest(stream: StreamContext, headers: HeaderList): void {
    stream.get(TRACE)?.inject(headers);
  }

  onStreamComplete(stream: StreamContext): void {
    const t = stream.get(TRACE);
    if (t === undefined) return;
    // A route that sent the request to another backend names the span after it (its decorator).
    if (stream.routeTarget !== undefined) t.span.updateName(operationName(stream));
    t.finish(stream);
  }
}

class AttemptTracingFilter extends TracingFilter {
  onUpstreamAttempt(stream: StreamContext, headers: HeaderList): void {
    stream.get(TRACE)?.attempt(stream, headers);
  }
}

/**
 * Istio's route decorator for a waypoint (istio/istio pilot/pkg/networking/telemetry/telemetry.go
 * `TraceOperation`): `<service host>:<port>/*`; workload-addressed traffic `<ip>:<port>/*`.
 */
function operationName(stream: StreamContext): string {
  const t = stream.routeTarget ?? stream.conn.target;
  if (t.kind === 'service') return `${t.service.hostname}:${t.port.port}/*`;
  return `${formatHostPort(stream.conn.info.targetIp, t.port)}/*`;
}
