/**
 * The filters that ship with the waypoint, registered by name. Each filter lives in its own
 * folder and plugs in through the filter API only (src/pipeline/index.ts). The router
 * (`envoy.filters.http.router`) is registered by the core because it owns the upstream.
 *
 * Later work adds `istio.metadata_exchange`.
 */
import type { FilterFactory, FilterRegistry } from '../src/pipeline/index.ts';
import type { TracingRuntime } from '../src/tracing/index.ts';
import { authzFactory, authzFilterFactory, type AuthzFilterOptions } from './authz/index.ts';
import { faultFactory } from './fault/index.ts';
import { localRateLimitFactory } from './local-ratelimit/index.ts';
import { peerMetadataFactory } from './peer-metadata/index.ts';
import { statsFactory } from './stats/index.ts';
import { tracingFilterFactory } from './tracing/index.ts';

/** What the composition root hands to built-in filters (clients that outlive one chain). */
export interface BuiltinFilterOptions {
  /** `istio.authz`: the ext_authz client (CUSTOM) and RequestAuthentication (JWT). */
  readonly authz?: AuthzFilterOptions;
  /** `istio.tracing`: the runtime that exports spans (without it, requests pass untraced). */
  readonly tracing?: TracingRuntime;
}

/** Register every built-in filter factory; returns the registry for chaining. */
export function registerBuiltinFilters(registry: FilterRegistry, opts: BuiltinFilterOptions = {}): FilterRegistry {
  registry.register(peerMetadataFactory);
  registry.register(statsFactory);
  registry.register(tracingFilterFactory(opts.tracing));
  registry.register(opts.authz ? authzFilterFactory(opts.authz) : authzFactory);
  registry.register(localRateLimitFactory);
  registry.register(faultFactory);
  return registry;
}

/** The built-in filters a WaypointFilter may attach per Gateway, Service or route rule (`spec.filter`). */
export function attachableFilters(): FilterFactory<unknown>[] {
  return [localRateLimitFactory as FilterFactory<unknown>, faultFactory as FilterFactory<unknown>];
}
