/**
 * What a load test measures: latency in HDR histograms at 1 µs resolution (corrected for
 * coordinated omission: from the time a request was due; and uncorrected: from the time it was
 * sent), response codes, errors by kind, and a time series cut every interval (throughput, errors,
 * latency percentiles, requests in flight and waiting).
 */
import { build, type Histogram } from 'hdr-histogram-js';
import type { Outcome } from './protocols.ts';

/** Largest latency recorded (µs): one hour; anything longer is recorded as this. */
export const HIGHEST_US = 3_600_000_000;

/** A histogram of µs values, 1 µs to one hour, 3 significant digits (HdrHistogram's usual). */
export function newHistogram(): Histogram {
  return build({ lowestDiscernibleValue: 1, highestTrackableValue: HIGHEST_US, numberOfSignificantValueDigits: 3 });
}

/** One cut of the time series (latencies of requests completed in the interval, corrected, µs). */
export interface IntervalSample {
  /** End of the interval: ms since the measured window began. */
  readonly tMs: number;
  readonly completed: number;
  readonly ok: number;
  readonly errors: number;
  /** Completions per second over the interval. */
  readonly rps: number;
  readonly p50Us: number;
  readonly p90Us: number;
  readonly p99Us: number;
  readonly maxUs: number;
  /** Requests on the wire, and due but waiting for a free connection (open loop), at the cut. */
  readonly inFlight: number;
  readonly queued: number;
}

const toUs = (ms: number): number => Math.min(HIGHEST_US, Math.max(1, Math.round(ms * 1000)));

/** Counts of one value per key, in insertion order. */
function bump(m: Map<string, number>, key: string): void {
  m.set(key, (m.get(key) ?? 0) + 1);
}

export class Recorder {
  /** From the time each request was due (open loop: its slot in the schedule). */
  readonly corrected = newHistogram();
  /** From the time each request was actually sent. */
  readonly uncorrected = newHistogram();
  /** How long requests waited to be sent after they were due (busy connections, the 1 ms timer). */
  readonly sendDelay = newHistogram();
  /** Corrected latency of the failed requests (fortio's `ErrorsDurationHistogram`). */
  readonly failed = newHistogram();
  readonly codes = new Map<string, number>();
  readonly errors = new Map<string, number>();
  /** A few distinct error details, for the report. */
  readonly samples: string[] = [];
  readonly timeline: IntervalSample[] = [];
  completed = 0;
  ok = 0;
  private readonly interval = newHistogram();
  private iCompleted = 0;
  private iOk = 0;
  private lastCutMs = 0;

  /** One measured request: due at `dueMs`, sent at `sentMs`, ended at `endMs` (performance.now() ms). */
  record(dueMs: number, sentMs: number, endMs: number, o: Outcome): void {
    const corrected = toUs(endMs - dueMs);
    this.sendDelay.recordValue(toUs(sentMs - dueMs));
    this.completed++;
    this.iCompleted++;
    bump(this.codes, o.code);
    if (o.ok) {
      this.ok++;
      this.iOk++;
      this.corrected.recordValue(corrected);
      this.uncorrected.recordValue(toUs(endMs - sentMs));
      this.interval.recordValue(corrected);
      return;
    }
    this.failed.recordValue(corrected);
    bump(this.errors, o.kind);
    if (this.samples.length < 8 && !this.samples.includes(o.detail)) this.samples.push(o.detail);
  }

  /** A request that never got an answer in time, or was never sent before the run had to end. */
  recordLost(kind: 'timeout' | 'not_sent', detail: string): void {
    this.completed++;
    this.iCompleted++;
    bump(this.codes, '-1');
    bump(this.errors, kind);
    if (this.samples.length < 8 && !this.samples.includes(detail)) this.samples.push(detail);
  }

  /** Close the current interval at `tMs` (ms since the measured window began). */
  cut(tMs: number, inFlight: number, queued: number): IntervalSample {
    const h = this.interval;
    const spanS = Math.max(1e-3, (tMs - this.lastCutMs) / 1000);
    const any = h.totalCount > 0;
    const s: IntervalSample = {
      tMs: Math.round(tMs),
      completed: this.iCompleted,
      ok: this.iOk,
      errors: this.iCompleted - this.iOk,
      rps: Math.round((this.iCompleted / spanS) * 10) / 10,
      p50Us: any ? h.getValueAtPercentile(50) : 0,
      p90Us: any ? h.getValueAtPercentile(90) : 0,
      p99Us: any ? h.getValueAtPercentile(99) : 0,
      maxUs: any ? h.maxValue : 0,
      inFlight,
      queued,
    };
    this.timeline.push(s);
    h.reset();
    this.iCompleted = 0;
    this.iOk = 0;
    this.lastCutMs = tMs;
    return s;
  }

  /** p99 (corrected) so far, µs; 0 before any success. */
  get p99Us(): number {
    return this.corrected.totalCount > 0 ? this.corrected.getValueAtPercentile(99) : 0;
  }

  get errorCount(): number {
    return this.completed - this.ok;
  }
}

/** Latency percentiles of a histogram (µs), the figures every report shows. */
export interface LatencySummary {
  readonly count: number;
  readonly min: number;
  readonly mean: number;
  readonly stddev: number;
  readonly p50: number;
  readonly p90: number;
  readonly p99: number;
  readonly p999: number;
  readonly max: number;
}

export function summarize(h: Histogram): LatencySummary {
  if (h.totalCount === 0) return { count: 0, min: 0, mean: 0, stddev: 0, p50: 0, p90: 0, p99: 0, p999: 0, max: 0 };
  return {
    count: h.totalCount,
    min: h.minNonZeroValue,
    mean: Math.round(h.mean),
    stddev: Math.round(h.stdDeviation),
    p50: h.getValueAtPercentile(50),
    p90: h.getValueAtPercentile(90),
    p99: h.getValueAtPercentile(99),
    p999: h.getValueAtPercentile(99.9),
    max: h.maxValue,
  };
}

/** The distinct recorded values of `h` (JS histograms, as `newHistogram` builds) with their counts. */
export function* recordedValues(h: Histogram): Generator<{ readonly value: number; readonly count: number }> {
  const it = (h as unknown as { recordedValuesIterator: { reset(): void; hasNext(): boolean; next(): { valueIteratedTo: number; countAtValueIteratedTo: number } } }).recordedValuesIterator;
  it.reset();
  while (it.hasNext()) {
    const v = it.next();
    yield { value: v.valueIteratedTo, count: v.countAtValueIteratedTo };
  }
}

/** How many recorded values of `h` are above `us`. */
export function countAbove(h: Histogram, us: number): number {
  let n = 0;
  for (const v of recordedValues(h)) if (v.value > us) n += v.count;
  return n;
}
