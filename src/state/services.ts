/**
 * Build {@link Service}s — Kubernetes Services and Istio ServiceEntries — with their healthy
 * endpoints per port, following istiod's ambient service builder (istio/istio
 * pilot/pkg/serviceregistry/ambient/services.go) and endpoint port semantics (istio/ztunnel
 * src/state.rs).
 */
import { servesServices, useWaypointRef } from './attachment.ts';
import { formatHostPort, ipFamily, normalizeIp, normalizeIpOrCidr } from './ip.ts';
import { parseProtocol, portProtocol } from './protocol.ts';
import { ServiceSchema, type ServiceEntryDoc } from './schemas.ts';
import type { SourceObject } from './source.ts';
import type { Endpoint, Service, ServicePort, Workload, WaypointIdentity } from './types.ts';
import { parseAs } from './validate.ts';

type Labels = Readonly<Record<string, string>>;

/** What the service builders need besides the object itself. */
export interface ServiceContext {
  readonly waypoint: WaypointIdentity;
  /** Cluster DNS suffix for `<name>.<ns>.svc.<domain>`, normally `cluster.local`. */
  readonly domainSuffix: string;
  namespaceLabels(namespace: string): Labels;
  /**
   * Pods and WorkloadEntries of a namespace that `selector` may select (at least every one it
   * selects, in file order; the builder checks every label): an index keeps a big mesh from
   * costing services × workloads.
   */
  selectable(namespace: string, selector: Labels): readonly Workload[];
}

/** Resolves one service port to a port on one workload; undefined = not an endpoint for that port. */
export type TargetPortOf = (workload: Workload, port: ServicePort) => number | undefined;

/**
 * Service from a Kubernetes `Service`. VIPs from `spec.clusterIPs` (else `spec.clusterIP`);
 * `None`/empty = headless (no VIPs). Endpoints: healthy Pods and WorkloadEntries of the same
 * namespace whose labels contain every selector entry (an empty or missing selector selects
 * nothing). Target port per endpoint:
 * - Pod: numeric `targetPort`, or the container port with that name (missing ⇒ not an endpoint);
 * - WorkloadEntry: `ports[<service port name>]`, else as above with `ports` as the named ports.
 * `targetPort` absent ⇒ the service port.
 * @throws ConfigError for bad cluster IPs, ports or labels.
 */
export function kubeService(obj: SourceObject, ctx: ServiceContext): Service {
  const svc = parseAs(ServiceSchema, obj);
  const spec = svc.spec ?? {};
  const vips: string[] = [];
  const addVip = (text: string, path: (string | number)[]) => {
    if (text === 'None' || text === '') return;
    const ip = normalizeIp(text);
    if (ip === undefined) throw obj.fail(`${JSON.stringify(text)} is not a valid IP address (or None)`, path);
    if (!vips.includes(ip)) vips.push(ip);
  };
  if (spec.clusterIPs?.length) spec.clusterIPs.forEach((ip, i) => addVip(ip, ['spec', 'clusterIPs', i]));
  else if (spec.clusterIP) addVip(spec.clusterIP, ['spec', 'clusterIP']);

  const ports: ServicePort[] = (spec.ports ?? []).map((p) => {
    const name = p.name ?? '';
    const appProtocol = p.appProtocol ?? '';
    return {
      name,
      port: p.port,
      targetPort: p.targetPort ?? p.port,
      appProtocol,
      protocol: portProtocol(name, appProtocol, { port: p.port, transport: p.protocol ?? undefined }),
    };
  });
  const labels = svc.metadata.labels ?? {};
  const selector = spec.selector ?? {};
  const selected = selectWorkloads(ctx.selectable(obj.namespace, selector), selector);
  const targetPortOf: TargetPortOf = (w, port) => {
    if (w.kind === 'WorkloadEntry' && port.name && w.namedPorts[port.name] !== undefined) return w.namedPorts[port.name];
    return typeof port.targetPort === 'number' ? port.targetPort : w.namedPorts[port.targetPort];
  };
  return {
    kind: 'Service',
    name: obj.name,
    namespace: obj.namespace,
    hostname: `${obj.name}.${obj.namespace}.svc.${ctx.domainSuffix}`,
    addresses: vips,
    ports,
    endpoints: endpointsByPort(ports, selected, vips, targetPortOf),
    ...attachment(labels, obj.namespace, ctx),
  };
}

/**
 * Service from an Istio `ServiceEntry` (already validated by the caller, who also built its inline
 * endpoint workloads). Hostname = `spec.hosts[0]`; VIPs = `spec.addresses` (IPs or CIDRs,
 * normalised); port protocol from `ports[].protocol`. Endpoints: the inline workloads plus healthy
 * Pods and WorkloadEntries of the namespace matching `spec.workloadSelector.labels` (istiod lets
 * ServiceEntries select Pods too). Target port: a WorkloadEntry's / inline endpoint's
 * `ports[<port name>]`, else `targetPort`, else the port number.
 */
export function serviceEntryService(
  obj: SourceObject,
  se: ServiceEntryDoc,
  inline: readonly Workload[],
  ctx: ServiceContext,
): Service {
  const spec = se.spec;
  const vips = [...new Set((spec.addresses ?? []).map((a) => normalizeIpOrCidr(a)!))];
  const ports: ServicePort[] = (spec.ports ?? []).map((p) => ({
    name: p.name ?? '',
    port: p.number,
    targetPort: p.targetPort ?? p.number,
    appProtocol: '',
    protocol: parseProtocol(p.protocol ?? ''),
  }));
  const selector = spec.workloadSelector?.labels ?? {};
  const selected = [...inline, ...selectWorkloads(ctx.selectable(obj.namespace, selector), selector)];
  const targetPortOf: TargetPortOf = (w, port) =>
    (w.kind === 'WorkloadEntry' && port.name ? w.namedPorts[port.name] : undefined) ??
    (typeof port.targetPort === 'number' ? port.targetPort : port.port);
  const labels = se.metadata.labels ?? {};
  return {
    kind: 'ServiceEntry',
    name: obj.name,
    namespace: obj.namespace,
    hostname: spec.hosts[0],
    addresses: vips,
    ports,
    endpoints: endpointsByPort(ports, selected, vips, targetPortOf),
    ...attachment(labels, obj.namespace, ctx),
  };
}

/**
 * Which waypoint a service uses, and whether it is this one. `viaWaypoint` (another waypoint in
 * front of the service) is resolved once every service is built (service-waypoints.ts).
 */
function attachment(labels: Labels, namespace: string, ctx: ServiceContext): Pick<Service, 'servedByThisWaypoint' | 'useWaypoint' | 'viaWaypoint'> {
  const ref = useWaypointRef(labels, namespace, ctx.namespaceLabels(namespace));
  const ours = ref !== undefined && ref.name === ctx.waypoint.name && ref.namespace === ctx.waypoint.namespace;
  return { servedByThisWaypoint: ours && servesServices(ctx.waypoint), useWaypoint: ref, viaWaypoint: undefined };
}

/** Workloads whose labels contain every selector entry; an empty selector selects nothing. */
function selectWorkloads(candidates: readonly Workload[], selector: Labels): Workload[] {
  const entries = Object.entries(selector);
  if (entries.length === 0) return [];
  return candidates.filter((w) => entries.every(([k, v]) => w.labels[k] === v));
}

/**
 * Healthy endpoints per service port (unhealthy ones too with `includeUnhealthy`: a service that
 * publishes not-ready addresses, WDS `LoadBalancing.health_policy: ALLOW_ALL`). The dialed address
 * is the workload's first address of the family of the service's first VIP (any first address
 * when the service has none or no match).
 */
export function endpointsByPort(
  ports: readonly ServicePort[],
  workloads: readonly Workload[],
  vips: readonly string[],
  targetPortOf: TargetPortOf,
  includeUnhealthy = false,
): Map<number, Endpoint[]> {
  const family = vips.length ? ipFamily(vips[0]) : undefined;
  const out = new Map<number, Endpoint[]>();
  for (const port of ports) {
    if (out.has(port.port)) continue; // same number twice (TCP + UDP): the first declaration wins
    const list: Endpoint[] = [];
    for (const w of workloads) {
      if ((!w.healthy && !includeUnhealthy) || w.addresses.length === 0) continue;
      const targetPort = targetPortOf(w, port);
      if (targetPort === undefined) continue;
      const address = w.addresses.find((a) => ipFamily(a) === family) ?? w.addresses[0];
      list.push({ workload: w, address, targetPort, tunnel: w.tunnelProtocol, authority: formatHostPort(address, targetPort) });
    }
    out.set(port.port, list);
  }
  return out;
}
