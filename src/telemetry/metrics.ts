/**
 * The process's Prometheus registry (prom-client). Instruments are created at start-up only;
 * the stats filter (filters/stats) adds Istio's `istio_*` metrics to this registry. Served at
 * `/stats/prometheus` on the admin port, with prom-client's default process metrics.
 */
import { Registry, collectDefaultMetrics } from 'prom-client';

/** A fresh registry with the process metrics (one per waypoint instance; tests run several). */
export function createMetricsRegistry(): Registry {
  const registry = new Registry();
  collectDefaultMetrics({ register: registry });
  return registry;
}
