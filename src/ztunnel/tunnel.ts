/**
 * `waypoint tunnel`: the source ztunnel's outbound role, for the demo, tests and local use.
 * Accepts plain TCP on `--listen` and carries each connection in its own HBONE CONNECT to
 * `--to` (a waypoint) with `:authority` = `--authority`, sending ztunnel's `forwarded`,
 * `traceparent` and (when the source workload is known from `--mesh`) `baggage` headers
 * (istio/ztunnel src/proxy/outbound.rs `create_hbone_request`). A refused CONNECT closes the client's
 * connection, as ztunnel does (the app just sees its connection reset: istio/ztunnel#691).
 */
import { randomBytes } from 'node:crypto';
import net, { type AddressInfo } from 'node:net';
import { HboneSessionPool, relay, DEFAULT_HTTP2, type Http2Params } from '../hbone/index.ts';
import type { WorkloadCertificate } from '../identity/index.ts';
import { formatBaggage } from '../peer/index.ts';
import { formatHostPort, normalizeIp, parseHostPort, type MeshSnapshot } from '../state/index.ts';
import { listenOn, log } from '../util/index.ts';

/** Settings of the tunnel role. */
export interface TunnelOptions {
  readonly listen: string;
  /** HBONE server (`IP:PORT`) to send the CONNECTs to. */
  readonly to: string;
  /** `:authority` of every CONNECT (`VIP:PORT`). */
  readonly authority: string;
  readonly certificate: WorkloadCertificate;
  /** SPIFFE URI the server must present; default: any identity of our trust domain. */
  readonly expectSan?: string;
  /** Source IP for the HBONE connection (the client pod IP stand-in). */
  readonly bind?: string;
  /** Mesh state, to describe the source workload (owner of `bind`) in `baggage`. */
  readonly mesh?: { readonly current: MeshSnapshot };
  readonly http2?: Http2Params;
  /** HBONE connections to spread the CONNECTs over (default 1: up to 100 streams share one, as with ztunnel). */
  readonly connections?: number;
}

/** A running tunnel role; `start()` throws on invalid addresses, rejects on bind errors. */
export class TunnelRole {
  readonly address: AddressInfo;
  private readonly server: net.Server;
  private readonly pool: HboneSessionPool;

  private constructor(server: net.Server, pool: HboneSessionPool, address: AddressInfo) {
    this.server = server;
    this.pool = pool;
    this.address = address;
  }

  /** Start listening. Throws on invalid addresses or a bind error. */
  static async start(opts: TunnelOptions): Promise<TunnelRole> {
    const to = parseHostPort(opts.to);
    if (!to) throw new Error(`invalid --to "${opts.to}": expected IP:PORT or [IPv6]:PORT`);
    if (!parseHostPort(opts.authority)) throw new Error(`invalid --authority "${opts.authority}": expected IP:PORT or [IPv6]:PORT`);
    const trustDomain = opts.certificate.spiffeId.trustDomain;
    const pool = new HboneSessionPool({
      material: () => opts.certificate.current,
      http2: opts.http2 ?? DEFAULT_HTTP2,
      trustDomain: () => trustDomain,
      connectTimeoutMs: 10_000,
      idleTimeoutMs: 300_000,
      maxStreamsPerConnection: 100,
      connections: opts.connections,
      localAddress: opts.bind,
    });
    const dst = { ip: to.ip, port: to.port, identity: opts.expectSan };
    const bindIp = opts.bind ? normalizeIp(opts.bind) : undefined;
    const server = net.createServer({ noDelay: true, allowHalfOpen: true }, (socket) => {
      socket.on('error', (err) => log.debug({ err: err.message }, 'tunnel: client socket error'));
      // The source workload's address: `--bind` stands in for the client pod IP when given.
      const src = formatHostPort(bindIp ?? normalizeIp(socket.remoteAddress ?? '') ?? '', socket.remotePort ?? 0);
      const headers: Record<string, string> = { forwarded: `for="${src}"`, traceparent: traceparent() };
      const source = bindIp && opts.mesh?.current.workloadByIp(bindIp);
      if (source) headers.baggage = formatBaggage(source);
      socket.pause();
      pool.connect(dst, opts.authority, headers).then(
        ({ stream }) => {
          socket.resume();
          void relay(socket, stream);
        },
        (err: Error) => {
          log.warn({ err: err.message, authority: opts.authority }, 'tunnel: CONNECT failed; closing the client connection');
          socket.resetAndDestroy();
        },
      );
    });
    return new TunnelRole(server, pool, await listenOn(server, opts.listen));
  }

  close(): Promise<void> {
    this.pool.destroy();
    return new Promise((r) => this.server.close(() => r()));
  }
}

/** W3C traceparent, random per connection, as ztunnel's connection tracing. */
function traceparent(): string {
  const b = randomBytes(24).toString('hex');
  return `00-${b.slice(0, 32)}-${b.slice(32, 48)}-00`;
}
