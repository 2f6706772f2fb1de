/**
 * Counters and histograms for the `istio_*` metrics, served by the waypoint's prom-client
 * Registry (`/stats/prometheus`) next to its process metrics.
 *
 * Why not prom-client's own Counter/Histogram: every `inc`/`observe` there (also through a
 * `labels(...)` child) rebuilds a string key from all label values and re-validates the label
 * names; with Istio's 25 labels that is several µs per request for four instruments. Here a
 * series is an object created once per label tuple; the stats filter keeps a reference to it
 * (cached per peer pair, see index.ts), so recording is a few additions. The registry reads the
 * series through the `get()` contract prom-client's own metrics implement (the same JSON shape,
 * so the text format, `getMetricsAsJSON` and `resetMetrics` work unchanged).
 *
 * Series are bounded: a metric creates at most `maxSeries` of them; past that, samples for new
 * label tuples go to a detached sink series that is never exported (and a warning is logged once),
 * so no input can grow memory without bound.
 */
import type { Logger } from 'pino';
import type { Registry } from 'prom-client';

/**
 * Envoy's default histogram buckets (envoyproxy/envoy source/common/stats/histogram_impl.cc), also
 * for byte histograms.
 */
export const ENVOY_DEFAULT_BUCKETS: readonly number[] = Object.freeze([
  0.5, 1, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000, 60000, 300000, 600000, 1800000, 3600000,
]);

/** One labelled counter. */
export class CounterSeries {
  readonly labels: Readonly<Record<string, string>>;
  value: number;
  constructor(labels: Readonly<Record<string, string>>) {
    this.labels = labels;
    this.value = 0;
  }
  add(n: number): void {
    this.value += n;
  }
}

/** One labelled histogram: per-bucket counts (not cumulative; the last slot is above every bound), sum and count. */
export class HistogramSeries {
  readonly labels: Readonly<Record<string, string>>;
  readonly bounds: readonly number[];
  readonly counts: Float64Array;
  sum: number;
  count: number;
  constructor(labels: Readonly<Record<string, string>>, bounds: readonly number[]) {
    this.labels = labels;
    this.bounds = bounds;
    this.counts = new Float64Array(bounds.length + 1);
    this.sum = 0;
    this.count = 0;
  }
  observe(v: number): void {
    const b = this.bounds;
    let i = 0;
    while (i < b.length && v > b[i]) i++;
    this.counts[i]++;
    this.sum += v;
    this.count++;
  }
}

/** One exported sample, in prom-client's `MetricValue` shape. */
interface Sample {
  readonly labels: Readonly<Record<string, string | number>>;
  readonly value: number;
  readonly metricName?: string;
}

/** What the registry reads from a metric (prom-client's `MetricObjectWithValues`). */
interface MetricSnapshot {
  readonly name: string;
  readonly help: string;
  readonly type: 'counter' | 'histogram';
  readonly values: Sample[];
  readonly aggregator: 'sum';
}

abstract class IstioMetric<S extends { readonly labels: Readonly<Record<string, string>> }> {
  readonly name: string;
  readonly help: string;
  readonly labelNames: readonly string[];
  readonly aggregator = 'sum' as const;
  protected readonly byKey = new Map<string, S>();
  private readonly maxSeries: number;
  private readonly log: Logger | undefined;
  private sink: S | undefined;
  /** Samples that went to the sink because the series limit was reached. */
  dropped = 0;

  constructor(name: string, help: string, labelNames: readonly string[], maxSeries: number, log: Logger | undefined) {
    this.name = name;
    this.help = help;
    this.labelNames = labelNames;
    this.maxSeries = maxSeries;
    this.log = log;
  }

  protected abstract make(labels: Readonly<Record<string, string>>): S;

  /**
   * The series of one label tuple, created on first use: `key` identifies the tuple (the caller's
   * joined values), `labels` holds one value per label name, in order (the caller builds it once
   * with {@link labelSet} and may share it between metrics with the same names). Past
   * `maxSeries`, a sink that is never exported.
   */
  seriesFor(key: string, labels: Readonly<Record<string, string>>): S {
    let s = this.byKey.get(key);
    if (s !== undefined) return s;
    if (this.byKey.size >= this.maxSeries) {
      if (this.sink === undefined) {
        this.log?.warn({ metric: this.name, maxSeries: this.maxSeries }, 'istio.stats: series limit reached; new label sets are not recorded');
        this.sink = this.make(Object.freeze({}));
      }
      this.dropped++;
      return this.sink;
    }
    s = this.make(labels);
    this.byKey.set(key, s);
    return s;
  }

  /** Number of exported series. */
  get size(): number {
    return this.byKey.size;
  }
}

/** A counter (`istio_requests_total`, `istio_tcp_*_total`, ...). */
export class IstioCounter extends IstioMetric<CounterSeries> {
  readonly type = 'counter' as const;

  protected make(labels: Readonly<Record<string, string>>): CounterSeries {
    return new CounterSeries(labels);
  }

  /** prom-client's metric contract: the current samples. */
  async get(): Promise<MetricSnapshot> {
    const values: Sample[] = [];
    for (const s of this.byKey.values()) values.push({ labels: s.labels, value: s.value });
    return { name: this.name, help: this.help, type: this.type, values, aggregator: this.aggregator };
  }

  /** Zero every series in place (cached references stay valid); `Registry.resetMetrics`. */
  reset(): void {
    for (const s of this.byKey.values()) s.value = 0;
  }
}

/** A histogram with Envoy's default buckets (`istio_request_duration_milliseconds`, `istio_request_bytes`, ...). */
export class IstioHistogram extends IstioMetric<HistogramSeries> {
  readonly type = 'histogram' as const;
  readonly bounds: readonly number[];

  constructor(name: string, help: string, labelNames: readonly string[], maxSeries: number, log: Logger | undefined, bounds: readonly number[] = ENVOY_DEFAULT_BUCKETS) {
    super(name, help, labelNames, maxSeries, log);
    this.bounds = bounds;
  }

  protected make(labels: Readonly<Record<string, string>>): HistogramSeries {
    return new HistogramSeries(labels, this.bounds);
  }

  /** prom-client's metric contract: `_bucket` (cumulative, `le` last), `_sum` and `_count` samples. */
  async get(): Promise<MetricSnapshot> {
    const values: Sample[] = [];
    const bucket = `${this.name}_bucket`;
    for (const s of this.byKey.values()) {
      let acc = 0;
      for (let i = 0; i < this.bounds.length; i++) {
        acc += s.counts[i];
        values.push({ labels: { ...s.labels, le: this.bounds[i] }, value: acc, metricName: bucket });
      }
      values.push({ labels: { ...s.labels, le: '+Inf' }, value: s.count, metricName: bucket });
      values.push({ labels: s.labels, value: s.sum, metricName: `${this.name}_sum` });
      values.push({ labels: s.labels, value: s.count, metricName: `${this.name}_count` });
    }
    return { name: this.name, help: this.help, type: this.type, values, aggregator: this.aggregator };
  }

  reset(): void {
    for (const s of this.byKey.values()) {
      s.counts.fill(0);
      s.sum = 0;
      s.count = 0;
    }
  }
}

/** A frozen `{ name: value }` object in `names` order (the order the text format prints). */
export function labelSet(names: readonly string[], values: readonly string[]): Readonly<Record<string, string>> {
  const labels: Record<string, string> = {};
  for (let i = 0; i < names.length; i++) labels[names[i]] = values[i];
  return Object.freeze(labels);
}

/** Register a metric built here with a prom-client Registry (it implements the registry's duck-typed contract). */
export function register(registry: Registry, metric: IstioCounter | IstioHistogram): void {
  registry.registerMetric(metric as unknown as Parameters<Registry['registerMetric']>[0]);
}
