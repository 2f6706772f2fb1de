/**
 * The tracing runtime: one OpenTelemetry TracerProvider per collector the compiled Telemetry
 * sends spans to (an `opentelemetry` extension provider: OTLP/gRPC, or OTLP/HTTP with `http`; or
 * the collector the `OTEL_*` environment variables name), kept across mesh snapshots while its
 * settings do not change, replaced when they do, flushed and shut down when no target uses it
 * any more and when the waypoint stops. Spans leave through a bounded batch (processor.ts); the
 * counts of exported and dropped spans are on `/stats/prometheus`.
 *
 * The resource is the span producer's, as Istio's (istio/istio pilot/pkg/networking/core/tracing.go
 * `otelConfig`: `service.name` is the proxy's cluster, `<Gateway name>.<namespace>` for a
 * waypoint), plus `OTEL_RESOURCE_ATTRIBUTES` with `resourceDetectors.environment` (always for
 * the environment-configured collector, as every OpenTelemetry SDK).
 */
import { ROOT_CONTEXT, type Span, type SpanContext, type SpanOptions, type Tracer, trace } from '@opentelemetry/api';
import { ExportResultCode, parseKeyPairsIntoRecord, type ExportResult } from '@opentelemetry/core';
import { resourceFromAttributes } from '@opentelemetry/resources';
import { SamplingDecision, TracerProvider, type ReadableSpan, type Sampler, type SpanExporter } from '@opentelemetry/sdk-trace';
import { ATTR_SERVICE_NAME } from '@opentelemetry/semantic-conventions';
import { Counter, type Registry } from 'prom-client';
import { formatHostPort, type MeshPart, type MeshSnapshot, type OpenTelemetryProvider } from '../state/index.ts';
import { log } from '../util/index.ts';
import { compileTelemetry, TELEMETRY, type CompiledTelemetry } from './compile.ts';
import type { TraceExporterRef } from './merge.ts';
import { batchSettingsFromEnv, BoundedBatchProcessor, type SpanOutcomes } from './processor.ts';
import { DEFAULT_SAMPLING_PERCENT, envSamplingPercent } from './sampling.ts';

/** The sampling decision rides in the parent context: the SDK asks the sampler, which reads it. */
const SAMPLED = Symbol('waypoint.sampled');
const decisionSampler: Sampler = {
  shouldSample: (ctx) => ({ decision: ctx.getValue(SAMPLED) === true ? SamplingDecision.RECORD_AND_SAMPLED : SamplingDecision.NOT_RECORD }),
  toString: () => 'WaypointDecisionSampler',
};

/** How long shutdown waits for the last spans to reach a collector. */
const CLOSE_TIMEOUT_MS = 2000;

interface Collector {
  readonly fingerprint: string;
  readonly provider: TracerProvider;
  readonly tracer: Tracer;
}

/** Options of {@link TracingRuntime}. */
export interface TracingRuntimeOptions {
  /** Where the span counters go (`/stats/prometheus`). */
  readonly metrics?: Registry;
  /** The environment (`OTEL_*`); default `process.env`. */
  readonly env?: NodeJS.ProcessEnv;
}

/** See the module comment. */
export class TracingRuntime {
  /** The Telemetry part bound to this runtime: give it to the mesh store. */
  readonly part: MeshPart<CompiledTelemetry>;
  /** `OTEL_TRACES_SAMPLER`'s percentage, for targets whose collector is the environment's and that set none. */
  readonly envSamplingPercent: number | undefined;
  private readonly env: NodeJS.ProcessEnv;
  private readonly collectors = new Map<string, Collector>();
  private readonly exported: Counter<'provider'> | undefined;
  private readonly dropped: Counter<'provider' | 'reason'> | undefined;
  private readonly warned = new Set<string>();
  private closed = false;

  constructor(opts: TracingRuntimeOptions = {}) {
    this.env = opts.env ?? process.env;
    this.envSamplingPercent = envSamplingPercent(this.env);
    this.part = TELEMETRY.with({ compile: (s) => compileTelemetry(s, this.env), publish: (v, s) => this.publish(v, s) });
    if (opts.metrics) {
      const registers = [opts.metrics];
      this.exported = new Counter({ name: 'waypoint_tracing_spans_exported_total', help: 'Spans a collector accepted.', labelNames: ['provider'], registers });
      this.dropped = new Counter({ name: 'waypoint_tracing_spans_dropped_total', help: 'Spans dropped: the queue was full (queue_full) or the collector did not accept them (export_failed).', labelNames: ['provider', 'reason'], registers });
    }
  }

  /** The percentage a target samples at: its own, else the environment sampler's (env collector), else Istio's 1 %. */
  samplingPercent(own: number | undefined, exporter: TraceExporterRef): number {
    return own ?? (exporter.kind === 'env' ? this.envSamplingPercent : undefined) ?? DEFAULT_SAMPLING_PERCENT;
  }

  /** The tracer spans for `exporter` are made with; undefined when that collector is not running (off, or being replaced). */
  tracerFor(exporter: TraceExporterRef): Tracer | undefined {
    return this.collectors.get(keyOf(exporter))?.tracer;
  }

  /**
   * Start a span with `tracer`: a child of `parent` (a remote context, or the waypoint's own span),
   * sampled or not as decided (an unsampled span is not recorded, only propagated).
   */
  static startSpan(tracer: Tracer, name: string, options: SpanOptions, parent: SpanContext | undefined, sampled: boolean): Span {
    const base = ROOT_CONTEXT.setValue(SAMPLED, sampled);
    return tracer.startSpan(name, options, parent ? trace.setSpanContext(base, parent) : base);
  }

  /** Bring the collectors in line with a snapshot just published. */
  private publish(compiled: CompiledTelemetry, snapshot: MeshSnapshot): void {
    if (this.closed) return;
    const wanted = new Map<string, TraceExporterRef>();
    for (const e of compiled.exporters) {
      if (e.kind === 'env' && this.envDisabled()) continue;
      wanted.set(keyOf(e), e);
    }
    const serviceName = `${snapshot.waypoint.name}.${snapshot.waypoint.namespace}`;
    for (const [key, c] of this.collectors) {
      const e = wanted.get(key);
      if (e === undefined || fingerprint(e, serviceName) !== c.fingerprint) {
        this.collectors.delete(key);
        void shutdownWithin(c.provider, CLOSE_TIMEOUT_MS);
      }
    }
    for (const [key, e] of wanted) {
      if (this.collectors.has(key)) continue;
      const fp = fingerprint(e, serviceName);
      const provider = new TracerProvider({
        resource: resourceFromAttributes({ ...this.resourceAttributes(e), [ATTR_SERVICE_NAME]: this.serviceName(e, serviceName) }),
        sampler: decisionSampler,
        spanProcessors: [new BoundedBatchProcessor(this.exporter(e), batchSettingsFromEnv(this.env), this.outcomes(key === '' ? 'env' : key))],
      });
      this.collectors.set(key, { fingerprint: fp, provider, tracer: provider.getTracer('node-waypoint') });
      log.info({ provider: key || 'OTEL_* environment', endpoint: e.kind === 'provider' ? otlpEndpoint(e.otel) : undefined }, 'tracing: exporting spans');
    }
  }

  /** Flush what is queued (at most 2 s) and stop every collector. Idempotent. */
  async close(): Promise<void> {
    this.closed = true;
    const all = [...this.collectors.values()];
    this.collectors.clear();
    await Promise.all(all.map((c) => shutdownWithin(c.provider, CLOSE_TIMEOUT_MS)));
  }

  /** `OTEL_SDK_DISABLED=true` or `OTEL_TRACES_EXPORTER=none`: the environment's collector is off. */
  private envDisabled(): boolean {
    return this.env.OTEL_SDK_DISABLED?.trim().toLowerCase() === 'true' || this.env.OTEL_TRACES_EXPORTER?.trim().toLowerCase() === 'none';
  }

  private serviceName(e: TraceExporterRef, fallback: string): string {
    return e.kind === 'env' && this.env.OTEL_SERVICE_NAME ? this.env.OTEL_SERVICE_NAME : fallback;
  }

  private resourceAttributes(e: TraceExporterRef): Record<string, string> {
    const want = e.kind === 'env' || e.otel.environmentResource;
    return want && this.env.OTEL_RESOURCE_ATTRIBUTES ? parseKeyPairsIntoRecord(this.env.OTEL_RESOURCE_ATTRIBUTES) : {};
  }

  private exporter(e: TraceExporterRef): SpanExporter {
    if (e.kind === 'provider') return providerExporter(e.otel);
    // As an OpenTelemetry SDK: the protocol from OTEL_EXPORTER_OTLP_(TRACES_)PROTOCOL, the endpoint,
    // headers and timeout read by the exporters themselves. The HTTP exporter sends OTLP/JSON.
    const protocol = this.env.OTEL_EXPORTER_OTLP_TRACES_PROTOCOL ?? this.env.OTEL_EXPORTER_OTLP_PROTOCOL ?? 'http/protobuf';
    return new LazyExporter(protocol.trim() === 'grpc' ? () => grpcExporter() : () => httpExporter());
  }

  private outcomes(provider: string): SpanOutcomes {
    return {
      exported: (n) => this.exported?.inc({ provider }, n),
      dropped: (reason, n, err) => {
        this.dropped?.inc({ provider, reason }, n);
        const key = `${provider}/${reason}`;
        if (this.warned.has(key)) return;
        this.warned.add(key);
        log.warn({ provider, reason, err }, 'tracing: spans dropped (further drops are counted in waypoint_tracing_spans_dropped_total)');
      },
    };
  }
}

function keyOf(e: TraceExporterRef): string {
  return e.kind === 'env' ? '' : e.name;
}

function fingerprint(e: TraceExporterRef, serviceName: string): string {
  return JSON.stringify([serviceName, e.kind === 'provider' ? e.otel : 'env']);
}

/** Where a provider's spans go: the OTLP/HTTP URL with its path, or the OTLP/gRPC address (logged as `grpc://`). */
export function otlpEndpoint(o: OpenTelemetryProvider): string {
  const hostPort = formatHostPort(o.host, o.port);
  return o.protocol === 'http' ? `http://${hostPort}${o.path.startsWith('/') ? o.path : `/${o.path}`}` : `grpc://${hostPort}`;
}

function providerExporter(o: OpenTelemetryProvider): SpanExporter {
  const timeout = o.timeoutMs ? { timeoutMillis: o.timeoutMs } : {};
  return new LazyExporter(
    o.protocol === 'http'
      ? () => httpExporter({ url: otlpEndpoint(o), headers: { ...o.headers }, ...timeout })
      : () => grpcExporter({ url: `http://${formatHostPort(o.host, o.port)}`, ...timeout }, o.headers),
  );
}

/** The OTLP/HTTP (JSON) exporter, its module loaded when first needed. */
async function httpExporter(config?: { url: string; headers: Record<string, string>; timeoutMillis?: number }): Promise<SpanExporter> {
  const { OTLPTraceExporter } = await import('@opentelemetry/exporter-trace-otlp-http');
  return new OTLPTraceExporter(config);
}

/** The OTLP/gRPC exporter (plaintext), its modules loaded when first needed; `headers` go as gRPC metadata. */
async function grpcExporter(config: { url?: string; timeoutMillis?: number } = {}, headers?: Readonly<Record<string, string>>): Promise<SpanExporter> {
  const [{ OTLPTraceExporter }, grpc] = await Promise.all([import('@opentelemetry/exporter-trace-otlp-grpc'), import('@grpc/grpc-js')]);
  let metadata: InstanceType<typeof grpc.Metadata> | undefined;
  if (headers) {
    metadata = new grpc.Metadata();
    for (const [k, v] of Object.entries(headers)) metadata.set(k, v);
  }
  return new OTLPTraceExporter({ ...config, credentials: grpc.credentials.createInsecure(), ...(metadata ? { metadata } : {}) });
}

/**
 * An OTLP exporter whose module is loaded on first use: the exporters (and the OTLP transformer and
 * gRPC stack under them) cost every start — each worker, each CLI command — for a feature that is off
 * unless a Telemetry resource or `OTEL_*` asks for it.
 */
class LazyExporter implements SpanExporter {
  private readonly real: Promise<SpanExporter>;
  constructor(load: () => Promise<SpanExporter>) {
    this.real = load();
    // A module that cannot load fails each export (counted as dropped), not the process.
    this.real.catch(() => undefined);
  }
  export(spans: ReadableSpan[], done: (result: ExportResult) => void): void {
    this.real.then((e) => e.export(spans, done), (error: unknown) => done({ code: ExportResultCode.FAILED, error: error instanceof Error ? error : new Error(String(error)) }));
  }
  async shutdown(): Promise<void> {
    await (await this.real.catch(() => undefined))?.shutdown();
  }
  async forceFlush(): Promise<void> {
    await (await this.real.catch(() => undefined))?.forceFlush?.();
  }
}

async function shutdownWithin(p: TracerProvider, ms: number): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  await Promise.race([p.shutdown().catch(() => undefined), new Promise((r) => (timer = setTimeout(r, ms)))]);
  clearTimeout(timer);
}
