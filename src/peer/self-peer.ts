/**
 * The waypoint's own peer description: what it sends about itself where Istio's proxies exchange
 * metadata (the `istio-peer-exchange` frame toward sidecars). An Envoy waypoint describes itself
 * from its node metadata, which istiod's waypoint template fills (istio/istio
 * manifests/charts/istio-control/istio-discovery/files/waypoint.yaml): pod name, the Gateway's
 * namespace, workload = Deployment = Gateway name, canonical name = Gateway name, revision
 * `latest`, and the pod labels below.
 */
import type { MeshSnapshot } from '../state/index.ts';
import { peerFromWorkload, type PeerInfo } from './peer-info.ts';
import { nodeId } from './peer-metadata-header.ts';

/** What {@link waypointSelf} needs besides the mesh: this process's pod name and source IP. */
export interface SelfParts {
  /** Pod name (`os.hostname()` inside Kubernetes). */
  readonly pod: string;
  /** The waypoint's own IP (the local address of the upstream connection), unbracketed. */
  readonly ip: string;
}

/** The waypoint's PeerInfo and Envoy node id (`waypoint~<ip>~<pod>.<ns>~<ns>.svc.cluster.local`). */
export interface SelfPeer {
  readonly peer: PeerInfo;
  readonly nodeId: string;
}

/**
 * Describe this waypoint. When the mesh state holds a Pod named `parts.pod` in the Gateway's
 * namespace (the waypoint's own Pod), it is described from that workload; otherwise from the
 * Gateway as Istio's generated Deployment would be: labels `gateway.networking.k8s.io/gateway-name`,
 * `istio.io/dataplane-mode: none`, `service.istio.io/canonical-name` (Gateway name) and
 * `service.istio.io/canonical-revision: latest`; type `deployment`; cluster of the mesh's
 * workloads (`Kubernetes` when there are none). Throws `TypeError` (from {@link nodeId}) for an
 * empty pod name or IP, or one containing `~`.
 */
export function waypointSelf(mesh: MeshSnapshot, parts: SelfParts): SelfPeer {
  const gw = mesh.waypoint;
  const id = nodeId({ ip: parts.ip, pod: parts.pod, namespace: gw.namespace });
  const own = mesh.workloads.find((w) => w.kind === 'Pod' && w.name === parts.pod && w.namespace === gw.namespace);
  if (own) return { peer: peerFromWorkload(own), nodeId: id };
  const labels = Object.freeze({
    'gateway.networking.k8s.io/gateway-name': gw.name,
    'istio.io/dataplane-mode': 'none',
    'service.istio.io/canonical-name': gw.name,
    'service.istio.io/canonical-revision': 'latest',
  });
  const peer: PeerInfo = Object.freeze({
    name: parts.pod,
    namespace: gw.namespace,
    cluster: mesh.workloads[0]?.clusterId ?? 'Kubernetes',
    workload: gw.name,
    type: 'deployment',
    service: gw.name,
    revision: 'latest',
    app: gw.name,
    version: 'latest',
    identity: gw.identity,
    region: '',
    availabilityZone: '',
    labels,
  });
  return { peer, nodeId: id };
}
