/**
 * `istio.stats` configuration (bootstrap `filters: [{ name: istio.stats, config: {...} }]`) and
 * the `istio_*` instruments of a Prometheus registry, created once per registry.
 */
import { Gauge, type Registry } from 'prom-client';
import type { Logger } from 'pino';
import { z } from 'zod';
import { IstioCounter, IstioHistogram, register } from './instruments.ts';
import { HTTP_LABEL_NAMES, PEER_LABEL_NAMES, TCP_LABEL_NAMES } from './labels.ts';

/** The filter's configuration (bootstrap `filters: [{ name: istio.stats, config: {...} }]`). */
export interface StatsConfig {
  /**
   * How often (ms) open TCP tunnels report their byte counts and open gRPC streams their message
   * counts (Istio's `tcp_reporting_duration`, default 5 s); 0 = only at the end.
   */
  readonly tcpReportingDurationMs: number;
  /** Series per metric at most (memory bound against label explosions; Envoy has none). */
  readonly maxSeries: number;
  /** `tag` of `istio_build` (Istio: the proxy's ISTIO_VERSION; `unknown` when unset, as Envoy). */
  readonly istioVersion: string;
}

export const DEFAULT_STATS_CONFIG: StatsConfig = Object.freeze({ tcpReportingDurationMs: 5000, maxSeries: 10_000, istioVersion: 'unknown' });

const schema = z.strictObject({
  tcpReportingDurationMs: z.number().int().min(0).optional(),
  maxSeries: z.number().int().min(1).optional(),
  istioVersion: z.string().min(1).optional(),
});

/** Validate the filter's `config:` (absent = defaults). @throws Error naming the field. */
export function parseStatsConfig(raw: unknown): StatsConfig {
  if (raw === undefined || raw === null) return DEFAULT_STATS_CONFIG;
  const r = schema.safeParse(raw);
  if (!r.success) {
    const issue = r.error.issues[0];
    const at = issue.path.map(String).join('.');
    throw new Error(at ? `${at}: ${issue.message}` : issue.message);
  }
  return Object.freeze({ ...DEFAULT_STATS_CONFIG, ...r.data });
}

/** The `istio_*` instruments of one registry. */
export interface IstioInstruments {
  readonly requestsTotal: IstioCounter;
  readonly requestDuration: IstioHistogram;
  readonly requestBytes: IstioHistogram;
  readonly responseBytes: IstioHistogram;
  readonly requestMessages: IstioCounter;
  readonly responseMessages: IstioCounter;
  readonly tcpOpened: IstioCounter;
  readonly tcpClosed: IstioCounter;
  readonly tcpSent: IstioCounter;
  readonly tcpReceived: IstioCounter;
}

// One set per registry: a rebuilt chain (or a second chain) keeps counting into the same series
// (the first configuration's `maxSeries` and `istioVersion` stay).
const byRegistry = new WeakMap<Registry, IstioInstruments>();

/** The registry's `istio_*` instruments, created and registered on first use. */
export function instrumentsFor(registry: Registry, config: StatsConfig, log?: Logger): IstioInstruments {
  let m = byRegistry.get(registry);
  if (m) return m;
  const max = config.maxSeries;
  const counter = (name: string, help: string, labels: readonly string[]) => new IstioCounter(name, help, labels, max, log);
  const histogram = (name: string, help: string) => new IstioHistogram(name, help, HTTP_LABEL_NAMES, max, log);
  m = Object.freeze({
    requestsTotal: counter('istio_requests_total', 'Requests handled by the waypoint.', HTTP_LABEL_NAMES),
    requestDuration: histogram('istio_request_duration_milliseconds', 'Request duration (ms).'),
    requestBytes: histogram('istio_request_bytes', 'Request body size (bytes).'),
    responseBytes: histogram('istio_response_bytes', 'Response body size (bytes).'),
    requestMessages: counter('istio_request_messages_total', 'gRPC messages sent by clients.', PEER_LABEL_NAMES),
    responseMessages: counter('istio_response_messages_total', 'gRPC messages sent by servers.', PEER_LABEL_NAMES),
    tcpOpened: counter('istio_tcp_connections_opened_total', 'TCP connections opened.', TCP_LABEL_NAMES),
    tcpClosed: counter('istio_tcp_connections_closed_total', 'TCP connections closed.', TCP_LABEL_NAMES),
    tcpSent: counter('istio_tcp_sent_bytes_total', 'Bytes sent to the client on TCP connections.', TCP_LABEL_NAMES),
    tcpReceived: counter('istio_tcp_received_bytes_total', 'Bytes received from the client on TCP connections.', TCP_LABEL_NAMES),
  });
  for (const metric of Object.values(m)) register(registry, metric);
  // One proxy, however many worker processes serve it: `waypoint run --concurrency N` merges the
  // workers' registries (src/workers/metrics.ts), which would otherwise add this up to N.
  const build = new Gauge({ name: 'istio_build', help: 'Istio component build info.', labelNames: ['component', 'tag'], registers: [registry], aggregator: 'first' });
  build.labels('proxy', config.istioVersion).set(1);
  byRegistry.set(registry, m);
  return m;
}

