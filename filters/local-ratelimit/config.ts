/**
 * Configuration of `istio.local_ratelimit`: Envoy's `LocalRateLimit` (envoyproxy/envoy
 * api/envoy/extensions/filters/http/local_ratelimit/v3/local_rate_limit.proto) in camelCase, with
 * the descriptor actions of Envoy's route `rate_limits` (api/envoy/config/route/v3/
 * route_components.proto `RateLimit.Action`) that make sense at a waypoint, plus the source
 * principal and workload:
 *
 * ```yaml
 * config:
 *   statPrefix: http_local_rate_limiter   # the counters' envoy_local_http_ratelimit_prefix label
 *   tokenBucket: { maxTokens: 100, tokensPerFill: 100, fillInterval: 1s }
 *   filterEnabled: 100        # % of requests checked (Envoy: absent = 0; here absent = 100)
 *   filterEnforced: 100       # % of limited requests refused (the others pass, counted)
 *   status: 429
 *   enableXRatelimitHeaders: DRAFT_VERSION_03   # or OFF (default)
 *   rateLimits:               # how each request's descriptors are built
 *     - actions: [{ requestHeaders: { headerName: x-tenant, descriptorKey: tenant } }]
 *   descriptors:              # buckets for matching descriptors (a value left out: one bucket per value)
 *     - entries: [{ key: tenant }]
 *       tokenBucket: { maxTokens: 10, tokensPerFill: 10, fillInterval: 1s }
 * ```
 */
import { z } from 'zod';
import { parseTtl } from '../../src/identity/index.ts';
import { ConfigError } from '../../src/util/index.ts';

/** One token bucket (Envoy's `TokenBucket`; `fillInterval` at least 50 ms, as Envoy requires). */
export interface BucketConfig {
  readonly maxTokens: number;
  readonly tokensPerFill: number;
  readonly fillIntervalMs: number;
}

/** Where one descriptor entry's value comes from. */
export type Action =
  | { readonly kind: 'header'; readonly key: string; readonly header: string; readonly skipIfAbsent: boolean }
  | { readonly kind: 'principal' | 'workload' | 'remote'; readonly key: string }
  | { readonly kind: 'generic'; readonly key: string; readonly value: string };

/** A configured descriptor: entries (value undefined = any value, one bucket per distinct value) and its bucket. */
export interface DescriptorConfig {
  readonly entries: readonly { readonly key: string; readonly value: string | undefined }[];
  readonly bucket: BucketConfig;
}

export interface LocalRateLimitConfig {
  readonly statPrefix: string;
  readonly bucket: BucketConfig;
  /** Fractions 0..1. */
  readonly enabled: number;
  readonly enforced: number;
  readonly status: number;
  readonly xRateLimitHeaders: boolean;
  readonly responseHeadersToAdd: readonly (readonly [string, string])[];
  readonly requestHeadersToAddWhenNotEnforced: readonly (readonly [string, string])[];
  readonly alwaysConsumeDefaultTokenBucket: boolean;
  readonly maxDynamicDescriptors: number;
  /** Each entry builds one request descriptor from its actions (all must produce a value). */
  readonly rateLimits: readonly (readonly Action[])[];
  readonly descriptors: readonly DescriptorConfig[];
}

const duration = z.string().transform((v, ctx) => {
  try {
    const ms = parseTtl(v);
    if (ms < 50) ctx.addIssue({ code: 'custom', message: `must be at least 50ms (Envoy's minimum fill interval), got ${JSON.stringify(v)}` });
    return ms;
  } catch (err) {
    ctx.addIssue({ code: 'custom', message: (err as Error).message });
    return z.NEVER;
  }
});

const bucket = z.strictObject({
  maxTokens: z.int().min(1),
  tokensPerFill: z.int().min(1).default(1),
  fillInterval: duration,
});

const header = z.strictObject({ name: z.string().regex(/^[A-Za-z0-9!#$%&'*+\-.^_`|~]+$/, 'must be a header name'), value: z.string().regex(/^[^\r\n\0]*$/, 'must not contain CR, LF or NUL') });

const action = z.union([
  z.strictObject({ requestHeaders: z.strictObject({ headerName: z.string().min(1), descriptorKey: z.string().min(1), skipIfAbsent: z.boolean().default(false) }) }),
  z.strictObject({ sourcePrincipal: z.strictObject({ descriptorKey: z.string().min(1).default('source_principal') }).prefault({}) }),
  z.strictObject({ sourceWorkload: z.strictObject({ descriptorKey: z.string().min(1).default('source_workload') }).prefault({}) }),
  z.strictObject({ remoteAddress: z.strictObject({ descriptorKey: z.string().min(1).default('remote_address') }).prefault({}) }),
  z.strictObject({ genericKey: z.strictObject({ descriptorValue: z.string(), descriptorKey: z.string().min(1).default('generic_key') }) }),
]);

const percent = z.number().min(0).max(100);

const schema = z.strictObject({
  statPrefix: z.string().regex(/^[A-Za-z0-9_]+$/, 'must be letters, digits and underscores').default('http_local_rate_limiter'),
  tokenBucket: bucket,
  filterEnabled: percent.default(100),
  filterEnforced: percent.default(100),
  status: z.int().min(100).max(599).default(429),
  enableXRatelimitHeaders: z.enum(['OFF', 'DRAFT_VERSION_03']).default('OFF'),
  responseHeadersToAdd: z.array(header).max(32).default([]),
  requestHeadersToAddWhenNotEnforced: z.array(header).max(32).default([]),
  alwaysConsumeDefaultTokenBucket: z.boolean().default(true),
  maxDynamicDescriptors: z.int().min(1).max(100_000).default(20),
  rateLimits: z.array(z.strictObject({ actions: z.array(action).min(1).max(16) })).max(16).default([]),
  descriptors: z
    .array(z.strictObject({ entries: z.array(z.strictObject({ key: z.string().min(1), value: z.string().optional() })).min(1).max(16), tokenBucket: bucket }))
    .max(256)
    .default([]),
});

function toAction(a: z.output<typeof action>): Action {
  if ('requestHeaders' in a) return { kind: 'header', key: a.requestHeaders.descriptorKey, header: a.requestHeaders.headerName.toLowerCase(), skipIfAbsent: a.requestHeaders.skipIfAbsent };
  if ('sourcePrincipal' in a) return { kind: 'principal', key: a.sourcePrincipal.descriptorKey };
  if ('sourceWorkload' in a) return { kind: 'workload', key: a.sourceWorkload.descriptorKey };
  if ('remoteAddress' in a) return { kind: 'remote', key: a.remoteAddress.descriptorKey };
  return { kind: 'generic', key: a.genericKey.descriptorKey, value: a.genericKey.descriptorValue };
}

const toBucket = (b: z.output<typeof bucket>): BucketConfig => Object.freeze({ maxTokens: b.maxTokens, tokensPerFill: b.tokensPerFill, fillIntervalMs: b.fillInterval });

/**
 * Validate and freeze a config.
 * @throws ConfigError naming the field (`tokenBucket.fillInterval`, `descriptors.0.entries`, ...).
 */
export function parseLocalRateLimitConfig(raw: unknown): LocalRateLimitConfig {
  const r = schema.safeParse(raw ?? {});
  if (!r.success) {
    const issue = r.error.issues[0];
    throw new ConfigError(issue.message, { field: issue.path.map(String).join('.') || undefined });
  }
  const c = r.data;
  const seen = new Set<string>();
  c.descriptors.forEach((d, i) => {
    // Envoy refuses a descriptor configured twice ("duplicate descriptor in the local rate descriptor").
    const key = JSON.stringify(d.entries.map((e) => [e.key, e.value ?? null]));
    if (seen.has(key)) throw new ConfigError('duplicate descriptor (same entries as an earlier one)', { field: `descriptors.${i}.entries` });
    seen.add(key);
  });
  return Object.freeze({
    statPrefix: c.statPrefix,
    bucket: toBucket(c.tokenBucket),
    enabled: c.filterEnabled / 100,
    enforced: c.filterEnforced / 100,
    // Envoy answers 429 for a configured status below 400 (local_ratelimit.h `toErrorCode`).
    status: c.status >= 400 ? c.status : 429,
    xRateLimitHeaders: c.enableXRatelimitHeaders === 'DRAFT_VERSION_03',
    responseHeadersToAdd: Object.freeze(c.responseHeadersToAdd.map((h) => Object.freeze([h.name.toLowerCase(), h.value] as const))),
    requestHeadersToAddWhenNotEnforced: Object.freeze(c.requestHeadersToAddWhenNotEnforced.map((h) => Object.freeze([h.name.toLowerCase(), h.value] as const))),
    alwaysConsumeDefaultTokenBucket: c.alwaysConsumeDefaultTokenBucket,
    maxDynamicDescriptors: c.maxDynamicDescriptors,
    rateLimits: Object.freeze(c.rateLimits.map((l) => Object.freeze(l.actions.map(toAction)))),
    descriptors: Object.freeze(c.descriptors.map((d) => Object.freeze({ entries: Object.freeze(d.entries.map((e) => Object.freeze({ key: e.key, value: e.value }))), bucket: toBucket(d.tokenBucket) }))),
  });
}
