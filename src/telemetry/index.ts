/**
 * Telemetry the waypoint writes itself: Istio's access log (one line per inner HTTP request and per
 * TCP tunnel) and the process's Prometheus registry.
 */
export { AccessLogFilter, AccessLogSinks } from './access-log.ts';
export { createMetricsRegistry } from './metrics.ts';
