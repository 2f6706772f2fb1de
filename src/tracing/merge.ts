/**
 * The Telemetry resources that apply to one target (attachment.ts), merged into what the waypoint
 * does for its traffic, as istiod merges them for a waypoint's listener (class
 * `SidecarInbound`, workload mode SERVER; istio/istio pilot/pkg/model/telemetry.go `Tracing`,
 * `mergeMetrics`, `mergeLogs`, `AccessLogging`; pilot/pkg/networking/core/tracing.go
 * `configureTracingFromTelemetry`).
 */
import type { ExtensionProvider, FileAccessLogProvider, MeshTelemetryConfig, OpenTelemetryProvider } from '../state/index.ts';
import type { CelExpression } from './cel.ts';
import { ISTIO_METRICS, type Telemetry, type TracingCustomTag, type WorkloadMode } from './telemetry-schema.ts';

/** Where spans go: an `opentelemetry` extension provider, or the `OTEL_*` environment variables. */
export type TraceExporterRef = { readonly kind: 'provider'; readonly name: string; readonly otel: OpenTelemetryProvider } | { readonly kind: 'env' };

/** The tracing a target gets (its server span), before the per-target parts (compile.ts). */
export interface TracingSpec {
  readonly exporter: TraceExporterRef;
  /** Percent of requests without a sampled parent that are traced; undefined: the env sampler's, else 1. */
  readonly samplingPercent: number | undefined;
  readonly customTags: Readonly<Record<string, TracingCustomTag>>;
  readonly istioTags: boolean;
  readonly useRequestIdForTraceSampling: boolean;
  readonly contextPropagation: boolean;
  readonly maxPathTagLength: number;
}

/** One metric's override: dropped, and/or labels removed or set. */
export interface MetricOverride {
  readonly drop: boolean;
  /** By label name, sorted: removed, or set to the expression's value (`unknown` when it fails). */
  readonly tags: readonly { readonly name: string; readonly remove: boolean; readonly value: CelExpression | undefined }[];
}

/** What `metrics[]` makes of the `istio_*` metrics of a target. */
export interface MetricsPolicy {
  /** Every metric off: no `prometheus` provider in scope, or ALL_METRICS disabled. */
  readonly disabled: boolean;
  /** By Prometheus name (`istio_requests_total`); a metric without an entry is as Istio's default. */
  readonly overrides: ReadonlyMap<string, MetricOverride>;
}

/** The metrics of a target without any override (the common case: one shared object, checked by identity). */
export const NO_METRIC_OVERRIDES: MetricsPolicy = Object.freeze({ disabled: false, overrides: new Map() });
const METRICS_OFF: MetricsPolicy = Object.freeze({ disabled: true, overrides: new Map() });

/** A file access log a target writes to, with its filter. */
export interface AccessLogSink {
  readonly provider: string;
  readonly file: FileAccessLogProvider;
  readonly filter: CelExpression | undefined;
}

const serverMode = (m: WorkloadMode) => m !== 'CLIENT';

/** Find a provider by name (case-insensitive, as istiod's `fetchProvider`). */
export function findProvider(config: MeshTelemetryConfig, name: string): ExtensionProvider | undefined {
  const lower = name.toLowerCase();
  return config.extensionProviders.find((p) => p.name.toLowerCase() === lower);
}

/**
 * The tracing of a target: undefined when it has none. Telemetry `tracing[]` (or MeshConfig
 * `defaultProviders.tracing`) decides when present; else MeshConfig `enableTracing: true` turns
 * tracing on toward the `OTEL_*` collector. A Telemetry without a usable provider also exports
 * to the `OTEL_*` collector (istiod would leave tracing off: nothing to send to).
 * `warn` hears of providers that cannot trace (a Zipkin provider, ...).
 */
export function mergeTracing(applicable: readonly Telemetry[], mesh: MeshTelemetryConfig, warn: (msg: string) => void): TracingSpec | undefined {
  const entries = applicable.flatMap((t) => t.tracing);
  const defaults = mesh.defaultProviders.tracing;
  if (entries.length === 0 && defaults.length === 0) {
    if (mesh.enableTracing !== true) return undefined;
    return {
      exporter: { kind: 'env' },
      samplingPercent: mesh.tracingSampling,
      customTags: mesh.tracingCustomTags,
      istioTags: true,
      useRequestIdForTraceSampling: true,
      contextPropagation: true,
      maxPathTagLength: mesh.maxPathTagLength,
    };
  }
  let provider = defaults.length > 0 ? defaults[0] : undefined;
  let disabled = false;
  let customTags: Readonly<Record<string, TracingCustomTag>> | undefined;
  let sampling: number | undefined;
  let useRequestId = true;
  let istioTags = true;
  let propagate = true;
  for (const e of entries) {
    if (!serverMode(e.mode)) continue;
    if (e.providers.length > 0) provider = e.providers[0];
    if (e.disableSpanReporting !== undefined) disabled = e.disableSpanReporting;
    if (e.customTags !== undefined) customTags = e.customTags;
    if (e.randomSamplingPercentage !== undefined) sampling = e.randomSamplingPercentage;
    if (e.useRequestIdForTraceSampling !== undefined) useRequestId = e.useRequestIdForTraceSampling;
    if (e.enableIstioTags !== undefined) istioTags = e.enableIstioTags;
    if (e.disableContextPropagation !== undefined) propagate = !e.disableContextPropagation;
  }
  if (disabled) return undefined;
  let exporter: TraceExporterRef = { kind: 'env' };
  if (provider !== undefined) {
    const p = findProvider(mesh, provider);
    if (p?.kind !== 'opentelemetry') {
      warn(`tracing provider ${provider} is ${p ? (p.kind === 'other' ? p.otherKind : p.kind) : 'not defined'}; this waypoint exports spans to opentelemetry providers only, so this traffic is not traced`);
      return undefined;
    }
    exporter = { kind: 'provider', name: p.name, otel: p.opentelemetry };
  }
  return {
    exporter,
    // provider sampler > Telemetry randomSamplingPercentage > defaultConfig.tracing.sampling > PILOT_TRACE_SAMPLING (tracing.go).
    samplingPercent: sampling ?? mesh.tracingSampling,
    // Telemetry custom tags replace MeshConfig's (tracing.go `configureCustomTags`).
    customTags: customTags ?? (entries.length === 0 ? mesh.tracingCustomTags : {}),
    istioTags,
    useRequestIdForTraceSampling: useRequestId,
    contextPropagation: propagate,
    maxPathTagLength: mesh.maxPathTagLength,
  };
}

/**
 * `metrics[]` of a target for the `prometheus` provider (the waypoint's `istio.stats`), mode SERVER.
 * `warn` hears of overrides of custom metrics (the waypoint has none).
 */
export function mergeMetrics(applicable: readonly Telemetry[], mesh: MeshTelemetryConfig, warn: (msg: string) => void): MetricsPolicy {
  const entries = applicable.flatMap((t) => t.metrics);
  const defaults = mesh.defaultProviders.metrics;
  let inScope = defaults;
  for (const m of entries) if (m.providers.length > 0) inScope = m.providers;
  const prometheus = [...inScope].sort().find((n) => findProvider(mesh, n)?.kind === 'prometheus');
  if (prometheus === undefined) return METRICS_OFF;
  if (entries.length === 0) return NO_METRIC_OVERRIDES;
  let allOff = false;
  const merged = new Map<string, { disabled: boolean | undefined; tags: Map<string, { remove: boolean; value: CelExpression | undefined }> }>();
  let parent = defaults;
  for (const m of entries) {
    const names = m.providers.length > 0 ? m.providers : parent;
    parent = names;
    if (!names.includes(prometheus)) continue;
    for (const o of m.overrides) {
      if (!serverMode(o.mode)) continue;
      if (o.allMetrics && o.disabled === true) {
        allOff = true;
        continue;
      }
      allOff = false;
      for (const metric of o.metrics) {
        const prom = ISTIO_METRICS[metric];
        if (prom === undefined) {
          warn(`metrics override of custom metric ${metric} ignored: the waypoint reports Istio's standard metrics only`);
          continue;
        }
        let e = merged.get(prom);
        if (!e) merged.set(prom, (e = { disabled: undefined, tags: new Map() }));
        if (o.disabled !== undefined) e.disabled = o.disabled;
        for (const [name, to] of Object.entries(o.tagOverrides)) e.tags.set(name, to);
      }
    }
  }
  if (allOff) return METRICS_OFF;
  if (merged.size === 0) return NO_METRIC_OVERRIDES;
  const overrides = new Map<string, MetricOverride>();
  for (const [prom, e] of merged) {
    const tags = [...e.tags].sort(([a], [b]) => (a < b ? -1 : 1)).map(([name, t]) => Object.freeze({ name, ...t }));
    overrides.set(prom, Object.freeze({ drop: e.disabled === true, tags: Object.freeze(tags) }));
  }
  return Object.freeze({ disabled: false, overrides });
}

/**
 * `accessLogging[]` of a target: undefined when no Telemetry (nor `defaultProviders.accessLogging`)
 * configures it, so MeshConfig `accessLogFile` applies; else the enabled file logs (possibly none).
 * `warn` hears of providers that are not file logs (OpenTelemetry and gRPC access log services).
 */
export function mergeAccessLogs(applicable: readonly Telemetry[], mesh: MeshTelemetryConfig, warn: (msg: string) => void): readonly AccessLogSink[] | undefined {
  const groups = applicable.map((t) => t.accessLogging).filter((g) => g.length > 0);
  const defaults = mesh.defaultProviders.accessLogging;
  if (groups.length === 0 && defaults.length === 0) return undefined;
  const result = new Map<string, { disabled: boolean; filter: CelExpression | undefined }>();
  if (groups.length === 0) {
    for (const d of defaults) result.set(d, { disabled: false, filter: undefined });
  } else {
    let inScope: readonly string[] = defaults;
    const filters = new Map<string, CelExpression | undefined>();
    for (const g of groups) {
      const names = new Set<string>();
      for (const l of g) {
        if (!serverMode(l.mode)) continue;
        for (const p of l.providers) {
          names.add(p);
          filters.set(p, l.filter);
        }
      }
      if (names.size > 0) inScope = [...names];
    }
    let parent = defaults;
    for (const g of groups) {
      for (const l of g) {
        const names = l.providers.length > 0 ? l.providers : parent;
        parent = names;
        if (!serverMode(l.mode)) continue;
        for (const p of names) {
          if (!inScope.includes(p)) continue;
          result.set(p, l.disabled === true ? { disabled: true, filter: undefined } : { disabled: false, filter: filters.get(p) });
        }
      }
    }
  }
  const sinks: AccessLogSink[] = [];
  let configured = false;
  for (const name of [...result.keys()].sort()) {
    const p = findProvider(mesh, name);
    if (!p) continue;
    configured = true;
    const r = result.get(name)!;
    if (r.disabled) continue;
    if (p.kind === 'envoyFileAccessLog') sinks.push(Object.freeze({ provider: p.name, file: p.envoyFileAccessLog, filter: r.filter }));
    else warn(`access log provider ${name} is ${p.kind === 'other' ? p.otherKind : p.kind}; this waypoint writes envoyFileAccessLog providers only`);
  }
  return configured ? Object.freeze(sinks) : undefined;
}
