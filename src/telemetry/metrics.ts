/**
 * The process's Prometheus registry (prom-client). Instruments are created at start-up only;
 * the stats filter (filters/stats) adds Istio's `istio_*` metrics to this registry. Served at
 * `/stats/prometheus` on the admin port, with prom-client's default process metrics.
 */
import { Registry, collectDefaultMetrics } from 'prom-client';

/** A fresh registry with the process metrics (one per waypoint instance; tests run several). */
export function createMetricsRegistry(): Registry {
  const registry = new Registry();
  // prom-client samples event-loop lag with a 10 ms timer by default: 100 wake-ups a second on an
  // idle waypoint. One sample per 100 ms still catches every stall longer than that.
  collectDefaultMetrics({ register: registry, eventLoopMonitoringPrecision: 100 });
  return registry;
}
