/**
 * The span processor between finished spans and an OTLP exporter: a bounded queue sent in
 * batches, one export in flight at a time, so a slow or unreachable collector never holds a
 * request up and never grows memory. Spans that cannot be queued (queue full) or whose export
 * failed are dropped and counted (`/stats/prometheus`). Sizes and timings are the
 * OpenTelemetry SDK's batch processor settings, from `OTEL_BSP_*` like every OpenTelemetry SDK
 * (opentelemetry-specification sdk-environment-variables.md "Batch Span Processor").
 *
 * Our own processor rather than the SDK's BatchSpanProcessor: that one neither reports its drops
 * nor failed exports (it logs them through `diag`).
 */
import type { Context } from '@opentelemetry/api';
import { TraceFlags } from '@opentelemetry/api';
import { ExportResultCode, type ExportResult } from '@opentelemetry/core';
import type { ReadableSpan, Span, SpanExporter, SpanProcessor } from '@opentelemetry/sdk-trace';

/** Batch settings (ms and span counts). */
export interface BatchSettings {
  readonly maxQueueSize: number;
  readonly maxExportBatchSize: number;
  readonly scheduledDelayMillis: number;
  readonly exportTimeoutMillis: number;
}

/** What happens to spans, for the counters. */
export interface SpanOutcomes {
  exported(n: number): void;
  dropped(reason: 'queue_full' | 'export_failed', n: number, err?: unknown): void;
}

/** `OTEL_BSP_*` (defaults 2048 spans, batches of 512, every 5 s, 30 s per export). */
export function batchSettingsFromEnv(env: NodeJS.ProcessEnv): BatchSettings {
  const num = (name: string, dflt: number, min: number) => {
    const v = Number(env[name]);
    return env[name] !== undefined && env[name] !== '' && Number.isFinite(v) && v >= min ? Math.floor(v) : dflt;
  };
  const maxQueueSize = num('OTEL_BSP_MAX_QUEUE_SIZE', 2048, 1);
  return {
    maxQueueSize,
    maxExportBatchSize: Math.min(num('OTEL_BSP_MAX_EXPORT_BATCH_SIZE', 512, 1), maxQueueSize),
    scheduledDelayMillis: num('OTEL_BSP_SCHEDULE_DELAY', 5000, 0),
    exportTimeoutMillis: num('OTEL_BSP_EXPORT_TIMEOUT', 30000, 1),
  };
}

/** See the module comment. */
export class BoundedBatchProcessor implements SpanProcessor {
  private readonly exporter: SpanExporter;
  private readonly settings: BatchSettings;
  private readonly outcomes: SpanOutcomes;
  private queue: ReadableSpan[] = [];
  private timer: NodeJS.Timeout | undefined;
  /** The export in flight, if any. */
  private inFlight: Promise<void> | undefined;
  private closed = false;

  constructor(exporter: SpanExporter, settings: BatchSettings, outcomes: SpanOutcomes) {
    this.exporter = exporter;
    this.settings = settings;
    this.outcomes = outcomes;
  }

  onStart(_span: Span, _parent: Context): void {}

  onEnd(span: ReadableSpan): void {
    if (this.closed || (span.spanContext().traceFlags & TraceFlags.SAMPLED) === 0) return;
    if (this.queue.length >= this.settings.maxQueueSize) {
      this.outcomes.dropped('queue_full', 1);
      return;
    }
    this.queue.push(span);
    if (this.queue.length >= this.settings.maxExportBatchSize) this.kick();
    else if (this.timer === undefined) {
      this.timer = setTimeout(() => {
        this.timer = undefined;
        this.kick();
      }, this.settings.scheduledDelayMillis);
      this.timer.unref();
    }
  }

  /** Start an export unless one is in flight (the next one follows it while spans wait). */
  private kick(): void {
    if (this.inFlight !== undefined || this.queue.length === 0) return;
    if (this.timer !== undefined) {
      clearTimeout(this.timer);
      this.timer = undefined;
    }
    this.inFlight = this.exportBatch().finally(() => {
      this.inFlight = undefined;
      if (this.queue.length >= this.settings.maxExportBatchSize || (this.closed && this.queue.length > 0)) this.kick();
      else if (this.queue.length > 0 && this.timer === undefined) {
        this.timer = setTimeout(() => {
          this.timer = undefined;
          this.kick();
        }, this.settings.scheduledDelayMillis);
        this.timer.unref();
      }
    });
  }

  private exportBatch(): Promise<void> {
    const batch = this.queue.splice(0, this.settings.maxExportBatchSize);
    return new Promise<void>((resolve) => {
      let done = false;
      const finish = (r: ExportResult) => {
        if (done) return;
        done = true;
        clearTimeout(guard);
        if (r.code === ExportResultCode.SUCCESS) this.outcomes.exported(batch.length);
        else this.outcomes.dropped('export_failed', batch.length, r.error);
        resolve();
      };
      // An exporter that never calls back must not stop every later export.
      const guard = setTimeout(() => finish({ code: ExportResultCode.FAILED, error: new Error('export timed out') }), this.settings.exportTimeoutMillis);
      guard.unref();
      try {
        this.exporter.export(batch, finish);
      } catch (err) {
        finish({ code: ExportResultCode.FAILED, error: err as Error });
      }
    });
  }

  /** Export everything queued now (batch after batch). */
  async forceFlush(): Promise<void> {
    while (this.inFlight !== undefined || this.queue.length > 0) {
      if (this.inFlight === undefined) this.kick();
      await this.inFlight;
    }
  }

  /** Flush, then shut the exporter down; spans ending afterwards are ignored. */
  async shutdown(): Promise<void> {
    if (this.closed) return;
    await this.forceFlush();
    this.closed = true;
    if (this.timer !== undefined) clearTimeout(this.timer);
    await this.exporter.shutdown().catch(() => {});
  }
}
