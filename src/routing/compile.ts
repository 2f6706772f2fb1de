/**
 * Compile every HTTPRoute and GRPCRoute of a mesh snapshot once into immutable per-target route
 * tables (the {@link ROUTES} part of every snapshot); the router does one lookup and an ordered scan.
 *
 * Attachment, as Istio applies Gateway API routes to a waypoint (GAMMA, kubernetes-sigs/gateway-api
 * site-src/mesh/index.md; istio/istio pilot/pkg/networking/core/listener_waypoint.go
 * `buildWaypointInboundHTTPRouteConfig`):
 * - a `parentRef` naming a Service (group `""`/`core`, kind `Service`) or a `networking.istio.io`
 *   `ServiceEntry` / `Hostname` this waypoint serves attaches the route to that service, on the
 *   `port` it names (or the port named by `sectionName`), else on every port;
 * - a route in the service's namespace is a producer route and applies to every client; a route in
 *   another namespace is a consumer route and applies only to clients in the route's namespace,
 *   for whom it replaces the producer routes (a client's own namespace wins, as an Istio sidecar
 *   prefers the VirtualService of its own namespace); clients with neither get the default route;
 * - routes attached to the waypoint's own Gateway are not programmed: Istio converts them to
 *   gateway-bound VirtualServices, which a waypoint's service chains never read; they are logged
 *   at debug and ignored;
 * - several routes on one service port (for the same clients) merge into one table ordered by
 *   Gateway API precedence, ties broken by the oldest `creationTimestamp`, then namespace/name,
 *   then rule and match order (istio/istio pilot/pkg/config/kube/gateway/conversion.go
 *   `convertResources` + `sortHTTPRoutes`).
 *
 * An invalid route is ignored with its error logged (istiod's `Accepted=False`); the rest of the
 * snapshot keeps working. {@link compileRoutes} also returns the rejections.
 */
import { ConfigError, log } from '../util/index.ts';
import { definePart, locateField, type KeptResource, type MeshSnapshot, type Service, type Target } from '../state/index.ts';
import { BackendResolver } from './backends.ts';
import { comparePrecedence } from './match.ts';
import { parseRoute, type ParsedRoute } from './route-parse.ts';
import type { ParentRefDoc } from './route-schema.ts';
import type { CompiledMatch, CompiledRule, RouteTable, ServicePortRoutes } from './types.ts';

const GATEWAY_GROUP = 'gateway.networking.k8s.io';
const ISTIO_GROUP = 'networking.istio.io';

/** All compiled routing of one mesh snapshot. */
export interface CompiledRoutes {
  readonly version: number;
  /** Valid routes (attached to this waypoint or not), oldest first. */
  readonly routes: readonly string[];
  /** Routes ignored as invalid, with the reason (`ConfigError` text naming the route and field). */
  readonly rejected: readonly { readonly route: string; readonly reason: string }[];
  /** The routes of a service target, or undefined when none attach (the default route applies). One Map lookup. */
  forTarget(target: Target): ServicePortRoutes | undefined;
  /** The rules of a valid route (`HTTPRoute/<ns>/<name>`), in rule order; undefined for no such route. */
  rulesOf(route: string): readonly CompiledRule[] | undefined;
}

/** Collected routes of one service port before tables are built. */
interface PortRoutes {
  producer: ParsedRoute[];
  consumers: Map<string, ParsedRoute[]>;
}

function isRoute(r: KeptResource): boolean {
  return (r.kind === 'HTTPRoute' || r.kind === 'GRPCRoute') && r.apiVersion.startsWith(`${GATEWAY_GROUP}/`);
}

/**
 * Versions the Gateway API v1.3 CRDs serve (standard channel): HTTPRoute v1 and v1beta1, GRPCRoute
 * v1. Another version is refused, as the API server would refuse it.
 */
const SERVED_VERSIONS: Readonly<Record<string, readonly string[]>> = { HTTPRoute: ['v1', 'v1beta1'], GRPCRoute: ['v1'] };

/** Kinds of the Gateway API group (standard and experimental channels, v1.3); any other is most likely a typo. */
const GATEWAY_KINDS = new Set([
  'Gateway',
  'GatewayClass',
  'HTTPRoute',
  'GRPCRoute',
  'ReferenceGrant',
  'TLSRoute',
  'TCPRoute',
  'UDPRoute',
  'BackendTLSPolicy',
  'BackendLBPolicy',
  'XListenerSet',
  'XBackendTrafficPolicy',
  'ListenerSet',
]);

/** Warn (once per snapshot) about kept resources of the Gateway API group whose kind is not one of it (e.g. `HttpRoute`). */
function warnUnknownKinds(snapshot: MeshSnapshot): void {
  for (const kind of snapshot.kinds()) {
    if (GATEWAY_KINDS.has(kind)) continue;
    for (const r of snapshot.resources(kind)) {
      if (!r.apiVersion.startsWith(`${GATEWAY_GROUP}/`)) continue;
      log.warn(
        { resource: `${kind}/${r.namespace}/${r.name}`, apiVersion: r.apiVersion, version: snapshot.version },
        `routing: kind ${JSON.stringify(kind)} is not a kind of ${GATEWAY_GROUP}; ignored (kinds are case-sensitive: HTTPRoute, GRPCRoute, ...)`,
      );
    }
  }
}

/** Compile the routes of `snapshot` (invalid routes are logged and left out): the {@link ROUTES} part's compiler. */
export function compileRoutes(snapshot: MeshSnapshot): CompiledRoutes {
  const resolver = new BackendResolver(snapshot);
  const parsed: ParsedRoute[] = [];
  const rejected: { route: string; reason: string }[] = [];
  warnUnknownKinds(snapshot);
  for (const r of [...snapshot.resources('HTTPRoute'), ...snapshot.resources('GRPCRoute')]) {
    if (!isRoute(r)) continue;
    try {
      const version = r.apiVersion.slice(GATEWAY_GROUP.length + 1);
      const served = SERVED_VERSIONS[r.kind];
      if (!served.includes(version)) {
        throw new ConfigError(`apiVersion ${r.apiVersion} is not served for ${r.kind} (use ${served.map((v) => `${GATEWAY_GROUP}/${v}`).join(' or ')})`, locateField(r, `${r.kind}/${r.namespace}/${r.name}`, ['apiVersion']));
      }
      parsed.push(parseRoute(r, resolver));
    } catch (err) {
      const reason = (err as ConfigError).toString();
      rejected.push({ route: `${r.kind}/${r.namespace}/${r.name}`, reason });
      log.warn({ route: `${r.kind}/${r.namespace}/${r.name}`, version: snapshot.version }, `routing: route not accepted, ignored: ${reason}`);
    }
  }
  // Oldest first, then namespace/name: the order ties are broken in.
  parsed.sort((a, b) => a.created - b.created || (`${a.namespace}/${a.name}` < `${b.namespace}/${b.name}` ? -1 : `${a.namespace}/${a.name}` > `${b.namespace}/${b.name}` ? 1 : a.kind < b.kind ? -1 : 1));

  const byService = new Map<Service, Map<number, PortRoutes>>();
  for (const route of parsed) {
    for (const ref of route.parentRefs) {
      for (const [service, ports] of attachments(ref, route, snapshot)) {
        let perPort = byService.get(service);
        if (!perPort) byService.set(service, (perPort = new Map()));
        for (const port of ports) {
          let pr = perPort.get(port);
          if (!pr) perPort.set(port, (pr = { producer: [], consumers: new Map() }));
          const list = route.namespace === service.namespace ? pr.producer : getOrAdd(pr.consumers, route.namespace);
          if (!list.includes(route)) list.push(route);
        }
      }
    }
  }

  // Every match of a rule points at the same frozen rule object: its rules, deduplicated in order.
  const rules = new Map<string, readonly CompiledRule[]>();
  for (const route of parsed) rules.set(route.ref, Object.freeze([...new Set(route.matches.map((m) => m.rule))]));

  const tables = new Map<Service, Map<number, ServicePortRoutes>>();
  for (const [service, perPort] of byService) {
    const out = new Map<number, ServicePortRoutes>();
    for (const [port, pr] of perPort) {
      const consumers = new Map<string, RouteTable>();
      for (const [ns, list] of pr.consumers) consumers.set(ns, table(list));
      out.set(port, Object.freeze({ producer: pr.producer.length ? table(pr.producer) : undefined, consumers }));
    }
    tables.set(service, out);
  }

  const compiled: CompiledRoutes = Object.freeze({
    version: snapshot.version,
    routes: Object.freeze(parsed.map((r) => r.ref)),
    rejected: Object.freeze(rejected),
    forTarget: (target: Target) => (target.kind === 'service' ? tables.get(target.service)?.get(target.port.port) : undefined),
    rulesOf: (route: string) => rules.get(route),
  });
  return compiled;
}

function getOrAdd<K, V>(map: Map<K, V[]>, key: K): V[] {
  let list = map.get(key);
  if (!list) map.set(key, (list = []));
  return list;
}

/** Merge routes (already oldest first) into one table sorted by precedence (stable). */
function table(routes: readonly ParsedRoute[]): RouteTable {
  const matches: CompiledMatch[] = [];
  for (const r of routes) matches.push(...r.matches);
  matches.sort(comparePrecedence);
  return Object.freeze({ matches: Object.freeze(matches), routes: Object.freeze(routes.map((r) => r.ref)) });
}

/** The served services (and their port numbers) a parentRef attaches `route` to; empty when none here. */
function attachments(ref: ParentRefDoc, route: ParsedRoute, snapshot: MeshSnapshot): [Service, number[]][] {
  const group = ref.group ?? GATEWAY_GROUP;
  const kind = ref.kind ?? 'Gateway';
  const namespace = ref.namespace ?? route.namespace;
  let services: Service[];
  if ((group === '' || group === 'core') && kind === 'Service') {
    services = snapshot.services.filter((s) => s.kind === 'Service' && s.name === ref.name && s.namespace === namespace);
  } else if (group === ISTIO_GROUP && kind === 'ServiceEntry') {
    services = snapshot.services.filter((s) => s.kind === 'ServiceEntry' && s.name === ref.name && s.namespace === namespace);
  } else if (group === ISTIO_GROUP && kind === 'Hostname') {
    services = snapshot.services.filter((s) => s.hostname === ref.name);
  } else {
    if (group === GATEWAY_GROUP && kind === 'Gateway' && ref.name === snapshot.waypoint.name && namespace === snapshot.waypoint.namespace) {
      log.debug({ route: route.ref }, 'routing: route attached to the waypoint Gateway ignored (Istio programs waypoint routes only from Service/ServiceEntry parentRefs)');
    }
    return [];
  }
  if (services.length === 0 && kind !== 'Hostname') {
    log.warn({ route: route.ref, parentRef: `${kind}/${namespace}/${ref.name}` }, `routing: parentRef ${kind} ${namespace}/${ref.name} not found; the route is not attached to it (istiod reports the parent Accepted=False)`);
  }
  const out: [Service, number[]][] = [];
  for (const s of services) {
    let ports = s.ports.filter((p) => p.protocol !== 'UDP');
    if (ref.port !== undefined && ref.port !== null) ports = ports.filter((p) => p.port === ref.port);
    if (ref.sectionName) ports = ports.filter((p) => p.name === ref.sectionName);
    if (ports.length === 0) {
      const which = ref.sectionName ? `sectionName ${JSON.stringify(ref.sectionName)}` : `port ${ref.port}`;
      log.warn({ route: route.ref, parentRef: `${kind}/${s.namespace}/${s.name}` }, `routing: parentRef ${kind} ${s.namespace}/${s.name} has no ${which}; the route is not attached to it (Istio: Accepted=False, NoMatchingParent)`);
    }
    if (!s.servedByThisWaypoint) continue;
    if (ports.length) out.push([s, ports.map((p) => p.port)]);
  }
  return out;
}

/**
 * The routes as a compiled part of every mesh snapshot. It never refuses a snapshot: an invalid
 * route is left out and logged when the snapshot is compiled (istiod's `Accepted=False`).
 */
export const ROUTES = definePart<CompiledRoutes>('routes', { compile: compileRoutes });

/** The compiled routes of `snapshot` (its {@link ROUTES} part): a lookup. */
export function routesFor(snapshot: MeshSnapshot): CompiledRoutes {
  return snapshot.part(ROUTES);
}
