/**
 * The filters that ship with the waypoint, registered by name. Each filter lives in its own
 * folder and plugs in through the filter API only (src/pipeline/filter.ts). The router
 * (`envoy.filters.http.router`) is registered by the core because it owns the upstream.
 *
 * Later work adds `istio.metadata_exchange`.
 */
import type { FilterRegistry } from '../src/pipeline/registry.ts';
import { authzFactory } from './authz/index.ts';
import { peerMetadataFactory } from './peer-metadata/index.ts';
import { statsFactory } from './stats/index.ts';

/** Register every built-in filter factory; returns the registry for chaining. */
export function registerBuiltinFilters(registry: FilterRegistry): FilterRegistry {
  registry.register(peerMetadataFactory);
  registry.register(statsFactory);
  registry.register(authzFactory);
  return registry;
}
