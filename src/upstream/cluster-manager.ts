/**
 * Upstream connections toward service endpoints (Envoy's cluster manager, reduced to what a
 * waypoint needs). For HTTP it keeps one undici Pool per endpoint whose "sockets" are HBONE
 * CONNECT streams to `podIP:15008` with `:authority podIP:targetPort` (IS:cluster_waypoint.go
 * `connect_originate`), or plain TCP to `podIP:targetPort` for endpoints outside the mesh
 * (`istio.io/dataplane-mode: none`). For TCP it opens one tunnel per downstream connection.
 */
import net from 'node:net';
import type { Duplex } from 'node:stream';
import { Pool, type Dispatcher } from 'undici';
import type { Endpoint, MeshSnapshot } from '../state/types.ts';
import { HboneConnectError, type HboneSessionPool } from '../hbone/pool.ts';
import { joinWritev } from '../hbone/writev-fix.ts';
import { log } from '../util/log.ts';
import { LoadBalancer, type LoadBalancerPolicy } from './load-balancer.ts';

export interface ClusterManagerOptions {
  readonly sessions: HboneSessionPool;
  /** Port of the endpoints' HBONE server (15008). */
  readonly hbonePort: number;
  readonly loadBalancer: LoadBalancerPolicy;
  readonly connectTimeoutMs: number;
  /** Idle time (ms) after which an inner HTTP/1.1 connection (one CONNECT stream) is closed. */
  readonly httpKeepAliveMs: number;
  /** Largest response header block accepted from an endpoint (bytes). */
  readonly maxResponseHeadersBytes: number;
}

export class ClusterManager {
  readonly lb: LoadBalancer;
  private readonly opts: ClusterManagerOptions;
  private readonly pools = new Map<string, Pool>();

  constructor(opts: ClusterManagerOptions) {
    this.opts = opts;
    this.lb = new LoadBalancer(opts.loadBalancer);
  }

  /** The undici dispatcher that sends HTTP/1.1 requests to `ep`. Created on first use. */
  dispatcherFor(ep: Endpoint): Dispatcher {
    const key = poolKey(ep);
    let pool = this.pools.get(key);
    if (!pool) {
      pool = this.createPool(ep);
      this.pools.set(key, pool);
    }
    return pool;
  }

  /**
   * Open a byte tunnel to `ep` for a TCP service port: an HBONE CONNECT stream, or a plain TCP
   * socket. Rejects with {@link HboneConnectError} (or a socket error) when unreachable.
   */
  async openTcp(ep: Endpoint): Promise<Duplex> {
    if (ep.tunnel === 'HBONE') {
      const { stream } = await this.opts.sessions.connect(this.hboneDestination(ep), ep.authority);
      return stream;
    }
    return connectTcp(ep.address, ep.targetPort, this.opts.connectTimeoutMs);
  }

  /** Close pools of endpoints that are gone from `snapshot` (after a mesh update). */
  prune(snapshot: MeshSnapshot): void {
    const live = new Set<string>();
    for (const svc of snapshot.services) for (const eps of svc.endpoints.values()) for (const ep of eps) live.add(poolKey(ep));
    for (const w of snapshot.workloads) if (w.servedByThisWaypoint) for (const a of w.addresses) live.add(`${w.tunnelProtocol}|${a}|`);
    for (const [key, pool] of this.pools) {
      if (live.has(key)) continue;
      // Workload-addressed pools are keyed per port; keep those whose workload is still served.
      const [tunnel, authority] = key.split('|');
      const ip = authority.startsWith('[') ? authority.slice(1, authority.indexOf(']')) : authority.slice(0, authority.lastIndexOf(':'));
      if (live.has(`${tunnel}|${ip}|`)) continue;
      this.pools.delete(key);
      pool.close().catch(() => {});
    }
  }

  /** Close every pool gracefully (in-flight requests finish). */
  async close(): Promise<void> {
    const all = [...this.pools.values()];
    this.pools.clear();
    await Promise.allSettled(all.map((p) => p.close()));
  }

  /** Destroy every pool now. */
  async destroy(): Promise<void> {
    const all = [...this.pools.values()];
    this.pools.clear();
    await Promise.allSettled(all.map((p) => p.destroy()));
  }

  private hboneDestination(ep: Endpoint) {
    return { ip: ep.address, port: this.opts.hbonePort, identity: ep.workload.identity };
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
    if (ep.tunnel !== 'HBONE') return new Pool(origin, { ...common, connectTimeout: this.opts.connectTimeoutMs });
    const dst = this.hboneDestination(ep);
    const sessions = this.opts.sessions;
    return new Pool(origin, {
      ...common,
      // Each undici "socket" is one CONNECT stream on a pooled HBONE connection.
      connect: (_opts, callback) => {
        sessions.connect(dst, ep.authority).then(
          ({ stream }) => callback(null, joinWritev(stream) as unknown as net.Socket),
          (err: Error) => callback(err, null),
        );
      },
    });
  }
}

function poolKey(ep: Endpoint): string {
  return `${ep.tunnel}|${ep.authority}|${ep.workload.identity}`;
}

/** Plain TCP connect with a timeout (ms); rejects with the socket error. */
export function connectTcp(host: string, port: number, timeoutMs: number): Promise<net.Socket> {
  return new Promise((resolve, reject) => {
    const socket = net.connect({ host, port, noDelay: true });
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
