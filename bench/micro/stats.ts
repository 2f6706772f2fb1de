/**
 * Micro benchmark of `istio.stats` (filters/stats): ns per request of its `onStreamComplete` (and
 * of its other phases where a case uses them) on realistic contexts: peers as `istio.peer_metadata`
 * sets them, a service target, status, flags and body sizes. Contexts are built before the timed
 * loop, so the figures are the filter's own cost.
 *
 *   node bench/micro/stats.ts            (BENCH_MICRO_ITERATIONS, default 300000 per case, in 5 rounds:
 *                                         the best and the median round are printed)
 *
 * For comparison, the last case records the same four instruments through prom-client's own
 * Counter/Histogram with cached `labels(...)` children (what a straightforward implementation does).
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { Counter, Histogram, Registry } from 'prom-client';
import { DEFAULT_STATS_CONFIG, ENVOY_DEFAULT_BUCKETS, StatsFilter, instrumentsFor } from '../../filters/stats/index.ts';
import { HTTP_LABEL_NAMES } from '../../filters/stats/labels.ts';
import { DOWNSTREAM_PEER, TCP_UPSTREAM_PEER, UPSTREAM_PEER, type PeerInfo } from '../../src/peer/peer-info.ts';
import type { FilterChain } from '../../src/pipeline/chain.ts';
import { ConnectionContext, HeaderList, StreamContext, type ConnectInfo } from '../../src/pipeline/index.ts';
import type { MeshSnapshot, Service, Target } from '../../src/state/types.ts';

const ITERATIONS = Number(process.env.BENCH_MICRO_ITERATIONS ?? 300_000);
const POOL = 4096;

const peer = (workload: string, ns: string, sa: string): PeerInfo =>
  Object.freeze({
    name: `${workload}-7d9f8c-x2k4p`,
    namespace: ns,
    cluster: 'Kubernetes',
    workload,
    type: 'deployment',
    service: workload,
    revision: 'v1',
    app: workload,
    version: 'v1',
    identity: `spiffe://cluster.local/ns/${ns}/sa/${sa}`,
    region: '',
    availabilityZone: '',
    labels: Object.freeze({ app: workload, version: 'v1' }),
  });
const CLIENTS = [peer('productpage', 'bookinfo', 'productpage'), peer('reviews', 'bookinfo', 'reviews')];
const SERVERS = [peer('details-v1', 'bookinfo', 'details'), peer('details-v2', 'bookinfo', 'details')];
const SERVICE = { kind: 'Service', name: 'details', namespace: 'bookinfo', hostname: 'details.bookinfo.svc.cluster.local' } as Service;
const TARGET: Target = { kind: 'service', service: SERVICE, port: { name: 'http', port: 9080, targetPort: 9080, appProtocol: '', protocol: 'HTTP' } };
const MESH = {} as MeshSnapshot;
const CHAIN = {} as FilterChain;

function info(i: number): ConnectInfo {
  const sa = i % 2 === 0 ? 'productpage' : 'reviews';
  return {
    peer: { uri: `spiffe://cluster.local/ns/bookinfo/sa/${sa}`, trustDomain: 'cluster.local', namespace: 'bookinfo', serviceAccount: sa },
    downstreamAddress: `10.0.0.${i % 250}`,
    downstreamPort: 40000 + i,
    authority: '10.96.0.10:9080',
    targetIp: '10.96.0.10',
    targetPort: 9080,
    forwarded: '',
    baggage: '',
    traceparent: '',
  };
}

function connection(i: number): ConnectionContext {
  const c = new ConnectionContext(info(i), MESH, TARGET, 'HTTP');
  c.set(DOWNSTREAM_PEER, CLIENTS[i % 2]);
  return c;
}

function request(c: ConnectionContext, i: number, grpc: boolean): StreamContext {
  const headers = new HeaderList(['host', 'details:9080', 'user-agent', 'bench', 'accept', '*/*']);
  if (grpc) headers.append('content-type', 'application/grpc');
  const head = { protocol: grpc ? 'HTTP/2' : 'HTTP/1.1', method: 'GET', path: `/details/${i}`, authority: 'details:9080', headers };
  const s = new StreamContext(c, CHAIN, {} as IncomingMessage, {} as ServerResponse, head);
  s.set(UPSTREAM_PEER, SERVERS[i % 2]);
  // Mostly 200, some 404 and 503 (a few series per peer pair, as in a real mesh).
  s.responseCode = i % 50 === 0 ? 503 : i % 10 === 0 ? 404 : 200;
  if (s.responseCode === 503) s.addFlag('UF');
  s.bytesReceived = i % 3 === 0 ? 1024 : 0;
  s.bytesSent = 178 + (i % 7);
  if (grpc) {
    s.grpcStatus = i % 10 === 0 ? '5' : '0';
    s.requestMessages = 1;
    s.responseMessages = 1;
  }
  return s;
}

function filter(tcpReportingDurationMs = 5000): StatsFilter {
  const cfg = { ...DEFAULT_STATS_CONFIG, tcpReportingDurationMs };
  return new StatsFilter(cfg, instrumentsFor(new Registry(), cfg));
}

/** Warm-up, then 5 timed rounds; prints the best and the median round (the machine may be shared). */
function measure(label: string, fn: (i: number) => void): number {
  for (let i = 0; i < 50_000; i++) fn(i);
  const per = Math.max(1, Math.floor(ITERATIONS / 5));
  const rounds: number[] = [];
  for (let r = 0; r < 5; r++) {
    const t0 = process.hrtime.bigint();
    for (let i = 0; i < per; i++) fn(i);
    rounds.push(Number(process.hrtime.bigint() - t0) / per);
  }
  rounds.sort((a, b) => a - b);
  process.stdout.write(`  ${label.padEnd(62)} ${rounds[0].toFixed(0).padStart(6)} ns  (median ${rounds[2].toFixed(0)})\n`);
  return rounds[0];
}

process.stdout.write(`istio.stats cost per request (${ITERATIONS.toLocaleString('en-US')} iterations per case, Node ${process.versions.node})\n`);

// 1. Requests on keep-alive tunnels (the per-tunnel source labels are cached on the tunnel).
{
  const f = filter();
  const conns = Array.from({ length: 64 }, (_, i) => connection(i));
  const streams = Array.from({ length: POOL }, (_, i) => request(conns[i % conns.length], i, false));
  measure('HTTP, keep-alive tunnels (onStreamComplete)', (i) => f.onStreamComplete(streams[i % POOL]));
}

// 2. One request per tunnel: the tunnel's source tuple is built on its first request.
{
  const f = filter();
  const streams = Array.from({ length: POOL }, (_, i) => request(connection(i), i, false));
  measure('HTTP, a new tunnel per request (onStreamComplete)', (i) => {
    const s = streams[i % POOL];
    // A fresh tunnel each time: drop the cached per-tunnel state.
    (s.conn as unknown as { slots: unknown[] }).slots.fill(undefined);
    s.conn.set(DOWNSTREAM_PEER, CLIENTS[i % 2]);
    f.onStreamComplete(s);
  });
}

// 3. Without peer metadata (no peer filter in the chain).
{
  const f = filter();
  const conns = Array.from({ length: 64 }, (_, i) => new ConnectionContext(info(i), MESH, TARGET, 'HTTP'));
  const streams = Array.from({ length: POOL }, (_, i) => {
    const s = request(conns[i % conns.length], i, false);
    s.set(UPSTREAM_PEER, undefined as unknown as PeerInfo);
    return s;
  });
  measure('HTTP, no peers (onStreamComplete)', (i) => f.onStreamComplete(streams[i % POOL]));
}

// 4. gRPC unary: onRequestHeaders (tracked for the periodic report) + onStreamComplete with message counts.
{
  const f = filter();
  const conns = Array.from({ length: 64 }, (_, i) => connection(i));
  const streams = Array.from({ length: POOL }, (_, i) => request(conns[i % conns.length], i, true));
  measure('gRPC unary (onRequestHeaders + onStreamComplete)', (i) => {
    const s = streams[i % POOL];
    f.onRequestHeaders(s);
    f.onStreamComplete(s);
  });
}

// 5. TCP tunnel: connected, then closed (bytes at close).
{
  const f = filter();
  const conns = Array.from({ length: POOL }, (_, i) => {
    const c = connection(i);
    c.set(TCP_UPSTREAM_PEER, SERVERS[i % 2]);
    c.innerProtocol = 'TCP';
    return c;
  });
  measure('TCP tunnel (onUpstreamConnected + onConnectionComplete)', (i) => {
    const c = conns[i % POOL];
    (c as unknown as { slots: unknown[] }).slots.fill(undefined);
    c.set(DOWNSTREAM_PEER, CLIENTS[i % 2]);
    c.set(TCP_UPSTREAM_PEER, SERVERS[i % 2]);
    f.onUpstreamConnected(c);
    c.bytesReceived += 100;
    c.bytesSent += 200;
    f.onConnectionComplete(c);
  });
}

// 6. For comparison: prom-client's own instruments, label children cached per label tuple.
{
  const r = new Registry();
  const names = [...HTTP_LABEL_NAMES];
  const total = new Counter({ name: 'istio_requests_total', help: 'x', labelNames: names, registers: [r] });
  const dur = new Histogram({ name: 'istio_request_duration_milliseconds', help: 'x', labelNames: names, buckets: [...ENVOY_DEFAULT_BUCKETS], registers: [r] });
  const rq = new Histogram({ name: 'istio_request_bytes', help: 'x', labelNames: names, buckets: [...ENVOY_DEFAULT_BUCKETS], registers: [r] });
  const rs = new Histogram({ name: 'istio_response_bytes', help: 'x', labelNames: names, buckets: [...ENVOY_DEFAULT_BUCKETS], registers: [r] });
  const values = (code: number) => [
    'waypoint', 'productpage', 'productpage', 'v1', 'bookinfo', 'spiffe://cluster.local/ns/bookinfo/sa/productpage', 'productpage', 'v1', 'Kubernetes',
    'details-v1', 'bookinfo', 'spiffe://cluster.local/ns/bookinfo/sa/details', 'details-v1', 'v1', 'details.bookinfo.svc.cluster.local', 'details-v1', 'v1', 'details', 'bookinfo', 'Kubernetes',
    'http', String(code), '', '-', 'mutual_tls',
  ];
  const children = new Map<number, { t: { inc(): void }; d: { observe(v: number): void }; q: { observe(v: number): void }; s: { observe(v: number): void } }>();
  for (const code of [200, 404, 503]) {
    const v = values(code);
    children.set(code, { t: total.labels(...v), d: dur.labels(...v), q: rq.labels(...v), s: rs.labels(...v) });
  }
  measure('(comparison) prom-client Counter+3 Histograms, cached children', (i) => {
    const c = children.get(i % 50 === 0 ? 503 : i % 10 === 0 ? 404 : 200)!;
    c.t.inc();
    c.d.observe(i & 7);
    c.q.observe(i % 3 === 0 ? 1024 : 0);
    c.s.observe(178);
  });
}
