/**
 * `istio.peer_metadata`: who is on each side of a request, as Istio's `peer_metadata` HTTP filter
 * (istio/proxy source/extensions/filters/http/peer_metadata/filter.cc) configured the way Istio
 * configures its waypoint (`waypoint_downstream_peer_metadata` +
 * `waypoint_upstream_peer_metadata`). Writes the slots of src/peer/peer-info.ts for the stats,
 * authz and access-log filters:
 *
 * - DOWNSTREAM_PEER (per tunnel, `onConnection`): the first configured method that finds the
 *   peer: `workload_discovery` (the tunnel's source IP looked up in the current mesh snapshot,
 *   IPv4-mapped IPv6 unwrapped), `baggage` (the CONNECT's `baggage` header, ztunnel's). When
 *   `istio_headers` is configured, each request's `x-envoy-peer-metadata` may stand in for the
 *   tunnel's peer (if it comes before the method that found it), in REQUEST_DOWNSTREAM_PEER: read
 *   a request's peer with `downstreamPeerOf(stream)`. A peer without identity gets the client
 *   certificate's SPIFFE id; when nothing is found the peer is that identity alone.
 * - UPSTREAM_PEER (per request, `onResponseHeaders`, also for local replies once an endpoint was
 *   picked): `workload_discovery` (the chosen endpoint's workload), `istio_headers` (the upstream
 *   response's headers), `baggage` (the `baggage` a destination ztunnel answered the upstream
 *   CONNECT with). A peer without identity gets the endpoint's expected SPIFFE id.
 * - TCP_UPSTREAM_PEER (TCP tunnels, `onUpstreamConnected`): same; `istio_headers` there means the
 *   peer a sidecar endpoint sent over `istio-peer-exchange` (`upstreamExchangePeerOf(conn)`), the
 *   TCP form of the same metadata.
 *
 * Propagation (off by default, as in Istio's waypoint) adds headers describing the waypoint
 * itself (see self.ts): toward the upstream on every request, toward the downstream on every
 * response for `baggage` and, for `istio_headers`, only when the request carried them (Envoy's
 * rule). Incoming `x-envoy-peer-metadata*` headers are read only when `istio_headers` discovery is
 * configured for that direction; whether read or not, they are removed from requests (in
 * `onRequestHeaders`, so no later filter, route or upstream sees a client's) and from responses:
 * the waypoint is the trust boundary between client and app. `stripIncomingPeerMetadata: false`
 * lets unread ones pass (debugging; Istio's waypoint passes them, filters/README.md).
 *
 * Unknown fields stay '' (no invented defaults), so the stats filter prints `unknown` where
 * Istio does; Istio's WDS defaults (namespace `default`, service account `default`) are already
 * applied by the mesh compiler. Malformed headers or baggage never throw: the method just finds
 * nothing and the next one is tried (istio/proxy#4120).
 */
import type { IncomingHttpHeaders } from 'node:http2';
import { FilterStatus, defineSlot, type ConnectionContext, type Filter, type FilterEnv, type FilterFactory, type HeaderList, type StreamContext } from '../../src/pipeline/index.ts';
import {
  DOWNSTREAM_PEER,
  EMPTY_PEER,
  PEER_METADATA_HEADER,
  PEER_METADATA_ID_HEADER,
  REQUEST_DOWNSTREAM_PEER,
  TCP_UPSTREAM_PEER,
  UPSTREAM_PEER,
  decodePeerMetadata,
  parseBaggage,
  peerFromWorkload,
  sourceWorkloadAt,
  upstreamExchangePeerOf,
  workloadAt,
  type PeerInfo,
} from '../../src/peer/index.ts';
import type { Endpoint, MeshSnapshot, Workload } from '../../src/state/index.ts';
import { parsePeerMetadataConfig, type DiscoveryMethod, type PeerMetadataConfig } from './config.ts';
import { selfMetadata, type SelfMetadata } from './self.ts';

export { parsePeerMetadataConfig, type PeerMetadataConfig } from './config.ts';
export { workloadAt };

export const PEER_METADATA_FILTER_NAME = 'istio.peer_metadata';

/** Method codes (the data path compares small integers, not strings). */
const WDS = 0;
const HEADERS = 1;
const BAGGAGE = 2;
type Method = typeof WDS | typeof HEADERS | typeof BAGGAGE;

function code(m: DiscoveryMethod): Method {
  return m === 'workload_discovery' ? WDS : m === 'istio_headers' ? HEADERS : BAGGAGE;
}

/** Per tunnel: a request's `x-envoy-peer-metadata` is consulted (istio_headers comes before the method that found the tunnel's peer, or none did). */
const CONSULT_HEADERS = defineSlot<boolean>('istio.peer_metadata.consult_headers', 'connection');
/** Per request: which metadata headers the request carried (bit 1: `-id`, bit 2: metadata), for downstream propagation. */
const REQUEST_MX = defineSlot<number>('istio.peer_metadata.request_mx', 'stream');
const SAW_ID = 1;
const SAW_METADATA = 2;

/** Decoded header values kept (Envoy keeps an MX cache too); values longer than this are decoded each time. */
const CACHE_ENTRIES = 1024;
const CACHE_VALUE_CHARS = 4096;

export const peerMetadataFactory: FilterFactory<PeerMetadataConfig> = {
  name: PEER_METADATA_FILTER_NAME,
  parseConfig: parsePeerMetadataConfig,
  create: (config, env) => createPeerMetadataFilter(config, env),
};

/** Build the filter; only the phases the configuration needs are implemented (unused phases cost nothing). */
export function createPeerMetadataFilter(config: PeerMetadataConfig, env: FilterEnv): Filter {
  const impl = new PeerMetadata(config, env);
  const f: {
    name: string;
    onConnection?: Filter['onConnection'];
    onRequestHeaders?: Filter['onRequestHeaders'];
    onUpstreamRequest?: Filter['onUpstreamRequest'];
    onResponseHeaders?: Filter['onResponseHeaders'];
    onUpstreamConnected?: Filter['onUpstreamConnected'];
  } = { name: PEER_METADATA_FILTER_NAME };
  if (config.downstreamDiscovery.length > 0) f.onConnection = (c) => impl.onConnection(c);
  if (impl.downHeaders || impl.strip) f.onRequestHeaders = (s) => impl.onRequestHeaders(s);
  if (impl.upMx || impl.upBaggage) f.onUpstreamRequest = (s, h) => impl.onUpstreamRequest(s, h);
  if (config.upstreamDiscovery.length > 0 || impl.strip || impl.downMx || impl.downBaggage) f.onResponseHeaders = (s, h) => impl.onResponseHeaders(s, h);
  if (config.upstreamDiscovery.length > 0) f.onUpstreamConnected = (c) => impl.onUpstreamConnected(c);
  return Object.freeze(f);
}

class PeerMetadata {
  private readonly env: FilterEnv;
  private readonly down: readonly Method[];
  private readonly up: readonly Method[];
  readonly downHeaders: boolean;
  private readonly upHeaders: boolean;
  readonly strip: boolean;
  readonly upMx: boolean;
  readonly upBaggage: boolean;
  readonly downMx: boolean;
  readonly downBaggage: boolean;
  /** Client certificate identity → the peer known only by it. */
  private readonly certPeers = new WeakMap<object, PeerInfo>();
  /** Workload → its PeerInfo (workloads are immutable per snapshot). */
  private readonly workloadPeers = new WeakMap<Workload, PeerInfo>();
  /** Workload peers without their principal, for plain-TCP endpoints (see {@link upstreamWorkloadPeer}). */
  private readonly unverifiedPeers = new WeakMap<PeerInfo, PeerInfo>();
  /** Upstream CONNECT response headers → the peer their `baggage` names (null: none). */
  private readonly connectPeers = new WeakMap<IncomingHttpHeaders, PeerInfo | null>();
  /** Decoded header peer → that peer with the identity of the client that sent it (the last one seen). */
  private readonly clientPeers = new WeakMap<PeerInfo, PeerInfo>();
  /** `x-envoy-peer-metadata` value → decoded peer (null: undecodable), bounded. */
  private readonly decoded = new Map<string, PeerInfo | null>();
  private selfOf: MeshSnapshot | undefined;
  private self: SelfMetadata | undefined;

  constructor(config: PeerMetadataConfig, env: FilterEnv) {
    this.env = env;
    this.down = Object.freeze(config.downstreamDiscovery.map(code));
    this.up = Object.freeze(config.upstreamDiscovery.map(code));
    this.downHeaders = this.down.includes(HEADERS);
    this.upHeaders = this.up.includes(HEADERS);
    this.strip = config.stripIncomingPeerMetadata;
    this.upMx = config.upstreamPropagation.includes('istio_headers');
    this.upBaggage = config.upstreamPropagation.includes('baggage');
    this.downMx = config.downstreamPropagation.includes('istio_headers');
    this.downBaggage = config.downstreamPropagation.includes('baggage');
  }

  // ---- downstream -------------------------------------------------------------------------

  onConnection(conn: ConnectionContext): FilterStatus {
    let peer: PeerInfo | undefined;
    let headersFirst = false;
    for (const m of this.down) {
      if (m === HEADERS) {
        headersFirst = true;
        continue;
      }
      peer = m === WDS ? this.downstreamWorkload(conn) : this.baggagePeer(conn.info.baggage);
      if (peer !== undefined) break;
    }
    if (headersFirst) conn.set(CONSULT_HEADERS, true);
    const cert = conn.info.peer;
    if (peer !== undefined) peer = withIdentity(peer, cert.uri);
    else {
      // Known only by its certificate; one object per client identity (HBONE session).
      peer = this.certPeers.get(cert);
      if (peer === undefined) this.certPeers.set(cert, (peer = identityOnly(cert.uri)));
    }
    conn.set(DOWNSTREAM_PEER, peer);
    return FilterStatus.Continue;
  }

  /** When `istio_headers` is a downstream method (read, then remove) or when stripping (remove). */
  onRequestHeaders(stream: StreamContext): FilterStatus {
    const h = stream.requestHeaders;
    if (!hasMx(h)) return FilterStatus.Continue;
    if (this.downHeaders) {
      const metadata = h.get(PEER_METADATA_HEADER);
      const seen = (h.get(PEER_METADATA_ID_HEADER) !== undefined ? SAW_ID : 0) | (metadata !== undefined ? SAW_METADATA : 0);
      if (seen !== 0) stream.set(REQUEST_MX, seen);
      if (metadata !== undefined && stream.conn.get(CONSULT_HEADERS) === true) {
        const peer = this.headerPeer(firstValue(metadata));
        if (peer !== undefined) stream.set(REQUEST_DOWNSTREAM_PEER, this.asClient(peer, stream.conn.info.peer.uri));
      }
    }
    removeMx(h);
    return FilterStatus.Continue;
  }

  /** Only with upstream propagation: the waypoint's own metadata. */
  onUpstreamRequest(_stream: StreamContext, headers: HeaderList): void {
    const self = this.selfMetadata();
    if (this.upMx) {
      headers.set(PEER_METADATA_HEADER, self.metadata);
      if (self.id !== '') headers.set(PEER_METADATA_ID_HEADER, self.id);
    }
    if (this.upBaggage) headers.set('baggage', self.baggage);
  }

  // ---- upstream ---------------------------------------------------------------------------

  onResponseHeaders(stream: StreamContext, headers: HeaderList): void {
    const up = this.up;
    if (up.length > 0 && stream.get(UPSTREAM_PEER) === undefined) {
      const ep = stream.endpoint;
      let peer: PeerInfo | undefined;
      for (let i = 0; i < up.length && peer === undefined; i++) {
        const m = up[i];
        if (m === WDS) peer = ep && this.upstreamWorkloadPeer(ep);
        else if (m === HEADERS) {
          const v = headers.get(PEER_METADATA_HEADER);
          peer = v === undefined ? undefined : this.headerPeer(v);
          if (peer !== undefined && ep) peer = withVerifiedIdentity(peer, verifiedIdentity(ep));
        } else peer = this.connectBaggagePeer(stream.upstreamConnectHeaders, ep);
      }
      if (peer !== undefined) stream.set(UPSTREAM_PEER, peer);
    }
    if ((this.upHeaders || this.strip) && hasMx(headers)) removeMx(headers);
    if (this.downBaggage || this.downMx) {
      const self = this.selfMetadata();
      if (this.downMx) {
        const seen = stream.get(REQUEST_MX) ?? 0;
        if ((seen & SAW_METADATA) !== 0) headers.set(PEER_METADATA_HEADER, self.metadata);
        if ((seen & SAW_ID) !== 0 && self.id !== '') headers.set(PEER_METADATA_ID_HEADER, self.id);
      }
      if (this.downBaggage) headers.set('baggage', self.baggage);
    }
  }

  onUpstreamConnected(conn: ConnectionContext): void {
    const ep = conn.endpoint;
    let peer: PeerInfo | undefined;
    for (let i = 0; i < this.up.length && peer === undefined; i++) {
      const m = this.up[i];
      if (m === WDS) peer = ep && this.upstreamWorkloadPeer(ep);
      else if (m === HEADERS) {
        // TCP has no headers: the same Struct arrives in the sidecar's `istio-peer-exchange` frame.
        peer = upstreamExchangePeerOf(conn);
        if (peer !== undefined && ep) peer = withVerifiedIdentity(peer, verifiedIdentity(ep));
      } else peer = this.connectBaggagePeer(conn.upstreamConnectHeaders, ep);
    }
    if (peer !== undefined) conn.set(TCP_UPSTREAM_PEER, peer);
  }

  // ---- methods ----------------------------------------------------------------------------

  /**
   * The workload owning the tunnel's source address in the current snapshot, when its identity is
   * the client certificate's: an east-west gateway forwarding another workload's tunnel, or a
   * client at a borrowed address, is not that workload (the next method decides).
   */
  private downstreamWorkload(conn: ConnectionContext): PeerInfo | undefined {
    const w = sourceWorkloadAt(this.env.mesh.current, conn.info.downstreamAddress, conn.info.peer.uri);
    return w && this.workloadPeer(w);
  }

  private workloadPeer(w: Workload): PeerInfo {
    let p = this.workloadPeers.get(w);
    if (p === undefined) {
      p = peerFromWorkload(w);
      this.workloadPeers.set(w, p);
    }
    return p;
  }

  /**
   * The upstream peer of `ep` from mesh state. An endpoint reached over plain TCP (tunnel protocol
   * `NONE`, `istio.io/dataplane-mode: none`) presented no certificate, so it has no principal:
   * Istio reports `destination_principal="unknown"` for it (the stats filter reads the upstream
   * peer's principal only from the verified TLS connection, istio/proxy
   * extensions/common/metadata_object.cc / Envoy
   * `upstreamSslConnection()->uriSanPeerCertificate()`), never the workload's service account.
   */
  private upstreamWorkloadPeer(ep: Endpoint): PeerInfo {
    const p = this.workloadPeer(ep.workload);
    if (ep.tunnel !== 'NONE' || p.identity === '') return p;
    let q = this.unverifiedPeers.get(p);
    if (q === undefined) this.unverifiedPeers.set(p, (q = Object.freeze({ ...p, identity: '' })));
    return q;
  }

  /** A `baggage` value's peer; undefined when absent or when it names nothing we know. */
  private baggagePeer(value: string | string[] | undefined): PeerInfo | undefined {
    if (value === undefined || value === '') return undefined;
    const p = parseBaggage(value);
    return p === undefined || describesNothing(p) ? undefined : p;
  }

  /** The peer named by the `baggage` of an upstream CONNECT answer (parsed once per CONNECT). */
  private connectBaggagePeer(h: IncomingHttpHeaders | undefined, ep: Endpoint | undefined): PeerInfo | undefined {
    if (h === undefined) return undefined;
    let p = this.connectPeers.get(h);
    if (p === undefined) {
      const found = this.baggagePeer(h.baggage);
      p = found === undefined ? null : ep ? withIdentity(found, ep.workload.identity) : found;
      this.connectPeers.set(h, p);
    }
    return p ?? undefined;
  }

  /** An `x-envoy-peer-metadata` value's peer, or undefined when it does not decode. Cached, bounded. */
  private headerPeer(value: string): PeerInfo | undefined {
    const hit = this.decoded.get(value);
    if (hit !== undefined) return hit ?? undefined;
    const r = decodePeerMetadata(value);
    const peer = r.ok ? r.peer : null;
    if (value.length <= CACHE_VALUE_CHARS) {
      if (this.decoded.size >= CACHE_ENTRIES) {
        // Drop the oldest quarter, as Envoy's MX cache does when full.
        let n = CACHE_ENTRIES / 4;
        for (const k of this.decoded.keys()) {
          this.decoded.delete(k);
          if (--n === 0) break;
        }
      }
      this.decoded.set(value, peer);
    }
    return peer ?? undefined;
  }

  /**
   * A request's header peer as the client it describes: the client proved its identity with its
   * certificate, so the metadata never claims another (as for upstream peers). Cached per decoded
   * peer, so a repeated header value costs no allocation.
   */
  private asClient(peer: PeerInfo, uri: string): PeerInfo {
    const hit = this.clientPeers.get(peer);
    if (hit !== undefined && hit.identity === uri) return hit;
    const p = withVerifiedIdentity(peer, uri || null);
    this.clientPeers.set(peer, p);
    return p;
  }

  private selfMetadata(): SelfMetadata {
    const mesh = this.env.mesh.current;
    if (mesh !== this.selfOf || this.self === undefined) {
      this.self = selfMetadata(mesh);
      this.selfOf = mesh;
    }
    return this.self;
  }
}

/** The peer with `identity` filled in when it has none. */
function withIdentity(peer: PeerInfo, identity: string): PeerInfo {
  if (peer.identity !== '' || identity === '') return peer;
  return Object.freeze({ ...peer, identity });
}

/**
 * The upstream peer with the identity the endpoint had to present (its HBONE/mTLS certificate was
 * verified against it): metadata an upstream sends about itself never overrides that. `identity`
 * null (nothing verified: a plain-TCP endpoint) clears a claimed one.
 */
function withVerifiedIdentity(peer: PeerInfo, identity: string | null): PeerInfo {
  if (identity === '' || peer.identity === (identity ?? '')) return peer;
  return Object.freeze({ ...peer, identity: identity ?? '' });
}

/**
 * The identity `ep` proved: its workload's for HBONE and sidecar endpoints (the tunnel's
 * certificate is verified against it), none for plain-TCP ones (tunnel protocol `NONE`).
 */
function verifiedIdentity(ep: Endpoint): string | null {
  return ep.tunnel === 'NONE' ? null : ep.workload.identity;
}

/** A peer known only by its certificate. */
function identityOnly(identity: string): PeerInfo {
  return Object.freeze({ ...EMPTY_PEER, identity });
}

/** True when a parsed peer has no field at all (e.g. baggage with only unknown keys). */
function describesNothing(p: PeerInfo): boolean {
  return (
    p.name === '' &&
    p.namespace === '' &&
    p.cluster === '' &&
    p.workload === '' &&
    p.service === '' &&
    p.revision === '' &&
    p.app === '' &&
    p.version === '' &&
    p.identity === '' &&
    p.region === '' &&
    p.availabilityZone === ''
  );
}

/** The first of a header's values (a sender may join several with `,`; base64 has no comma). */
function firstValue(s: string): string {
  const comma = s.indexOf(',');
  return comma === -1 ? s : s.slice(0, comma);
}

/** Whether `headers` has an `x-envoy-peer-metadata` or `-id` field (one pass over the names, by length first). */
function hasMx(headers: HeaderList): boolean {
  const raw = headers.raw;
  for (let i = 0; i < raw.length; i += 2) {
    const n = raw[i];
    if ((n.length === 21 || n.length === 24) && n.toLowerCase().startsWith(PEER_METADATA_HEADER)) return true;
  }
  return false;
}

function removeMx(headers: HeaderList): void {
  headers.remove(PEER_METADATA_HEADER);
  headers.remove(PEER_METADATA_ID_HEADER);
}
