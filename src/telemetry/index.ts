/**
 * Telemetry the waypoint writes itself: Istio's access log (one line per inner HTTP request and per
 * TCP tunnel), the process's Prometheus registry, and the overload manager's figures on it.
 */
export { AccessLogFilter } from './access-log.ts';
export { AccessLogSinks } from './log-sinks.ts';
export { createMetricsRegistry } from './metrics.ts';
export { registerOverloadMetrics } from './overload-metrics.ts';
