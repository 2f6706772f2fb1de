/**
 * What the waypoint says about itself when it propagates peer metadata: the PeerInfo, its
 * `x-envoy-peer-metadata` value, node id and `baggage` value, computed once per mesh snapshot.
 *
 * The description is src/peer/self-peer.ts's `waypointSelf` (the one the TCP metadata exchange
 * toward sidecars sends too), for pod name `os.hostname()` (the pod name inside Kubernetes): the
 * waypoint's own Pod when the mesh state lists it, else what Istio's generated waypoint Deployment
 * would say (workload = canonical name = the Gateway's name, type `deployment`, revision `latest`,
 * the Gateway's namespace and identity). The own Pod is also found by Istio's label
 * `gateway.networking.k8s.io/gateway-name: <Gateway name>`. The node id
 * (`x-envoy-peer-metadata-id`) needs the pod IP, which filters do not see: it is the own Pod's
 * address when the mesh lists the Pod, else there is no id (the header is left out).
 */
import os from 'node:os';
import { encodePeerMetadata, waypointSelf, type PeerInfo } from '../../src/peer/index.ts';
import type { MeshSnapshot } from '../../src/state/index.ts';

/** The label Istio puts on a waypoint's pods naming their Gateway. */
export const GATEWAY_NAME_LABEL = 'gateway.networking.k8s.io/gateway-name';

/** The waypoint's own metadata, ready to be written into headers. */
export interface SelfMetadata {
  readonly peer: PeerInfo;
  /** `x-envoy-peer-metadata` value (base64 Struct). */
  readonly metadata: string;
  /** `x-envoy-peer-metadata-id` value (Envoy node id), '' when the pod IP is unknown. */
  readonly id: string;
  /** `baggage` value, as Envoy's `WorkloadMetadataObject::baggage()`. */
  readonly baggage: string;
}

/** Stands in for the unknown pod IP when only the peer (not the node id) is wanted. */
const NO_IP = '0.0.0.0';

/** Compute the waypoint's own metadata from a snapshot (`hostname`: this pod's name). Never throws. */
export function selfMetadata(mesh: MeshSnapshot, hostname: string = os.hostname()): SelfMetadata {
  const wp = mesh.waypoint;
  const own =
    mesh.workloads.find((w) => w.kind === 'Pod' && w.namespace === wp.namespace && w.name === hostname) ??
    mesh.workloads.find((w) => w.kind === 'Pod' && w.namespace === wp.namespace && w.labels[GATEWAY_NAME_LABEL] === wp.name);
  const pod = own?.name ?? hostname;
  const ip = own?.addresses[0] ?? '';
  let peer: PeerInfo;
  let id = '';
  try {
    const self = waypointSelf(mesh, { pod: pod || wp.name, ip: ip || NO_IP });
    peer = self.peer;
    if (ip) id = self.nodeId;
  } catch {
    // A host name unusable in a node id (contains `~`): describe the Gateway without a pod name.
    peer = waypointSelf(mesh, { pod: wp.name, ip: NO_IP }).peer;
    peer = Object.freeze({ ...peer, name: '' });
  }
  return Object.freeze({ peer, metadata: encodePeerMetadata(peer), id, baggage: peerBaggage(peer) });
}

/**
 * The `baggage` value Envoy writes for a peer (istio/proxy extensions/common/metadata_object.cc
 * `WorkloadMetadataObject::baggage`): `k8s.<type>.name` (type `pod` when unknown),
 * `service.name` (else app), `app.name` when it differs, `service.version` (else version),
 * `app.version` when it differs, then `k8s.namespace.name`, `k8s.cluster.name`,
 * `k8s.instance.name`, `cloud.region`, `cloud.availability_zone`; empty values left out.
 */
export function peerBaggage(peer: PeerInfo): string {
  const parts: string[] = [];
  const add = (key: string, value: string) => {
    if (value !== '') parts.push(`${key}=${value}`);
  };
  add(`k8s.${peer.type || 'pod'}.name`, peer.workload);
  const service = peer.service || peer.app;
  add('service.name', service);
  if (peer.app !== service) add('app.name', peer.app);
  const version = peer.revision || peer.version;
  add('service.version', version);
  if (peer.version !== version) add('app.version', peer.version);
  add('k8s.namespace.name', peer.namespace);
  add('k8s.cluster.name', peer.cluster);
  add('k8s.instance.name', peer.name);
  add('cloud.region', peer.region);
  add('cloud.availability_zone', peer.availabilityZone);
  return parts.join(',');
}
