/**
 * Parse and validate one HTTPRoute or GRPCRoute into compiled rules and matches (rule order,
 * then match order; precedence is applied later when routes are merged into tables).
 *
 * Besides the schema (`route-schema.ts`), the CRDs' cross-field rules are checked here
 * (kubernetes-sigs/gateway-api apis/v1/httproute_types.go, grpcroute_types.go CEL rules): a
 * filter's type names the field it sets; RequestHeaderModifier, ResponseHeaderModifier,
 * RequestRedirect and URLRewrite at most once per rule; RequestRedirect and URLRewrite not
 * together; ReplacePrefixMatch only with a single PathPrefix match; `timeouts.backendRequest` not
 * longer than `timeouts.request`. A route breaking them is what istiod reports `Accepted=False` and
 * does not program: the caller ignores it with the error logged.
 *
 * Filters the waypoint cannot apply (CORS, ExternalAuth, unknown types, an ExtensionRef to anything
 * but a WaypointFilter) do not invalidate the route: the rule answers 500, as the spec requires
 * when a filter cannot be honoured. An ExtensionRef to a WaypointFilter is kept by name for the
 * extensions engine (src/extensions), which runs it when the rule is chosen. Invalid backends (unknown service, missing port, cross-namespace without a
 * ReferenceGrant) keep their weight and answer 500 for their share.
 */
import { ConfigError, log } from '../util/index.ts';
import { locateField, type KeptResource, formatFieldPath, type FieldPath } from '../state/index.ts';
import type { BackendResolver } from './backends.ts';
import { parseDuration } from './duration.ts';
import { compileHeaderModifier, type CompiledHeaderFilter } from './filters.ts';
import { compileRegex, normalizePrefix } from './match.ts';
import {
  GrpcRouteSchema,
  HttpRouteSchema,
  type BackendRefDoc,
  type FilterDoc,
  type GrpcMatchDoc,
  type HeaderFilterDoc,
  type HttpMatchDoc,
  type ParentRefDoc,
  type PathModifierDoc,
} from './route-schema.ts';
import type { CompiledMatch, CompiledRule, HeaderModifier, Mirror, PathMatcher, PathModifier, Redirect, Rewrite, RuleRetry, RuleTimeouts, ValueMatcher, WeightedBackend } from './types.ts';

export type RouteKind = 'HTTPRoute' | 'GRPCRoute';

/** A validated route with its rules compiled (matches in rule order, then match order). */
export interface ParsedRoute {
  readonly kind: RouteKind;
  /** `HTTPRoute/<ns>/<name>`. */
  readonly ref: string;
  readonly namespace: string;
  readonly name: string;
  /** `metadata.creationTimestamp` in ms since the epoch; 0 when absent (ordered as the oldest). */
  readonly created: number;
  readonly parentRefs: readonly ParentRefDoc[];
  readonly matches: readonly CompiledMatch[];
}

type Fail = (path: FieldPath, message: string) => never;

/**
 * Parse `resource` (an HTTPRoute or GRPCRoute kept from the mesh file).
 * @throws ConfigError naming the route (`HTTPRoute/<ns>/<name>`) and the offending field.
 */
export function parseRoute(resource: KeptResource, resolver: BackendResolver): ParsedRoute {
  const kind = resource.kind as RouteKind;
  const ref = `${kind}/${resource.namespace}/${resource.name}`;
  const fail: Fail = (path, message) => {
    throw new ConfigError(message, locateField(resource, ref, path));
  };
  const schema = kind === 'GRPCRoute' ? GrpcRouteSchema : HttpRouteSchema;
  const parsed = schema.safeParse(resource.object);
  if (!parsed.success) {
    const issue = parsed.error.issues[0];
    fail(issue.path.filter((p): p is string | number => typeof p !== 'symbol'), issue.message);
  }
  const spec = parsed.data!.spec ?? {};
  const ctx: RuleContext = { kind, ref, namespace: resource.namespace, resolver, fail };
  const rules = spec.rules && spec.rules.length > 0 ? spec.rules : [{}];
  const matches: CompiledMatch[] = [];
  rules.forEach((rule, i) => matches.push(...compileRule(rule as RuleDoc, i, ctx)));
  if (spec.hostnames?.length) log.debug({ route: ref }, 'routing: hostnames are not used for routes attached to a Service (the service is the host)');
  const meta = (resource.object.metadata ?? {}) as Record<string, unknown>;
  const created = typeof meta.creationTimestamp === 'string' ? Date.parse(meta.creationTimestamp) : Number.NaN;
  return {
    kind,
    ref,
    namespace: resource.namespace,
    name: resource.name,
    created: Number.isFinite(created) ? created : 0,
    parentRefs: spec.parentRefs ?? [],
    matches,
  };
}

interface RuleContext {
  readonly kind: RouteKind;
  readonly ref: string;
  readonly namespace: string;
  readonly resolver: BackendResolver;
  readonly fail: Fail;
}

/** The kind an HTTPRoute/GRPCRoute `ExtensionRef` filter may name (src/extensions). */
const WAYPOINT_FILTER_GROUP = 'extensions.node-waypoint.dev';
const WAYPOINT_FILTER_KIND = 'WaypointFilter';

/** A rule of either kind (GRPCRoute rules have no timeouts or retry). */
interface RuleDoc {
  readonly name?: string | null;
  readonly matches?: readonly (HttpMatchDoc | GrpcMatchDoc)[] | null;
  readonly filters?: readonly FilterDoc[] | null;
  readonly backendRefs?: readonly BackendRefDoc[] | null;
  readonly timeouts?: { readonly request?: string | null; readonly backendRequest?: string | null } | null;
  readonly retry?: { readonly codes?: readonly number[] | null; readonly attempts?: number | null; readonly backoff?: string | null } | null;
}

const HTTP_FILTERS = new Set(['RequestHeaderModifier', 'ResponseHeaderModifier', 'RequestRedirect', 'URLRewrite', 'RequestMirror', 'ExtensionRef', 'CORS', 'ExternalAuth']);
const GRPC_FILTERS = new Set(['RequestHeaderModifier', 'ResponseHeaderModifier', 'RequestMirror', 'ExtensionRef']);
/** Filter type → the field that must be set with it. */
const FILTER_FIELD: Readonly<Record<string, keyof FilterDoc>> = {
  RequestHeaderModifier: 'requestHeaderModifier',
  ResponseHeaderModifier: 'responseHeaderModifier',
  RequestRedirect: 'requestRedirect',
  URLRewrite: 'urlRewrite',
  RequestMirror: 'requestMirror',
  ExtensionRef: 'extensionRef',
};

function compileRule(doc: RuleDoc, index: number, ctx: RuleContext): CompiledMatch[] {
  const at: FieldPath = ['spec', 'rules', index];
  const { fail } = ctx;
  let requestHeaders: HeaderModifier | undefined;
  let responseHeaders: HeaderModifier | undefined;
  let requestAuthority: string | undefined;
  let redirect: Redirect | undefined;
  let rewrite: Rewrite | undefined;
  let filterError: string | undefined;
  const extensionRefs: string[] = [];
  const mirrors: Mirror[] = [];
  const seen = new Set<string>();
  const matchDocs = doc.matches && doc.matches.length > 0 ? doc.matches : [{}];
  const prefixRewriteOk = matchDocs.length === 1 && ctx.kind === 'HTTPRoute' && ((matchDocs[0] as HttpMatchDoc).path?.type ?? 'PathPrefix') === 'PathPrefix';

  (doc.filters ?? []).forEach((f, i) => {
    const fat = [...at, 'filters', i];
    const allowed = ctx.kind === 'GRPCRoute' ? GRPC_FILTERS : HTTP_FILTERS;
    if (!allowed.has(f.type)) {
      if (ctx.kind === 'GRPCRoute' || !/^[A-Za-z0-9]+$/.test(f.type)) fail([...fat, 'type'], `must be one of ${[...allowed].join(', ')}, got ${JSON.stringify(f.type)}`);
    }
    const field = FILTER_FIELD[f.type];
    if (field && (f[field] === undefined || f[field] === null)) fail(fat, `filter.${field} must be specified for ${f.type} filter.type`);
    for (const [t, other] of Object.entries(FILTER_FIELD)) {
      if (t !== f.type && f[other] !== undefined && f[other] !== null) fail([...fat, other], `filter.${other} must be nil if the filter.type is not ${t}`);
    }
    if (f.type !== 'RequestMirror' && f.type !== 'ExtensionRef') {
      if (seen.has(f.type)) fail(fat, `${f.type} filter cannot be repeated`);
      seen.add(f.type);
    }
    switch (f.type) {
      case 'RequestHeaderModifier': {
        const h = headerFilter(f.requestHeaderModifier, 'request', [...fat, 'requestHeaderModifier'], ctx);
        requestHeaders = h.modifier;
        requestAuthority = h.authority;
        break;
      }
      case 'ResponseHeaderModifier':
        responseHeaders = headerFilter(f.responseHeaderModifier, 'response', [...fat, 'responseHeaderModifier'], ctx).modifier;
        break;
      case 'RequestRedirect': {
        const r = f.requestRedirect!;
        redirect = {
          scheme: r.scheme ?? undefined,
          hostname: r.hostname ?? undefined,
          port: r.port ?? undefined,
          path: r.path ? pathModifier(r.path, [...fat, 'requestRedirect', 'path'], prefixRewriteOk, fail) : undefined,
          statusCode: r.statusCode ?? 302,
        };
        break;
      }
      case 'URLRewrite': {
        const r = f.urlRewrite!;
        rewrite = { hostname: r.hostname ?? undefined, path: r.path ? pathModifier(r.path, [...fat, 'urlRewrite', 'path'], prefixRewriteOk, fail) : undefined };
        break;
      }
      case 'RequestMirror': {
        const m = f.requestMirror!;
        if (m.percent !== undefined && m.percent !== null && m.fraction) fail([...fat, 'requestMirror'], 'only one of percent or fraction may be specified');
        if (m.fraction && m.fraction.numerator > (m.fraction.denominator ?? 100)) fail([...fat, 'requestMirror', 'fraction'], 'numerator must be less than or equal to denominator');
        const b = ctx.resolver.resolve(m.backendRef, ctx.kind, ctx.namespace);
        if (typeof b === 'string') {
          log.warn({ route: ctx.ref, field: formatFieldPath([...fat, 'requestMirror', 'backendRef']) }, `routing: ${b}; requests are not mirrored`);
          break;
        }
        const fraction = m.fraction ? Math.min(1, m.fraction.numerator / (m.fraction.denominator ?? 100)) : m.percent !== undefined && m.percent !== null ? m.percent / 100 : 1;
        mirrors.push({ backend: b, fraction });
        break;
      }
      case 'ExtensionRef': {
        // A LocalObjectReference: only this waypoint's own WaypointFilter kind can be honoured; the
        // extensions engine resolves the name (a missing one makes the rule answer 500 there).
        const ref = f.extensionRef as { group?: unknown; kind?: unknown; name?: unknown };
        if (typeof ref !== 'object' || ref === null || typeof ref.name !== 'string' || ref.name === '') fail([...fat, 'extensionRef', 'name'], 'is required');
        if (ref.group === WAYPOINT_FILTER_GROUP && ref.kind === WAYPOINT_FILTER_KIND) extensionRefs.push(ref.name as string);
        else filterError ??= `ExtensionRef to ${String(ref.kind)} of group ${JSON.stringify(ref.group ?? '')} is not supported by this waypoint (only ${WAYPOINT_FILTER_KIND} of ${WAYPOINT_FILTER_GROUP})`;
        break;
      }
      default:
        filterError ??= `filter ${f.type} is not supported by this waypoint`;
    }
  });
  if (redirect && rewrite) fail([...at, 'filters'], 'may specify either httpRouteFilterRequestRedirect or httpRouteFilterRequestRewrite, but not both');
  if (filterError) log.warn({ route: ctx.ref, rule: index }, `routing: ${filterError}; requests matching this rule answer 500`);

  const backends: WeightedBackend[] = [];
  let totalWeight = 0;
  (doc.backendRefs ?? []).forEach((b, i) => {
    const weight = b.weight ?? 1;
    if (weight === 0) return;
    const bat = [...at, 'backendRefs', i];
    let invalid: string | undefined;
    let reqH: HeaderModifier | undefined;
    let resH: HeaderModifier | undefined;
    let reqAuthority: string | undefined;
    (b.filters ?? []).forEach((f, j) => {
      if (f.type === 'RequestHeaderModifier' && f.requestHeaderModifier) {
        const h = headerFilter(f.requestHeaderModifier, 'request', [...bat, 'filters', j, 'requestHeaderModifier'], ctx);
        reqH = h.modifier;
        reqAuthority = h.authority;
      } else if (f.type === 'ResponseHeaderModifier' && f.responseHeaderModifier) resH = headerFilter(f.responseHeaderModifier, 'response', [...bat, 'filters', j, 'responseHeaderModifier'], ctx).modifier;
      else invalid ??= `backend filter ${f.type} is not supported by this waypoint`;
    });
    const resolved = ctx.resolver.resolve(b, ctx.kind, ctx.namespace);
    if (typeof resolved === 'string') invalid ??= resolved;
    if (invalid) log.warn({ route: ctx.ref, field: formatFieldPath(bat) }, `routing: ${invalid}; its share of requests answers 500`);
    backends.push({ weight, backend: invalid ? undefined : (resolved as Exclude<typeof resolved, string>), invalid, requestHeaders: reqH, responseHeaders: resH, requestAuthority: reqAuthority });
    totalWeight += weight;
  });

  const rule: CompiledRule = Object.freeze({
    route: ctx.ref,
    index,
    name: doc.name ?? undefined,
    filterError,
    extensionRefs: Object.freeze(extensionRefs),
    redirect,
    rewrite,
    requestHeaders,
    responseHeaders,
    requestAuthority,
    mirrors: Object.freeze(mirrors),
    backends: Object.freeze(backends),
    totalWeight,
    timeouts: doc.timeouts ? compileTimeouts(doc.timeouts, [...at, 'timeouts'], fail) : undefined,
    retry: doc.retry ? compileRetry(doc.retry, [...at, 'retry'], fail) : undefined,
  });
  return matchDocs.map((m, i) =>
    Object.freeze(ctx.kind === 'GRPCRoute' ? grpcMatch(m as GrpcMatchDoc, rule, [...at, 'matches', i], fail) : httpMatch(m as HttpMatchDoc, rule, [...at, 'matches', i], fail)),
  );
}

/** Compile a header filter, logging (warn) the entries a proxy never modifies (see `compileHeaderModifier`). */
function headerFilter(doc: HeaderFilterDoc | null | undefined, direction: 'request' | 'response', at: FieldPath, ctx: RuleContext): CompiledHeaderFilter {
  const h = compileHeaderModifier(doc, direction, at, ctx.fail);
  if (h.ignored.length) {
    log.warn({ route: ctx.ref, field: formatFieldPath(at) }, `routing: header edits ignored (connection-specific, framing or host headers are not modifiable, as in Envoy): ${h.ignored.join(', ')}`);
  }
  return h;
}

function pathModifier(doc: PathModifierDoc, at: FieldPath, prefixOk: boolean, fail: Fail): PathModifier {
  if (doc.type === 'ReplaceFullPath') {
    if (typeof doc.replaceFullPath !== 'string') fail([...at, 'replaceFullPath'], 'replaceFullPath must be specified when type is set to ReplaceFullPath');
    if (doc.replacePrefixMatch !== undefined && doc.replacePrefixMatch !== null) fail([...at, 'replacePrefixMatch'], 'type must be ReplacePrefixMatch when replacePrefixMatch is set');
    if (!doc.replaceFullPath!.startsWith('/')) fail([...at, 'replaceFullPath'], `must be an absolute path starting with "/", got ${JSON.stringify(doc.replaceFullPath)}`);
    checkPathChars(doc.replaceFullPath!, [...at, 'replaceFullPath'], fail);
    return { type: 'ReplaceFullPath', value: doc.replaceFullPath! };
  }
  if (typeof doc.replacePrefixMatch !== 'string') fail([...at, 'replacePrefixMatch'], 'replacePrefixMatch must be specified when type is set to ReplacePrefixMatch');
  if (doc.replaceFullPath !== undefined && doc.replaceFullPath !== null) fail([...at, 'replaceFullPath'], 'type must be ReplaceFullPath when replaceFullPath is set');
  // '' is allowed: the matched prefix is removed (`/foo/bar` with prefix `/foo` → `/bar`; GW HTTPPathModifier).
  if (doc.replacePrefixMatch !== '') {
    if (!doc.replacePrefixMatch!.startsWith('/')) fail([...at, 'replacePrefixMatch'], `must be an absolute path starting with "/" or empty, got ${JSON.stringify(doc.replacePrefixMatch)}`);
    checkPathChars(doc.replacePrefixMatch!, [...at, 'replacePrefixMatch'], fail);
  }
  if (!prefixOk) fail(at, 'when using ReplacePrefixMatch, exactly one PathPrefix match must be specified');
  return { type: 'ReplacePrefixMatch', value: doc.replacePrefixMatch! };
}

/**
 * The characters the HTTPPathMatch CRD allows in Exact and PathPrefix values
 * (kubernetes-sigs/gateway-api apis/v1/httproute_types.go `HTTPPathMatch` CEL rule), also required
 * here of path modifier values, which go on the request line as they are.
 */
const PATH_CHARS = /^(?:[-A-Za-z0-9/._~!$&'()*+,;=:@]|[%][0-9a-fA-F]{2})+$/;

function checkPathChars(value: string, at: FieldPath, fail: Fail): void {
  if (!PATH_CHARS.test(value)) fail(at, `must only contain valid characters (matching ${PATH_CHARS.source}), got ${JSON.stringify(value)}`);
  if (/%2f/i.test(value)) fail(at, `must not contain "%2f" or "%2F", got ${JSON.stringify(value)}`);
}

function compileTimeouts(doc: NonNullable<RuleDoc['timeouts']>, at: FieldPath, fail: Fail): RuleTimeouts {
  const ms = (v: string | null | undefined, field: string): number | undefined => {
    if (v === undefined || v === null) return undefined;
    try {
      return parseDuration(v);
    } catch (err) {
      return fail([...at, field], (err as Error).message);
    }
  };
  const requestMs = ms(doc.request, 'request');
  const backendRequestMs = ms(doc.backendRequest, 'backendRequest');
  if (requestMs && backendRequestMs && backendRequestMs > requestMs) fail([...at, 'backendRequest'], 'backendRequest timeout cannot be longer than request timeout');
  return { requestMs, backendRequestMs };
}

function compileRetry(doc: NonNullable<RuleDoc['retry']>, at: FieldPath, fail: Fail): RuleRetry {
  let backoffMs: number | undefined;
  if (doc.backoff !== undefined && doc.backoff !== null) {
    try {
      backoffMs = parseDuration(doc.backoff);
    } catch (err) {
      fail([...at, 'backoff'], (err as Error).message);
    }
  }
  return { attempts: doc.attempts ?? undefined, codes: Object.freeze([...(doc.codes ?? [])]), backoffMs };
}

/** Compile header or query matches, keeping only the first of equivalent names (the spec's rule). */
function valueMatchers(
  docs: readonly { type?: string | null; name: string; value: string }[] | null | undefined,
  at: FieldPath,
  lower: boolean,
  fail: Fail,
): ValueMatcher[] {
  const out: ValueMatcher[] = [];
  const names = new Set<string>();
  (docs ?? []).forEach((d, i) => {
    const name = lower ? d.name.toLowerCase() : d.name;
    if (names.has(name)) return;
    names.add(name);
    if (d.type === 'RegularExpression') {
      try {
        out.push({ name, exact: undefined, re: compileRegex(d.value) });
      } catch (err) {
        fail([...at, i, 'value'], (err as Error).message);
      }
    } else out.push({ name, exact: d.value, re: undefined });
  });
  return out;
}

function httpMatch(doc: HttpMatchDoc, rule: CompiledRule, at: FieldPath, fail: Fail): CompiledMatch {
  const type = doc.path?.type ?? 'PathPrefix';
  const value = doc.path?.value ?? '/';
  let path: PathMatcher;
  if (type === 'RegularExpression') {
    try {
      path = { kind: 'RegularExpression', value, re: compileRegex(value) };
    } catch (err) {
      return fail([...at, 'path', 'value'], (err as Error).message);
    }
  } else {
    if (!value.startsWith('/')) fail([...at, 'path', 'value'], `must be an absolute path starting with "/", got ${JSON.stringify(value)}`);
    if (value.includes('//') || /\/\.\.?(\/|$)/.test(value)) fail([...at, 'path', 'value'], `must not contain "//", "/./" or "/../", got ${JSON.stringify(value)}`);
    if (value.includes('?') || value.includes('#')) fail([...at, 'path', 'value'], `must not contain "?" or "#", got ${JSON.stringify(value)}`);
    checkPathChars(value, [...at, 'path', 'value'], fail);
    path = type === 'Exact' ? { kind: 'Exact', value, re: undefined } : { kind: 'PathPrefix', value: normalizePrefix(value), re: undefined };
  }
  return {
    path,
    method: doc.method ?? undefined,
    headers: valueMatchers(doc.headers, [...at, 'headers'], true, fail),
    query: valueMatchers(doc.queryParams, [...at, 'queryParams'], false, fail),
    rule,
  };
}

const GRPC_SERVICE = /^(?:[A-Za-z_][A-Za-z_0-9]*\.)*[A-Za-z_][A-Za-z_0-9]*$/;
const GRPC_METHOD = /^[A-Za-z_][A-Za-z_0-9]*$/;

/**
 * A GRPCMethodMatch as a path match, as Istio converts GRPCRoutes (istio/istio
 * pilot/pkg/config/kube/gateway conversion.go `createGRPCURIMatch`): service and method → exact
 * `/<service>/<method>`; service only → prefix `/<service>/`; method only or regular expressions →
 * `/<service re>/<method re>` with `[^/]+` for the missing part. No method match: every path.
 */
function grpcMatch(doc: GrpcMatchDoc, rule: CompiledRule, at: FieldPath, fail: Fail): CompiledMatch {
  const m = doc.method;
  let path: PathMatcher = { kind: 'PathPrefix', value: '', re: undefined };
  if (m) {
    const mat = [...at, 'method'];
    const service = m.service ?? undefined;
    const method = m.method ?? undefined;
    if (!service && !method) fail(mat, 'one or both of service or method must be specified');
    if ((m.type ?? 'Exact') === 'Exact') {
      if (service && !GRPC_SERVICE.test(service)) fail([...mat, 'service'], `must be a gRPC service name such as "pkg.Service", got ${JSON.stringify(service)}`);
      if (method && !GRPC_METHOD.test(method)) fail([...mat, 'method'], `must be a gRPC method name, got ${JSON.stringify(method)}`);
      if (service && method) path = { kind: 'Exact', value: `/${service}/${method}`, re: undefined };
      else if (service) path = { kind: 'StringPrefix', value: `/${service}/`, re: undefined };
      else {
        const src = `/[^/]+/${method}`;
        path = { kind: 'RegularExpression', value: src, re: compileRegex(src) };
      }
    } else {
      const src = `/${service || '[^/]+'}/${method || '[^/]+'}`;
      try {
        path = { kind: 'RegularExpression', value: src, re: compileRegex(src) };
      } catch (err) {
        return fail(mat, (err as Error).message);
      }
    }
  }
  return { path, method: undefined, headers: valueMatchers(doc.headers, [...at, 'headers'], true, fail), query: [], rule };
}
