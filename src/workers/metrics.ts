/**
 * One `/stats/prometheus` for all the processes: the primary's admin server serves a registry whose
 * text is the primary's own metrics merged with every live worker's, collected over IPC when
 * scraped. The merge is prom-client's cluster aggregation (`AggregatorRegistry.aggregate`): series
 * with the same name and labels are added (counters, histogram buckets, sums and counts, gauges such
 * as buffered bytes), and the process metrics use the aggregator prom-client defines for each
 * (`process_start_time_seconds` the earliest, versions the first, ...). So `istio_requests_total` is
 * the waypoint's total whatever worker served each request, as Envoy's stats are across its threads.
 */
import { AggregatorRegistry, Registry } from 'prom-client';

/** Metrics of each worker (as `Registry.getMetricsAsJSON()`), for one scrape; a worker that does not answer in time is left out. */
export type WorkerMetrics = Awaited<ReturnType<Registry['getMetricsAsJSON']>>;
export type CollectWorkerMetrics = () => Promise<WorkerMetrics[]>;

export class WorkersRegistry extends Registry {
  readonly #own: Registry;
  readonly #collect: CollectWorkerMetrics;

  constructor(own: Registry, collect: CollectWorkerMetrics) {
    super();
    this.#own = own;
    this.#collect = collect;
  }

  /** The merged text exposition (see the module comment). */
  override async metrics(): Promise<string> {
    const [own, workers] = await Promise.all([this.#own.getMetricsAsJSON(), this.#collect()]);
    return AggregatorRegistry.aggregate([own, ...workers]).metrics();
  }
}
