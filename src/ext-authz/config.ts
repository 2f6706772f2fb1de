/**
 * MeshConfig `extensionProviders[]` entries of kind `envoyExtAuthzGrpc` / `envoyExtAuthzHttp`
 * (istio/api mesh/v1alpha1/config.proto `EnvoyExternalAuthorizationGrpcProvider`,
 * `EnvoyExternalAuthorizationHttpProvider`, `EnvoyExternalAuthorizationRequestBody`), read into the
 * settings Envoy's ext_authz filter gets from istiod (istio/istio
 * `pilot/pkg/security/authz/builder/extauthz.go` `buildExtAuthzHTTP`, `buildExtAuthzGRPC`,
 * `generateHTTPConfig`, `generateGRPCConfig`, `generateHeaders`, `timeoutOrDefault`).
 *
 * - `timeout`: a protobuf JSON Duration (`"0.5s"`, `"10s"`); default 600 s (Istio's
 *   `timeoutOrDefault`, not Envoy's 200 ms).
 * - `statusOnError`: an HTTP status as a string; default 403 (Envoy's `status_on_error` default).
 * - Header lists (`includeRequestHeadersInCheck`, `headersToUpstreamOnAllow`, ...): exact, prefix
 *   (`abc*`) or suffix (`*abc`) matches, case-insensitive (`generateHeaders` sets `IgnoreCase`); a
 *   lone `*` is rejected. `includeHeadersInCheck` (deprecated) is used only when
 *   `includeRequestHeadersInCheck` is empty.
 */
import { WaypointError } from '../util/index.ts';

/** Default `timeout` of both provider kinds (ms): Istio's `timeoutOrDefault`. */
export const DEFAULT_TIMEOUT_MS = 600_000;
/** Default `statusOnError` (Envoy's ext_authz `status_on_error` default, 403 Forbidden). */
export const DEFAULT_STATUS_ON_ERROR = 403;

/** A provider entry that cannot be used (the message says which field and why). */
export class ExtAuthzConfigError extends WaypointError {
  constructor(message: string) {
    super('WP_ERR_EXT_AUTHZ_CONFIG', message);
    this.name = 'ExtAuthzConfigError';
  }
}

/** `includeRequestBodyInCheck` (Envoy `with_request_body`). */
export interface BodySettings {
  /** Bytes of body sent at most (`max_request_bytes`). 0: Envoy sends no body. */
  readonly maxRequestBytes: number;
  /** Send a truncated body instead of answering 413 when the body is larger. */
  readonly allowPartialMessage: boolean;
  /** gRPC only: body in `raw_body` (bytes) instead of `body` (UTF-8 string). */
  readonly packAsBytes: boolean;
}

/** A header-name matcher compiled from an Istio header list. */
export type NameMatcher = (lowerName: string) => boolean;

interface CommonSettings {
  readonly name: string;
  /** `[<namespace>/]<hostname>` as written. */
  readonly service: string;
  /** The service port. */
  readonly port: number;
  readonly timeoutMs: number;
  readonly failOpen: boolean;
  readonly statusOnError: number;
  readonly body?: BodySettings;
}

export interface GrpcProviderSettings extends CommonSettings {
  readonly kind: 'grpc';
}

export interface HttpProviderSettings extends CommonSettings {
  readonly kind: 'http';
  /** Prepended to the request path (`pathPrefix`); '' when unset. */
  readonly pathPrefix: string;
  /** Request headers sent besides the defaults; undefined when the list is empty. */
  readonly includeRequestHeaders?: NameMatcher;
  /** `includeAdditionalHeadersInCheck`, sorted by name (istiod sorts them). */
  readonly additionalHeaders: readonly (readonly [string, string])[];
  /** `headersToUpstreamOnAllow`; undefined = none. */
  readonly headersToUpstreamOnAllow?: NameMatcher;
  /** `headersToDownstreamOnDeny`; undefined = every header but Host. */
  readonly headersToDownstreamOnDeny?: NameMatcher;
  /** `headersToDownstreamOnAllow`; undefined = none. */
  readonly headersToDownstreamOnAllow?: NameMatcher;
}

export type ProviderSettings = GrpcProviderSettings | HttpProviderSettings;

const isRecord = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);

/**
 * A protobuf JSON Duration string (`"1s"`, `"0.250s"`, `"-1s"` rejected) in ms, rounded up to a
 * whole ms. Numbers are taken as seconds, as a YAML-to-JSON conversion may produce them.
 * @throws ExtAuthzConfigError when it is neither.
 */
export function parseDurationMs(value: unknown, field: string): number {
  if (typeof value === 'number' && Number.isFinite(value) && value >= 0) return Math.ceil(value * 1000);
  if (typeof value === 'string') {
    const m = /^(\d+)(?:\.(\d{1,9}))?s$/.exec(value.trim());
    if (m) return Number(m[1]) * 1000 + Math.ceil(Number(`0.${m[2] ?? '0'}`) * 1000);
  }
  throw new ExtAuthzConfigError(`${field} must be a duration such as "0.5s" or "10s", got ${JSON.stringify(value)}`);
}

/** Compile an Istio header list (exact, `prefix*`, `*suffix`; case-insensitive). */
export function headerListMatcher(list: unknown, field: string): NameMatcher | undefined {
  if (list === undefined || list === null) return undefined;
  if (!Array.isArray(list) || list.some((x) => typeof x !== 'string')) throw new ExtAuthzConfigError(`${field} must be a list of header names`);
  if (list.length === 0) return undefined;
  const tests: NameMatcher[] = (list as string[]).map((raw) => {
    if (raw === '*') throw new ExtAuthzConfigError(`a single wildcard ("*") is not supported, change it to either prefix or suffix match: ${field}`);
    const h = raw.toLowerCase();
    if (h.startsWith('*')) return (n) => n.endsWith(h.slice(1));
    if (h.endsWith('*')) return (n) => n.startsWith(h.slice(0, -1));
    return (n) => n === h;
  });
  return (name) => tests.some((t) => t(name));
}

function bodySettings(value: unknown, field: string): BodySettings | undefined {
  if (value === undefined || value === null) return undefined;
  if (!isRecord(value)) throw new ExtAuthzConfigError(`${field} must be a mapping`);
  const max = value.maxRequestBytes ?? 0;
  if (typeof max !== 'number' || !Number.isInteger(max) || max < 0 || max > 0xffffffff) {
    throw new ExtAuthzConfigError(`${field}.maxRequestBytes must be a non-negative integer, got ${JSON.stringify(max)}`);
  }
  return { maxRequestBytes: max, allowPartialMessage: value.allowPartialMessage === true, packAsBytes: value.packAsBytes === true };
}

function statusOnError(value: unknown): number {
  if (value === undefined || value === null || value === '') return DEFAULT_STATUS_ON_ERROR;
  const text = String(value);
  if (!/^[1-5]\d\d$/.test(text)) throw new ExtAuthzConfigError(`invalid statusOnError ${JSON.stringify(value)}`);
  return Number(text);
}

function common(name: string, s: Record<string, unknown>): CommonSettings {
  const port = s.port;
  if (typeof port !== 'number' || !Number.isInteger(port) || port < 1 || port > 65535) {
    throw new ExtAuthzConfigError(`port must be in the range [1, 65535], found: ${JSON.stringify(port)}`);
  }
  if (typeof s.service !== 'string' || s.service === '') throw new ExtAuthzConfigError('service must not be empty');
  const body = bodySettings(s.includeRequestBodyInCheck, 'includeRequestBodyInCheck');
  return {
    name,
    service: s.service,
    port,
    timeoutMs: s.timeout === undefined || s.timeout === null ? DEFAULT_TIMEOUT_MS : parseDurationMs(s.timeout, 'timeout'),
    failOpen: s.failOpen === true,
    statusOnError: statusOnError(s.statusOnError),
    ...(body ? { body } : {}),
  };
}

/**
 * Read one `extensionProviders[]` entry.
 * @returns undefined when the entry is not an ext_authz provider (tracing, logging, ...).
 * @throws ExtAuthzConfigError naming the problem when it is one but cannot be used.
 */
export function parseProviderSettings(entry: unknown): ProviderSettings | undefined {
  if (!isRecord(entry) || typeof entry.name !== 'string') return undefined;
  const name = entry.name;
  if (isRecord(entry.envoyExtAuthzGrpc)) return { kind: 'grpc', ...common(name, entry.envoyExtAuthzGrpc) };
  if (!isRecord(entry.envoyExtAuthzHttp)) return undefined;
  const s = entry.envoyExtAuthzHttp;
  const pathPrefix = s.pathPrefix ?? '';
  if (typeof pathPrefix !== 'string' || (pathPrefix !== '' && !pathPrefix.startsWith('/'))) {
    throw new ExtAuthzConfigError(`pathPrefix must begin with \`/\`, found: ${JSON.stringify(pathPrefix)}`);
  }
  const additional = s.includeAdditionalHeadersInCheck ?? {};
  if (!isRecord(additional) || Object.values(additional).some((v) => typeof v !== 'string')) {
    throw new ExtAuthzConfigError('includeAdditionalHeadersInCheck must map header names to string values');
  }
  const include =
    headerListMatcher(s.includeRequestHeadersInCheck, 'includeRequestHeadersInCheck') ?? headerListMatcher(s.includeHeadersInCheck, 'includeHeadersInCheck');
  const upstream = headerListMatcher(s.headersToUpstreamOnAllow, 'headersToUpstreamOnAllow');
  const onDeny = headerListMatcher(s.headersToDownstreamOnDeny, 'headersToDownstreamOnDeny');
  const onAllow = headerListMatcher(s.headersToDownstreamOnAllow, 'headersToDownstreamOnAllow');
  return {
    kind: 'http',
    ...common(name, s),
    pathPrefix,
    additionalHeaders: Object.entries(additional as Record<string, string>)
      .map(([k, v]) => [k.toLowerCase(), v] as const)
      .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)),
    ...(include ? { includeRequestHeaders: include } : {}),
    ...(upstream ? { headersToUpstreamOnAllow: upstream } : {}),
    ...(onDeny ? { headersToDownstreamOnDeny: onDeny } : {}),
    ...(onAllow ? { headersToDownstreamOnAllow: onAllow } : {}),
  };
}
