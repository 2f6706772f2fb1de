/**
 * `waypoint inbound`: the destination ztunnel's inbound role, for the demo, tests and local use.
 * Terminates HBONE on `--listen IP:PORT`, requires the `:authority` IP to be its own listen IP
 * (400 otherwise, as ztunnel: ZT:src/proxy/inbound.rs), refuses ztunnel's illegal target ports
 * (15001, 15006, 15008 ⇒ 503), dials `<forward host>:<authority port>`, answers 200 only once that
 * connect succeeded (503 otherwise) and relays bytes with half-close. With mesh state (`--mesh`) its
 * 200 carries the destination workload's `baggage` (the workload owning the listen IP), as
 * ztunnel's inbound answers (ZT:src/proxy/inbound.rs, src/baggage.rs).
 */
import type { AddressInfo } from 'node:net';
import { HboneServer, respondAndClose } from '../hbone/server.ts';
import { relay } from '../hbone/relay.ts';
import { DEFAULT_HTTP2, type Http2Params } from '../hbone/settings.ts';
import { trustDomainAllowed } from '../identity/spiffe.ts';
import { formatBaggage } from '../peer/baggage.ts';
import type { WorkloadCertificate } from '../identity/workload-certificate.ts';
import { normalizeIp } from '../state/ip.ts';
import type { MeshSnapshot } from '../state/types.ts';
import { connectTcp } from '../upstream/cluster-manager.ts';
import { log } from '../util/log.ts';

/** Target ports ztunnel never forwards to (its own capture and HBONE ports). */
const ILLEGAL_PORTS = new Set([15001, 15006, 15008]);

/** Settings of the inbound role (connect timeout in ms, default 10 s). */
export interface InboundOptions {
  /** `IP:PORT` to listen on; the IP is also the only accepted authority IP. */
  readonly listen: string;
  readonly certificate: WorkloadCertificate;
  /** Host to dial for the application (default: the listen IP). */
  readonly forward?: string;
  readonly http2?: Http2Params;
  readonly connectTimeoutMs?: number;
  /** Mesh state, to describe the destination workload in the response `baggage` (none when absent or unknown). */
  readonly mesh?: { readonly current: MeshSnapshot | undefined };
}

/** A running inbound role; `start()` rejects on a bad listen address or bind error. */
export class InboundRole {
  readonly address: AddressInfo;
  private readonly server: HboneServer;

  private constructor(server: HboneServer, address: AddressInfo) {
    this.server = server;
    this.address = address;
  }

  /** Start listening. Throws on an invalid listen address or a bind error. */
  static async start(opts: InboundOptions): Promise<InboundRole> {
    const own = opts.certificate.spiffeId;
    const http2 = opts.http2 ?? DEFAULT_HTTP2;
    let listenIp = '';
    // The response baggage, computed once per mesh snapshot.
    let baggageOf: MeshSnapshot | undefined;
    let baggage = '';
    const responseHeaders = (): Record<string, string | number> => {
      const mesh = opts.mesh?.current;
      if (mesh && mesh !== baggageOf) {
        const w = mesh.workloadByIp(listenIp);
        baggage = w ? formatBaggage(w) : '';
        baggageOf = mesh;
      }
      return baggage && mesh ? { ':status': 200, baggage } : { ':status': 200 };
    };
    const server = new HboneServer({
      name: 'inbound',
      material: opts.certificate.current,
      http2,
      // ztunnel's TrustDomainVerifier: the client must be of our own trust domain.
      verifyPeer: (peer) => (peer && trustDomainAllowed(peer, own.trustDomain, []) ? undefined : `client identity ${peer?.uri ?? '(none)'} is not in trust domain ${own.trustDomain}`),
      onConnect: (stream, req) => {
        if (req.ip !== listenIp) return respondAndClose(stream, 400, `authority ${req.authority} is not this endpoint (${listenIp})`);
        if (ILLEGAL_PORTS.has(req.port)) return respondAndClose(stream, 503, `port ${req.port} is not a valid target`);
        const host = opts.forward ?? listenIp;
        connectTcp(host, req.port, opts.connectTimeoutMs ?? 10_000).then(
          (socket) => {
            if (stream.destroyed) return socket.destroy();
            stream.respond(responseHeaders());
            void relay(stream, socket);
          },
          (err: Error) => {
            log.debug({ err: err.message, host, port: req.port }, 'inbound: application connect failed');
            respondAndClose(stream, 503, 'connect to application failed');
          },
        );
      },
    });
    opts.certificate.on('rotated', (m) => server.updateMaterial(m));
    const address = await server.listen(opts.listen);
    listenIp = normalizeIp(address.address) ?? address.address;
    return new InboundRole(server, address);
  }

  close(timeoutMs = 1_000): Promise<void> {
    return this.server.drain(timeoutMs);
  }
}
