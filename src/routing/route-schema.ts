/**
 * zod shapes of Gateway API `HTTPRoute` and `GRPCRoute` (gateway.networking.k8s.io/v1, Gateway API
 * v1.3 standard fields, plus HTTPRoute `retry` from the experimental channel, GEP-1731). Unknown
 * fields are dropped, as the API server prunes them; `null` is accepted wherever a field is
 * optional (YAML `filters:` with nothing after it). Enum values and limits follow the CRDs' OpenAPI
 * validation (kubernetes-sigs/gateway-api apis/v1/httproute_types.go, grpcroute_types.go,
 * shared_types.go); cross-field rules (the CRDs' CEL rules) are checked when a route is compiled
 * (`route-parse.ts`).
 */
import { z } from 'zod';

const show = (v: unknown): string => (v === undefined ? 'nothing' : JSON.stringify(v));

const text = (what = 'a string') =>
  z.string({ error: (iss) => (iss.input === undefined ? 'is required' : `must be ${what}, got ${show(iss.input)}`) });

const oneOf = <T extends readonly [string, ...string[]]>(values: T) =>
  z.enum(values, { error: (iss) => `must be one of ${values.join(', ')}, got ${show(iss.input)}` });

const int = (min: number, max: number, what = 'an integer') =>
  z
    .int({ error: (iss) => (iss.input === undefined ? 'is required' : `must be ${what}, got ${show(iss.input)}`) })
    .min(min, { error: (iss) => `must be between ${min} and ${max}, got ${show(iss.input)}` })
    .max(max, { error: (iss) => `must be between ${min} and ${max}, got ${show(iss.input)}` });

const list = <T extends z.ZodType>(item: T, what: string, max?: number) => {
  const l = z.array(item, { error: (iss) => `must be a list of ${what}, got ${show(iss.input)}` });
  return (max === undefined ? l : l.max(max, { error: `must have at most ${max} entries` })).nullish();
};

const obj = <T extends z.ZodRawShape>(shape: T) => z.object(shape, { error: (iss) => `must be a mapping, got ${show(iss.input)}` });

const portNumber = int(1, 65535, 'a port number (1-65535)');

/** ParentReference (GW shared_types.go): kind defaults to Gateway, group to gateway.networking.k8s.io. */
export const ParentRefSchema = obj({
  group: text().nullish(),
  kind: text().nullish(),
  namespace: text().nullish(),
  name: text().min(1, { error: 'must not be empty' }),
  sectionName: text().nullish(),
  port: portNumber.nullish(),
});
export type ParentRefDoc = z.output<typeof ParentRefSchema>;

/** BackendObjectReference: kind defaults to Service, group to core (""). */
const backendObjectShape = {
  group: text().nullish(),
  kind: text().nullish(),
  name: text().min(1, { error: 'must not be empty' }),
  namespace: text().nullish(),
  port: portNumber.nullish(),
};
export const BackendObjectRefSchema = obj(backendObjectShape);
export type BackendObjectRefDoc = z.output<typeof BackendObjectRefSchema>;

const headerName = text('a header name').regex(/^[A-Za-z0-9!#$%&'*+\-.^_`|~]+$/, { error: (iss) => `must be a valid HTTP header name, got ${show(iss.input)}` });

/** HTTPHeaderFilter: set/add/remove, at most 16 entries each. */
const headerValue = text().max(4096, { error: 'must be at most 4096 characters' });
export const HeaderFilterSchema = obj({
  set: list(obj({ name: headerName, value: headerValue }), 'headers ({name, value})', 16),
  add: list(obj({ name: headerName, value: headerValue }), 'headers ({name, value})', 16),
  remove: list(headerName, 'header names', 16),
});
export type HeaderFilterDoc = z.output<typeof HeaderFilterSchema>;

/** HTTPPathModifier. */
export const PathModifierSchema = obj({
  type: oneOf(['ReplaceFullPath', 'ReplacePrefixMatch'] as const),
  replaceFullPath: text().nullish(),
  replacePrefixMatch: text().nullish(),
});
export type PathModifierDoc = z.output<typeof PathModifierSchema>;

const hostname = text('a hostname').regex(/^(\*\.)?[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/, {
  error: (iss) => `must be a lower-case DNS hostname, got ${show(iss.input)}`,
});

export const RedirectSchema = obj({
  scheme: oneOf(['http', 'https'] as const).nullish(),
  hostname: hostname.nullish(),
  path: PathModifierSchema.nullish(),
  port: portNumber.nullish(),
  statusCode: z
    .union([z.literal(301), z.literal(302), z.literal(303), z.literal(307), z.literal(308)], {
      error: (iss) => `must be one of 301, 302, 303, 307, 308, got ${show(iss.input)}`,
    })
    .nullish(),
});
export type RedirectDoc = z.output<typeof RedirectSchema>;

export const RewriteSchema = obj({ hostname: hostname.nullish(), path: PathModifierSchema.nullish() });
export type RewriteDoc = z.output<typeof RewriteSchema>;

export const MirrorSchema = obj({
  backendRef: BackendObjectRefSchema,
  percent: int(0, 100).nullish(),
  fraction: obj({ numerator: int(0, 1_000_000), denominator: int(1, 1_000_000).nullish() }).nullish(),
});
export type MirrorDoc = z.output<typeof MirrorSchema>;

/** HTTPRouteFilter / GRPCRouteFilter: `type` plus the matching field. Unknown types are kept (they make the rule answer 500). */
export const FilterSchema = obj({
  type: text('a filter type'),
  requestHeaderModifier: HeaderFilterSchema.nullish(),
  responseHeaderModifier: HeaderFilterSchema.nullish(),
  requestRedirect: RedirectSchema.nullish(),
  urlRewrite: RewriteSchema.nullish(),
  requestMirror: MirrorSchema.nullish(),
  extensionRef: z.unknown().optional(),
});
export type FilterDoc = z.output<typeof FilterSchema>;

export const BackendRefSchema = obj({
  ...backendObjectShape,
  weight: int(0, 1_000_000).nullish(),
  filters: list(FilterSchema, 'filters', 16),
});
export type BackendRefDoc = z.output<typeof BackendRefSchema>;

const stringMatch = (types: readonly [string, ...string[]]) =>
  obj({ type: oneOf(types as ['Exact', 'RegularExpression']).nullish(), name: text().min(1, { error: 'must not be empty' }), value: text() });

export const HttpMatchSchema = obj({
  path: obj({ type: oneOf(['Exact', 'PathPrefix', 'RegularExpression'] as const).nullish(), value: text().nullish() }).nullish(),
  headers: list(stringMatch(['Exact', 'RegularExpression']).extend({ name: headerName }), 'header matches', 16),
  queryParams: list(stringMatch(['Exact', 'RegularExpression']), 'query parameter matches', 16),
  method: oneOf(['GET', 'HEAD', 'POST', 'PUT', 'DELETE', 'CONNECT', 'OPTIONS', 'TRACE', 'PATCH'] as const).nullish(),
});
export type HttpMatchDoc = z.output<typeof HttpMatchSchema>;

/** Fields every route rule has, with its kind of match. */
const ruleFields = <M extends z.ZodType>(match: M) => ({
  name: text().nullish(),
  matches: list(match, 'matches', 64),
  filters: list(FilterSchema, 'filters', 16),
  backendRefs: list(BackendRefSchema, 'backend references', 16),
});

export const HttpRuleSchema = obj({
  ...ruleFields(HttpMatchSchema),
  timeouts: obj({ request: text('a duration').nullish(), backendRequest: text('a duration').nullish() }).nullish(),
  retry: obj({
    codes: list(int(400, 599, 'an HTTP status code (400-599)'), 'status codes'),
    attempts: int(0, 1_000_000).nullish(),
    backoff: text('a duration').nullish(),
  }).nullish(),
});
export type HttpRuleDoc = z.output<typeof HttpRuleSchema>;

const routeSpec = <R extends z.ZodType>(rule: R) =>
  obj({
    parentRefs: list(ParentRefSchema, 'parent references', 32),
    hostnames: list(text(), 'hostnames', 16),
    rules: list(rule, 'rules', 16),
  });

/** `HTTPRoute` (metadata read separately). */
export const HttpRouteSchema = z.object({ spec: routeSpec(HttpRuleSchema).nullish() });

export const GrpcMatchSchema = obj({
  method: obj({ type: oneOf(['Exact', 'RegularExpression'] as const).nullish(), service: text().nullish(), method: text().nullish() }).nullish(),
  headers: list(stringMatch(['Exact', 'RegularExpression']).extend({ name: headerName }), 'header matches', 16),
});
export type GrpcMatchDoc = z.output<typeof GrpcMatchSchema>;

export const GrpcRuleSchema = obj(ruleFields(GrpcMatchSchema));
export type GrpcRuleDoc = z.output<typeof GrpcRuleSchema>;

/** `GRPCRoute` (metadata read separately). */
export const GrpcRouteSchema = z.object({ spec: routeSpec(GrpcRuleSchema).nullish() });

/** `ReferenceGrant` (gateway.networking.k8s.io/v1beta1): who may refer to what in its namespace. */
export const ReferenceGrantSchema = z.object({
  spec: obj({
    from: list(obj({ group: z.string().nullish(), kind: text(), namespace: text() }), 'from entries'),
    to: list(obj({ group: z.string().nullish(), kind: text(), name: text().nullish() }), 'to entries'),
  }).nullish(),
});
