/**
 * Deploying the waypoint to a cluster: the Kubernetes objects of a namespace waypoint (`waypoint
 * generate`, deploy/base) and the RBAC of what the in-cluster mode watches.
 */
export { waypointManifests, namespaceProblem, nameProblem, WAYPOINT_CLASS, MANAGED_LABEL, type Manifest, type ManifestOptions } from './manifests.ts';
export { DRAIN, GRACE_MARGIN_SECONDS, PORTS, PROXY_UID, RESOURCES } from './deployment.ts';
export { WATCHED_KINDS, ISTIO_NAMESPACE, READ_VERBS, rbacName, type WatchedKind } from './rbac.ts';
export { baseOptions, generateYaml, kustomizeBase } from './render.ts';
