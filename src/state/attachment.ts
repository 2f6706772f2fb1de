/**
 * Ambient enrolment labels: which objects use this waypoint (istio/istio
 * pilot/pkg/serviceregistry/ambient/waypoints.go `fetchWaypointForService` /
 * `fetchWaypointForWorkload`) and whether a workload is reached over HBONE.
 */
import type { TunnelProtocol, WaypointIdentity, WaypointRef } from './types.ts';

type Labels = Readonly<Record<string, string>>;

/** On a Service, ServiceEntry, Pod, WorkloadEntry or Namespace: name of the waypoint to use, or `none`. */
export const LABEL_USE_WAYPOINT = 'istio.io/use-waypoint';
/** Namespace of the waypoint named by {@link LABEL_USE_WAYPOINT}, when not the object's own. */
export const LABEL_USE_WAYPOINT_NAMESPACE = 'istio.io/use-waypoint-namespace';
/** On the waypoint Gateway: `service` (default), `workload`, `all` or `none`. */
export const LABEL_WAYPOINT_FOR = 'istio.io/waypoint-for';
/** On a Pod, WorkloadEntry or Namespace: `ambient`, or `none` to opt out of the mesh. */
export const LABEL_DATAPLANE_MODE = 'istio.io/dataplane-mode';

/**
 * The waypoint an object asks for, as istiod reads it (istio/istio pilot/pkg/serviceregistry/ambient/
 * waypoints.go `fetchWaypointForTarget` / `GetUseWaypoint`): the object's `istio.io/use-waypoint`
 * label when it has one, else its namespace's. The waypoint namespace is the same label holder's
 * `istio.io/use-waypoint-namespace`, else the object's namespace. `none` (on the object: it opts
 * out even when the namespace opts in) and an empty value name no waypoint: undefined.
 */
export function useWaypointRef(labels: Labels, namespace: string, namespaceLabels: Labels): WaypointRef | undefined {
  const holder = labels[LABEL_USE_WAYPOINT] !== undefined ? labels : namespaceLabels;
  const name = holder[LABEL_USE_WAYPOINT];
  if (name === undefined || name === '' || name === 'none') return undefined;
  return { namespace: holder[LABEL_USE_WAYPOINT_NAMESPACE] || namespace, name };
}

/** True when the object's waypoint ({@link useWaypointRef}) is `waypoint`. */
export function usesWaypoint(
  labels: Labels,
  namespace: string,
  namespaceLabels: Labels,
  waypoint: Pick<WaypointIdentity, 'name' | 'namespace'>,
): boolean {
  const ref = useWaypointRef(labels, namespace, namespaceLabels);
  return ref !== undefined && ref.name === waypoint.name && ref.namespace === waypoint.namespace;
}

/** A waypoint with `istio.io/waypoint-for` `service` or `all` handles traffic to Service VIPs. */
export function servesServices(waypoint: Pick<WaypointIdentity, 'waypointFor'>): boolean {
  return waypoint.waypointFor === 'service' || waypoint.waypointFor === 'all';
}

/** A waypoint with `istio.io/waypoint-for` `workload` or `all` handles traffic to workload addresses. */
export function servesWorkloads(waypoint: Pick<WaypointIdentity, 'waypointFor'>): boolean {
  return waypoint.waypointFor === 'workload' || waypoint.waypointFor === 'all';
}

/** On a Pod: set by Istio's sidecar injector; its presence means the Pod runs an Istio sidecar. */
export const ANNOTATION_SIDECAR_STATUS = 'sidecar.istio.io/status';

/**
 * `SIDECAR` when the workload carries the {@link ANNOTATION_SIDECAR_STATUS} annotation, whatever its
 * labels say (its sidecar terminates Istio mTLS on the target port). Otherwise HBONE unless
 * `istio.io/dataplane-mode: none` opts the workload out: the workload's own label decides when
 * present (any other value keeps it enrolled), else its namespace's.
 */
export function tunnelProtocol(labels: Labels, namespaceLabels: Labels, annotations: Labels = {}): TunnelProtocol {
  if (annotations[ANNOTATION_SIDECAR_STATUS] !== undefined) return 'SIDECAR';
  const mode = labels[LABEL_DATAPLANE_MODE] ?? namespaceLabels[LABEL_DATAPLANE_MODE];
  return mode === 'none' ? 'NONE' : 'HBONE';
}
