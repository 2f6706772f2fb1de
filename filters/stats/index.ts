/**
 * `istio.stats`: Istio's standard metrics as Envoy's waypoint reports them (the `istio_stats` HTTP
 * and network filter, istio/proxy source/extensions/filters/http/istio_stats/istio_stats.cc, reporter
 * `SERVER_GATEWAY`), served at `/stats/prometheus` on the admin port:
 *
 * - per inner HTTP/gRPC request, at its end: `istio_requests_total`,
 *   `istio_request_duration_milliseconds`, `istio_request_bytes`, `istio_response_bytes`
 *   (histograms with Envoy's default buckets);
 * - gRPC requests: `istio_request_messages_total` / `istio_response_messages_total` (messages the
 *   router counted in the bodies), reported every `tcpReportingDurationMs` while the stream is
 *   open and at its end, with the peer and service labels only (as Envoy);
 * - TCP tunnels: `istio_tcp_connections_opened_total` once the upstream is connected,
 *   `istio_tcp_sent_bytes_total` / `istio_tcp_received_bytes_total` every
 *   `tcpReportingDurationMs` (Istio's `tcp_reporting_duration`, 5 s) and at close from the live
 *   counters, `istio_tcp_connections_closed_total` when the tunnel is over (both directions
 *   ended). A TCP tunnel that never connected (no endpoint `UH`, connect failure `UF`) or was
 *   refused at CONNECT (L4 authorization denial, 401) is counted opened and closed at its end,
 *   with its flag, as Envoy does at close;
 * - `istio_build{component="proxy",tag=…}` = 1.
 *
 * Labels: labels.ts. Peers come from the slots `istio.peer_metadata` writes (without it, Istio's
 * labels without peer info: `unknown`, `latest` for the source revision, namespace and principal
 * from the client certificate).
 *
 * The Telemetry API (src/tracing, per tunnel) can turn a target's metrics off, drop a metric or
 * remove, change or add labels (`metrics[].overrides`, overrides.ts).
 *
 * Recording is cheap: the source labels are built once per tunnel (and per downstream peer), the
 * destination labels once per (upstream peer, service); the series of a whole label tuple hang off
 * the (source, destination) pair under one small integer made of the per-request values (status
 * code, gRPC status, protocol; a string key only when there are response flags). Caches are
 * bounded (CACHE_ENTRIES); a request costs a few hundred ns (bench/micro/stats.ts).
 */
import { FilterStatus, defineSlot, type ConnectionContext, type Filter, type FilterFactory, type StreamContext } from '../../src/pipeline/index.ts';
import { TCP_UPSTREAM_PEER, UPSTREAM_PEER, DOWNSTREAM_PEER, downstreamPeerOf, type PeerInfo } from '../../src/peer/index.ts';
import type { Target } from '../../src/state/index.ts';
import { NO_METRIC_OVERRIDES, telemetryOf, type MetricsPolicy } from '../../src/tracing/index.ts';
import { instrumentsFor, parseStatsConfig, type IstioInstruments, type StatsConfig } from './config.ts';
import { labelSet } from './instruments.ts';
import { DROPPED_COUNTER, DROPPED_HISTOGRAM, overridden, type Base } from './overrides.ts';
import { BoundedMap, CACHE_ENTRIES, ConnStats, GrpcLive, Pair, TcpLive, Tuple, type HttpSeries, type MessageSeries, type TcpSeries } from './series.ts';
import {
  HTTP_LABEL_NAMES,
  NO_FLAGS,
  NO_GRPC_STATUS,
  PEER_LABEL_NAMES,
  TCP_LABEL_NAMES,
  destinationLabels,
  grpcStatusCode,
  grpcStatusText,
  isGrpcContentType,
  securityPolicy,
  sourceLabels,
} from './labels.ts';

export { ENVOY_DEFAULT_BUCKETS } from './instruments.ts';
export { DEFAULT_STATS_CONFIG, instrumentsFor, parseStatsConfig, type IstioInstruments, type StatsConfig } from './config.ts';

export const STATS_FILTER_NAME = 'istio.stats';

export const statsFactory: FilterFactory<StatsConfig> = {
  name: STATS_FILTER_NAME,
  // Its TCP labels read the upstream peer peer-metadata sets in the same phase (onUpstreamConnected).
  after: ['istio.peer_metadata'],
  parseConfig: parseStatsConfig,
  create: (config, env) => new StatsFilter(config, instrumentsFor(env.metrics, config, env.log)),
};

const CONN_STATS = defineSlot<ConnStats>('istio.stats', 'connection');
const GRPC_LIVE = defineSlot<GrpcLive>('istio.stats', 'stream');

/** Stand-ins for "no upstream peer" / "no service" as WeakMap keys. */
const NO_PEER = Object.freeze({});
const NO_SERVICE = Object.freeze({});

// ---- the filter -------------------------------------------------------------------------------

export class StatsFilter implements Filter {
  readonly name = STATS_FILTER_NAME;
  private readonly m: IstioInstruments;
  private readonly reportMs: number;
  /** Interned source / destination tuples by their joined values. */
  private sources = new BoundedMap<string, Tuple>(2048);
  private destinations = new BoundedMap<string, Tuple>(2048);
  /** (downstream peer | NO_PEER) → principal → source tuple. */
  private srcMemo = new WeakMap<object, Map<string, Tuple>>();
  /** (upstream peer | NO_PEER) → (service | NO_SERVICE) → destination tuple. */
  private dstMemo = new WeakMap<object, WeakMap<object, Tuple>>();
  /** Cache generation and the entries cached in it (pairs and series), bounded by CACHE_ENTRIES. */
  private gen = 0;
  private cached = 0;
  /** Open TCP tunnels and gRPC streams, reported every `reportMs`. */
  private readonly live = new Set<TcpLive | GrpcLive>();
  private timer: NodeJS.Timeout | undefined;

  constructor(config: StatsConfig, instruments: IstioInstruments) {
    this.m = instruments;
    this.reportMs = config.tcpReportingDurationMs;
  }

  // -- HTTP / gRPC --------------------------------------------------------------------------

  /** gRPC streams are tracked for the periodic message report. */
  onRequestHeaders(stream: StreamContext): FilterStatus {
    if (this.reportMs > 0 && isGrpcContentType(contentType(stream)) && !telemetryOf(stream.conn).metrics.disabled) {
      const live = new GrpcLive(stream);
      stream.set(GRPC_LIVE, live);
      this.track(live);
    }
    return FilterStatus.Continue;
  }

  onStreamComplete(stream: StreamContext): void {
    const conn = stream.conn;
    // The Telemetry API may turn the target's metrics off, or drop or relabel some (overrides.ts).
    const policy = telemetryOf(conn).metrics;
    if (policy.disabled) return;
    const pair = this.pair(this.sourceOf(conn, downstreamPeerOf(stream)), this.destinationOf(stream.get(UPSTREAM_PEER), stream.routeTarget ?? conn.target));
    // gRPC-Web counts as gRPC, as Istio reports it (Envoy's grpc_web filter, on `grpc-web` ports,
    // makes it gRPC before the stats see it); its status comes from the body's trailer frame,
    // which the router reads (istio/istio#58430: Envoy loses it and reports 2).
    const web = stream.isGrpcWeb;
    const grpc = web || isGrpcContentType(contentType(stream));
    const code = stream.responseCode;
    const flags = stream.responseFlags;
    const status = grpc ? grpcStatusCode(stream.grpcStatus, code) : NO_GRPC_STATUS;
    let s: HttpSeries | undefined;
    if (policy !== NO_METRIC_OVERRIDES) {
      s = this.overriddenHttp(this.httpBase(pair, grpc, code, status, flags, conn.info.peer.uri), policy, stream);
    } else if (flags === NO_FLAGS && code >= 0 && code <= 999 && Number.isInteger(code)) {
      // (code, status + 2 ∈ 0..18, protocol) in one integer.
      const key = ((code * 19 + status + 2) << 1) | (grpc ? 1 : 0);
      s = pair.http.get(key);
      if (s === undefined) {
        s = this.httpSeries(pair, grpc, code, status, flags, conn.info.peer.uri);
        pair.http.set(key, s);
      }
    } else {
      const key = `${grpc ? 'g' : 'h'}|${code}|${status}|${flags}`;
      s = pair.other.get(key);
      if (s === undefined) {
        s = this.httpSeries(pair, grpc, code, status, flags, conn.info.peer.uri);
        pair.other.set(key, s);
      }
    }
    s.requests.value++;
    s.duration.observe(Math.floor(performance.now() - stream.startMonotonic));
    s.requestBytes.observe(stream.bytesReceived);
    s.responseBytes.observe(stream.bytesSent);
    if (grpc && !web) {
      const live = stream.get(GRPC_LIVE);
      if (live !== undefined) {
        this.live.delete(live);
        this.reportMessages(live);
      } else {
        const ms = this.messageSeries(pair, stream.conn, stream);
        ms.request.add(stream.requestMessages);
        ms.response.add(stream.responseMessages);
      }
    }
  }

  // -- TCP ----------------------------------------------------------------------------------

  onUpstreamConnected(conn: ConnectionContext): void {
    if (telemetryOf(conn).metrics.disabled) return;
    const cs = this.connStats(conn, conn.get(DOWNSTREAM_PEER));
    const pair = this.pair(cs.src, this.destinationOf(conn.get(TCP_UPSTREAM_PEER), conn.target));
    const series = this.tcpSeries(pair, conn.responseFlags, conn);
    series.opened.add(1);
    const live = new TcpLive(conn, pair, series);
    cs.tcp = live;
    this.track(live);
  }

  onConnectionComplete(conn: ConnectionContext): void {
    const live = conn.get(CONN_STATS)?.tcp;
    if (live !== undefined) {
      this.live.delete(live);
      this.reflag(live);
      live.report();
      live.series.closed.add(1);
      return;
    }
    if ((conn.innerProtocol !== 'TCP' && conn.rejectStatus === 0) || telemetryOf(conn).metrics.disabled) return;
    // A TCP tunnel that never reached its upstream (UH, UF), or one refused at CONNECT by a filter
    // (an L4 authorization denial: 401): Envoy's istio_stats network filter still sees the
    // connection its RBAC / ext_authz filter closed and reports it at close, opened and closed,
    // no bytes, with the connection's response flags (`-` for RBAC, `UAEX` for ext_authz).
    const cs = this.connStats(conn, conn.get(DOWNSTREAM_PEER));
    const series = this.tcpSeries(this.pair(cs.src, this.destinationOf(conn.get(TCP_UPSTREAM_PEER), conn.target)), conn.responseFlags, conn);
    series.opened.add(1);
    series.sent.add(conn.bytesSent);
    series.received.add(conn.bytesReceived);
    series.closed.add(1);
  }

  /**
   * Flags the tunnel got while open (UR when its destination cut it, OM when the overload manager
   * reset it) go with what is reported from then on, its close included, as in its access-log
   * line: the series is picked again for the current flags (the pair stays the connect's).
   */
  private reflag(live: TcpLive): void {
    const flags = live.conn.responseFlags;
    if (flags === live.flags) return;
    live.flags = flags;
    live.series = this.tcpSeries(live.pair, flags, live.conn);
  }

  // -- periodic reports ---------------------------------------------------------------------

  private track(live: TcpLive | GrpcLive): void {
    if (this.reportMs <= 0) return;
    this.live.add(live);
    if (this.timer === undefined) {
      this.timer = setInterval(() => this.reportLive(), this.reportMs);
      this.timer.unref();
    }
  }

  /** The periodic report (open TCP tunnels' bytes, open gRPC streams' messages); the timer stops once nothing is open. */
  reportLive(): void {
    if (this.live.size === 0) {
      clearInterval(this.timer);
      this.timer = undefined;
      return;
    }
    for (const live of this.live) {
      if (live instanceof TcpLive) {
        this.reflag(live);
        live.report();
      } else this.reportMessages(live);
    }
  }

  private reportMessages(live: GrpcLive): void {
    const s = live.stream;
    let ms = live.series;
    if (ms === undefined) {
      ms = this.messageSeries(this.pair(this.sourceOf(s.conn, downstreamPeerOf(s)), this.destinationOf(s.get(UPSTREAM_PEER), s.routeTarget ?? s.conn.target)), s.conn, s);
      live.series = ms;
    }
    ms.request.add(s.requestMessages - live.request);
    ms.response.add(s.responseMessages - live.response);
    live.request = s.requestMessages;
    live.response = s.responseMessages;
  }

  // -- label tuples and series ----------------------------------------------------------------

  private connStats(conn: ConnectionContext, peer: PeerInfo | undefined): ConnStats {
    let cs = conn.get(CONN_STATS);
    if (cs === undefined) {
      cs = new ConnStats(peer, this.sourceTuple(peer, conn.info.peer.uri));
      conn.set(CONN_STATS, cs);
    } else if (cs.peer !== peer) {
      cs.peer = peer;
      cs.src = this.sourceTuple(peer, conn.info.peer.uri);
    }
    return cs;
  }

  private sourceTuple(peer: PeerInfo | undefined, principal: string): Tuple {
    const pk: object = peer ?? NO_PEER;
    let inner = this.srcMemo.get(pk);
    if (inner === undefined) {
      inner = new Map();
      this.srcMemo.set(pk, inner);
    }
    let t = inner.get(principal);
    if (t === undefined) {
      t = this.intern(this.sources, sourceLabels(peer, principal));
      inner.set(principal, t);
    }
    return t;
  }

  private sourceOf(conn: ConnectionContext, peer: PeerInfo | undefined): Tuple {
    return this.connStats(conn, peer).src;
  }

  private destinationOf(peer: PeerInfo | undefined, target: Target | undefined): Tuple {
    const pk: object = peer ?? NO_PEER;
    const sk: object = target?.kind === 'service' ? target.service : NO_SERVICE;
    let inner = this.dstMemo.get(pk);
    if (inner === undefined) {
      inner = new WeakMap();
      this.dstMemo.set(pk, inner);
    }
    let t = inner.get(sk);
    if (t === undefined) {
      t = this.intern(this.destinations, destinationLabels(peer, target));
      inner.set(sk, t);
    }
    return t;
  }

  private intern(table: BoundedMap<string, Tuple>, values: string[]): Tuple {
    const key = values.join('\u0001');
    let t = table.get(key);
    if (t === undefined) {
      t = new Tuple(Object.freeze(values), this.gen);
      table.set(key, t);
    }
    return t;
  }

  private pair(src: Tuple, dst: Tuple): Pair {
    if (src.gen !== this.gen) {
      src.pairs.clear();
      src.gen = this.gen;
    }
    let p = src.pairs.get(dst.id);
    if (p === undefined) {
      p = new Pair(src, dst);
      src.pairs.set(dst.id, p);
      this.grew();
    }
    return p;
  }

  /**
   * One more cache entry. Past CACHE_ENTRIES every cache starts over (a new generation): tuples
   * still held by open tunnels drop their pairs on next use, the rest become garbage.
   */
  private grew(): void {
    if (++this.cached <= CACHE_ENTRIES) return;
    this.gen++;
    this.cached = 0;
    this.sources = new BoundedMap(2048);
    this.destinations = new BoundedMap(2048);
    this.srcMemo = new WeakMap();
    this.dstMemo = new WeakMap();
  }

  /** The standard HTTP label set of a request (key and labels), without creating any series. */
  private httpBase(pair: Pair, grpc: boolean, code: number, status: number, flags: string, principal: string): Base {
    const values = [...pair.src.values, ...pair.dst.values, grpc ? 'grpc' : 'http', String(code), grpcStatusText(status), flags, securityPolicy(principal)];
    return { key: values.join('\u0001'), labels: labelSet(HTTP_LABEL_NAMES, values) };
  }

  private httpSeries(pair: Pair, grpc: boolean, code: number, status: number, flags: string, principal: string): HttpSeries {
    this.grew();
    const { key, labels } = this.httpBase(pair, grpc, code, status, flags, principal);
    const m = this.m;
    return Object.freeze({
      requests: m.requestsTotal.seriesFor(key, labels),
      duration: m.requestDuration.seriesFor(key, labels),
      requestBytes: m.requestBytes.seriesFor(key, labels),
      responseBytes: m.responseBytes.seriesFor(key, labels),
    });
  }

  /** The TCP series of a tunnel: the pair's for its flags, with the target's metric overrides applied (per tunnel, uncached). */
  private tcpSeries(pair: Pair, flags: string, conn: ConnectionContext): TcpSeries {
    const policy = telemetryOf(conn).metrics;
    if (policy === NO_METRIC_OVERRIDES) return this.baseTcpSeries(pair, flags, conn.info.peer.uri);
    const values = [...pair.src.values, ...pair.dst.values, 'tcp', flags, securityPolicy(conn.info.peer.uri)];
    const base = { key: values.join('\u0001'), labels: labelSet(TCP_LABEL_NAMES, values) };
    const m = this.m;
    const c = (metric: typeof m.tcpOpened) => overridden(metric, base, DROPPED_COUNTER, policy, conn, undefined);
    return { opened: c(m.tcpOpened), closed: c(m.tcpClosed), sent: c(m.tcpSent), received: c(m.tcpReceived) };
  }

  private baseTcpSeries(pair: Pair, flags: string, principal: string): TcpSeries {
    let s = pair.tcp.get(flags);
    if (s === undefined) {
      this.grew();
      const values = [...pair.src.values, ...pair.dst.values, 'tcp', flags, securityPolicy(principal)];
      const key = values.join('\u0001');
      const labels = labelSet(TCP_LABEL_NAMES, values);
      const m = this.m;
      s = Object.freeze({ opened: m.tcpOpened.seriesFor(key, labels), closed: m.tcpClosed.seriesFor(key, labels), sent: m.tcpSent.seriesFor(key, labels), received: m.tcpReceived.seriesFor(key, labels) });
      pair.tcp.set(flags, s);
    }
    return s;
  }

  /** The gRPC message series of a request: the pair's, with the target's metric overrides applied. */
  private messageSeries(pair: Pair, conn: ConnectionContext, stream: StreamContext): MessageSeries {
    const policy = telemetryOf(conn).metrics;
    if (policy === NO_METRIC_OVERRIDES) return this.baseMessageSeries(pair);
    const values = [...pair.src.values, ...pair.dst.values];
    const base = { key: values.join('\u0001'), labels: labelSet(PEER_LABEL_NAMES, values) };
    return {
      request: overridden(this.m.requestMessages, base, DROPPED_COUNTER, policy, conn, stream),
      response: overridden(this.m.responseMessages, base, DROPPED_COUNTER, policy, conn, stream),
    };
  }

  /** A request's HTTP series with the target's metric overrides applied. */
  private overriddenHttp(base: Base, policy: MetricsPolicy, stream: StreamContext): HttpSeries {
    const m = this.m;
    const conn = stream.conn;
    return {
      requests: overridden(m.requestsTotal, base, DROPPED_COUNTER, policy, conn, stream),
      duration: overridden(m.requestDuration, base, DROPPED_HISTOGRAM, policy, conn, stream),
      requestBytes: overridden(m.requestBytes, base, DROPPED_HISTOGRAM, policy, conn, stream),
      responseBytes: overridden(m.responseBytes, base, DROPPED_HISTOGRAM, policy, conn, stream),
    };
  }

  private baseMessageSeries(pair: Pair): MessageSeries {
    let s = pair.messages;
    if (s === undefined) {
      const values = [...pair.src.values, ...pair.dst.values];
      const key = values.join('\u0001');
      const labels = labelSet(PEER_LABEL_NAMES, values);
      s = Object.freeze({ request: this.m.requestMessages.seriesFor(key, labels), response: this.m.responseMessages.seriesFor(key, labels) });
      pair.messages = s;
    }
    return s;
  }
}

function contentType(stream: StreamContext): string | undefined {
  return stream.requestHeaders.get('content-type');
}
