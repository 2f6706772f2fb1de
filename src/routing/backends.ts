/**
 * Resolve route `backendRefs` (and mirror targets) to router targets, as Istio's waypoint reaches
 * them (istio/istio pilot/pkg/networking/core/listener_waypoint.go `getWaypointDestinationCluster`): a
 * backend this waypoint serves goes to its `inbound-vip|<port>|http|<host>` cluster, any other to
 * `outbound|<port>||<host>`; either way its endpoints are dialed directly (HBONE for mesh
 * workloads, plain TCP for non-mesh ones) on the backend's service port.
 *
 * Supported references: core `Service` (the default kind), `networking.istio.io` `ServiceEntry`
 * (by name) and `Hostname` (a service host, e.g. a ServiceEntry's). A `Service` or `ServiceEntry`
 * in another namespace needs a `ReferenceGrant` there, as Istio requires for every route
 * (istio/istio pilot/pkg/config/kube/gateway/conversion.go `BackendAllowed`). `port` is required.
 */
import type { KeptResource, MeshSnapshot, Service } from '../state/index.ts';
import { ReferenceGrantSchema, type BackendObjectRefDoc } from './route-schema.ts';
import type { ResolvedBackend } from './types.ts';

const GATEWAY_GROUP = 'gateway.networking.k8s.io';
const ISTIO_GROUP = 'networking.istio.io';

/** `''` and `core` are the same API group. */
function coreGroup(group: string | null | undefined): boolean {
  return !group || group === 'core';
}

/** Lookups over one snapshot's services and ReferenceGrants, built once per compilation. */
export class BackendResolver {
  private readonly byName = new Map<string, Service>();
  private readonly byHost = new Map<string, Service>();
  /** `<to-namespace>|<from-kind>|<from-namespace>|<to-kind>` → allowed names (`*` = all). */
  private readonly grants = new Map<string, Set<string>>();
  private readonly cache = new Map<string, ResolvedBackend>();

  constructor(snapshot: MeshSnapshot) {
    for (const s of snapshot.services) {
      const key = `${s.kind}/${s.namespace}/${s.name}`;
      if (!this.byName.has(key)) this.byName.set(key, s);
      if (!this.byHost.has(s.hostname)) this.byHost.set(s.hostname, s);
    }
    for (const r of snapshot.resources('ReferenceGrant')) this.addGrant(r);
  }

  private addGrant(r: KeptResource): void {
    if (!r.apiVersion.startsWith(`${GATEWAY_GROUP}/`)) return;
    const parsed = ReferenceGrantSchema.safeParse(r.object);
    if (!parsed.success) return; // not ours to validate; an unusable grant grants nothing
    for (const from of parsed.data.spec?.from ?? []) {
      if ((from.group ?? '') !== GATEWAY_GROUP) continue;
      for (const to of parsed.data.spec?.to ?? []) {
        const toKind = coreGroup(to.group) ? to.kind : `${to.group}/${to.kind}`;
        const key = `${r.namespace}|${from.kind}|${from.namespace}|${toKind}`;
        let names = this.grants.get(key);
        if (!names) this.grants.set(key, (names = new Set()));
        names.add(to.name ?? '*');
      }
    }
  }

  private granted(toNamespace: string, fromKind: string, fromNamespace: string, toKind: string, name: string): boolean {
    const names = this.grants.get(`${toNamespace}|${fromKind}|${fromNamespace}|${toKind}`);
    return names !== undefined && (names.has('*') || names.has(name));
  }

  /**
   * Resolve one reference made by a route of kind `routeKind` in `routeNamespace`.
   * @returns the backend, or a sentence saying why the reference is invalid.
   */
  resolve(ref: BackendObjectRefDoc, routeKind: string, routeNamespace: string): ResolvedBackend | string {
    const kind = ref.kind ?? 'Service';
    const namespace = ref.namespace ?? routeNamespace;
    let service: Service | undefined;
    let what: string;
    if (coreGroup(ref.group) && kind === 'Service') {
      what = `Service ${namespace}/${ref.name}`;
      if (namespace !== routeNamespace && !this.granted(namespace, routeKind, routeNamespace, 'Service', ref.name)) {
        return `backend ${what} is in another namespace and no ReferenceGrant in ${namespace} allows ${routeKind}s from ${routeNamespace} to refer to it`;
      }
      service = this.byName.get(`Service/${namespace}/${ref.name}`);
    } else if (ref.group === ISTIO_GROUP && kind === 'ServiceEntry') {
      what = `ServiceEntry ${namespace}/${ref.name}`;
      if (namespace !== routeNamespace && !this.granted(namespace, routeKind, routeNamespace, `${ISTIO_GROUP}/ServiceEntry`, ref.name)) {
        return `backend ${what} is in another namespace and no ReferenceGrant in ${namespace} allows ${routeKind}s from ${routeNamespace} to refer to it`;
      }
      service = this.byName.get(`ServiceEntry/${namespace}/${ref.name}`);
    } else if (ref.group === ISTIO_GROUP && kind === 'Hostname') {
      what = `host ${ref.name}`;
      service = this.byHost.get(ref.name);
    } else {
      return `backend kind ${ref.group ? `${ref.group}/` : ''}${kind} is not supported (use a Service, a networking.istio.io ServiceEntry or Hostname)`;
    }
    if (!service) return `backend ${what} not found`;
    if (ref.port === undefined || ref.port === null) return `backend ${what}: port is required`;
    const port = service.ports.find((p) => p.port === ref.port && p.protocol !== 'UDP');
    if (!port) return `backend ${what} has no port ${ref.port}`;
    const key = `${service.kind}/${service.namespace}/${service.name}|${port.port}`;
    let resolved = this.cache.get(key);
    if (!resolved) {
      const cluster = service.servedByThisWaypoint ? `inbound-vip|${port.port}|http|${service.hostname}` : `outbound|${port.port}||${service.hostname}`;
      resolved = Object.freeze({ target: Object.freeze({ kind: 'service', service, port } as const), service, port, cluster });
      this.cache.set(key, resolved);
    }
    return resolved;
  }
}
