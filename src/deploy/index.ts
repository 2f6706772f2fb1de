/**
 * Deploying the waypoint to a cluster: the Kubernetes objects of a namespace waypoint (`waypoint
 * generate`, deploy/base), with the RBAC src/kube renders from the kinds it watches.
 */
export { waypointManifests, namespaceProblem, nameProblem, rbacName, WAYPOINT_CLASS, MANAGED_LABEL, type Manifest, type ManifestOptions } from './manifests.ts';
export { DRAIN, GRACE_MARGIN_SECONDS, PORTS, PROXY_UID, RESOURCES } from './deployment.ts';
export { baseOptions, generateYaml, kustomizeBase } from './render.ts';
