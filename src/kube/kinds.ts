/**
 * What the waypoint reads from the Kubernetes API, as one table: the watchers are started from it,
 * and the least-privilege RBAC (docs, deploy manifests) is rendered from it, so the two cannot
 * drift apart.
 */

/** One kind the waypoint lists and watches. */
export interface WatchedKind {
  /** API group (`''` for the core group). */
  readonly group: string;
  readonly version: string;
  /** The resource name in URLs and RBAC rules (`authorizationpolicies`). */
  readonly plural: string;
  readonly kind: string;
  readonly namespaced: boolean;
  /**
   * Installed by a CustomResourceDefinition (Istio, Gateway API): a cluster without it answers 404,
   * and the kind is then treated as empty (see watcher.ts) instead of blocking readiness.
   */
  readonly crd: boolean;
  /** Watched in this namespace only; otherwise across all namespaces. */
  readonly namespace?: string;
  /** Only the object of this name (a `metadata.name` field selector; RBAC `resourceNames`). */
  readonly name?: string;
  /** What the waypoint reads it for (docs). */
  readonly why: string;
}

/** Istio's root namespace, where the `istio` ConfigMap (MeshConfig) lives. */
export const ISTIO_ROOT_NAMESPACE = 'istio-system';

/**
 * The kinds the waypoint watches. Pods, Services, ServiceEntries and WorkloadEntries reach the
 * mesh from istiod (WDS), which already merged them; ServiceEntries and WorkloadEntries are
 * watched too, for a compile without WDS (the same objects a mesh file holds).
 */
export const WATCHED_KINDS: readonly WatchedKind[] = Object.freeze([
  crd('security.istio.io', 'v1', 'authorizationpolicies', 'AuthorizationPolicy', 'ALLOW/DENY/AUDIT/CUSTOM rules this waypoint enforces'),
  crd('security.istio.io', 'v1', 'requestauthentications', 'RequestAuthentication', 'JWT validation'),
  crd('security.istio.io', 'v1', 'peerauthentications', 'PeerAuthentication', 'mTLS mode of the destination ztunnel'),
  crd('telemetry.istio.io', 'v1', 'telemetries', 'Telemetry', 'tracing, access logging and metrics settings'),
  crd('extensions.node-waypoint.dev', 'v1alpha1', 'waypointfilters', 'WaypointFilter', 'user filters, local rate limits and faults attached to this waypoint, a Service or a route (CRD in deploy/crds)'),
  crd('gateway.networking.k8s.io', 'v1', 'httproutes', 'HTTPRoute', 'HTTP routes of the services this waypoint serves'),
  crd('gateway.networking.k8s.io', 'v1', 'grpcroutes', 'GRPCRoute', 'gRPC routes'),
  crd('gateway.networking.k8s.io', 'v1', 'gateways', 'Gateway', "this waypoint's Gateway (identity, istio.io/waypoint-for) and route parents"),
  { ...crd('gateway.networking.k8s.io', 'v1', 'gatewayclasses', 'GatewayClass', 'the istio-waypoint class (its istio.io/waypoint-for default)'), namespaced: false },
  crd('networking.istio.io', 'v1', 'destinationrules', 'DestinationRule', 'load balancing, connection pools, outlier detection'),
  crd('networking.istio.io', 'v1', 'serviceentries', 'ServiceEntry', 'services outside the cluster (when not learned from istiod)'),
  crd('networking.istio.io', 'v1', 'workloadentries', 'WorkloadEntry', 'workloads outside the cluster (when not learned from istiod)'),
  builtIn('networking.k8s.io', 'networkpolicies', 'NetworkPolicy', true, "NetworkPolicies on the original client's pod"),
  builtIn('', 'namespaces', 'Namespace', false, 'namespace labels (istio.io/use-waypoint, NetworkPolicy namespaceSelector)'),
  { ...builtIn('', 'configmaps', 'ConfigMap', true, 'MeshConfig (data.mesh): trust domain, root namespace, extension providers'), namespace: ISTIO_ROOT_NAMESPACE, name: 'istio' },
]);

function crd(group: string, version: string, plural: string, kind: string, why: string): WatchedKind {
  return { group, version, plural, kind, namespaced: true, crd: true, why };
}

function builtIn(group: string, plural: string, kind: string, namespaced: boolean, why: string): WatchedKind {
  return { group, version: 'v1', plural, kind, namespaced, crd: false, why };
}

/** `group/version`, or `v1` for the core group. */
export function apiVersionOf(k: WatchedKind): string {
  return k.group ? `${k.group}/${k.version}` : k.version;
}

/** `plural.group` (`plural` for the core group), as the API server names a resource in errors. */
export function resourceName(k: WatchedKind): string {
  return k.group ? `${k.plural}.${k.group}` : k.plural;
}

/** The collection's URL path: `/apis/<group>/<version>[/namespaces/<ns>]/<plural>` (`/api/v1/...` for core). */
export function collectionPath(k: WatchedKind): string {
  const base = k.group ? `/apis/${k.group}/${k.version}` : `/api/${k.version}`;
  return k.namespace ? `${base}/namespaces/${encodeURIComponent(k.namespace)}/${k.plural}` : `${base}/${k.plural}`;
}

/** The field selector of a kind watched by name (`metadata.name=istio`), else undefined. */
export function fieldSelectorOf(k: WatchedKind): string | undefined {
  return k.name === undefined ? undefined : `metadata.name=${k.name}`;
}

/** A Kubernetes RBAC `PolicyRule`. */
export interface PolicyRule {
  readonly apiGroups: readonly string[];
  readonly resources: readonly string[];
  readonly verbs: readonly string[];
  readonly resourceNames?: readonly string[];
}

/** Reading is all the waypoint does: list and watch, and get for tools that check access. */
const READ_VERBS: readonly string[] = ['get', 'list', 'watch'];

function rulesOf(kinds: readonly WatchedKind[]): PolicyRule[] {
  const byGroup = new Map<string, string[]>();
  const rules: PolicyRule[] = [];
  for (const k of kinds) {
    // A rule with resourceNames allows list/watch only with a matching metadata.name field
    // selector (Kubernetes RBAC docs, "Referring to resources"): it gets a rule of its own.
    if (k.name !== undefined) {
      rules.push({ apiGroups: [k.group], resources: [k.plural], resourceNames: [k.name], verbs: [...READ_VERBS] });
      continue;
    }
    let resources = byGroup.get(k.group);
    if (!resources) byGroup.set(k.group, (resources = []));
    if (!resources.includes(k.plural)) resources.push(k.plural);
  }
  return [...[...byGroup].map(([group, resources]) => ({ apiGroups: [group], resources, verbs: [...READ_VERBS] })), ...rules];
}

/**
 * The rules of the waypoint's ClusterRole: get/list/watch of every kind watched across all
 * namespaces (and of the cluster-scoped ones), one rule per API group.
 */
export function clusterRoleRules(kinds: readonly WatchedKind[] = WATCHED_KINDS): PolicyRule[] {
  return rulesOf(kinds.filter((k) => k.namespace === undefined));
}

/**
 * The rules of the Roles the waypoint needs in single namespaces (the `istio` ConfigMap in
 * `istio-system`, by name): a ClusterRole would grant them in every namespace.
 */
export function namespaceRoleRules(kinds: readonly WatchedKind[] = WATCHED_KINDS): { readonly namespace: string; readonly rules: PolicyRule[] }[] {
  const namespaces = [...new Set(kinds.flatMap((k) => (k.namespace === undefined ? [] : [k.namespace])))];
  return namespaces.map((namespace) => ({ namespace, rules: rulesOf(kinds.filter((k) => k.namespace === namespace)) }));
}

/** Who the RBAC objects are for. */
export interface RbacSubject {
  /** Name of the ClusterRole, Roles and bindings (e.g. `node-waypoint`). */
  readonly name: string;
  /** The waypoint's service account. */
  readonly serviceAccount: { readonly namespace: string; readonly name: string };
  /** Labels of every object (none by default). */
  readonly labels?: Readonly<Record<string, string>>;
}

/** One of the RBAC objects of {@link rbacObjects}. */
export interface RbacObject {
  readonly apiVersion: 'rbac.authorization.k8s.io/v1';
  readonly kind: 'ClusterRole' | 'ClusterRoleBinding' | 'Role' | 'RoleBinding';
  readonly metadata: { readonly name: string; readonly namespace?: string; readonly labels?: Record<string, string> };
  /** ClusterRole, Role. */
  readonly rules?: PolicyRule[];
  /** The bindings. */
  readonly roleRef?: { readonly apiGroup: string; readonly kind: string; readonly name: string };
  readonly subjects?: { readonly kind: string; readonly name: string; readonly namespace: string }[];
}

/**
 * The RBAC objects the waypoint needs, ready to `kubectl apply`: a ClusterRole and its
 * ClusterRoleBinding ({@link clusterRoleRules}), and a Role and RoleBinding per namespace of
 * {@link namespaceRoleRules}.
 */
export function rbacObjects(subject: RbacSubject, kinds: readonly WatchedKind[] = WATCHED_KINDS): RbacObject[] {
  const rbac = 'rbac.authorization.k8s.io/v1';
  // New objects each time, so a YAML dump has no anchors.
  const metadata = (namespace?: string) => ({ name: subject.name, ...(namespace ? { namespace } : {}), ...(subject.labels ? { labels: { ...subject.labels } } : {}) });
  const subjects = () => [{ kind: 'ServiceAccount', name: subject.serviceAccount.name, namespace: subject.serviceAccount.namespace }];
  const roleRef = (kind: string) => ({ apiGroup: 'rbac.authorization.k8s.io', kind, name: subject.name });
  return [
    { apiVersion: rbac, kind: 'ClusterRole', metadata: metadata(), rules: clusterRoleRules(kinds) },
    { apiVersion: rbac, kind: 'ClusterRoleBinding', metadata: metadata(), roleRef: roleRef('ClusterRole'), subjects: subjects() },
    ...namespaceRoleRules(kinds).flatMap(({ namespace, rules: r }): RbacObject[] => [
      { apiVersion: rbac, kind: 'Role', metadata: metadata(namespace), rules: r },
      { apiVersion: rbac, kind: 'RoleBinding', metadata: metadata(namespace), roleRef: roleRef('Role'), subjects: subjects() },
    ]),
  ];
}
