/**
 * Gateway API HTTPRoute and GRPCRoute at the waypoint, and the DestinationRules that shape its
 * clusters (destination-rule.ts: one traffic policy per service port).
 * Both are compiled parts of every mesh snapshot (`ROUTES`, `DESTINATION_RULES`).
 *
 *   const routes = routesFor(snapshot).forTarget(target);   // the ROUTES part of the snapshot
 *   const table = routes && tableFor(routes, clientNamespace, target.service.namespace);
 *   const match = table && selectMatch(table, request);      // undefined: 404 NR
 *   const backend = pickBackend(match.rule);                 // weighted; invalid → 500
 *
 * See compile.ts (attachment, precedence), route-parse.ts (validation), backends.ts (backend
 * resolution), filters.ts (filters); the router sends mirrored requests (src/router/mirror.ts).
 */
export { applyRequestHeaders, routeRequest, type RoutedRequest } from './apply.ts';
export { compileRoutes, routesFor, type CompiledRoutes } from './compile.ts';
export { applyHeaderModifier, modifyPath, redirectLocation, shadowAuthority } from './filters.ts';
export { pickBackend, selectMatch, tableFor } from './select.ts';
export type * from './types.ts';
export { ROUTES } from './compile.ts';
export {
  DESTINATION_RULES,
  compileDestinationRules,
  destinationRulesFor,
  dumpDestinationRules,
  type ClusterPolicyDump,
  type CompiledDestinationRules,
  type DestinationRule,
  type ShapedCluster,
} from './destination-rule.ts';
// DestinationRule traffic policies as the upstream layer applies them (one per cluster).
export {
  DEFAULT_MAGLEV_TABLE_SIZE,
  MAX_RING_SIZE,
  UNLIMITED_POOL,
  defaultTrafficPolicy,
  poolSignature,
  type ClusterTrafficPolicy,
  type ConnectionPoolPolicy,
  type ConsistentHashPolicy,
  type HashKey,
  type LbAlgorithm,
  type LoadBalancerSettings,
  type OutlierDetectionPolicy,
} from './traffic-policy.ts';
