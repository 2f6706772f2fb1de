/**
 * Compiled route tables: immutable shapes built once per mesh snapshot by `compile.ts` and read
 * by the router on the data path (one Map lookup, then an ordered scan of the matches).
 */
import type { RE2JS } from 're2js';
import type { Service, ServicePort, Target } from '../state/index.ts';

/** How a match tests the request path. `StringPrefix` is a plain string prefix (GRPCRoute service matches). */
export type PathKind = 'Exact' | 'PathPrefix' | 'StringPrefix' | 'RegularExpression';

export interface PathMatcher {
  readonly kind: PathKind;
  /** The path, prefix (trailing `/` removed for PathPrefix, except `/` itself) or regex source. */
  readonly value: string;
  /** RE2 regex for `RegularExpression`, matched against the whole path. */
  readonly re: RE2JS | undefined;
}

/** A header or query parameter test: exact value, or a regex over the whole value. */
export interface ValueMatcher {
  /** Header names lower-case; query parameter names as written (case-sensitive, as the spec says). */
  readonly name: string;
  readonly exact: string | undefined;
  /** RE2 regex matched against the whole value. */
  readonly re: RE2JS | undefined;
}

/** One match of one rule, with its precedence already applied (tables hold them sorted). */
export interface CompiledMatch {
  readonly path: PathMatcher;
  /** Upper-case method, or undefined for any. */
  readonly method: string | undefined;
  readonly headers: readonly ValueMatcher[];
  readonly query: readonly ValueMatcher[];
  readonly rule: CompiledRule;
}

/** Header edits of RequestHeaderModifier / ResponseHeaderModifier (names lower-case). */
export interface HeaderModifier {
  readonly set: readonly (readonly [string, string])[];
  readonly add: readonly (readonly [string, string])[];
  readonly remove: readonly string[];
}

/** HTTPPathModifier. */
export interface PathModifier {
  readonly type: 'ReplaceFullPath' | 'ReplacePrefixMatch';
  readonly value: string;
}

export interface Redirect {
  readonly scheme: 'http' | 'https' | undefined;
  readonly hostname: string | undefined;
  readonly port: number | undefined;
  readonly path: PathModifier | undefined;
  readonly statusCode: number;
}

export interface Rewrite {
  readonly hostname: string | undefined;
  readonly path: PathModifier | undefined;
}

/** A backend reference resolved against the snapshot. */
export interface ResolvedBackend {
  /** The backend service port as a router target (its endpoints are dialed directly). */
  readonly target: Target & { readonly kind: 'service' };
  readonly service: Service;
  readonly port: ServicePort;
  /** Envoy cluster name: `inbound-vip|<port>|http|<host>` when this waypoint serves the service, else `outbound|<port>||<host>`. */
  readonly cluster: string;
}

/** One weighted entry of a rule: a resolved backend, or why it is invalid (its share answers 500). */
export interface WeightedBackend {
  readonly weight: number;
  readonly backend: ResolvedBackend | undefined;
  readonly invalid: string | undefined;
  /** HTTPBackendRef filters (header modifiers only). */
  readonly requestHeaders: HeaderModifier | undefined;
  readonly responseHeaders: HeaderModifier | undefined;
  /** A `Host` set by the backend's RequestHeaderModifier: an authority rewrite (see `compileHeaderModifier`). */
  readonly requestAuthority: string | undefined;
}

export interface Mirror {
  readonly backend: ResolvedBackend;
  /** Fraction of requests mirrored, 0..1 (1 = all). */
  readonly fraction: number;
}

/** Per-rule overrides of the router's route settings (ms, counts). */
export interface RuleTimeouts {
  /** `timeouts.request`: the whole request including retries; 0 = none; undefined = bootstrap's. */
  readonly requestMs: number | undefined;
  /** `timeouts.backendRequest`: each attempt; 0 / undefined = none. */
  readonly backendRequestMs: number | undefined;
}

export interface RuleRetry {
  /** Retries after the first attempt; undefined = Istio's default (2). */
  readonly attempts: number | undefined;
  /** Status codes retried (besides Istio's connect-failure, refused-stream, unavailable, cancelled). */
  readonly codes: readonly number[];
  /** Base back-off between attempts (ms); undefined = Envoy's 25 ms. */
  readonly backoffMs: number | undefined;
}

/** One rule of one route. */
export interface CompiledRule {
  /** `HTTPRoute/<ns>/<name>` or `GRPCRoute/<ns>/<name>`. */
  readonly route: string;
  readonly index: number;
  /** `rules[].name` (Gateway API v1.2+): what a policy's `sectionName` names the rule by. */
  readonly name: string | undefined;
  /**
   * Set when the rule uses a filter this waypoint cannot apply (CORS, unknown types, an ExtensionRef
   * to another kind): its requests answer 500, as the spec requires of filters that cannot be honoured.
   */
  readonly filterError: string | undefined;
  /** Names of the WaypointFilters (rule's namespace) its `ExtensionRef` filters name, in order. */
  readonly extensionRefs: readonly string[];
  readonly redirect: Redirect | undefined;
  readonly rewrite: Rewrite | undefined;
  readonly requestHeaders: HeaderModifier | undefined;
  readonly responseHeaders: HeaderModifier | undefined;
  /** A `Host` set by the rule's RequestHeaderModifier: an authority rewrite (see `compileHeaderModifier`). */
  readonly requestAuthority: string | undefined;
  readonly mirrors: readonly Mirror[];
  /** Weighted backends (weight > 0 only); empty = every request answers 500. */
  readonly backends: readonly WeightedBackend[];
  readonly totalWeight: number;
  readonly timeouts: RuleTimeouts | undefined;
  readonly retry: RuleRetry | undefined;
}

/** The routes of one service port for one set of clients, matches sorted by precedence. */
export interface RouteTable {
  readonly matches: readonly CompiledMatch[];
  /** Names of the routes merged into this table (precedence order). */
  readonly routes: readonly string[];
}

/** The routes attached to one served service port. */
export interface ServicePortRoutes {
  /** Producer routes (route in the service's namespace): every client. */
  readonly producer: RouteTable | undefined;
  /** Consumer routes by route namespace: only clients in that namespace, replacing the producer routes for them. */
  readonly consumers: ReadonlyMap<string, RouteTable>;
}
