/**
 * Tracing and the Telemetry API: the `telemetry.istio.io` Telemetry resources and MeshConfig's
 * telemetry providers compiled once per mesh snapshot into what each served service's traffic
 * gets (its server span's settings, `istio_*` metric overrides, access logs: `TELEMETRY`,
 * read per tunnel with `telemetryOf`), and the OpenTelemetry plumbing of spans: context
 * propagation (W3C, B3), Envoy's sampling decision, the span of one request, and the runtime that
 * exports to OTLP collectors.
 *
 *   const t = telemetryOf(stream.conn);            // cached on the tunnel
 *   if (t.tracing) { ... }                          // undefined: no span, nothing allocated
 */
export { compileTelemetry, NO_TELEMETRY, TELEMETRY, telemetryOf, type CompiledTelemetry, type StaticAttributes, type TargetTelemetry, type TracingPolicy } from './compile.ts';
export { NO_METRIC_OVERRIDES, type AccessLogSink, type MetricOverride, type MetricsPolicy, type TraceExporterRef } from './merge.ts';
export { CEL_ERROR, CelCompileError, compileCel, type CelExpression, type CelValue } from './cel.ts';
export { ISTIO_METRICS, parseTelemetry, type Telemetry } from './telemetry-schema.ts';
export { renderLine, renderText } from './format-eval.ts';
export { extractContext, injectContext, B3_MULTI, B3_SINGLE, W3C, type IncomingContext } from './propagation.ts';
export { DEFAULT_SAMPLING_PERCENT, envSamplingPercent, sampleRequest } from './sampling.ts';
export { RequestTrace } from './request-trace.ts';
export { TracingRuntime, type TracingRuntimeOptions } from './runtime.ts';
