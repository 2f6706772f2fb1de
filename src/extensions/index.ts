/**
 * User filters and built-in filters attached by `WaypointFilter` resources
 * (`extensions.node-waypoint.dev/v1alpha1`, shaped like Istio's WasmPlugin): loading their ES
 * modules, compiling the per-service / per-route attachment table of each mesh snapshot (the
 * `EXTENSIONS` part), and running them in the chain with isolation (a throw answers 500, a slow
 * asynchronous phase 504; never the process or other requests).
 *
 *   const extensions = new WaypointExtensions({ filters: [localRateLimitFactory, faultFactory], metrics, phaseTimeoutMs });
 *   const mesh = await MeshStore.open({ ..., parts: [..., ROUTES, extensions.part] });
 *   extensions.bind(mesh);
 *   registry.register(routerFactory(clusters, opts, overload, { onRoute: runRouteFilters }));
 *   const base = registry.build(bootstrap.filters, env, core);
 *   const chain = new FilterChain(withExtensionSlots(base.filters, extensionSlots(mesh)));
 */
export { WaypointExtensions, type ExtensionsOptions } from './extensions.ts';
export { EXTENSIONS, extensionsFor, type AttachedSet, type CompiledExtensions } from './compile.ts';
export { EXTENSION_SLOTS, extensionSlots, runRouteFilters, withExtensionSlots } from './slots.ts';
export { FILTER_API_SPECIFIER, resolveModule } from './loader.ts';
export { PHASES, WAYPOINT_FILTER_GROUP, WAYPOINT_FILTER_KIND, type PhaseName } from './schema.ts';
