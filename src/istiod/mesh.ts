/**
 * What istiod's WDS says, as the mesh model the file source fills (src/state/workloads.ts,
 * services.ts, service-waypoints.ts): a {@link DiscoveredMesh} whose `resolve` maps every WDS
 * `Workload` and `Service` onto `Workload` / `Service` / `Endpoint`, with ztunnel's semantics
 * (istio/ztunnel src/state/workload.rs, src/state/service.rs, src/state.rs):
 * - defaults: empty trust domain ⇒ `cluster.local`, service account ⇒ `default`, cluster ⇒
 *   `Kubernetes`; canonical name/revision as sent, else derived from the workload name;
 * - tunnel protocol `HBONE` / `NONE`, and `LEGACY_ISTIO_MTLS` (a sidecar) ⇒ `SIDECAR`;
 * - a service's endpoints are the workloads whose `services` map has its `namespace/hostname`;
 *   target port = the workload's own port for that service port, else the service's
 *   `target_port` when not 0, else the workload is no endpoint of that port; healthy workloads
 *   only unless the service's `load_balancing.health_policy` is `ALLOW_ALL`;
 * - app protocol: istiod sends HTTP11, HTTP2 or GRPC when it knows, UNKNOWN otherwise (which the
 *   waypoint then sniffs, as for an unnamed port);
 * - which waypoint: `Service.waypoint` / `Workload.waypoint` is a `GatewayAddress` naming it by
 *   hostname (namespace + the FQDN of the waypoint's Service, what istiod sends for Gateways) or
 *   by address (the VIP of that Service, or a waypoint pod's IP). It names this waypoint when it
 *   is this waypoint's Service FQDN, that Service's VIP, or this pod's IP; a service naming
 *   another waypoint goes through it (`viaWaypoint`, chained waypoints).
 * Not in the model: subject_alt_names, ip_families, visibility, weighted_waypoints, network
 * gateways (workloads without an IP are no endpoint), application tunnels, routing preferences.
 */
import { log } from '../util/index.ts';
import {
  canonicalService,
  endpointsByPort,
  normalizeIp,
  normalizeIpOrCidr,
  portProtocol,
  servesServices,
  servesWorkloads,
  throughWaypoint,
  WAYPOINT_HBONE_PORT,
  type DiscoveredMesh,
  type DiscoveryContext,
  type Service,
  type ServicePort,
  type TunnelProtocol,
  type WaypointRef,
  type Workload,
  type WorkloadType,
} from '../state/index.ts';
import { AppProtocolValue, LbHealthPolicyValue, TunnelProtocolValue, WorkloadStatusValue, WorkloadTypeValue, type GatewayAddress, type PortList, type WdsService, type WdsWorkload } from './proto-workload.ts';
import type { WdsState } from './wds-client.ts';
import { ipFromBytes } from './wds-resource.ts';

type Labels = Readonly<Record<string, string>>;

export interface WdsMeshOptions {
  /** This waypoint pod's IP(s) (`INSTANCE_IP`): a `GatewayAddress` with one of them names this waypoint. */
  readonly instanceIps?: readonly string[];
  /** This waypoint's network (`ISTIO_META_NETWORK`); a `GatewayAddress` of another network is not this waypoint. */
  readonly network?: string;
  /** A workload's labels when the caller knows them (WDS sends none): `namespace`, pod/entry `name`. */
  readonly workloadLabels?: (namespace: string, name: string) => Labels | undefined;
}

const TUNNEL: Readonly<Record<number, TunnelProtocol>> = {
  [TunnelProtocolValue.NONE]: 'NONE',
  [TunnelProtocolValue.HBONE]: 'HBONE',
  [TunnelProtocolValue.LEGACY_ISTIO_MTLS]: 'SIDECAR',
};
const WORKLOAD_TYPE: Readonly<Record<number, WorkloadType>> = {
  [WorkloadTypeValue.DEPLOYMENT]: 'deployment',
  [WorkloadTypeValue.CRONJOB]: 'cronjob',
  [WorkloadTypeValue.POD]: 'pod',
  [WorkloadTypeValue.JOB]: 'job',
};
/** WDS `AppProtocol` as a Kubernetes `appProtocol` value, which `portProtocol` reads as Istio does. */
const APP_PROTOCOL: Readonly<Record<number, string>> = {
  [AppProtocolValue.HTTP11]: 'http',
  [AppProtocolValue.HTTP2]: 'http2',
  [AppProtocolValue.GRPC]: 'grpc',
  [AppProtocolValue.TCP]: 'tcp',
  [AppProtocolValue.TLS]: 'tls',
};

/** Something holding the current WDS state: a `WdsClient`, or a fixed `{ state }`. */
export interface WdsStateSource {
  readonly state: WdsState;
}

/**
 * The {@link DiscoveredMesh} of `source`'s current state: each `resolve` maps the state of that
 * moment into new model objects (the compile freezes them).
 */
export function wdsDiscoveredMesh(source: WdsStateSource, opts: WdsMeshOptions = {}): DiscoveredMesh {
  const warned = new Set<string>();
  return { resolve: (ctx) => resolveWds(source.state, ctx, opts, warned) };
}

function resolveWds(state: WdsState, ctx: DiscoveryContext, opts: WdsMeshOptions, warned: Set<string>): { workloads: Workload[]; services: Service[] } {
  const ownHost = `${ctx.waypoint.name}.${ctx.waypoint.namespace}.svc.${ctx.domainSuffix}`;
  const own = state.services.get(`${ctx.waypoint.namespace}/${ownHost}`);
  const ownIps = new Set([...(opts.instanceIps ?? []).map((ip) => normalizeIp(ip) ?? ip), ...(own?.addresses ?? []).map((a) => ipFromBytes(a.address)!)]);
  const namesUs = (g: GatewayAddress | undefined): boolean => {
    const d = g?.destination;
    if (d?.case === 'hostname') return d.value.namespace === ctx.waypoint.namespace && d.value.hostname === ownHost;
    if (d?.case !== 'address') return false;
    if (d.value.network && opts.network && d.value.network !== opts.network) return false;
    return ownIps.has(ipFromBytes(d.value.address)!);
  };

  const origin = new Map<Workload, WdsWorkload>();
  const byService = new Map<string, Workload[]>();
  const byIp = new Map<string, Workload>();
  const workloads: Workload[] = [];
  for (const w of state.workloads.values()) {
    const model = toWorkload(w, opts, servesWorkloads(ctx.waypoint) && namesUs(w.waypoint));
    workloads.push(model);
    origin.set(model, w);
    for (const key of Object.keys(w.services)) {
      let list = byService.get(key);
      if (!list) byService.set(key, (list = []));
      list.push(model);
    }
    for (const a of model.addresses) if (!byIp.has(a)) byIp.set(a, model);
  }

  const services: Service[] = [];
  const sources: WdsService[] = [];
  const byHost = new Map<string, Service>();
  const byVip = new Map<string, Service>();
  for (const s of state.services.values()) {
    const key = `${s.namespace}/${s.hostname}`;
    const namedUs = namesUs(s.waypoint);
    const service = toService(s, byService.get(key) ?? [], (w) => origin.get(w)?.services[key], ctx, namedUs);
    services.push(service);
    sources.push(s);
    byHost.set(key, service);
    for (const a of service.addresses) if (!byVip.has(a)) byVip.set(a, service);
  }

  // Once every service exists: a service naming another waypoint goes through it.
  for (let i = 0; i < services.length; i++) {
    const s = services[i];
    const g = sources[i].waypoint;
    if (!g || namesUs(g)) continue;
    const d = g.destination;
    const ip = d.case === 'address' ? ipFromBytes(d.value.address) : undefined;
    const reached = d.case === 'hostname' ? byHost.get(`${d.value.namespace}/${d.value.hostname}`) : ip === undefined ? undefined : (byVip.get(ip) ?? byIp.get(ip));
    const ref = s.useWaypoint ?? addressRef(reached, ip!);
    const via = throughWaypoint(ref, s, reached, ip, g.hboneMtlsPort || WAYPOINT_HBONE_PORT);
    services[i] = { ...s, useWaypoint: ref, viaWaypoint: via };
    if (via === undefined) continue;
    const wp = `${ref.namespace}/${ref.name}`;
    if ([...via.endpoints.values()].every((eps) => eps.length > 0)) warned.delete(wp);
    else if (!warned.has(wp)) {
      warned.add(wp);
      log.warn({ waypoint: wp, service: `${s.namespace}/${s.hostname}` }, `WDS: waypoint ${wp} has no healthy instance; requests routed to services using it fail (503 UH) until it has`);
    }
  }
  return { workloads, services };
}

/**
 * The Gateway a waypoint named by address is: the Service at that VIP (Istio names a waypoint's
 * Service after its Gateway) or the Deployment of the workload at that IP; else the address.
 */
function addressRef(reached: Service | Workload | undefined, ip: string): WaypointRef {
  if (reached === undefined) return { namespace: '', name: ip };
  return { namespace: reached.namespace, name: 'uid' in reached ? reached.workloadName : reached.name };
}

function toWorkload(w: WdsWorkload, opts: WdsMeshOptions, servedByThisWaypoint: boolean): Workload {
  const labels = opts.workloadLabels?.(w.namespace, w.name) ?? {};
  const workloadName = w.workloadName || w.name;
  const derived = canonicalService(labels, workloadName);
  const trustDomain = w.trustDomain || 'cluster.local';
  const serviceAccount = w.serviceAccount || 'default';
  return {
    uid: w.uid,
    kind: w.uid.includes('//Pod/') ? 'Pod' : 'WorkloadEntry',
    name: w.name,
    namespace: w.namespace,
    addresses: [...new Set(w.addresses.map((a) => ipFromBytes(a)!))],
    serviceAccount,
    trustDomain,
    identity: `spiffe://${trustDomain}/ns/${w.namespace}/sa/${serviceAccount}`,
    labels,
    annotations: {},
    workloadName,
    workloadType: WORKLOAD_TYPE[w.workloadType] ?? 'deployment',
    canonicalName: w.canonicalName || derived.name,
    canonicalRevision: w.canonicalRevision || derived.revision,
    clusterId: w.clusterId || 'Kubernetes',
    network: w.network,
    node: w.node,
    region: w.locality?.region ?? '',
    zone: w.locality?.zone ?? '',
    tunnelProtocol: TUNNEL[w.tunnelProtocol] ?? 'HBONE',
    healthy: w.status === WorkloadStatusValue.HEALTHY,
    namedPorts: {},
    servedByThisWaypoint,
  };
}

function toService(
  s: WdsService,
  members: readonly Workload[],
  portsOf: (w: Workload) => PortList | undefined,
  ctx: DiscoveryContext,
  namedUs: boolean,
): Service {
  const vips = [
    ...new Set(
      s.addresses.map((a) => {
        const ip = ipFromBytes(a.address)!;
        const full = a.address.length === 4 ? 32 : 128;
        return a.length === undefined || a.length === full ? ip : (normalizeIpOrCidr(`${ip}/${a.length}`) ?? ip);
      }),
    ),
  ];
  const ports: ServicePort[] = s.ports.map((p) => {
    const appProtocol = APP_PROTOCOL[p.appProtocol] ?? '';
    return { name: '', port: p.servicePort, targetPort: p.targetPort, appProtocol, protocol: portProtocol('', appProtocol, { port: p.servicePort }) };
  });
  const targetPortOf = (w: Workload, port: ServicePort): number | undefined => {
    const own = portsOf(w)?.ports.find((p) => p.servicePort === port.port)?.targetPort;
    if (own) return own;
    return typeof port.targetPort === 'number' && port.targetPort > 0 ? port.targetPort : undefined;
  };
  const allowAll = s.loadBalancing?.healthPolicy === LbHealthPolicyValue.ALLOW_ALL;
  return {
    kind: s.hostname === `${s.name}.${s.namespace}.svc.${ctx.domainSuffix}` ? 'Service' : 'ServiceEntry',
    name: s.name,
    namespace: s.namespace,
    hostname: s.hostname,
    addresses: vips,
    ports,
    endpoints: endpointsByPort(ports, members, vips, targetPortOf, allowAll),
    servedByThisWaypoint: namedUs && servesServices(ctx.waypoint),
    useWaypoint: namedUs ? { namespace: ctx.waypoint.namespace, name: ctx.waypoint.name } : hostnameRef(s.waypoint, ctx),
    viaWaypoint: undefined,
  };
}

/**
 * The Gateway of a waypoint named by hostname: the first label of a `<name>.<ns>.svc.<suffix>`
 * hostname (Istio names the waypoint's Service after its Gateway), else the whole hostname.
 * Undefined for no waypoint, or one named by address (resolved once every service exists).
 */
function hostnameRef(g: GatewayAddress | undefined, ctx: DiscoveryContext): WaypointRef | undefined {
  const d = g?.destination;
  if (d?.case !== 'hostname') return undefined;
  const suffix = `.${d.value.namespace}.svc.${ctx.domainSuffix}`;
  const name = d.value.hostname.endsWith(suffix) ? d.value.hostname.slice(0, -suffix.length) : d.value.hostname;
  return { namespace: d.value.namespace, name };
}
