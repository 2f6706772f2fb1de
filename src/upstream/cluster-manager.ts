/**
 * Upstream connections toward service endpoints (Envoy's cluster manager, reduced to what a
 * waypoint needs). For HTTP it keeps one undici Pool per endpoint whose "sockets" are HBONE CONNECT
 * streams to `podIP:15008` with `:authority podIP:targetPort` (istio/istio
 * pilot/pkg/networking/core/cluster_waypoint.go `connect_originate`) — or, to an instance of
 * another waypoint in front of the service (chained waypoints), to `waypointIP:15008` with
 * `:authority VIP:port` (`Endpoint.connectAuthority`) — or plain TCP to `podIP:targetPort` for
 * endpoints outside the mesh (`istio.io/dataplane-mode: none`), or mutual TLS with Istio's ALPN to
 * `podIP:targetPort` for workloads that run an Istio sidecar (`sidecar-transport.ts`). For TCP it
 * opens one tunnel per downstream connection.
 */
import type { IncomingHttpHeaders } from 'node:http2';
import net from 'node:net';
import type { Duplex } from 'node:stream';
import { Pool, type Dispatcher } from 'undici';
import type { Endpoint, MeshSnapshot, Target } from '../state/index.ts';
import { HboneConnectError, type HboneSessionPool, type Http2Params, asHttp1Socket, joinWritev } from '../hbone/index.ts';
import { log } from '../util/index.ts';
import { carrierClient } from './carrier-client.ts';
import { isConnectTimeout } from './failure.ts';
import { TrackedAttempt, type ClusterState } from './cluster-state.ts';
import { ClusterTable, type ClusterRuntimeDump } from './cluster-table.ts';
import { H2Upstream, type UpstreamHandler, type UpstreamRequest } from './h2-upstream.ts';
import { LoadBalancer, type LoadBalancerPolicy } from './load-balancer.ts';
import type { PeerInfo } from '../peer/index.ts';
import type { SidecarProtocol, SidecarTransport } from './sidecar-transport.ts';

/**
 * Key under which {@link ClusterManager.openTcp} tags an HBONE tunnel stream with the response
 * headers of its CONNECT (read them with {@link connectResponseHeaders}).
 */
export const CONNECT_RESPONSE_HEADERS: unique symbol = Symbol('hbone.connectResponseHeaders');

/** The CONNECT response headers an HBONE tunnel from {@link ClusterManager.openTcp} got; undefined for plain TCP. */
export function connectResponseHeaders(tunnel: Duplex): IncomingHttpHeaders | undefined {
  return (tunnel as { [CONNECT_RESPONSE_HEADERS]?: IncomingHttpHeaders })[CONNECT_RESPONSE_HEADERS];
}

/**
 * Key under which {@link ClusterManager.openTcp} tags a sidecar connection with the peer it learned
 * over `istio-peer-exchange` (read it with {@link exchangePeer}).
 */
export const EXCHANGE_PEER: unique symbol = Symbol('sidecar.exchangePeer');

/**
 * The upstream workload as it described itself over `istio-peer-exchange`, for a tunnel from
 * {@link ClusterManager.openTcp} to a sidecar endpoint; undefined otherwise (HBONE, plain TCP, no
 * exchange, or the sidecar did not send one).
 */
export function exchangePeer(tunnel: Duplex): PeerInfo | undefined {
  return (tunnel as { [EXCHANGE_PEER]?: PeerInfo })[EXCHANGE_PEER];
}

export interface ClusterManagerOptions {
  readonly sessions: HboneSessionPool;
  /** mTLS toward endpoints of sidecar workloads (tunnel protocol `SIDECAR`). */
  readonly sidecar: SidecarTransport;
  /** Port of the endpoints' HBONE server (15008). */
  readonly hbonePort: number;
  readonly loadBalancer: LoadBalancerPolicy;
  readonly connectTimeoutMs: number;
  /** Base time (ms) an endpoint whose connect timed out is left out of picks (connect-ejection.ts; default 30 s, 0: never). */
  readonly connectTimeoutEjectionMs?: number;
  /** Idle time (ms) after which an inner HTTP/1.1 connection (one CONNECT stream) is closed. */
  readonly httpKeepAliveMs: number;
  /** Largest response header block accepted from an endpoint (bytes). */
  readonly maxResponseHeadersBytes: number;
  /** HTTP/2 settings of h2c sessions toward endpoints (http2/grpc ports). */
  readonly http2: Http2Params;
  /**
   * The DestinationRule-shaped clusters (their part is given to the mesh store); absent: every
   * cluster uses the defaults above.
   */
  readonly clusters?: ClusterTable;
}

export type { ClusterRuntimeDump };

/** A pooled upstream client and what it was made for. */
interface PoolEntry<P> {
  readonly pool: P;
  /** Workload key (pruning of workload-addressed pools). */
  readonly workload: string;
  /** `poolKey` of the endpoint (live-endpoint check). */
  readonly base: string;
  /** Key of the cluster whose connection-pool settings made it, '' for the shared pools. */
  readonly cluster: string;
  /** That cluster's `poolSignature` when it was made. */
  readonly signature: string;
}

export class ClusterManager {
  readonly lb: LoadBalancer;
  private readonly opts: ClusterManagerOptions;
  /**
   * Pools by endpoint key (plus cluster and settings when a DestinationRule's connection pool
   * shapes them: Envoy keeps pools per cluster); each remembers its workload key for pruning
   * workload-addressed ones.
   */
  private readonly pools = new Map<string, PoolEntry<Pool>>();
  /** h2c upstreams, keyed and pruned like the HTTP/1.1 pools. */
  private readonly h2 = new Map<string, PoolEntry<H2Upstream>>();
  /** Runtime state of DestinationRule-shaped clusters (kept across snapshots). */
  private readonly clusters: ClusterTable;
  /**
   * Response headers of the latest HBONE CONNECT of each endpoint's HTTP pool (same key), for
   * {@link connectHeadersFor}: every CONNECT to one endpoint reaches the same destination
   * workload, so any of them describes it.
   */
  private readonly connectHeaders = new Map<string, IncomingHttpHeaders>();

  constructor(opts: ClusterManagerOptions) {
    this.opts = opts;
    this.lb = new LoadBalancer(opts.loadBalancer, opts.connectTimeoutEjectionMs);
    this.clusters = opts.clusters ?? new ClusterTable({ clusters: () => [] });
  }

  /** The runtime state of every DestinationRule-shaped cluster (`/config_dump`). */
  dumpClusters(): ClusterRuntimeDump[] {
    return this.clusters.dump();
  }

  /** Largest response header block (bytes) accepted from an endpoint, for every upstream client. */
  get maxResponseHeadersBytes(): number {
    return this.opts.maxResponseHeadersBytes;
  }

  /**
   * The runtime state of the cluster `target` belongs to when a DestinationRule shapes it;
   * undefined for workload-addressed traffic and clusters without one (the defaults apply). A
   * lookup in the cluster table of the published snapshot (cluster-table.ts).
   */
  clusterFor(target: Target): ClusterState | undefined {
    return this.clusters.clusterFor(target);
  }

  /**
   * Send one HTTP attempt to `ep` of `target`'s cluster, over h2c (`h2`) or HTTP/1.1. A
   * DestinationRule's circuit breakers apply first: over `http2MaxRequests` or
   * `http1MaxPendingRequests` the handler gets an {@link UpstreamOverflowError} at once (Envoy's
   * pool overflow, 503 `UO`); within them the attempt is counted (and reported to outlier
   * detection) until it ends. `retry`: the attempt is a retry (counted against `maxRetries`).
   */
  dispatch(target: Target, ep: Endpoint, req: UpstreamRequest, handler: UpstreamHandler & Dispatcher.DispatchHandler, h2: boolean, retry = false): void {
    const cluster = this.clusterFor(target);
    let h: UpstreamHandler & Dispatcher.DispatchHandler = handler;
    if (cluster) {
      const overflow = cluster.requestOverflow();
      if (overflow) return handler.onError(overflow);
      h = new TrackedAttempt(cluster, ep, handler, retry);
    }
    if (h2) this.h2For(ep, cluster).dispatch(req, h);
    else {
      // `maxRequestsPerConnection: 1`: the connection closes after this request.
      const reset = cluster?.policy.connectionPool.maxRequestsPerConnection === 1 ? true : undefined;
      this.dispatcherFor(ep, cluster).dispatch({ method: req.method, path: req.path, headers: req.headers as string[], body: req.body, reset }, h);
    }
  }

  /** The undici dispatcher that sends HTTP/1.1 requests to `ep` (with `cluster`'s pool settings). Created on first use. */
  dispatcherFor(ep: Endpoint, cluster?: ClusterState): Dispatcher {
    const base = poolKey(ep);
    const signature = cluster?.poolSignature ?? '';
    const key = signature ? `${base}|${cluster!.key}|${signature}` : base;
    let entry = this.pools.get(key);
    if (!entry) {
      const pool = this.createPool(ep, signature ? cluster : undefined);
      entry = { pool, workload: workloadKey(ep.tunnel, ep.address, ep.workload.identity), base, cluster: signature ? cluster!.key : '', signature };
      this.pools.set(key, entry);
    }
    return entry.pool;
  }

  /** The h2c upstream (HTTP/2 with prior knowledge inside the tunnel) for `ep` (with `cluster`'s pool settings). Created on first use. */
  h2For(ep: Endpoint, cluster?: ClusterState): H2Upstream {
    const base = poolKey(ep);
    const signature = cluster?.poolSignature ?? '';
    const key = signature ? `${base}|${cluster!.key}|${signature}` : base;
    let entry = this.h2.get(key);
    if (!entry) {
      const p = signature ? cluster!.policy.connectionPool : undefined;
      const pool = new H2Upstream({
        authority: ep.authority,
        open: () => this.openWithin(this.open(ep, 'h2'), p?.connectTimeoutMs, ep).then((t) => this.remember(base, t)),
        http2: this.opts.http2,
        idleTimeoutMs: p?.idleTimeoutMs ?? this.opts.httpKeepAliveMs,
        maxStreamsPerSession: this.opts.http2.maxConcurrentStreams,
        maxSessions: p?.maxConnections,
        maxRequestsPerSession: p?.maxRequestsPerConnection || undefined,
      });
      entry = { pool, workload: workloadKey(ep.tunnel, ep.address, ep.workload.identity), base, cluster: signature ? cluster!.key : '', signature };
      this.h2.set(key, entry);
    }
    return entry.pool;
  }

  /** `open`, failing with a connect timeout after `ms` (a DestinationRule's `tcp.connectTimeout`); `open` itself when `ms` is undefined. */
  openWithin<T extends Duplex>(open: Promise<T>, ms: number | undefined, ep: Endpoint): Promise<T> {
    if (ms === undefined) return open;
    return new Promise<T>((resolve, reject) => {
      const timer = setTimeout(() => {
        reject(new HboneConnectError('TIMEOUT', `connect to ${ep.authority} timed out after ${ms} ms`));
        open.then((t) => t.destroy(), () => {});
      }, ms);
      open.then(
        (t) => {
          clearTimeout(timer);
          resolve(t);
        },
        (err: unknown) => {
          clearTimeout(timer);
          reject(err);
        },
      );
    });
  }

  /**
   * Response headers of the latest HBONE CONNECT that carried HTTP to `ep` (ztunnel's `baggage`
   * describing the destination workload), or undefined (plain TCP endpoint, nothing opened yet).
   */
  connectHeadersFor(ep: Endpoint): IncomingHttpHeaders | undefined {
    return this.connectHeaders.get(poolKey(ep));
  }

  /**
   * Open a byte tunnel to `ep` for a TCP service port: an HBONE CONNECT stream (tagged with its
   * CONNECT response headers, see {@link connectResponseHeaders}), a plain TCP socket, or an mTLS
   * socket to a sidecar offering the ALPN for `use` (`tcp` by default; `http/1.1` or `h2` when
   * HTTP goes over it), tagged with the peer learned from `istio-peer-exchange` (see
   * {@link exchangePeer}). With `cluster` (a DestinationRule's TCP port), its `tcp.connectTimeout`
   * applies and the outcome is reported to its outlier detection (a connect success as a 200, a
   * failure as a 503, as Envoy's tcp_proxy does). Rejects with {@link HboneConnectError} (or a
   * socket error) when unreachable.
   */
  async openTcp(ep: Endpoint, use: SidecarProtocol = 'tcp', cluster?: ClusterState): Promise<Duplex> {
    try {
      const tunnel = await this.openWithin(this.open(ep, use), cluster?.policy.connectionPool.connectTimeoutMs, ep);
      this.connectOutcome(ep);
      cluster?.outlier?.reportStatus(ep.authority, 200, cluster.hostCount);
      return tunnel;
    } catch (err) {
      this.connectOutcome(ep, err as Error);
      cluster?.outlier?.reportLocalFailure(ep.authority, cluster.hostCount);
      throw err;
    }
  }

  /** How a connection to `ep` went (`err`: it failed): a timed-out connect ejects the endpoint for a while, a success forgets that (connect-ejection.ts). */
  connectOutcome(ep: Endpoint, err?: Error & { code?: string }): void {
    if (!err) return this.lb.ejections.connected(ep.authority);
    if (isConnectTimeout(err) && this.lb.ejections.timedOut(ep.authority)) log.warn({ endpoint: ep.authority, err: err.message }, 'upstream endpoint did not answer within the connect timeout; ejected while others remain');
  }

  private async open(ep: Endpoint, use: SidecarProtocol): Promise<Duplex> {
    if (ep.tunnel === 'HBONE') {
      const { stream, headers } = await this.opts.sessions.connect(this.hboneDestination(ep), connectAuthority(ep));
      (stream as { [CONNECT_RESPONSE_HEADERS]?: IncomingHttpHeaders })[CONNECT_RESPONSE_HEADERS] = headers;
      return stream;
    }
    if (ep.tunnel === 'SIDECAR') {
      const { socket, peer } = await this.opts.sidecar.connect(this.sidecarDestination(ep), use);
      if (peer) (socket as { [EXCHANGE_PEER]?: PeerInfo })[EXCHANGE_PEER] = peer;
      return socket;
    }
    return connectTcp(ep.address, ep.targetPort, this.opts.connectTimeoutMs);
  }

  /** Close pools of endpoints that are gone from `snapshot` (after a mesh update). */
  prune(snapshot: MeshSnapshot): void {
    const liveEndpoints = new Set<string>();
    const liveHosts = new Set<string>();
    for (const svc of snapshot.services) {
      // A service that goes through another waypoint is dialed at that waypoint's instances.
      for (const endpoints of svc.viaWaypoint ? [svc.endpoints, svc.viaWaypoint.endpoints] : [svc.endpoints]) {
        for (const eps of endpoints.values()) {
          for (const ep of eps) {
            liveEndpoints.add(poolKey(ep));
            liveHosts.add(workloadKey(ep.tunnel, ep.address, ep.workload.identity));
          }
        }
      }
    }
    // Workload-addressed traffic may use any port of a served workload.
    const servedWorkloads = new Set<string>();
    for (const w of snapshot.workloads) if (w.servedByThisWaypoint) for (const a of w.addresses) servedWorkloads.add(workloadKey(w.tunnelProtocol, a, w.identity));
    // HBONE connections to hosts that left the mesh are drained now, not at the idle timeout: a
    // reused pod IP must not inherit them (istio/ztunnel#1637).
    this.opts.sessions.drainWhere((dst) => {
      const host = workloadKey('HBONE', dst.ip, dst.identity ?? '');
      return !liveHosts.has(host) && !servedWorkloads.has(host);
    });
    // DestinationRule clusters were brought up to date when the snapshot was published (the
    // cluster table's part); pools made under connection-pool settings that changed are stale.
    const signatures = this.clusters.signatures();
    for (const map of [this.pools, this.h2] as Map<string, PoolEntry<{ close(): Promise<unknown> }>>[]) {
      for (const [key, entry] of map) {
        // A pool made for a cluster whose connection-pool settings changed is replaced: closed
        // gracefully (requests on it finish), new requests open one with the new settings.
        const stale = entry.cluster !== '' && signatures.get(entry.cluster) !== entry.signature;
        if (!stale && (liveEndpoints.has(entry.base) || servedWorkloads.has(entry.workload))) continue;
        map.delete(key);
        entry.pool.close().catch(() => {});
      }
    }
    const bases = new Set<string>();
    for (const map of [this.pools, this.h2] as Map<string, PoolEntry<unknown>>[]) for (const e of map.values()) bases.add(e.base);
    for (const key of this.connectHeaders.keys()) if (!bases.has(key)) this.connectHeaders.delete(key);
  }

  /** Close every pool gracefully (in-flight requests finish). */
  async close(): Promise<void> {
    this.clusters.close();
    const all = [...this.pools.values(), ...this.h2.values()];
    this.pools.clear();
    this.h2.clear();
    this.connectHeaders.clear();
    await Promise.allSettled(all.map((e) => e.pool.close()));
  }

  /** Destroy every pool now. */
  async destroy(): Promise<void> {
    this.clusters.close();
    const all = [...this.pools.values(), ...this.h2.values()];
    this.pools.clear();
    this.h2.clear();
    this.connectHeaders.clear();
    await Promise.allSettled(all.map((e) => e.pool.destroy()));
  }

  /** Keep the CONNECT response headers of an HTTP pool's new tunnel (see {@link connectHeadersFor}). */
  private remember(key: string, tunnel: Duplex): Duplex {
    const headers = connectResponseHeaders(tunnel);
    if (headers) this.connectHeaders.set(key, headers);
    return tunnel;
  }

  private hboneDestination(ep: Endpoint) {
    return { ip: ep.address, port: this.opts.hbonePort, identity: ep.workload.identity };
  }

  private sidecarDestination(ep: Endpoint) {
    return { ip: ep.address, port: ep.targetPort, identity: ep.workload.identity };
  }

  /**
   * An undici Pool toward `ep`. With `cluster` (a DestinationRule's connection pool): at most
   * `tcp.maxConnections` connections (requests beyond wait in the pool, counted as pending),
   * `http.maxRequestsPerConnection` requests per connection, `http.idleTimeout` and
   * `tcp.connectTimeout`.
   */
  private createPool(ep: Endpoint, cluster?: ClusterState): Pool {
    const p = cluster?.policy.connectionPool;
    const keepAlive = p?.idleTimeoutMs ?? this.opts.httpKeepAliveMs;
    const connectTimeout = p?.connectTimeoutMs;
    const common = {
      keepAliveTimeout: keepAlive,
      keepAliveMaxTimeout: keepAlive,
      maxHeaderSize: this.opts.maxResponseHeadersBytes,
      headersTimeout: 0,
      bodyTimeout: 0,
      pipelining: 1,
      // Each request learns the connection carrying it (its buffers count in the overload budget).
      factory: carrierClient,
      ...(p && Number.isFinite(p.maxConnections) ? { connections: p.maxConnections } : {}),
      // undici closes a connection after maxRequestsPerClient + 1 requests; 1 is done per request (see dispatch).
      ...(p && p.maxRequestsPerConnection > 1 ? { maxRequestsPerClient: p.maxRequestsPerConnection - 1 } : {}),
    };
    const origin = `http://${ep.authority}`;
    if (ep.tunnel === 'SIDECAR') {
      const dst = this.sidecarDestination(ep);
      const sidecar = this.opts.sidecar;
      return new Pool(origin, {
        ...common,
        // HTTP/1.1 over mTLS to the sidecar, which picks its HTTP chain by ALPN `istio-http/1.1`.
        connect: (_opts, callback) => {
          this.openWithin(sidecar.connect(dst, 'http/1.1').then(({ socket }) => socket), connectTimeout, ep).then(
            (socket) => callback(null, socket),
            (err: Error) => callback(err, null),
          );
        },
      });
    }
    if (ep.tunnel !== 'HBONE') return new Pool(origin, { ...common, connectTimeout: connectTimeout ?? this.opts.connectTimeoutMs });
    const dst = this.hboneDestination(ep);
    const sessions = this.opts.sessions;
    const key = poolKey(ep);
    return new Pool(origin, {
      ...common,
      // Each undici "socket" is one CONNECT stream on a pooled HBONE connection.
      connect: (_opts, callback) => {
        const stream = sessions.connect(dst, connectAuthority(ep)).then(({ stream, headers }) => {
          this.connectHeaders.set(key, headers);
          return stream;
        });
        this.openWithin(stream, connectTimeout, ep).then(
          // A CONNECT reset mid-body must fail the request, never complete it (hbone/stream-end.ts).
          (s) => callback(null, asHttp1Socket(joinWritev(s), ep.authority) as unknown as net.Socket),
          (err: Error) => callback(err, null),
        );
      },
    });
  }
}

/** Pool keys by endpoint: endpoints are immutable per snapshot, and the key was built twice per request. */
const poolKeys = new WeakMap<Endpoint, string>();

function poolKey(ep: Endpoint): string {
  let key = poolKeys.get(ep);
  // One waypoint instance fronts several services: their CONNECT authorities keep their pools apart.
  if (key === undefined) poolKeys.set(ep, (key = `${ep.tunnel}|${ep.authority}|${ep.workload.identity}${ep.connectAuthority ? `|${ep.connectAuthority}` : ''}`));
  return key;
}

/** The CONNECT `:authority` toward `ep`: the service's `VIP:port` for another waypoint's instance, else the endpoint's own. */
function connectAuthority(ep: Endpoint): string {
  return ep.connectAuthority ?? ep.authority;
}

function workloadKey(tunnel: string, ip: string, identity: string): string {
  return `${tunnel}|${ip}|${identity}`;
}

/** Plain TCP connect with a timeout (ms); rejects with the socket error. */
export function connectTcp(host: string, port: number, timeoutMs: number): Promise<net.Socket> {
  return new Promise((resolve, reject) => {
    // Half-open: a peer that FINs after its last bytes may still be sent to (TCP half-close,
    // istio/ztunnel#1065).
    const socket = net.connect({ host, port, noDelay: true, allowHalfOpen: true });
    const timer = setTimeout(() => {
      socket.destroy();
      reject(new HboneConnectError('TIMEOUT', `TCP connect to ${host}:${port} timed out after ${timeoutMs} ms`));
    }, timeoutMs);
    socket.once('connect', () => {
      clearTimeout(timer);
      socket.off('error', onError);
      resolve(socket);
    });
    const onError = (err: Error) => {
      clearTimeout(timer);
      log.debug({ err: err.message, host, port }, 'TCP connect failed');
      reject(err);
    };
    socket.once('error', onError);
  });
}
