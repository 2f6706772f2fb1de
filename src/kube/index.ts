/**
 * The Kubernetes API as a mesh source (`waypoint run --cluster`): the kinds the waypoint reads,
 * listed and watched with `@kubernetes/client-node` (bookmarks, relist on 410 Gone, reconnects with
 * backoff, a kind whose CRD is not installed treated as empty), their least-privilege RBAC rendered
 * from the same table, and a live mesh store over them.
 *
 *   const watcher = new KubeWatcher();               // KUBECONFIG, else the pod's service account
 *   watcher.start();
 *   const mesh = await openClusterMesh({ watcher, discovered, gateway, parts, accept });
 *   readiness: watcher.synced (stays true); mesh.store.current is the snapshot
 *   istiod pushed: void mesh.refresh();   shutdown: mesh.close(); await watcher.stop();
 */
export { KubeWatcher, type KubeWatcherOptions } from './watcher.ts';
export { openClusterMesh, type ClusterMesh, type ClusterMeshOptions } from './cluster-mesh.ts';
export { DEFAULT_RETRY, type KindStatus, type WatchRetry } from './kind-watch.ts';
export { KubeApiError, loadKubeConfig, type KubeObject } from './client.ts';
export {
  apiVersionOf,
  clusterRoleRules,
  collectionPath,
  ISTIO_ROOT_NAMESPACE,
  namespaceRoleRules,
  rbacObjects,
  resourceName,
  WATCHED_KINDS,
  type PolicyRule,
  type RbacObject,
  type RbacSubject,
  type WatchedKind,
} from './kinds.ts';
