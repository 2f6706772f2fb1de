/**
 * Gateway API HTTPRoute and GRPCRoute at the waypoint.
 *
 *   const routes = routesFor(snapshot).forTarget(target);   // compiled once per mesh snapshot
 *   const table = routes && tableFor(routes, clientNamespace, target.service.namespace);
 *   const match = table && selectMatch(table, request);      // undefined: 404 NR
 *   const backend = pickBackend(match.rule);                 // weighted; invalid → 500
 *
 * See compile.ts (attachment, precedence), route-parse.ts (validation), backends.ts (backend
 * resolution), filters.ts and mirror.ts (filters).
 */
export { applyRequestHeaders, clientNamespace, NO_CLUSTER_FOUND, routeRequest, type RoutedRequest } from './apply.ts';
export { compileRoutes, routesFor, type CompiledRoutes } from './compile.ts';
export { applyHeaderModifier, modifyPath, redirectLocation, shadowAuthority } from './filters.ts';
export { splitTarget, type MatchInput } from './match.ts';
export { MirrorSender, type MirroredRequest } from './mirror.ts';
export { pickBackend, selectMatch, tableFor } from './select.ts';
export type * from './types.ts';
