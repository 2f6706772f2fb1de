/**
 * The request Envoy's HTTP ext_authz client sends (envoyproxy/envoy
 * source/extensions/filters/common/ext_authz/ext_authz_http_impl.cc `RawHttpClientImpl::check`,
 * `ClientConfig::toRequestMatchers`), from the same header map a gRPC check carries:
 *
 * - method: the original `:method`; path: `pathPrefix` + the original `:path` (query included);
 *   `:authority`: the original one (the server sees the client's Host);
 * - headers: Authorization, `:method`, `:path`, `:authority` always, plus those matching
 *   `includeRequestHeadersInCheck`; then `includeAdditionalHeadersInCheck` (overwriting);
 * - `content-length`: the length of the buffered body sent (0 and no body otherwise).
 */
import type { HttpProviderSettings } from './config.ts';
import { bodyToSend, checkHeaderMap } from './check-request.ts';
import type { CheckInput } from './types.ts';

/** What to send to an HTTP authorization server. */
export interface HttpCheckRequest {
  readonly method: string;
  readonly path: string;
  readonly authority: string;
  /** `[name, value]`, lower-case names, no pseudo-headers. */
  readonly headers: readonly (readonly [string, string])[];
  readonly body: Buffer;
}

const ALWAYS = new Set(['authorization', ':method', ':path', ':authority']);

/** Build the HTTP check request for `input` (which must have `http`). */
export function buildHttpCheckRequest(input: CheckInput, settings: HttpProviderSettings): HttpCheckRequest {
  const http = input.http;
  if (!http) throw new Error('an HTTP ext_authz provider checks HTTP requests only');
  const map = checkHeaderMap(http);
  const body = bodyToSend(input, settings.body);
  if (body) map['x-envoy-auth-partial-body'] = body.partial ? 'true' : 'false';
  const include = settings.includeRequestHeaders;
  let headers: [string, string][] = [];
  for (const [name, value] of Object.entries(map)) {
    if (name === 'content-length') continue;
    if (!ALWAYS.has(name) && !(include && include(name))) continue;
    if (name.startsWith(':')) continue;
    headers.push([name, value]);
  }
  for (const [name, value] of settings.additionalHeaders) {
    headers = headers.filter(([n]) => n !== name);
    headers.push([name, value]);
  }
  const data = body?.data ?? Buffer.alloc(0);
  headers.push(['content-length', String(data.length)]);
  return { method: map[':method'], path: `${settings.pathPrefix}${map[':path']}`, authority: map[':authority'], headers, body: data };
}
