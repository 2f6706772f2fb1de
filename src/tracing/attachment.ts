/**
 * Which Telemetry resources apply to the traffic of one served service on this waypoint, in the
 * order later ones override earlier ones, as istiod computes it for a waypoint (istio/istio
 * pilot/pkg/model/telemetry.go `applicableTelemetries`, pilot/pkg/model/policyattachment.go
 * `ShouldAttachPolicy`):
 *
 * 1. the root namespace's namespace-wide Telemetry (no `selector`, no `targetRefs`; the oldest
 *    when there are several: creationTimestamp, then name);
 * 2. the waypoint's namespace's namespace-wide Telemetry (unless it is the root namespace);
 * 3. for a service in another namespace, that namespace's namespace-wide Telemetry;
 * 4. the Telemetries of the service's namespace (the waypoint's for a service in the waypoint's
 *    namespace, and for workload-addressed traffic) with `targetRefs` naming the service
 *    (`Service`, or `networking.istio.io/ServiceEntry`, from the service's namespace), this
 *    waypoint's `Gateway` (from the waypoint's namespace), or the `istio-waypoint`
 *    `GatewayClass` (from the root namespace), in creation order.
 *
 * `selector` Telemetries never apply to a waypoint (istiod: "waypoints never use selector"), and,
 * as in istiod, a Telemetry targeting the Gateway is read only for services of the waypoint's own
 * namespace (step 4 looks in the service's namespace).
 */
import type { Service, WaypointIdentity } from '../state/index.ts';
import type { Telemetry, TelemetryTargetRef } from './telemetry-schema.ts';

const GATEWAY_API = 'gateway.networking.k8s.io';
const NETWORKING_ISTIO = 'networking.istio.io';
/** Istio's `constants.WaypointGatewayClassName`. */
const WAYPOINT_CLASS = 'istio-waypoint';

/** The Telemetries of a mesh by namespace, creation-ordered, with the namespace-wide one of each. */
export class TelemetryIndex {
  private readonly byNamespace = new Map<string, Telemetry[]>();

  constructor(all: readonly Telemetry[]) {
    const sorted = [...all].sort((a, b) => cmp(a.created, b.created) || cmp(a.name, b.name) || cmp(a.namespace, b.namespace));
    for (const t of sorted) {
      let list = this.byNamespace.get(t.namespace);
      if (!list) this.byNamespace.set(t.namespace, (list = []));
      list.push(t);
    }
  }

  /** The namespace-wide Telemetry of `namespace` (the oldest), if any. */
  namespaceWide(namespace: string): Telemetry | undefined {
    return this.byNamespace.get(namespace)?.find((t) => !t.hasSelector && t.targetRefs.length === 0);
  }

  /**
   * The Telemetries that apply to `service` (undefined: workload-addressed traffic) on `waypoint`,
   * earliest first.
   */
  applicable(service: Service | undefined, waypoint: WaypointIdentity, rootNamespace: string): Telemetry[] {
    const out: Telemetry[] = [];
    const add = (t: Telemetry | undefined) => {
      if (t) out.push(t);
    };
    add(this.namespaceWide(rootNamespace));
    let namespace = waypoint.namespace;
    if (namespace !== rootNamespace) add(this.namespaceWide(namespace));
    if (service && service.namespace !== namespace) {
      namespace = service.namespace;
      add(this.namespaceWide(namespace));
    }
    for (const t of this.byNamespace.get(namespace) ?? []) {
      if (t.targetRefs.length === 0) continue; // namespace-wide (done above) or selector (never a waypoint's)
      if (t.targetRefs.some((ref) => attaches(ref, t, service, waypoint, rootNamespace))) out.push(t);
    }
    return out;
  }
}

function cmp(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}

/** `ShouldAttachPolicy` for one target reference of a waypoint's Telemetry. */
function attaches(ref: TelemetryTargetRef, t: Telemetry, service: Service | undefined, waypoint: WaypointIdentity, rootNamespace: string): boolean {
  const group = ref.group === 'core' ? '' : ref.group;
  if (service && t.namespace === service.namespace && ref.name === service.name) {
    if (group === '' && ref.kind === 'Service' && service.kind === 'Service') return true;
    if (group === NETWORKING_ISTIO && ref.kind === 'ServiceEntry' && service.kind === 'ServiceEntry') return true;
  }
  if (group === GATEWAY_API && ref.kind === 'GatewayClass' && ref.name === WAYPOINT_CLASS && t.namespace === rootNamespace) return true;
  if (t.namespace !== waypoint.namespace) return false;
  if (ref.namespace !== '' && ref.namespace !== waypoint.namespace) return false;
  return group === GATEWAY_API && ref.kind === 'Gateway' && ref.name === waypoint.name;
}
