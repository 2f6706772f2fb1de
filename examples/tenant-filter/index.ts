/**
 * An example node-waypoint filter to copy: requests must name an allowed tenant in a header
 * (`x-tenant` by default), else they are answered 403 before they reach the app. Attach it with a
 * WaypointFilter (README "Write a filter"):
 *
 *   apiVersion: extensions.node-waypoint.dev/v1alpha1
 *   kind: WaypointFilter
 *   metadata: { name: tenants, namespace: shop }
 *   spec:
 *     targetRefs: [{ kind: Service, name: orders }]
 *     module: ./tenant-filter/index.ts        # or the package name, once installed: tenant-filter
 *     phase: AUTHZ
 *     config: { tenants: [acme, globex] }
 *
 * It imports only the filter API (`node-waypoint/filter-api`, which at run time is always the
 * waypoint's own) and zod for its config schema.
 */
import { z } from 'zod';
import { defineSlot, FilterStatus, ResponseFlag, sendLocalReply, type Filter, type FilterModuleFactory, type HeaderList, type StreamContext } from 'node-waypoint/filter-api';

/**
 * The WaypointFilter's `config`, validated by the waypoint before the filter is created: an
 * invalid one refuses the mesh update, naming the field (`spec.config.tenants`).
 */
export const configSchema = z.strictObject({
  /** Request header naming the tenant. */
  header: z
    .string()
    .regex(/^[a-z0-9-]+$/, 'must be a lower-case header name')
    .default('x-tenant'),
  /** Tenants allowed through. */
  tenants: z.array(z.string().min(1)).min(1),
  /** Status for requests without an allowed tenant. */
  status: z.int().min(400).max(599).default(403),
  /** Tell the app which tenant passed, in this request header ('' = do not). */
  forwardAs: z.string().default('x-tenant-verified'),
});
export type TenantConfig = z.output<typeof configSchema>;

/**
 * The tenant a request was let through for, for filters after this one. `reusable`: when the
 * module's code changes and the waypoint imports it again, it gets this same slot back.
 */
export const TENANT = defineSlot<string>('example.tenant', 'stream', { reusable: true });

class TenantFilter implements Filter {
  readonly name = 'example.tenant';
  private readonly config: TenantConfig;
  private readonly allowed: ReadonlySet<string>;

  constructor(config: TenantConfig) {
    this.config = config;
    this.allowed = new Set(config.tenants);
  }

  onRequestHeaders(stream: StreamContext): FilterStatus {
    const tenant = stream.requestHeaders.get(this.config.header);
    if (tenant === undefined || !this.allowed.has(tenant)) {
      sendLocalReply(stream, this.config.status, `tenant ${JSON.stringify(tenant ?? '')} is not allowed\n`, ResponseFlag.None, 'tenant_not_allowed');
      return FilterStatus.StopAndReply;
    }
    stream.set(TENANT, tenant);
    if (this.config.forwardAs) stream.requestHeaders.set(this.config.forwardAs, tenant);
    return FilterStatus.Continue;
  }

  onResponseHeaders(stream: StreamContext, headers: HeaderList): void {
    const tenant = stream.get(TENANT);
    if (tenant !== undefined) headers.set('x-tenant', tenant);
  }
}

const factory: FilterModuleFactory<TenantConfig> = {
  name: 'example.tenant',
  create: (config) => new TenantFilter(config),
};
export default factory;
