/**
 * The overload manager's figures on `/stats/prometheus`, named as Envoy's admin prints its stats
 * in Prometheus form (`envoy_` + the stat name with dots as underscores), read at scrape time:
 *  - `envoy_overload_buffered_bytes` (gauge): bytes the live streams and tunnels hold in their
 *    buffers at the last refresh (the resource monitor's reading; ours, Envoy has no such monitor);
 *  - `envoy_overload_buffered_bytes_pressure` (gauge, percent of the budget): Envoy's
 *    `overload.<monitor>.pressure`;
 *  - `envoy_overload_envoy_overload_actions_stop_accepting_requests_active` and
 *    `envoy_overload_envoy_overload_actions_reset_high_memory_stream_active` (gauges, 0/1):
 *    Envoy's `overload.<action>.active`;
 *  - `envoy_http_downstream_rq_overload_close` (counter): requests answered 503 `OM`, Envoy's
 *    connection-manager stat, by `envoy_http_conn_manager_prefix`: `connect_terminate` for
 *    CONNECTs (Istio's HBONE listener's prefix), `main_internal` for requests inside tunnels;
 *  - `envoy_envoy_overload_actions_reset_high_memory_stream_count` (counter): streams and tunnels
 *    reset, Envoy's `envoy.overload_actions.reset_high_memory_stream.count`.
 */
import { Counter, Gauge, type Registry } from 'prom-client';
import type { OverloadManager } from '../pipeline/index.ts';

/** Register the overload manager's metrics on `registry`. */
export function registerOverloadMetrics(registry: Registry, m: OverloadManager): void {
  const registers = [registry];
  new Gauge({
    name: 'envoy_overload_buffered_bytes',
    help: 'Bytes held in the buffers of live streams and tunnels (last refresh).',
    registers,
    collect() {
      this.set(m.bufferedBytes);
    },
  });
  new Gauge({
    name: 'envoy_overload_buffered_bytes_pressure',
    help: 'Buffered bytes as a percent of overload.maxBufferedBytes.',
    registers,
    collect() {
      this.set(Math.round((m.bufferedBytes / m.settings.maxBufferedBytes) * 100));
    },
  });
  new Gauge({
    name: 'envoy_overload_envoy_overload_actions_stop_accepting_requests_active',
    help: 'New requests and CONNECTs are refused with 503 (1) or not (0).',
    registers,
    collect() {
      this.set(m.stopAccepting ? 1 : 0);
    },
  });
  new Gauge({
    name: 'envoy_overload_envoy_overload_actions_reset_high_memory_stream_active',
    help: 'The largest streams were being reset at the last refresh (1) or not (0).',
    registers,
    collect() {
      this.set(m.resetting ? 1 : 0);
    },
  });
  new Counter({
    name: 'envoy_http_downstream_rq_overload_close',
    help: 'Requests answered 503 because the proxy is overloaded.',
    labelNames: ['envoy_http_conn_manager_prefix'],
    registers,
    collect() {
      this.reset();
      this.labels('connect_terminate').inc(m.rejectedTunnels);
      this.labels('main_internal').inc(m.rejectedRequests);
    },
  });
  new Counter({
    name: 'envoy_envoy_overload_actions_reset_high_memory_stream_count',
    help: 'Streams and tunnels reset because they held the most buffered bytes past the budget.',
    registers,
    collect() {
      this.reset();
      this.inc(m.resets);
    },
  });
}
