/**
 * Chained waypoints (istio/istio#44948): which other waypoint each service uses, resolved once
 * per snapshot, so that a route of this waypoint whose backend has its own waypoint sends the
 * request to that waypoint instead of straight to the backend's pods, and the backend's own
 * policies and routes still apply.
 *
 * The binding follows istiod (istio/istio pilot/pkg/serviceregistry/ambient/waypoints.go): the service's
 * `istio.io/use-waypoint` (else its namespace's) names a Gateway of class `istio-waypoint`, which
 * must handle service traffic (`istio.io/waypoint-for` service or all, from the Gateway or its
 * GatewayClass). The waypoint is reached where istiod says (`getGatewayAddress`): the Gateway's
 * `status.addresses` (a `Hostname`: the Service of that host in the Gateway's namespace; an
 * `IPAddress`: a Service VIP or a workload), else the Service named after the Gateway, which is
 * what Istio's gateway controller creates and publishes there. Its instances are that Service's
 * healthy endpoints on port 15008 (istio/ztunnel src/state.rs `fetch_waypoint`, hboneMtlsPort 15008).
 *
 * Each chained service port then gets one endpoint per instance, as Istio builds the endpoints of a
 * service whose traffic goes to its waypoint (istio/istio
 * pilot/pkg/xds/endpoints/endpoint_builder.go `findServiceWaypoint` / `buildEnvoyLbEndpoint` with
 * `toServiceWaypoint`) and as ztunnel sends to a service waypoint (istio/ztunnel
 * src/proxy/outbound.rs `build_request`): HBONE to `instanceIP:15008`, CONNECT `:authority` the
 * service's `VIP:port`, the instance's workload identity verified.
 *
 * Not chained, reached directly: a service this waypoint serves; `use-waypoint: none` or no label;
 * a Gateway the mesh does not have (istiod reports the waypoint not ready, ztunnel goes direct);
 * a waypoint for workloads only; a service without a VIP (waypoints take VIP traffic only). A
 * waypoint Gateway that exists but cannot be reached (no address, no Service, no instance) fails
 * the requests (503 `UH`) rather than bypass the service's policies; a warning says why.
 */
import { log } from '../util/index.ts';
import { servesServices } from './attachment.ts';
import { formatHostPort, ipFamily, normalizeIp } from './ip.ts';
import { GatewaySchema } from './schemas.ts';
import type { SourceObject } from './source.ts';
import type { Endpoint, Service, ServiceWaypoint, WaypointIdentity, WaypointRef, Workload } from './types.ts';
import { parseAs } from './validate.ts';
import { waypointFor } from './waypoint.ts';

/** The HBONE port of a waypoint's instances (istiod's waypoint `GatewayAddress.hboneMtlsPort`). */
export const WAYPOINT_HBONE_PORT = 15008;

/** Services resolved between two pauses of {@link chainServiceWaypoints}. */
const PER_STEP = 256;

/** What resolving the services' waypoints needs besides the services. */
export interface ServiceWaypointContext {
  /** This waypoint (its services are never chained). */
  readonly waypoint: WaypointIdentity;
  /** Every Gateway of class `istio-waypoint` of the mesh. */
  readonly gateways: readonly SourceObject[];
  /** Labels of the `istio-waypoint` GatewayClass (its `istio.io/waypoint-for` is the Gateways' default). */
  readonly gatewayClassLabels: Readonly<Record<string, string>>;
  readonly workloads: readonly Workload[];
  /** Cluster DNS suffix (the Service named after a Gateway is `<name>.<ns>.svc.<suffix>`). */
  readonly domainSuffix: string;
}

/** A waypoint's instances: where each is dialed. */
interface Instance {
  readonly workload: Workload;
  readonly address: string;
}

/**
 * Set `viaWaypoint` on every service that goes through another waypoint (replacing its object;
 * `services` is rewritten in place, before the snapshot is built and frozen). Pauses every few
 * hundred services.
 * @throws ConfigError for a named waypoint Gateway with an invalid `istio.io/waypoint-for`.
 */
export function* chainServiceWaypoints(services: Service[], ctx: ServiceWaypointContext): Generator<void, void, void> {
  const resolver = new WaypointResolver(services, ctx);
  for (let i = 0; i < services.length; i++) {
    if ((i + 1) % PER_STEP === 0) yield;
    const s = services[i];
    const ref = s.useWaypoint;
    if (ref === undefined || s.servedByThisWaypoint) continue;
    // Named this waypoint but not served (it is for workloads only): istiod gives it no waypoint.
    if (ref.name === ctx.waypoint.name && ref.namespace === ctx.waypoint.namespace) continue;
    // A waypoint takes traffic addressed to a VIP only: a headless service is reached directly.
    const vip = s.addresses.find((a) => !a.includes('/'));
    if (vip === undefined) continue;
    const instances = resolver.instances(ref, s);
    if (instances !== undefined) services[i] = { ...s, viaWaypoint: chained(ref, s, vip, instances, WAYPOINT_HBONE_PORT) };
  }
}

/**
 * The {@link ServiceWaypoint} of `service` through waypoint `ref` reached at `reached`: the
 * waypoint's Service (its healthy endpoints on `hbonePort`) or the waypoint workload at `ip`;
 * undefined `reached` ⇒ no instance (requests fail rather than skip the waypoint). Undefined when
 * the service has no VIP: a waypoint takes traffic addressed to a VIP only, so a headless service
 * is reached directly. Also used by discovery sources that name the waypoint's address themselves
 * (istiod's WDS `Service.waypoint`, src/istiod).
 */
export function throughWaypoint(
  ref: WaypointRef,
  service: Service,
  reached: Service | Workload | undefined,
  ip?: string,
  hbonePort = WAYPOINT_HBONE_PORT,
): ServiceWaypoint | undefined {
  const vip = service.addresses.find((a) => !a.includes('/'));
  if (vip === undefined) return undefined;
  return chained(ref, service, vip, reached === undefined ? [] : instancesOf(reached, ip, hbonePort), hbonePort);
}

/** The endpoints of `service`'s ports through a waypoint's `instances`, `:authority` `vip:port`. */
function chained(ref: WaypointRef, service: Service, vip: string, instances: readonly Instance[], hbonePort: number): ServiceWaypoint {
  const family = ipFamily(vip);
  const endpoints = new Map<number, Endpoint[]>();
  for (const port of service.ports) {
    if (port.protocol === 'UDP' || endpoints.has(port.port)) continue;
    const connectAuthority = formatHostPort(vip, port.port);
    endpoints.set(
      port.port,
      instances.map((i) => {
        const address = i.workload.addresses.find((a) => ipFamily(a) === family) ?? i.address;
        return { workload: i.workload, address, targetPort: hbonePort, tunnel: 'HBONE', authority: formatHostPort(address, hbonePort), connectAuthority };
      }),
    );
  }
  return { namespace: ref.namespace, name: ref.name, endpoints };
}

/** Waypoint Gateways and their instances, looked up once per Gateway. */
class WaypointResolver {
  private readonly ctx: ServiceWaypointContext;
  private readonly gateways = new Map<string, SourceObject>();
  private readonly byHost = new Map<string, Service>();
  private readonly byVip = new Map<string, Service>();
  private readonly byIp = new Map<string, Workload>();
  /** By `ns/name`: the instances, or undefined when the service is reached directly. */
  private readonly resolved = new Map<string, readonly Instance[] | undefined>();
  private readonly warned = new Set<string>();

  constructor(services: readonly Service[], ctx: ServiceWaypointContext) {
    this.ctx = ctx;
    for (const g of ctx.gateways) if (!this.gateways.has(`${g.namespace}/${g.name}`)) this.gateways.set(`${g.namespace}/${g.name}`, g);
    for (const s of services) {
      if (!this.byHost.has(`${s.namespace}/${s.hostname}`)) this.byHost.set(`${s.namespace}/${s.hostname}`, s);
      for (const a of s.addresses) if (!this.byVip.has(a)) this.byVip.set(a, s);
    }
    for (const w of ctx.workloads) for (const a of w.addresses) if (!this.byIp.has(a)) this.byIp.set(a, w);
  }

  /** The healthy instances of waypoint `ref` (maybe none), or undefined when `service` goes direct. */
  instances(ref: WaypointRef, service: Service): readonly Instance[] | undefined {
    const key = `${ref.namespace}/${ref.name}`;
    if (this.resolved.has(key)) return this.resolved.get(key);
    const found = this.resolve(key, service);
    this.resolved.set(key, found);
    return found;
  }

  private resolve(key: string, service: Service): readonly Instance[] | undefined {
    const fields = { waypoint: key, service: `${service.namespace}/${service.hostname}` };
    const gateway = this.gateways.get(key);
    if (!gateway) {
      this.warnOnce(key, fields, `mesh: istio.io/use-waypoint names ${key}, which is not a Gateway of class istio-waypoint in the mesh: services using it are reached directly`);
      return undefined;
    }
    if (!servesServices({ waypointFor: waypointFor(gateway, this.ctx.gatewayClassLabels) })) {
      this.warnOnce(key, fields, `mesh: waypoint ${key} does not handle service traffic (istio.io/waypoint-for): services using it are reached directly`);
      return undefined;
    }
    const addresses = parseAs(GatewaySchema, gateway).status?.addresses ?? [];
    let where: string;
    let reached: Service | Workload | undefined;
    const hostname = addresses.find((a) => a.type === 'Hostname');
    const ipEntry = addresses.find((a) => (!a.type || a.type === 'IPAddress') && normalizeIp(a.value) !== undefined);
    const ip = ipEntry && normalizeIp(ipEntry.value)!;
    if (hostname) {
      where = `status.addresses hostname ${hostname.value}`;
      reached = this.byHost.get(`${gateway.namespace}/${hostname.value}`);
    } else if (ip) {
      where = `status.addresses IP ${ip}`;
      reached = this.byVip.get(ip) ?? this.byIp.get(ip);
    } else {
      const host = `${gateway.name}.${gateway.namespace}.svc.${this.ctx.domainSuffix}`;
      where = `the Service ${gateway.namespace}/${gateway.name} (no status.addresses)`;
      reached = this.byHost.get(`${gateway.namespace}/${host}`);
    }
    const instances = reached === undefined ? [] : instancesOf(reached, ip);
    if (instances.length === 0) {
      const why = reached === undefined ? `${where} is not in the mesh` : `${where} has no healthy instance on port ${WAYPOINT_HBONE_PORT}`;
      this.warnOnce(key, fields, `mesh: waypoint ${key} cannot be reached: ${why}; requests routed to services using it fail (503 UH) until it can`);
    }
    return instances;
  }

  private warnOnce(key: string, fields: Record<string, string>, message: string): void {
    if (this.warned.has(key)) return;
    this.warned.add(key);
    log.warn(fields, message);
  }
}

/** A waypoint Service's healthy endpoints on its HBONE port (15008), or the workload at the Gateway's IP. */
function instancesOf(reached: Service | Workload, ip: string | undefined, hbonePort = WAYPOINT_HBONE_PORT): Instance[] {
  if ('uid' in reached) return reached.healthy ? [{ workload: reached, address: ip ?? reached.addresses[0] }] : [];
  return (reached.endpoints.get(hbonePort) ?? []).map((ep) => ({ workload: ep.workload, address: ep.address }));
}

const NO_ENDPOINTS: readonly Endpoint[] = Object.freeze([]);

/**
 * The endpoints requests to `service`'s `port` go to: its waypoint's instances when it goes
 * through another waypoint ({@link Service.viaWaypoint}), else its own healthy endpoints. A lookup.
 */
export function upstreamEndpoints(service: Service, port: number): readonly Endpoint[] {
  return (service.viaWaypoint ?? service).endpoints.get(port) ?? NO_ENDPOINTS;
}
