/**
 * The JSON result of a load test, versioned (`loadtest.schema`). Its top level is fortio's result
 * shape (fortio/fortio periodic/periodic.go `RunnerResults`, fhttp/httprunner.go
 * `HTTPRunnerResults`, stats/stats.go `HistogramData`: durations in seconds, buckets with a
 * cumulative percent), so fortio's report viewer and tools that read fortio JSON read it too;
 * everything fortio has no field for sits under `loadtest` (docs/loadtest.md describes it).
 */
import fs from 'node:fs';
import os from 'node:os';
import { decodeFromCompressedBase64, encodeIntoCompressedBase64, type Histogram } from 'hdr-histogram-js';
import type { LoadResult } from './engine.ts';
import type { PrometheusReport, ResourceReport } from './monitor.ts';
import type { LoadtestSettings } from './options.ts';
import { newHistogram, recordedValues, summarize, type IntervalSample, type LatencySummary } from './recorder.ts';

/** The schema id of this version; a reader refuses anything else. */
export const SCHEMA = 'node-waypoint.loadtest/v1';

/** fortio's `stats.HistogramData` (values in seconds). */
export interface FortioHistogram {
  readonly Count: number;
  readonly Min: number;
  readonly Max: number;
  readonly Sum: number;
  readonly Avg: number;
  readonly StdDev: number;
  readonly Data: readonly { readonly Start: number; readonly End: number; readonly Percent: number; readonly Count: number }[];
  readonly Percentiles: readonly { readonly Percentile: number; readonly Value: number }[];
}

/** [percentile, µs] points from p0 to the maximum, dense towards the tail. */
export type PercentileCurve = readonly (readonly [number, number])[];

export interface LoadtestExtension {
  readonly schema: typeof SCHEMA;
  readonly tool: string;
  readonly settings: Omit<LoadtestSettings, 'via'> & { readonly via: Record<string, unknown> };
  readonly transport: string;
  readonly host: { readonly hostname: string; readonly cpus: number; readonly node: string };
  readonly window: {
    readonly startedAt: string;
    readonly seconds: number;
    readonly scheduled: number;
    readonly sent: number;
    readonly completed: number;
    readonly ok: number;
    readonly errors: number;
    readonly interrupted: boolean;
    /** Why these figures are not a full run (Ctrl-C, nothing measured), or null. Compare refuses or warns on it. */
    readonly incomplete: string | null;
  };
  readonly throughput: { readonly requestedRps: number | null; readonly achievedRps: number; readonly okRps: number };
  /** Corrected: from when each request was due; uncorrected: from when it was sent. Successes only, µs. */
  readonly latencyUs: { readonly corrected: LatencySummary; readonly uncorrected: LatencySummary };
  /** How long requests waited between when they were due and when they were sent (µs, every measured request sent). */
  readonly sendDelayUs: LatencySummary;
  readonly percentileCurve: { readonly corrected: PercentileCurve; readonly uncorrected: PercentileCurve };
  /** The full histograms, HdrHistogram's compressed base64 encoding (µs). */
  readonly histograms: { readonly corrected: string; readonly uncorrected: string };
  readonly codes: Readonly<Record<string, number>>;
  readonly errors: Readonly<Record<string, number>>;
  readonly errorSamples: readonly string[];
  readonly timeline: readonly IntervalSample[];
  readonly concurrency: { readonly connections: number; readonly maxInFlight: number; readonly maxQueued: number };
  readonly waypoint: ResourceReport | null;
  readonly prometheus: readonly PrometheusReport[];
}

/** One load test's result: fortio's fields, then ours under `loadtest`. */
export interface LoadtestReport {
  readonly RunType: string;
  readonly Labels: string;
  readonly StartTime: string;
  readonly RequestedQPS: string;
  readonly RequestedDuration: string;
  readonly ActualQPS: number;
  /** Nanoseconds (Go's time.Duration). */
  readonly ActualDuration: number;
  readonly NumThreads: number;
  readonly Version: string;
  readonly DurationHistogram: FortioHistogram;
  readonly ErrorsDurationHistogram: FortioHistogram;
  readonly Exactly: number;
  readonly Jitter: boolean;
  readonly Uniform: boolean;
  readonly NoCatchUp: boolean;
  readonly RunID: number;
  readonly URL?: string;
  readonly Destination?: string;
  readonly RetCodes: Readonly<Record<string, number>>;
  readonly SocketCount: number;
  readonly loadtest: LoadtestExtension;
}

const PERCENTILES = [50, 75, 90, 99, 99.9];

/** Bucket bounds (µs) per decade: fortio-like resolution (1, 1.5, 2, 3, ... 9 × 10^d). */
const STEPS = [1, 1.5, 2, 3, 4, 5, 6, 7, 8, 9];

/** The bucket [lo, hi) holding `us`. */
function bucketOf(us: number): [number, number] {
  const d = 10 ** Math.floor(Math.log10(Math.max(1, us)));
  for (let i = 1; i < STEPS.length; i++) if (us < STEPS[i] * d) return [STEPS[i - 1] * d, STEPS[i] * d];
  return [9 * d, 10 * d];
}

const s6 = (us: number): number => Math.round(us) / 1e6;

/** A histogram (µs) in fortio's shape (seconds). */
export function fortioHistogram(h: Histogram): FortioHistogram {
  const n = h.totalCount;
  if (n === 0) return { Count: 0, Min: 0, Max: 0, Sum: 0, Avg: 0, StdDev: 0, Data: [], Percentiles: [] };
  const data: { Start: number; End: number; Percent: number; Count: number }[] = [];
  let seen = 0;
  let bucket: { start: number; end: number; count: number } | undefined;
  const flush = () => {
    if (!bucket) return;
    seen += bucket.count;
    data.push({ Start: s6(Math.max(bucket.start, h.minNonZeroValue)), End: s6(Math.min(bucket.end, h.maxValue)), Percent: Math.round((seen / n) * 1e6) / 1e4, Count: bucket.count });
  };
  for (const v of recordedValues(h)) {
    const [start, end] = bucketOf(v.value);
    if (bucket?.end !== end) {
      flush();
      bucket = { start, end, count: 0 };
    }
    bucket.count += v.count;
  }
  flush();
  return {
    Count: n,
    Min: s6(h.minNonZeroValue),
    Max: s6(h.maxValue),
    Sum: Math.round(h.mean * n) / 1e6,
    Avg: h.mean / 1e6,
    StdDev: h.stdDeviation / 1e6,
    Data: data,
    Percentiles: PERCENTILES.map((p) => ({ Percentile: p, Value: s6(h.getValueAtPercentile(p)) })),
  };
}

/** Percentile curve points: 20 per "nine" (90, 99, 99.9, ...) up to the maximum. */
export function percentileCurve(h: Histogram): PercentileCurve {
  if (h.totalCount === 0) return [];
  const out: [number, number][] = [];
  const nines = Math.log10(h.totalCount);
  for (let k = 0; k < nines; k += 0.05) {
    const p = 100 * (1 - 10 ** -k);
    out.push([Math.round(p * 1e4) / 1e4, h.getValueAtPercentile(p)]);
  }
  out.push([100, h.maxValue]);
  return out;
}

/** Everything {@link buildReport} needs. */
export interface ReportInput {
  readonly settings: LoadtestSettings;
  readonly transport: string;
  readonly load: LoadResult;
  readonly waypoint: ResourceReport | null;
  readonly prometheus: readonly PrometheusReport[];
  readonly version: string;
}

export function buildReport(i: ReportInput): LoadtestReport {
  const { settings: s, load } = i;
  const rec = load.recorder;
  const seconds = load.windowMs / 1000;
  const all = newHistogram();
  all.add(rec.corrected);
  all.add(rec.failed);
  const codes = Object.fromEntries(rec.codes);
  const achieved = rec.completed / seconds;
  const { via, ...rest } = s;
  const url = s.protocol === 'grpc' ? undefined : `http://${s.host}${s.path}`;
  return {
    RunType: s.protocol === 'grpc' ? 'GRPC' : 'HTTP',
    Labels: s.label,
    StartTime: load.startedAt.toISOString(),
    RequestedQPS: s.rate === null ? 'max' : String(s.rate),
    RequestedDuration: s.durationMs !== null ? `${s.durationMs / 1000}s` : `exactly ${s.requests} calls`,
    ActualQPS: Math.round(achieved * 1000) / 1000,
    ActualDuration: Math.round(load.windowMs * 1e6),
    NumThreads: s.connections * s.streams,
    Version: i.version,
    DurationHistogram: fortioHistogram(all),
    ErrorsDurationHistogram: fortioHistogram(rec.failed),
    Exactly: s.requests ?? 0,
    Jitter: false,
    Uniform: false,
    NoCatchUp: false,
    RunID: 0,
    ...(url ? { URL: url } : { Destination: `${s.host}${s.grpcMethod}` }),
    RetCodes: codes,
    SocketCount: load.connectionsOpened,
    loadtest: {
      schema: SCHEMA,
      tool: i.version,
      settings: { ...rest, via: { ...via } },
      transport: i.transport,
      host: { hostname: os.hostname(), cpus: os.cpus().length, node: process.versions.node },
      window: {
        startedAt: load.startedAt.toISOString(),
        seconds: Math.round(seconds * 1000) / 1000,
        scheduled: load.scheduled,
        sent: load.sent,
        completed: rec.completed,
        ok: rec.ok,
        errors: rec.errorCount,
        interrupted: load.interrupted,
        incomplete: incompleteReason(load.interrupted, load.scheduled, rec.completed),
      },
      throughput: { requestedRps: s.rate, achievedRps: Math.round(achieved * 10) / 10, okRps: Math.round((rec.ok / seconds) * 10) / 10 },
      latencyUs: { corrected: summarize(rec.corrected), uncorrected: summarize(rec.uncorrected) },
      sendDelayUs: summarize(rec.sendDelay),
      percentileCurve: { corrected: percentileCurve(rec.corrected), uncorrected: percentileCurve(rec.uncorrected) },
      histograms: { corrected: encodeIntoCompressedBase64(rec.corrected), uncorrected: encodeIntoCompressedBase64(rec.uncorrected) },
      codes,
      errors: Object.fromEntries(rec.errors),
      errorSamples: rec.samples,
      timeline: rec.timeline,
      concurrency: { connections: s.connections, maxInFlight: load.maxInFlight, maxQueued: load.maxQueued },
      waypoint: i.waypoint,
      prometheus: i.prometheus,
    },
  };
}

function incompleteReason(interrupted: boolean, scheduled: number, completed: number): string | null {
  if (interrupted && scheduled === 0) return 'interrupted during the warm-up: nothing was measured';
  if (completed === 0) return 'no request was measured';
  if (interrupted) return 'interrupted: the measured window was cut short';
  return null;
}

/** Why a result is not a full run, or null; results written before `incomplete` existed included. */
export function incompleteOf(r: LoadtestReport): string | null {
  const w = r.loadtest.window;
  return w.incomplete !== undefined ? w.incomplete : incompleteReason(w.interrupted, w.scheduled, w.completed);
}

/** The corrected histogram of a report, decoded. */
export function correctedHistogram(r: LoadtestReport): Histogram {
  return decodeFromCompressedBase64(r.loadtest.histograms.corrected);
}

/** Read a result file. @throws naming the file when it is not JSON or not this schema. */
export function readReport(file: string): LoadtestReport {
  let data: unknown;
  try {
    data = JSON.parse(fs.readFileSync(file, 'utf8'));
  } catch (err) {
    const e = err as NodeJS.ErrnoException;
    throw new Error(e.code === 'ENOENT' ? `${file}: no such file` : `${file}: not a JSON file (${e.message})`, { cause: err });
  }
  const ext = (data as { loadtest?: { schema?: unknown } } | null)?.loadtest;
  if (!ext || typeof ext !== 'object') throw new Error(`${file}: not a node-waypoint load-test result (no "loadtest" section; written by \`waypoint loadtest --json\`?)`);
  if (ext.schema !== SCHEMA) throw new Error(`${file}: schema ${JSON.stringify(ext.schema)}, this version reads ${SCHEMA}`);
  return data as LoadtestReport;
}
