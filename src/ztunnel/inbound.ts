/**
 * `waypoint inbound`: the destination ztunnel's inbound role, for the demo, tests and local use.
 * Terminates HBONE on `--listen IP:PORT`, requires the `:authority` IP to be its own listen IP
 * (400 otherwise, as ztunnel: istio/ztunnel src/proxy/inbound.rs), refuses ztunnel's illegal target ports
 * (15001, 15006, 15008 ⇒ 503), dials `<forward host>:<authority port>`, answers 200 only once that
 * connect succeeded (503 otherwise) and relays bytes with half-close. With mesh state (`--mesh`) its
 * 200 carries the destination workload's `baggage` (the workload owning the listen IP), as
 * ztunnel's inbound answers (istio/ztunnel src/proxy/inbound.rs, src/baggage.rs).
 *
 * `plaintext` listeners stand in for ztunnel's inbound passthrough (the pod's app port reached by a
 * non-mesh client, without HBONE): a connection accepted on `IP:PORT` is relayed to
 * `<forward host>:PORT` (the listener's port is the application's port, as for HBONE the
 * `:authority` port is) unless PeerAuthentication makes that port STRICT for the workload owning
 * the HBONE listen IP (peer-authentication.ts): then the connection is
 * closed before anything is dialed, and no byte is relayed. HBONE traffic is always mTLS, so
 * PeerAuthentication never refuses it.
 *
 * AuthorizationPolicy: with mesh state, the selector / namespace-wide / mesh-wide policies of the
 * workload owning the listen IP are enforced as ztunnel enforces them (L4 only: authz.ts) on every
 * connection, with source principal = the HBONE client certificate's SPIFFE id (none for
 * plaintext), source IP = the connection's peer address, destination = the CONNECT `:authority`
 * (plaintext: the listen IP and the listener's port). A denied CONNECT is answered 401
 * (istio/ztunnel src/proxy/inbound.rs maps the RBAC error to UNAUTHORIZED) and a denied plaintext
 * connection is closed; either way the application is never dialed, and the denial is logged with
 * ztunnel's wording (`connection closed due to policy rejection: explicitly denied by: ns/name`).
 * Decisions use the snapshot current at accept time; when the mesh holder can be subscribed to (a
 * MeshStore), open connections are re-checked on every new snapshot and the ones now denied are
 * closed (`connection closed due to policy change`), as ztunnel's connection manager drains them
 * (istio/ztunnel src/state.rs `assert_rbac`, src/proxy/connection_manager.rs). PeerAuthentication
 * counts as policy there too (istiod turns it into DENY policies ztunnel evaluates with the
 * others).
 */
import net, { type AddressInfo } from 'node:net';
import { HboneServer, respondAndClose, relay, teardown, DEFAULT_HTTP2, type Http2Params } from '../hbone/index.ts';
import { trustDomainAllowed, type WorkloadCertificate } from '../identity/index.ts';
import { formatBaggage } from '../peer/index.ts';
import { normalizeIp, parseHostPort, type MeshPart, type MeshSnapshot } from '../state/index.ts';
import type { RequestAttributes } from '../authz/index.ts';
import { rejectionReason, ZTUNNEL_AUTHZ, ztunnelAuthzFor } from './authz.ts';
import { PEER_AUTHENTICATION, peerAuthenticationFor } from './peer-authentication.ts';
import { NETWORK_POLICIES } from '../netpol/index.ts';
import { connectTcp } from '../upstream/index.ts';
import { log } from '../util/index.ts';

/**
 * The compiled parts the inbound role reads from its mesh snapshots (give them to its MeshStore):
 * PeerAuthentication and ztunnel's AuthorizationPolicies; NetworkPolicies are compiled too so an
 * invalid one is refused, as the API server refuses it.
 */
export const INBOUND_PARTS: readonly MeshPart<unknown>[] = Object.freeze([PEER_AUTHENTICATION, ZTUNNEL_AUTHZ, NETWORK_POLICIES]);

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
  /**
   * Mesh state: the destination workload for the response `baggage`, its PeerAuthentication and
   * AuthorizationPolicies (none when absent). With `subscribe` (a MeshStore), open connections are
   * re-checked on every new snapshot.
   */
  readonly mesh?: { readonly current: MeshSnapshot | undefined; subscribe?(fn: (next: MeshSnapshot) => void): () => void };
  /**
   * Plain-TCP listen addresses (`IP:PORT`) for the application's non-mesh clients; each relays to
   * `<forward host>:PORT`, subject to PeerAuthentication (STRICT ⇒ closed). The IP:PORT must not be
   * the application's own address (use another IP, or `forward`).
   */
  readonly plaintext?: readonly string[];
}

/** An open, authorized connection: what it was decided on, and how to close it. */
interface OpenConnection {
  readonly attrs: RequestAttributes;
  /** The listener's port for plaintext connections (PeerAuthentication applies), else undefined. */
  readonly plaintextPort: number | undefined;
  close(): void;
}

/**
 * The decision for a connection to the workload owning `listenIp` under `mesh`: undefined when
 * allowed, else ztunnel's rejection reason (`explicitly denied by: ns/name`, ...).
 */
function rejection(mesh: MeshSnapshot, listenIp: string, attrs: RequestAttributes, plaintextPort: number | undefined): string | undefined {
  const workload = mesh.workloadByIp(listenIp);
  if (plaintextPort !== undefined) {
    const { mode, policy } = peerAuthenticationFor(mesh).explain(workload, plaintextPort);
    if (mode === 'STRICT') return `PeerAuthentication ${policy ?? ''} requires mTLS (STRICT)`;
  }
  const evaluator = ztunnelAuthzFor(mesh).forWorkload(workload);
  if (evaluator.empty) return undefined;
  const result = evaluator.evaluate(attrs);
  return result.decision === 'DENY' ? rejectionReason(result) : undefined;
}

/** A running inbound role; `start()` rejects on a bad listen address or bind error. */
export class InboundRole {
  readonly address: AddressInfo;
  /** Bound plaintext listeners, in `plaintext` order. */
  readonly plaintextAddresses: readonly AddressInfo[];
  private readonly server: HboneServer;
  private readonly plainServers: readonly net.Server[];
  private readonly plainSockets: Set<net.Socket>;
  private readonly unsubscribe: (() => void) | undefined;

  private constructor(server: HboneServer, address: AddressInfo, plain: readonly net.Server[], sockets: Set<net.Socket>, unsubscribe: (() => void) | undefined) {
    this.server = server;
    this.address = address;
    this.plainServers = plain;
    this.plainSockets = sockets;
    this.unsubscribe = unsubscribe;
    this.plaintextAddresses = plain.map((p) => p.address() as AddressInfo);
  }

  /** Start listening. Throws on an invalid listen address or a bind error. */
  static async start(opts: InboundOptions): Promise<InboundRole> {
    const own = opts.certificate.spiffeId;
    const http2 = opts.http2 ?? DEFAULT_HTTP2;
    let listenIp = '';
    /** Connections relayed now, re-checked when the mesh state changes. */
    const open = new Set<OpenConnection>();
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
        const attrs: RequestAttributes = { principal: req.peer.uri, sourceIp: req.remoteAddress, destinationIp: req.ip, destinationPort: req.port };
        const mesh = opts.mesh?.current;
        const denied = mesh && rejection(mesh, listenIp, attrs, undefined);
        if (denied) {
          log.info({ src: req.remoteAddress, peer: req.peer.uri, dst: req.authority }, `inbound: connection closed due to policy rejection: ${denied}`);
          return respondAndClose(stream, 401, `connection closed due to policy rejection: ${denied}`);
        }
        const host = opts.forward ?? listenIp;
        connectTcp(host, req.port, opts.connectTimeoutMs ?? 10_000).then(
          (socket) => {
            if (stream.destroyed) return socket.destroy();
            stream.respond(responseHeaders());
            const conn: OpenConnection = { attrs, plaintextPort: undefined, close: () => (teardown(stream), teardown(socket)) };
            open.add(conn);
            void relay(stream, socket).then(() => open.delete(conn));
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
    const sockets = new Set<net.Socket>();
    const plain: net.Server[] = [];
    try {
      for (const text of opts.plaintext ?? []) {
        const at = parseHostPort(text);
        if (!at || at.port === 0) throw new Error(`--plaintext ${text}: expected IP:PORT`);
        const host = opts.forward ?? listenIp;
        const srv = net.createServer({ allowHalfOpen: true, noDelay: true }, (socket) => {
          sockets.add(socket);
          socket.once('close', () => sockets.delete(socket));
          socket.on('error', () => undefined);
          const src = normalizeIp(socket.remoteAddress ?? '') ?? '';
          const attrs: RequestAttributes = { sourceIp: src, destinationIp: listenIp, destinationPort: at.port };
          const mesh = opts.mesh?.current;
          const denied = mesh && rejection(mesh, listenIp, attrs, at.port);
          if (denied) {
            log.info({ src, dst: `${listenIp}:${at.port}` }, `inbound: plaintext connection closed due to policy rejection: ${denied}`);
            socket.destroy();
            return;
          }
          connectTcp(host, at.port, opts.connectTimeoutMs ?? 10_000).then(
            (app) => {
              if (socket.destroyed) return app.destroy();
              const conn: OpenConnection = { attrs, plaintextPort: at.port, close: () => (socket.destroy(), app.destroy()) };
              open.add(conn);
              void relay(socket, app).then(() => open.delete(conn));
            },
            (err: Error) => {
              log.debug({ err: err.message, host, port: at.port }, 'inbound: application connect failed (plaintext)');
              socket.destroy();
            },
          );
        });
        await new Promise<void>((resolve, reject) => {
          srv.once('error', reject);
          srv.listen(at.port, at.ip, () => {
            srv.off('error', reject);
            resolve();
          });
        });
        plain.push(srv);
      }
    } catch (err) {
      for (const p of plain) p.close();
      await server.drain(0);
      throw err;
    }
    // A mesh compiled without INBOUND_PARTS is a programming error: fail now, not at the first
    // connection. Open connections are re-checked on every new snapshot.
    if (opts.mesh?.current) ztunnelAuthzFor(opts.mesh.current);
    const unsubscribe = opts.mesh?.subscribe?.((next) => {
      for (const conn of open) {
        const denied = rejection(next, listenIp, conn.attrs, conn.plaintextPort);
        if (!denied) continue;
        log.info(
          { src: conn.attrs.sourceIp, peer: conn.attrs.principal, dst: `${conn.attrs.destinationIp}:${conn.attrs.destinationPort}`, reason: denied },
          'inbound: connection closed due to policy change',
        );
        open.delete(conn);
        conn.close();
      }
    });
    return new InboundRole(server, address, plain, sockets, unsubscribe);
  }

  async close(timeoutMs = 1_000): Promise<void> {
    this.unsubscribe?.();
    const closed = this.plainServers.map((p) => new Promise<void>((resolve) => p.close(() => resolve())));
    for (const s of this.plainSockets) s.destroy();
    await Promise.all([this.server.drain(timeoutMs), ...closed]);
  }
}
