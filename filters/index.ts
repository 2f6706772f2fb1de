/**
 * The filters that ship with the waypoint, registered by name. Each filter lives in its own
 * folder and plugs in through the filter API only (src/pipeline/filter.ts). The router
 * (`envoy.filters.http.router`) is registered by the core because it owns the upstream.
 *
 * Later work adds `istio.peer_metadata`, `istio.metadata_exchange`, `istio.stats`, `istio.authz`.
 */
import type { FilterRegistry } from '../src/pipeline/registry.ts';

/** Register every built-in filter factory; returns the registry for chaining. */
export function registerBuiltinFilters(registry: FilterRegistry): FilterRegistry {
  return registry;
}
