/**
 * The original client of a tunnel, as a NetworkPolicy at the destination would have seen it had
 * the waypoint not been in the path (after a waypoint, the destination sees the waypoint's
 * address instead: istio.io docs ambient/usage/networkpolicy).
 */
import type { ConnectInfo } from '../pipeline/index.ts';
import { forwardedFor, sourceWorkloadAt } from '../peer/index.ts';
import type { MeshSnapshot, Workload } from '../state/index.ts';

/** The source a NetworkPolicy is evaluated against. */
export interface OriginalSource {
  /** Normalised source IP (for `ipBlock` peers); undefined when unknown. */
  readonly ip: string | undefined;
  /** The source pod (for `podSelector` / `namespaceSelector` peers); undefined when not a known pod. */
  readonly pod: Workload | undefined;
}

/**
 * The original source of a tunnel under `snapshot`:
 * - IP: the first `for=` of ztunnel's `forwarded` CONNECT header, else the HBONE peer address
 *   (with in-pod ztunnel that is the client pod's own IP);
 * - pod: the Pod at that IP in the mesh, but only when the tunnel's mTLS identity is that pod's
 *   identity (ztunnel presents the source workload's certificate), so a client cannot borrow another
 *   pod's labels or namespace by writing its address into `forwarded`. WorkloadEntries and unknown
 *   addresses are not pods: only `ipBlock` peers can match them, as for a CNI.
 */
export function originalSource(snapshot: MeshSnapshot, info: ConnectInfo): OriginalSource {
  const ip = forwardedFor(info.forwarded) ?? (info.downstreamAddress || undefined);
  // The same rule as the telemetry's source workload (peer's sourceWorkloadAt): address and identity.
  const w = ip === undefined ? undefined : sourceWorkloadAt(snapshot, ip, info.peer.uri);
  const pod = w?.kind === 'Pod' ? w : undefined;
  return { ip, pod };
}
