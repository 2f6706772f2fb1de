/**
 * Upstream connections toward service endpoints (Envoy's cluster manager, reduced to what a
 * waypoint needs). For HTTP it keeps one undici Pool per endpoint whose "sockets" are HBONE
 * CONNECT streams to `podIP:15008` with `:authority podIP:targetPort` (IS:cluster_waypoint.go
 * `connect_originate`), or plain TCP to `podIP:targetPort` for endpoints outside the mesh
 * (`istio.io/dataplane-mode: none`), or mutual TLS with Istio's ALPN to `podIP:targetPort` for
 * workloads that run an Istio sidecar (`sidecar-transport.ts`). For TCP it opens one tunnel per
 * downstream connection.
 */
import type { IncomingHttpHeaders } from 'node:http2';
import net from 'node:net';
import type { Duplex } from 'node:stream';
import { Pool, type Dispatcher } from 'undici';
import type { Endpoint, MeshSnapshot } from '../state/types.ts';
import { HboneConnectError, type HboneSessionPool } from '../hbone/pool.ts';
import type { Http2Params } from '../hbone/settings.ts';
import { joinWritev } from '../hbone/writev-fix.ts';
import { log } from '../util/log.ts';
import { H2Upstream } from './h2-upstream.ts';
import { LoadBalancer, type LoadBalancerPolicy } from './load-balancer.ts';
import type { PeerInfo } from '../peer/peer-info.ts';
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
  /** Idle time (ms) after which an inner HTTP/1.1 connection (one CONNECT stream) is closed. */
  readonly httpKeepAliveMs: number;
  /** Largest response header block accepted from an endpoint (bytes). */
  readonly maxResponseHeadersBytes: number;
  /** HTTP/2 settings of h2c sessions toward endpoints (http2/grpc ports). */
  readonly http2: Http2Params;
}

export class ClusterManager {
  readonly lb: LoadBalancer;
  private readonly opts: ClusterManagerOptions;
  /** Pools by endpoint key; each remembers its workload key for pruning workload-addressed ones. */
  private readonly pools = new Map<string, { readonly pool: Pool; readonly workload: string }>();
  /** h2c upstreams by endpoint key, pruned like the HTTP/1.1 pools. */
  private readonly h2 = new Map<string, { readonly pool: H2Upstream; readonly workload: string }>();
  /**
   * Response headers of the latest HBONE CONNECT of each endpoint's HTTP pool (same key), for
   * {@link connectHeadersFor}: every CONNECT to one endpoint reaches the same destination
   * workload, so any of them describes it.
   */
  private readonly connectHeaders = new Map<string, IncomingHttpHeaders>();

  constructor(opts: ClusterManagerOptions) {
    this.opts = opts;
    this.lb = new LoadBalancer(opts.loadBalancer);
  }

  /** Largest response header block (bytes) accepted from an endpoint, for every upstream client. */
  get maxResponseHeadersBytes(): number {
    return this.opts.maxResponseHeadersBytes;
  }

  /** The undici dispatcher that sends HTTP/1.1 requests to `ep`. Created on first use. */
  dispatcherFor(ep: Endpoint): Dispatcher {
    const key = poolKey(ep);
    let entry = this.pools.get(key);
    if (!entry) {
      entry = { pool: this.createPool(ep), workload: workloadKey(ep.tunnel, ep.address, ep.workload.identity) };
      this.pools.set(key, entry);
    }
    return entry.pool;
  }

  /** The h2c upstream (HTTP/2 with prior knowledge inside the tunnel) for `ep`. Created on first use. */
  h2For(ep: Endpoint): H2Upstream {
    const key = poolKey(ep);
    let entry = this.h2.get(key);
    if (!entry) {
      const pool = new H2Upstream({
        authority: ep.authority,
        open: () => this.openTcp(ep, 'h2').then((t) => this.remember(key, t)),
        http2: this.opts.http2,
        idleTimeoutMs: this.opts.httpKeepAliveMs,
        maxStreamsPerSession: this.opts.http2.maxConcurrentStreams,
      });
      entry = { pool, workload: workloadKey(ep.tunnel, ep.address, ep.workload.identity) };
      this.h2.set(key, entry);
    }
    return entry.pool;
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
   * {@link exchangePeer}). Rejects with {@link HboneConnectError} (or a socket error) when unreachable.
   */
  async openTcp(ep: Endpoint, use: SidecarProtocol = 'tcp'): Promise<Duplex> {
    if (ep.tunnel === 'HBONE') {
      const { stream, headers } = await this.opts.sessions.connect(this.hboneDestination(ep), ep.authority);
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
      for (const eps of svc.endpoints.values()) {
        for (const ep of eps) {
          liveEndpoints.add(poolKey(ep));
          liveHosts.add(workloadKey(ep.tunnel, ep.address, ep.workload.identity));
        }
      }
    }
    // Workload-addressed traffic may use any port of a served workload.
    const servedWorkloads = new Set<string>();
    for (const w of snapshot.workloads) if (w.servedByThisWaypoint) for (const a of w.addresses) servedWorkloads.add(workloadKey(w.tunnelProtocol, a, w.identity));
    // HBONE connections to hosts that left the mesh are drained now, not at the idle timeout: a
    // reused pod IP must not inherit them (pitfall F1).
    this.opts.sessions.drainWhere((dst) => {
      const host = workloadKey('HBONE', dst.ip, dst.identity ?? '');
      return !liveHosts.has(host) && !servedWorkloads.has(host);
    });
    for (const map of [this.pools, this.h2] as Map<string, { pool: { close(): Promise<unknown> }; workload: string }>[]) {
      for (const [key, entry] of map) {
        if (liveEndpoints.has(key) || servedWorkloads.has(entry.workload)) continue;
        map.delete(key);
        entry.pool.close().catch(() => {});
      }
    }
    for (const key of this.connectHeaders.keys()) if (!this.pools.has(key) && !this.h2.has(key)) this.connectHeaders.delete(key);
  }

  /** Close every pool gracefully (in-flight requests finish). */
  async close(): Promise<void> {
    const all = [...this.pools.values(), ...this.h2.values()];
    this.pools.clear();
    this.h2.clear();
    this.connectHeaders.clear();
    await Promise.allSettled(all.map((e) => e.pool.close()));
  }

  /** Destroy every pool now. */
  async destroy(): Promise<void> {
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

  private createPool(ep: Endpoint): Pool {
    const common = {
      keepAliveTimeout: this.opts.httpKeepAliveMs,
      keepAliveMaxTimeout: this.opts.httpKeepAliveMs,
      maxHeaderSize: this.opts.maxResponseHeadersBytes,
      headersTimeout: 0,
      bodyTimeout: 0,
      pipelining: 1,
    };
    const origin = `http://${ep.authority}`;
    if (ep.tunnel === 'SIDECAR') {
      const dst = this.sidecarDestination(ep);
      const sidecar = this.opts.sidecar;
      return new Pool(origin, {
        ...common,
        // HTTP/1.1 over mTLS to the sidecar, which picks its HTTP chain by ALPN `istio-http/1.1`.
        connect: (_opts, callback) => {
          sidecar.connect(dst, 'http/1.1').then(
            ({ socket }) => callback(null, socket),
            (err: Error) => callback(err, null),
          );
        },
      });
    }
    if (ep.tunnel !== 'HBONE') return new Pool(origin, { ...common, connectTimeout: this.opts.connectTimeoutMs });
    const dst = this.hboneDestination(ep);
    const sessions = this.opts.sessions;
    const key = poolKey(ep);
    return new Pool(origin, {
      ...common,
      // Each undici "socket" is one CONNECT stream on a pooled HBONE connection.
      connect: (_opts, callback) => {
        sessions.connect(dst, ep.authority).then(
          ({ stream, headers }) => {
            this.connectHeaders.set(key, headers);
            callback(null, joinWritev(stream) as unknown as net.Socket);
          },
          (err: Error) => callback(err, null),
        );
      },
    });
  }
}

function poolKey(ep: Endpoint): string {
  return `${ep.tunnel}|${ep.authority}|${ep.workload.identity}`;
}

function workloadKey(tunnel: string, ip: string, identity: string): string {
  return `${tunnel}|${ip}|${identity}`;
}

/** Plain TCP connect with a timeout (ms); rejects with the socket error. */
export function connectTcp(host: string, port: number, timeoutMs: number): Promise<net.Socket> {
  return new Promise((resolve, reject) => {
    // Half-open: a peer that FINs after its last bytes may still be sent to (pitfall B1, TCP relay).
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
