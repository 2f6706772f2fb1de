/**
 * What the waypoint knows about a peer (the workload on the other end of a request): the fields of
 * istio/proxy's `WorkloadMetadataObject` (istio/proxy extensions/common/metadata_object.h), filled
 * from mesh state (WDS-equivalent lookup by IP), `x-envoy-peer-metadata` headers, or `baggage`.
 *
 * Filters share peers through the slots below: `peer-metadata` writes them, `stats`, `authz` and
 * the access log read them. Empty string = unknown (the stats filter prints `unknown` for it,
 * exactly where Istio does).
 */
import { defineSlot, type ConnectionContext, type StreamContext } from '../pipeline/index.ts';
import { normalizeIp, type MeshSnapshot, type Workload } from '../state/index.ts';

/** A peer workload; strings are '' when unknown. */
export interface PeerInfo {
  /** Pod / WorkloadEntry name (`k8s.pod.name`, `NAME`). */
  readonly name: string;
  readonly namespace: string;
  /** Cluster id (`CLUSTER_ID`, `k8s.cluster.name`). */
  readonly cluster: string;
  /** Workload (owner) name, e.g. the Deployment. */
  readonly workload: string;
  /** Workload type, lower-case: `deployment`, `pod`, `job`, `cronjob`. */
  readonly type: string;
  /** Canonical service and revision (`service.istio.io/canonical-name` / `-revision`). */
  readonly service: string;
  readonly revision: string;
  /** `app` / `version` labels as Istio's stats read them. */
  readonly app: string;
  readonly version: string;
  /** SPIFFE identity (`spiffe://td/ns/ns/sa/sa`), when known. */
  readonly identity: string;
  readonly region: string;
  readonly availabilityZone: string;
  readonly labels: Readonly<Record<string, string>>;
}

/** A peer with every field unknown (''), no labels: the base for partially known peers. */
export const EMPTY_PEER: PeerInfo = Object.freeze({
  name: '',
  namespace: '',
  cluster: '',
  workload: '',
  type: '',
  service: '',
  revision: '',
  app: '',
  version: '',
  identity: '',
  region: '',
  availabilityZone: '',
  labels: Object.freeze({}),
});

/**
 * The peer of a workload from mesh state (istio/proxy
 * source/extensions/common/workload_discovery/api.cc field mapping).
 */
export function peerFromWorkload(w: Workload): PeerInfo {
  return Object.freeze({
    name: w.name,
    namespace: w.namespace,
    cluster: w.clusterId,
    workload: w.workloadName,
    type: w.workloadType,
    service: w.canonicalName,
    revision: w.canonicalRevision,
    app: w.canonicalName,
    version: w.canonicalRevision,
    identity: w.identity,
    region: w.region,
    availabilityZone: w.zone,
    labels: w.labels,
  });
}

/** The downstream peer of a tunnel (set once per tunnel by `peer-metadata`; per request see {@link downstreamPeerOf}). */
export const DOWNSTREAM_PEER = defineSlot<PeerInfo>('downstream_peer', 'connection');
/** The upstream peer of a request (the endpoint that answered). */
export const UPSTREAM_PEER = defineSlot<PeerInfo>('upstream_peer', 'stream');
/** The upstream peer of a TCP tunnel. */
export const TCP_UPSTREAM_PEER = defineSlot<PeerInfo>('upstream_peer', 'connection');

/**
 * A request's own downstream peer, set by `peer-metadata` only when `istio_headers` discovery is
 * configured and the request's `x-envoy-peer-metadata` overrode the tunnel's peer. Read the
 * effective downstream peer of a request with {@link downstreamPeerOf}.
 */
export const REQUEST_DOWNSTREAM_PEER = defineSlot<PeerInfo>('downstream_peer', 'stream');

/** The downstream peer of one request: its own (from its headers) when set, else its tunnel's. */
export function downstreamPeerOf(stream: StreamContext): PeerInfo | undefined {
  return stream.get(REQUEST_DOWNSTREAM_PEER) ?? stream.conn.get(DOWNSTREAM_PEER);
}

/** The upstream peer a sidecar endpoint of a TCP tunnel sent over `istio-peer-exchange`, if any. */
export function upstreamExchangePeerOf(conn: ConnectionContext): PeerInfo | undefined {
  return conn.upstreamExchangePeer as PeerInfo | undefined;
}

/**
 * The workload at `address` (as the listener reports it) in `mesh`. The listener normalises
 * addresses already; an IPv4-mapped IPv6 form (`::ffff:10.0.0.1`, what a `::` listener sees) or
 * an uncompressed IPv6 is normalised here before a second lookup.
 */
export function workloadAt(mesh: MeshSnapshot, address: string): Workload | undefined {
  const w = mesh.workloadByIp(address);
  if (w !== undefined || !address.includes(':')) return w;
  const n = normalizeIp(address);
  return n === undefined || n === address ? undefined : mesh.workloadByIp(n);
}

/**
 * The source workload of a tunnel: the workload at its source `address` in `mesh`, but only when
 * that workload's identity is `identity`, the SPIFFE id of the tunnel's client certificate. The
 * address alone proves nothing: behind an east-west gateway (double HBONE) the address is the
 * gateway's and the certificate the original client's, and a client may connect from another pod's
 * address. (ztunnel and Istio's peer_metadata filter skip the address lookup only when the
 * CONNECT's `x-forwarded-network` names another network: istio/ztunnel src/proxy/inbound.rs
 * `from_gateway`, istio/proxy source/extensions/filters/http/peer_metadata/filter.cc; a gateway on
 * the same network, or a borrowed address, passes that test.) The NetworkPolicy mode pairs them the
 * same way (src/netpol/source.ts).
 */
export function sourceWorkloadAt(mesh: MeshSnapshot, address: string, identity: string): Workload | undefined {
  const w = workloadAt(mesh, address);
  return w !== undefined && identity !== '' && w.identity === identity ? w : undefined;
}
