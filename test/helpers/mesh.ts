/**
 * Typed builders for the mesh YAML tests feed the waypoint (Kubernetes and Istio objects in one
 * file): Namespace, Service with its ports, Pod with labels / service account / IP, the waypoint
 * Gateway, the `istio` MeshConfig ConfigMap, policies and routes. Each builder returns the object;
 * {@link meshText} writes a YAML stream of objects and documents given as text (kept verbatim, for
 * tests whose subject is the text itself, e.g. file:line error messages).
 *
 *   meshText(
 *     waypointGateway('demo'),
 *     namespace('demo', { [USE_WAYPOINT]: 'waypoint' }),
 *     service({ name: 'web', namespace: 'demo', vip: '127.0.9.100', ports: [{ name: 'http', port: 80, targetPort: 8080 }] }),
 *     pod({ name: 'web-1', namespace: 'demo', labels: { app: 'web' }, ip: '127.0.9.11' }),
 *   )
 */
import { parse, stringify } from 'yaml';
import { compileMesh } from '../../src/state/compile.ts';
import type { MeshSnapshot } from '../../src/state/types.ts';

/** One Kubernetes / Istio object. */
export type Doc = Record<string, unknown>;

/** Istio's ambient labels (https://istio.io/latest/docs/ambient/usage/waypoint/). */
export const USE_WAYPOINT = 'istio.io/use-waypoint';
export const USE_WAYPOINT_NAMESPACE = 'istio.io/use-waypoint-namespace';
export const WAYPOINT_FOR = 'istio.io/waypoint-for';
export const DATAPLANE_MODE = 'istio.io/dataplane-mode';

/** Labels of a namespace whose Services use `<waypointNamespace>/waypoint` and whose pods are out of the mesh (plain TCP endpoints). */
export function usesWaypoint(opts: { waypoint?: string; waypointNamespace?: string; outOfMesh?: boolean } = {}): Record<string, string> {
  const labels: Record<string, string> = { [USE_WAYPOINT]: opts.waypoint ?? 'waypoint' };
  if (opts.waypointNamespace) labels[USE_WAYPOINT_NAMESPACE] = opts.waypointNamespace;
  if (opts.outOfMesh) labels[DATAPLANE_MODE] = 'none';
  return labels;
}

const meta = (name: string, namespace?: string, labels?: Record<string, string>, annotations?: Record<string, string>): Doc => ({
  name,
  ...(namespace !== undefined ? { namespace } : {}),
  ...(labels && Object.keys(labels).length > 0 ? { labels } : {}),
  ...(annotations ? { annotations } : {}),
});

/** A Namespace. */
export function namespace(name: string, labels?: Record<string, string>): Doc {
  return { apiVersion: 'v1', kind: 'Namespace', metadata: meta(name, undefined, labels) };
}

/** One Service port (Kubernetes `ServicePort`). */
export interface ServicePortSpec {
  readonly name?: string;
  readonly port: number;
  /** A number, or a container port name. Omitted: the port itself. */
  readonly targetPort?: number | string;
  readonly appProtocol?: string;
  readonly protocol?: string;
}

/** Service port `port` named `name` to `targetPort` (default: the same port). */
export const servicePort = (name: string, port: number, targetPort: number | string = port): ServicePortSpec => ({ name, port, targetPort });

export interface ServiceSpec {
  readonly name: string;
  readonly namespace?: string;
  /** `spec.clusterIP` (omitted: a Service without a VIP). */
  readonly vip?: string;
  /** `spec.selector` (default `{ app: <name> }`). */
  readonly selector?: Record<string, string>;
  readonly ports: readonly ServicePortSpec[];
  readonly labels?: Record<string, string>;
}

/** A Service (namespace `default` unless given). */
export function service(s: ServiceSpec): Doc {
  return {
    apiVersion: 'v1',
    kind: 'Service',
    metadata: meta(s.name, s.namespace ?? 'default', s.labels),
    spec: {
      ...(s.vip !== undefined ? { clusterIP: s.vip } : {}),
      selector: s.selector ?? { app: s.name },
      ports: s.ports.map((p) => ({ ...p })),
    },
  };
}

export interface PodSpec {
  readonly name: string;
  readonly namespace?: string;
  readonly labels?: Record<string, string>;
  readonly annotations?: Record<string, string>;
  /** `spec.serviceAccountName` (omitted: none). */
  readonly sa?: string;
  /** `status.podIP`. */
  readonly ip: string;
  /** Named container ports (`name: containerPort`), for Services whose targetPort is a name. */
  readonly ports?: Readonly<Record<string, number>>;
}

/** A Pod (namespace `default` unless given). */
export function pod(p: PodSpec): Doc {
  const spec: Doc = {};
  if (p.sa !== undefined) spec.serviceAccountName = p.sa;
  if (p.ports) spec.containers = [{ name: 'app', ports: Object.entries(p.ports).map(([name, containerPort]) => ({ name, containerPort })) }];
  return {
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: meta(p.name, p.namespace ?? 'default', p.labels, p.annotations),
    spec,
    status: { podIP: p.ip },
  };
}

/** The waypoint Gateway `<namespace>/<name>` (class istio-waypoint, HBONE listener on 15008); `for` sets `istio.io/waypoint-for`. */
export function waypointGateway(ns: string, opts: { name?: string; for?: 'service' | 'workload' | 'all' | 'none' } = {}): Doc {
  return {
    apiVersion: 'gateway.networking.k8s.io/v1',
    kind: 'Gateway',
    metadata: meta(opts.name ?? 'waypoint', ns, opts.for ? { [WAYPOINT_FOR]: opts.for } : undefined),
    spec: { gatewayClassName: 'istio-waypoint', listeners: [{ name: 'mesh', port: 15008, protocol: 'HBONE' }] },
  };
}

/** The `istio-system/istio` ConfigMap carrying MeshConfig (`data.mesh`): an object, or YAML text as written. */
export function meshConfig(config: object | string): Doc {
  return {
    apiVersion: 'v1',
    kind: 'ConfigMap',
    metadata: meta('istio', 'istio-system'),
    data: { mesh: typeof config === 'string' ? config : stringify(config) },
  };
}

/** A `telemetry.istio.io/v1` Telemetry; `spec` an object or YAML text. */
export function telemetry(name: string, ns: string, spec: object | string, opts: { created?: string } = {}): Doc {
  const metadata = { ...meta(name, ns), ...(opts.created ? { creationTimestamp: opts.created } : {}) };
  return { apiVersion: 'telemetry.istio.io/v1', kind: 'Telemetry', metadata, spec: specOf(spec) };
}

/** `spec` given as an object, or as YAML text (written at the left margin). */
const specOf = (spec: object | string): unknown => (typeof spec === 'string' ? parse(spec) : spec);

/** An AuthorizationPolicy (namespace `foo` unless given). */
export function authorizationPolicy(name: string, spec: object | string, opts: { namespace?: string; annotations?: Record<string, string> } = {}): Doc {
  return { apiVersion: 'security.istio.io/v1', kind: 'AuthorizationPolicy', metadata: meta(name, opts.namespace ?? 'foo', undefined, opts.annotations), spec: specOf(spec) };
}

/** `targetRefs` to Service `name`. */
export const toService = (name: string) => [{ kind: 'Service', group: '', name }];
/** `targetRefs` to the Gateway `name` (the waypoint). */
export const toGateway = (name = 'waypoint') => [{ group: 'gateway.networking.k8s.io', kind: 'Gateway', name }];

/** A NetworkPolicy. */
export function networkPolicy(name: string, ns: string, spec: object | string): Doc {
  return { apiVersion: 'networking.k8s.io/v1', kind: 'NetworkPolicy', metadata: meta(name, ns), spec: specOf(spec) };
}

/** An HTTPRoute (or `kind`: GRPCRoute) whose `spec` is given whole. */
export function route(name: string, ns: string, spec: object | string, opts: { kind?: 'HTTPRoute' | 'GRPCRoute'; labels?: Record<string, string> } = {}): Doc {
  return { apiVersion: 'gateway.networking.k8s.io/v1', kind: opts.kind ?? 'HTTPRoute', metadata: meta(name, ns, opts.labels), spec: specOf(spec) };
}

/** A WaypointFilter (`extensions.node-waypoint.dev/v1alpha1`; namespace `foo` unless given) whose `spec` is given whole. */
export function waypointFilter(name: string, spec: object | string, ns = 'foo'): Doc {
  return { apiVersion: 'extensions.node-waypoint.dev/v1alpha1', kind: 'WaypointFilter', metadata: meta(name, ns), spec: specOf(spec) };
}

/** `parentRefs` to Service `<ns>/<name>` port `port`. */
export const parentService = (name: string, ns: string, port: number) => [{ group: '', kind: 'Service', name, namespace: ns, port }];

/** A YAML stream of `docs`: objects are written as YAML, text is kept as written. */
export function meshText(...docs: readonly (object | string)[]): string {
  return docs.map((d) => (typeof d === 'string' ? (d.endsWith('\n') ? d : `${d}\n`) : stringify(d, { lineWidth: 0 }))).join('---\n');
}

/** Compile `docs` into a mesh snapshot (file name `test-mesh.yaml` in errors). */
export function snapshotOf(...docs: readonly (object | string)[]): MeshSnapshot {
  return compileMesh({ text: meshText(...docs), file: 'test-mesh.yaml' });
}

/** A waypoint Gateway `shop/waypoint` and the namespace `shop` using it, as mesh YAML text (store tests edit files by text). */
export const SHOP_WAYPOINT_YAML = `apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: waypoint, namespace: shop}
spec: {gatewayClassName: istio-waypoint}
---
apiVersion: v1
kind: Namespace
metadata: {name: shop, labels: {istio.io/use-waypoint: waypoint}}
`;

/** The Service `shop/reviews` (port 9080) at `ip`, as a YAML document to append to {@link SHOP_WAYPOINT_YAML}. */
export const reviewsServiceYaml = (ip: string) => `---
apiVersion: v1
kind: Service
metadata: {name: reviews, namespace: shop}
spec: {clusterIP: ${ip}, ports: [{name: http, port: 9080}]}
`;
