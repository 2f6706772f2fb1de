/**
 * Where a load test's connections go: each one is either a CONNECT tunnel through an HBONE
 * waypoint (mTLS HTTP/2 to `waypoint:15008`, `:authority` = the service address, ztunnel's
 * request headers), carried by the HBONE client pool the waypoint itself uses upstream; or a
 * plain TCP connection (`--target`, the non-HBONE baseline).
 */
import { randomBytes } from 'node:crypto';
import net from 'node:net';
import type { Duplex } from 'node:stream';
import { DEFAULT_HTTP2, HboneSessionPool, asHttp1Socket, joinWritev, type TlsMaterial } from '../hbone/index.ts';
import { formatHostPort } from '../state/index.ts';
import type { HostPort } from './options.ts';

/** A source of connections to the application under test. */
export interface Transport {
  /** For reports: `HBONE 127.0.0.1:15008 → 10.0.0.1:80` or `TCP 127.0.0.1:8080`. */
  readonly description: string;
  /**
   * A new byte stream to the application. `http1`: it will carry undici's HTTP/1.1 client, which
   * needs an HBONE stream's end and resets surfaced as a socket's (hbone/stream-end.ts).
   */
  open(use: 'http1' | 'raw'): Promise<Duplex>;
  /** Close every connection it opened. */
  close(): void;
}

export interface HboneTransportOptions {
  readonly waypoint: HostPort;
  readonly authority: string;
  /** The client identity's current TLS material (read per new HBONE connection). */
  material(): TlsMaterial;
  readonly trustDomain: string;
  readonly expectSan?: string;
  readonly bind?: string;
  readonly tunnelsPerConnection: number;
  readonly connectHeaders?: Readonly<Record<string, string>>;
  readonly connectTimeoutMs: number;
}

/**
 * One CONNECT tunnel per connection, sent as ztunnel sends them (istio/ztunnel
 * src/proxy/outbound.rs `create_hbone_request`): `forwarded: for="<source ip>"` when the source
 * address is known (`bind`), a random W3C `traceparent` per tunnel, and any extra headers.
 */
export function hboneTransport(o: HboneTransportOptions): Transport {
  const pool = new HboneSessionPool({
    material: o.material,
    http2: DEFAULT_HTTP2,
    trustDomain: () => o.trustDomain,
    connectTimeoutMs: o.connectTimeoutMs,
    idleTimeoutMs: 60_000,
    maxStreamsPerConnection: o.tunnelsPerConnection,
    localAddress: o.bind,
  });
  const dst = { ip: o.waypoint.host, port: o.waypoint.port, identity: o.expectSan };
  const where = formatHostPort(o.waypoint.host, o.waypoint.port);
  return {
    description: `HBONE ${where} → ${o.authority}`,
    async open(use) {
      const headers: Record<string, string> = { ...o.connectHeaders, traceparent: traceparent() };
      if (o.bind) headers.forwarded = `for="${o.bind.includes(':') ? `[${o.bind}]` : o.bind}"`;
      const { stream } = await pool.connect(dst, o.authority, headers);
      // Node's writev onto an Http2Stream corrupts corked chunks (hbone/writev-fix.ts).
      const s = joinWritev(stream);
      return use === 'http1' ? asHttp1Socket(s, o.authority) : s;
    },
    close: () => pool.destroy(),
  };
}

/** W3C traceparent, random per tunnel, as ztunnel traces each connection. */
function traceparent(): string {
  const b = randomBytes(24).toString('hex');
  return `00-${b.slice(0, 32)}-${b.slice(32, 48)}-00`;
}

/** Plain TCP connections to `target` (Nagle off, as every client of the bench). */
export function tcpTransport(target: HostPort, connectTimeoutMs: number): Transport {
  const open = new Set<net.Socket>();
  return {
    description: `TCP ${formatHostPort(target.host, target.port)}`,
    open: () =>
      new Promise<Duplex>((resolve, reject) => {
        const s = net.connect({ host: target.host, port: target.port, noDelay: true });
        const timer = setTimeout(() => s.destroy(Object.assign(new Error(`TCP connect to ${formatHostPort(target.host, target.port)} timed out`), { code: 'ETIMEDOUT' })), connectTimeoutMs);
        open.add(s);
        s.once('close', () => open.delete(s));
        s.once('connect', () => {
          clearTimeout(timer);
          s.off('error', reject);
          resolve(s);
        });
        s.once('error', (err) => {
          clearTimeout(timer);
          reject(err);
        });
      }),
    close: () => {
      for (const s of open) s.destroy();
    },
  };
}
