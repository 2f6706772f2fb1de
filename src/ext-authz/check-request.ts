/**
 * The `CheckRequest` Envoy's ext_authz filter builds for a request (envoyproxy/envoy
 * source/extensions/filters/common/ext_authz/check_request_utils.cc `createHttpCheck`,
 * `setAttrContextPeer`, `setHttpRequest`, `setRequestTime`; `createTcpCheck` for TCP):
 *
 * - `source` / `destination`: socket address and principal (the peer's URI SAN) of each side;
 * - `request.time`: request start; `request.http`: id, method, path (query included), host,
 *   scheme, size (bytes received), protocol, and every request header in a map with lower-case
 *   keys, pseudo-headers included (`:authority`, `:method`, `:path`, `:scheme`; Host is
 *   `:authority` in Envoy's header map, so there is no `host` key), repeated headers joined with
 *   `,`, a client-sent `x-envoy-auth-partial-body` dropped; `x-request-id` is there (the
 *   connection manager set it before the filter ran);
 * - with a buffered body (`includeRequestBodyInCheck`): at most `maxRequestBytes` of it in `body`
 *   (UTF-8) or `raw_body` (`packAsBytes`), and `x-envoy-auth-partial-body: true|false` in the
 *   header map (true when more than `maxRequestBytes` were buffered).
 * - `query` and `fragment` stay empty (Envoy never fills them).
 */
import { create } from '@bufbuild/protobuf';
import { timestampFromDate } from '@bufbuild/protobuf/wkt';
import type { BodySettings } from './config.ts';
import { CheckRequestSchema, type CheckRequest } from './proto.ts';
import type { CheckInput, CheckPeer } from './types.ts';

/** Header Envoy adds to tell the server whether the body it got was cut. */
export const PARTIAL_BODY_HEADER = 'x-envoy-auth-partial-body';

let nextId = 1;

/** The request's header map as Envoy fills `HttpRequest.headers` (see the module comment). */
export function checkHeaderMap(input: NonNullable<CheckInput['http']>): Record<string, string> {
  const map: Record<string, string> = Object.create(null) as Record<string, string>;
  map[':authority'] = input.host;
  map[':method'] = input.method;
  map[':path'] = input.path;
  map[':scheme'] = input.scheme ?? 'http';
  const raw = input.headers;
  for (let i = 0; i + 1 < raw.length; i += 2) {
    const name = raw[i].toLowerCase();
    // Envoy's header map has no `host`: its codecs store HTTP/1's Host as `:authority`.
    if (name.startsWith(':') || name === 'host' || name === PARTIAL_BODY_HEADER) continue;
    map[name] = map[name] === undefined ? raw[i + 1] : `${map[name]},${raw[i + 1]}`;
  }
  // The connection manager's x-request-id (generated when the client sent none: StreamContext).
  if (input.requestId && map['x-request-id'] === undefined) map['x-request-id'] = input.requestId;
  return { ...map };
}

/** The body part sent and whether it is partial; undefined when no body is sent. */
export function bodyToSend(input: CheckInput, settings: BodySettings | undefined): { data: Buffer; partial: boolean } | undefined {
  const body = input.http?.body;
  if (!settings || settings.maxRequestBytes === 0 || !body) return undefined;
  const data = body.data.subarray(0, settings.maxRequestBytes);
  return { data, partial: data.length !== body.data.length };
}

function peer(p: CheckPeer) {
  return {
    address: { address: { case: 'socketAddress' as const, value: { address: p.address, portSpecifier: { case: 'portValue' as const, value: p.port } } } },
    principal: p.principal ?? '',
  };
}

/** Build the `CheckRequest` for `input`. */
export function buildCheckRequest(input: CheckInput, settings: BodySettings | undefined): CheckRequest {
  const http = input.http;
  if (!http) return create(CheckRequestSchema, { attributes: { source: peer(input.source), destination: peer(input.destination) } });
  const headers = checkHeaderMap(http);
  const body = bodyToSend(input, settings);
  if (body) headers[PARTIAL_BODY_HEADER] = body.partial ? 'true' : 'false';
  return create(CheckRequestSchema, {
    attributes: {
      source: peer(input.source),
      destination: peer(input.destination),
      request: {
        time: timestampFromDate(http.time ?? new Date()),
        http: {
          id: http.id ?? String(nextId++),
          method: http.method,
          headers,
          path: http.path,
          host: http.host,
          scheme: http.scheme ?? 'http',
          size: BigInt(http.size ?? http.body?.data.length ?? 0),
          protocol: http.protocol ?? 'HTTP/1.1',
          ...(body ? (settings!.packAsBytes ? { rawBody: body.data } : { body: body.data.toString('utf8') }) : {}),
        },
      },
    },
  });
}
