/**
 * Least-privilege RBAC of an in-cluster waypoint: read-only access (get, list, watch) to exactly
 * the kinds the in-cluster mode lists and watches, cluster-wide through a ClusterRole, and the
 * `istio` ConfigMap (MeshConfig) alone through a Role in the Istio root namespace.
 */
import type { IClusterRole } from 'kubernetes-models/rbac.authorization.k8s.io/v1/ClusterRole';
import type { IClusterRoleBinding } from 'kubernetes-models/rbac.authorization.k8s.io/v1/ClusterRoleBinding';
import type { IPolicyRule } from 'kubernetes-models/rbac.authorization.k8s.io/v1/PolicyRule';
import type { IRole } from 'kubernetes-models/rbac.authorization.k8s.io/v1/Role';
import type { IRoleBinding } from 'kubernetes-models/rbac.authorization.k8s.io/v1/RoleBinding';

/** One kind the in-cluster mode watches, by API group and resource (the plural RBAC names). */
export interface WatchedKind {
  /** API group (`''` is the core group). */
  readonly group: string;
  readonly resource: string;
  /** Only objects of this namespace (a Role there instead of the ClusterRole). */
  readonly namespace?: string;
  /** Only objects of these names (RBAC `resourceNames`; list/watch then need a `metadata.name` field selector). */
  readonly names?: readonly string[];
}

/** Istio's root namespace, where the `istio` ConfigMap (MeshConfig) lives. */
export const ISTIO_NAMESPACE = 'istio-system';

/**
 * What the in-cluster mode lists and watches (Kubernetes API informers; workloads and services
 * come from istiod's WDS, not from here). This table MUST match `WATCHED_KINDS` of src/kube (the
 * informers); the RBAC below is derived from it, so a kind added there and not here is refused by
 * the API server with 403.
 */
export const WATCHED_KINDS: readonly WatchedKind[] = [
  { group: 'security.istio.io', resource: 'authorizationpolicies' },
  { group: 'security.istio.io', resource: 'requestauthentications' },
  { group: 'security.istio.io', resource: 'peerauthentications' },
  { group: 'telemetry.istio.io', resource: 'telemetries' },
  { group: 'gateway.networking.k8s.io', resource: 'httproutes' },
  { group: 'gateway.networking.k8s.io', resource: 'grpcroutes' },
  { group: 'gateway.networking.k8s.io', resource: 'gateways' },
  { group: 'gateway.networking.k8s.io', resource: 'gatewayclasses' },
  { group: 'networking.istio.io', resource: 'destinationrules' },
  { group: 'networking.istio.io', resource: 'serviceentries' },
  { group: 'networking.istio.io', resource: 'workloadentries' },
  { group: 'networking.k8s.io', resource: 'networkpolicies' },
  { group: '', resource: 'namespaces' },
  { group: '', resource: 'configmaps', namespace: ISTIO_NAMESPACE, names: ['istio'] },
];

/** Read-only: the informers only list and watch (and get on a relist). */
export const READ_VERBS = ['get', 'list', 'watch'] as const;

/** The name of this waypoint's RBAC objects: one set per waypoint, so deleting one waypoint never breaks another. */
export function rbacName(namespace: string, name: string): string {
  return `node-waypoint:${namespace}:${name}`;
}

/** Rules for `kinds`, one per API group (resources sorted as listed), resourceNames when given. */
export function rulesFor(kinds: readonly WatchedKind[]): IPolicyRule[] {
  const rules = new Map<string, IPolicyRule & { resources: string[] }>();
  for (const k of kinds) {
    const key = `${k.group}/${k.names?.join(',') ?? ''}`;
    let rule = rules.get(key);
    if (!rule) {
      rule = { apiGroups: [k.group], resources: [], ...(k.names ? { resourceNames: [...k.names] } : {}), verbs: [...READ_VERBS] };
      rules.set(key, rule);
    }
    rule.resources.push(k.resource);
  }
  return [...rules.values()];
}

/** ClusterRole + ClusterRoleBinding (cluster-wide kinds) and Role + RoleBinding in the Istio namespace (the MeshConfig). */
export function rbacObjects(namespace: string, name: string): [IClusterRole, IClusterRoleBinding, IRole, IRoleBinding] {
  const rbac = rbacName(namespace, name);
  const subjects = [{ kind: 'ServiceAccount', name, namespace }];
  const labels = { 'app.kubernetes.io/name': 'node-waypoint', 'gateway.networking.k8s.io/gateway-name': name };
  return [
    {
      apiVersion: 'rbac.authorization.k8s.io/v1',
      kind: 'ClusterRole',
      metadata: { name: rbac, labels },
      rules: rulesFor(WATCHED_KINDS.filter((k) => !k.namespace)),
    },
    {
      apiVersion: 'rbac.authorization.k8s.io/v1',
      kind: 'ClusterRoleBinding',
      metadata: { name: rbac, labels },
      roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'ClusterRole', name: rbac },
      subjects,
    },
    {
      apiVersion: 'rbac.authorization.k8s.io/v1',
      kind: 'Role',
      metadata: { name: rbac, namespace: ISTIO_NAMESPACE, labels },
      rules: rulesFor(WATCHED_KINDS.filter((k) => k.namespace === ISTIO_NAMESPACE)),
    },
    {
      apiVersion: 'rbac.authorization.k8s.io/v1',
      kind: 'RoleBinding',
      metadata: { name: rbac, namespace: ISTIO_NAMESPACE, labels },
      roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'Role', name: rbac },
      subjects,
    },
  ];
}
