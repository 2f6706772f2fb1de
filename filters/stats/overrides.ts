/**
 * Telemetry API `metrics[].overrides` on the `istio_*` series (istio/istio
 * pilot/pkg/model/telemetry.go `generateStatsConfig`; the stats plugin's `MetricConfig`: `drop`,
 * `tags_to_remove`, `dimensions`): a dropped metric records into a sink that is never exported,
 * a removed tag leaves the label set, an upserted tag is set (or added) to its CEL expression's
 * value for this request or tunnel (`unknown` when it cannot be evaluated, e.g. a header that was
 * not sent). Only targets with overrides take this path; the others keep their cached series.
 */
import type { ConnectionContext, StreamContext } from '../../src/pipeline/index.ts';
import { CEL_ERROR, type MetricsPolicy } from '../../src/tracing/index.ts';
import { CounterSeries, ENVOY_DEFAULT_BUCKETS, HistogramSeries } from './instruments.ts';

/** Where samples of a dropped metric go (never registered, never exported). */
export const DROPPED_COUNTER = new CounterSeries(Object.freeze({}));
export const DROPPED_HISTOGRAM = new HistogramSeries(Object.freeze({}), ENVOY_DEFAULT_BUCKETS);

/** The standard label set of a sample: its key (the joined values) and its labels. */
export interface Base {
  readonly key: string;
  readonly labels: Readonly<Record<string, string>>;
}

/**
 * The series `metric` records into under `policy`: the series of the standard label set `base`
 * when the metric has no override, `dropped` when the override drops it, else the series of the
 * overridden label set, evaluated against `conn` and `stream` (undefined on TCP). The standard
 * series of an overridden metric is never created, so it is not exported at zero.
 */
export function overridden<S extends CounterSeries | HistogramSeries>(
  metric: { readonly name: string; seriesFor(key: string, labels: Readonly<Record<string, string>>): S },
  base: Base,
  dropped: S,
  policy: MetricsPolicy,
  conn: ConnectionContext,
  stream: StreamContext | undefined,
): S {
  const o = policy.overrides.get(metric.name);
  if (o === undefined) return metric.seriesFor(base.key, base.labels);
  if (o.drop) return dropped;
  const labels: Record<string, string> = { ...base.labels };
  for (const t of o.tags) {
    if (t.remove) {
      delete labels[t.name];
      continue;
    }
    const v = t.value!.evaluate(conn, stream);
    labels[t.name] = v === CEL_ERROR ? 'unknown' : String(v);
  }
  // Keys of overridden label sets carry the names too (another shape than the standard keys).
  let key = '\u0002';
  for (const name in labels) key += `${name}\u0001${labels[name]}\u0001`;
  return metric.seriesFor(key, Object.freeze(labels));
}
