/**
 * Compile the mesh's Kubernetes / Istio / Gateway API objects — the standalone mesh file people
 * `kubectl apply`, or the same objects as the API server serves them — into a
 * {@link MeshSnapshot}: the equivalent of what istiod would push over WDS (or what it did push,
 * `discovered`) plus the resources later stages read (policies, routes) kept as-is, and the
 * engines' compiled parts (parts.ts) given in `parts`. One compiler for both sources, so behaviour
 * never depends on where config came from. Written as a generator ({@link compileMeshStepwise})
 * so the store can compile a huge mesh in slices without stalling the traffic it serves.
 */
import { log, runNow, type Stepwise } from '../util/index.ts';
import { DEFAULT_MESH_CONFIG, parseMeshConfig } from './mesh-config.ts';
import { PartCompileError } from './parts.ts';
import { ConfigMapSchema, GatewayClassSchema, NamespaceSchema, ServiceEntrySchema } from './schemas.ts';
import { chainServiceWaypoints } from './service-waypoints.ts';
import { serviceEntryService, kubeService, type ServiceContext } from './services.ts';
import { createSnapshotStepwise } from './snapshot.ts';
import { readObjectsStepwise, readParsedObjectsStepwise, type SourceObject } from './source.ts';
import type { DiscoveredMesh, KeptResource, MeshConfig, MeshPart, MeshSnapshot, Service, Workload } from './types.ts';
import { parseAs } from './validate.ts';
import { GATEWAY_API_GROUP, type GatewaySource, isWaypointGateway, NO_WAYPOINT, selectWaypointGateway, WAYPOINT_GATEWAY_CLASS, waypointIdentity } from './waypoint.ts';
import { podWorkload, serviceEntryWorkloads, workloadEntryWorkload, type WorkloadContext } from './workloads.ts';

/** What {@link compileMesh} needs besides the objects, whichever their source. */
export interface CompileOptions {
  /** `namespace/name` of the waypoint Gateway to run as; required when there are several. */
  readonly gateway?: string;
  /**
   * Compile for a role that is not a waypoint (`waypoint inbound`, the destination ztunnel): no
   * waypoint Gateway is looked for or needed, `snapshot.waypoint` is {@link NO_WAYPOINT}.
   */
  readonly withoutWaypoint?: boolean;
  /** Explicit MeshConfig YAML; wins over the `istio` ConfigMap of the objects. */
  readonly meshConfig?: { readonly text: string; readonly file: string };
  /** Snapshot version (default 1). */
  readonly version?: number;
  /** Cluster id of every workload (default `Kubernetes`, as istiod's). */
  readonly clusterId?: string;
  /** Cluster DNS suffix for Service hostnames (default `cluster.local`). */
  readonly domainSuffix?: string;
  /** The engines' parts to compile into the snapshot, in order (see parts.ts); default none. */
  readonly parts?: readonly MeshPart<unknown>[];
  /**
   * Workloads and services from a discovery service (istiod's WDS): when given, the objects'
   * Pods, Services, ServiceEntries and WorkloadEntries are not used, and `discovered.resolve` is
   * asked once the waypoint is known. Its services come with their `viaWaypoint` resolved (WDS
   * names each service's waypoint address); chained waypoints are resolved here only for services
   * compiled from objects.
   */
  readonly discovered?: DiscoveredMesh;
}

/** The mesh as YAML text: the standalone mesh file. */
export interface MeshTextInput extends CompileOptions {
  /** The mesh YAML (multi-document, or `kind: List`). */
  readonly text: string;
  /** File name used in error messages. */
  readonly file: string;
  readonly objects?: undefined;
}

/** The mesh as objects already parsed: the API server's JSON. Errors name the object and field. */
export interface MeshObjectsInput extends CompileOptions {
  readonly objects: readonly unknown[];
  /** How messages name where the objects came from (default `the mesh objects`). */
  readonly origin?: string;
  readonly text?: undefined;
  readonly file?: undefined;
}

/** Input of {@link compileMesh}: the same compile for both sources. */
export type CompileInput = MeshTextInput | MeshObjectsInput;

const NETWORKING_ISTIO = 'networking.istio.io';

/** API groups built into Kubernetes: objects of these groups that are not compiled are skipped. */
function isBuiltInGroup(group: string): boolean {
  if (group === '' || !group.includes('.')) return true; // v1, apps, batch, policy, autoscaling
  return group.endsWith('.k8s.io') && group !== 'gateway.networking.k8s.io';
}

/**
 * Compile the mesh (YAML text or parsed objects) into a deep-frozen snapshot, with `input.parts`
 * compiled into it. The source changes only how errors are located (file:line, or the object).
 *
 * Compiled kinds: `Namespace`, `Service`, `Pod`, `ServiceEntry`, `WorkloadEntry`, Gateway API
 * `Gateway` of class `istio-waypoint`, and the `istio` ConfigMap of the root namespace (`data.mesh`).
 * Every other object of a non-built-in API group (AuthorizationPolicy, HTTPRoute, DestinationRule,
 * Istio or non-waypoint Gateways, ...) is kept as a {@link KeptResource}; all Gateway API Gateways
 * are kept too, so route code can see their listeners, and so are `networking.k8s.io`
 * NetworkPolicies (validated, as the API server does, by the NetworkPolicy part:
 * src/netpol). Other built-in kinds (Deployment, other ConfigMaps, ...) are skipped with a debug
 * log. Every Namespace gets the `kubernetes.io/metadata.name` label the API server sets.
 *
 * @throws ConfigError (with file, line, document, object and field when known) for YAML syntax
 *   errors, objects without apiVersion/kind/metadata.name, duplicate objects, invalid fields
 *   (IPs, ports, labels, ...), a missing or ambiguous waypoint Gateway (unless `withoutWaypoint`),
 *   and whatever a part refuses (an invalid AuthorizationPolicy, NetworkPolicy, ...).
 */
export function compileMesh(input: CompileInput): MeshSnapshot {
  try {
    return runNow(compileMeshStepwise(input));
  } catch (err) {
    throw err instanceof PartCompileError ? err.cause : err;
  }
}

/**
 * {@link compileMesh}, pausing after each YAML document, each object and each part (run it with
 * `runInSlices`). A part's error is thrown as a {@link PartCompileError} (its refusal reason).
 */
export function* compileMeshStepwise(input: CompileInput): Stepwise<MeshSnapshot> {
  const objects = input.objects ? yield* readParsedObjectsStepwise(input.objects) : yield* readObjectsStepwise(input.text, input.file);
  const source: GatewaySource = input.objects ? { name: input.origin ?? 'the mesh objects' } : { file: input.file, name: input.file };
  rejectDuplicates(objects);

  const byKindIndex = new Map<string, SourceObject[]>();
  for (const o of objects) {
    const key = `${o.group}/${o.kind}`;
    let list = byKindIndex.get(key);
    if (!list) byKindIndex.set(key, (list = []));
    list.push(o);
  }
  const byKind = (group: string, kind: string) => byKindIndex.get(`${group}/${kind}`) ?? [];
  const meshConfig = resolveMeshConfig(input, byKind('', 'ConfigMap'));
  const trustDomain = meshConfig.trustDomain;

  const namespaces = new Map<string, Readonly<Record<string, string>>>();
  // The API server labels every namespace with its name (`kubernetes.io/metadata.name`, KEP-2161;
  // NetworkPolicy `namespaceSelector`s select by it), overriding any value written in the object.
  for (const ns of byKind('', 'Namespace')) {
    namespaces.set(ns.name, { ...(parseAs(NamespaceSchema, ns).metadata.labels ?? {}), [NAMESPACE_NAME_LABEL]: ns.name });
  }
  const namespaceLabels = (name: string) => namespaces.get(name) ?? {};

  const gateways = objects.filter(isWaypointGateway);
  const gatewayClass = byKind(GATEWAY_API_GROUP, 'GatewayClass').find((o) => o.name === WAYPOINT_GATEWAY_CLASS);
  const gatewayClassLabels = gatewayClass ? (parseAs(GatewayClassSchema, gatewayClass).metadata.labels ?? {}) : {};
  const waypoint = input.withoutWaypoint
    ? NO_WAYPOINT
    : waypointIdentity(selectWaypointGateway(gateways, input.gateway, source), trustDomain, gatewayClassLabels);

  const clusterId = input.clusterId || 'Kubernetes';
  const domainSuffix = input.domainSuffix || 'cluster.local';
  let workloads: Workload[];
  let services: Service[];
  if (input.discovered) {
    const found = input.discovered.resolve({ waypoint, trustDomain, domainSuffix, clusterId, namespaceLabels });
    workloads = [...found.workloads];
    services = [...found.services];
  } else {
    const wctx: WorkloadContext = { clusterId, trustDomain, waypoint, namespaceLabels };
    ({ workloads, services } = yield* compileWorkloadsAndServices(byKind, wctx, { waypoint, domainSuffix, namespaceLabels }));
    // Once every service exists: a waypoint's instances are the endpoints of its own Service. A role
    // that is no waypoint (the inbound role) never sends to another waypoint: nothing to chain or warn about.
    if (!input.withoutWaypoint) yield* chainServiceWaypoints(services, { waypoint, gateways, gatewayClassLabels, workloads, domainSuffix });
  }

  return yield* createSnapshotStepwise(
    {
      version: input.version ?? 1,
      meshConfig,
      waypoint,
      services,
      workloads,
      namespaces,
      kept: keptResources(objects, meshConfig),
    },
    input.parts,
  );
}

/** Workloads (Pods, WorkloadEntries, ServiceEntry endpoints) and services (Services, ServiceEntries) of the objects. */
function* compileWorkloadsAndServices(
  byKind: (group: string, kind: string) => readonly SourceObject[],
  wctx: WorkloadContext,
  sctx: Omit<ServiceContext, 'selectable'>,
): Stepwise<{ workloads: Workload[]; services: Service[] }> {
  const workloads: Workload[] = [];
  for (const o of byKind('', 'Pod')) {
    const w = podWorkload(o, wctx);
    if (w) workloads.push(w);
    yield;
  }
  for (const o of byKind(NETWORKING_ISTIO, 'WorkloadEntry')) {
    workloads.push(workloadEntryWorkload(o, wctx));
    yield;
  }

  const selectable = new SelectorIndex(workloads);
  const ctx: ServiceContext = { ...sctx, selectable: (ns, selector) => selectable.candidates(ns, selector) };
  const services: Service[] = [];
  for (const o of byKind('', 'Service')) {
    services.push(kubeService(o, ctx));
    yield;
  }
  for (const o of byKind(NETWORKING_ISTIO, 'ServiceEntry')) {
    const se = parseAs(ServiceEntrySchema, o);
    const inline = serviceEntryWorkloads(o, se, wctx);
    workloads.push(...inline);
    services.push(serviceEntryService(o, se, inline, ctx));
    yield;
  }
  return { workloads, services };
}

/** Same group, kind, namespace and name twice ⇒ ConfigError pointing at the second one. */
function rejectDuplicates(objects: readonly SourceObject[]): void {
  const seen = new Map<string, SourceObject>();
  for (const o of objects) {
    const key = `${o.group}/${o.ref}`;
    const first = seen.get(key);
    if (first) {
      const at = first.locate();
      throw o.fail(first.fromFile ? `duplicate ${o.ref}: already defined in document ${at.document} (line ${at.line})` : `duplicate ${o.ref}`, ['metadata', 'name']);
    }
    seen.set(key, o);
  }
}

/**
 * Explicit `meshConfig` input, else `data.mesh` of the ConfigMap `istio` in the root namespace
 * (`istio-system`), else the defaults.
 */
function resolveMeshConfig(input: CompileInput, configMaps: readonly SourceObject[]): MeshConfig {
  if (input.meshConfig) return parseMeshConfig(input.meshConfig.text, { file: input.meshConfig.file });
  const root = DEFAULT_MESH_CONFIG.rootNamespace;
  const cm = configMaps.find((o) => o.name === 'istio' && o.namespace === root);
  if (!cm) return DEFAULT_MESH_CONFIG;
  const mesh = parseAs(ConfigMapSchema, cm).data?.mesh;
  if (mesh === undefined) return DEFAULT_MESH_CONFIG;
  return parseMeshConfig(mesh, {
    file: cm.file,
    line: cm.embeddedBaseLine(['data', 'mesh']),
    document: cm.document,
    object: cm.ref,
    field: 'data.mesh',
  });
}

/** `kubernetes.io/metadata.name`: the label the API server puts on every namespace. */
const NAMESPACE_NAME_LABEL = 'kubernetes.io/metadata.name';

/**
 * Workloads by namespace and by `label=value`, so a selector's candidates are the workloads
 * carrying one of its labels (the rarest), not the whole namespace: a mesh of S services and P
 * pods costs about S + P label checks instead of S × P.
 */
class SelectorIndex {
  readonly #byLabel = new Map<string, Map<string, Workload[]>>();

  constructor(workloads: readonly Workload[]) {
    for (const w of workloads) {
      let ns = this.#byLabel.get(w.namespace);
      if (!ns) this.#byLabel.set(w.namespace, (ns = new Map()));
      for (const [k, v] of Object.entries(w.labels)) {
        const key = `${k}\u0000${v}`;
        let list = ns.get(key);
        if (!list) ns.set(key, (list = []));
        list.push(w);
      }
    }
  }

  /** Workloads of `namespace` that carry the least common label of `selector` (file order); none for an empty selector. */
  candidates(namespace: string, selector: Readonly<Record<string, string>>): readonly Workload[] {
    const ns = this.#byLabel.get(namespace);
    let best: readonly Workload[] | undefined;
    for (const [k, v] of Object.entries(selector)) {
      const list = ns?.get(`${k}\u0000${v}`);
      if (!list) return [];
      if (!best || list.length < best.length) best = list;
    }
    return best ?? [];
  }
}

const COMPILED_CORE = new Set(['Namespace', 'Service', 'Pod']);
const COMPILED_ISTIO = new Set(['ServiceEntry', 'WorkloadEntry']);

/** Objects later stages read, in file order; logs (debug) the built-in kinds it skips. */
function keptResources(objects: readonly SourceObject[], meshConfig: MeshConfig): KeptResource[] {
  const kept: KeptResource[] = [];
  for (const o of objects) {
    if (o.group === '' && COMPILED_CORE.has(o.kind)) continue;
    if (o.group === NETWORKING_ISTIO && COMPILED_ISTIO.has(o.kind)) continue;
    if (o.group === '' && o.kind === 'ConfigMap' && o.name === 'istio' && o.namespace === meshConfig.rootNamespace) continue;
    // NetworkPolicies are kept for the NetworkPolicy part (src/netpol), which validates them.
    if (isBuiltInGroup(o.group) && !(o.group === 'networking.k8s.io' && o.kind === 'NetworkPolicy')) {
      log.debug({ file: o.file, document: o.document, object: o.ref, apiVersion: o.apiVersion }, 'mesh: skipping unsupported kind');
      continue;
    }
    const resource: KeptResource = { apiVersion: o.apiVersion, kind: o.kind, name: o.name, namespace: o.namespace, object: o.body };
    // Not from a file, a resource is located by its ref and field alone (KeptResource.locate).
    kept.push(o.fromFile ? { ...resource, locate: (path) => o.locate(path) } : resource);
  }
  return kept;
}
