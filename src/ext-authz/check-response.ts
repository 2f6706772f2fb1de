/**
 * Turning an authorization server's answer into a {@link CheckOutcome}, as Envoy does:
 *
 * gRPC (envoyproxy/envoy source/extensions/filters/common/ext_authz/ext_authz_grpc_impl.cc `onSuccess`,
 * `toHeaderMutationAction`):
 * - `CheckResponse.status.code == 0` (also when `status` is unset) → allowed, with the
 *   `ok_response` header mutations (`headers` → upstream request, `headers_to_remove`,
 *   `response_headers_to_add` → downstream response);
 * - any other code → denied: `denied_response.status` (403 when unset or 0), its headers and body;
 * - header actions: deprecated `append` set → `true` appends to the request header (adds a line
 *   on responses), `false` overwrites; otherwise `append_action`: APPEND_IF_EXISTS_OR_ADD → add,
 *   ADD_IF_ABSENT, OVERWRITE_IF_EXISTS_OR_ADD → set, OVERWRITE_IF_EXISTS; unknown → set.
 *
 * HTTP (ext_authz_http_impl.cc `toResponse`, `SuccessResponse`, `ClientConfig`):
 * - 5xx → error (fail-open applies); 200 → allowed: headers matching `headersToUpstreamOnAllow`
 *   set on the request, headers matching `headersToDownstreamOnAllow` added to the response, names
 *   listed in `x-envoy-auth-headers-to-remove` dropped from the request;
 * - any other status → denied with that status, the body, and the response headers matching
 *   `headersToDownstreamOnDeny` (when unset: all but Host; when set, `:status`, Content-Length,
 *   WWW-Authenticate and Location are added to the list).
 *
 * Headers that never make sense on a local reply (hop-by-hop ones, Content-Length: the reply sets
 * its own) and mutations of pseudo-headers or Host are dropped.
 */
import { ResponseFlag } from '../pipeline/index.ts';
import type { HttpProviderSettings } from './config.ts';
import { HeaderAppendAction, type CheckResponse, type HeaderValueOption } from './proto.ts';
import type { CheckAllowed, CheckDenied, CheckOutcome, HeaderMutation } from './types.ts';

/** Response header of an HTTP authorization server listing request headers to remove. */
export const HEADERS_TO_REMOVE_HEADER = 'x-envoy-auth-headers-to-remove';

const HOP_BY_HOP = new Set(['connection', 'keep-alive', 'proxy-connection', 'transfer-encoding', 'upgrade', 'te', 'content-length']);

const textDecoder = new TextDecoder();

function actionOf(opt: HeaderValueOption, responseHeader: boolean): HeaderMutation['action'] {
  if (opt.append !== undefined) {
    if (responseHeader && opt.append) return 'add';
    return opt.append ? 'append' : 'set';
  }
  switch (opt.appendAction) {
    case HeaderAppendAction.APPEND_IF_EXISTS_OR_ADD:
      return 'add';
    case HeaderAppendAction.ADD_IF_ABSENT:
      return 'add-if-absent';
    case HeaderAppendAction.OVERWRITE_IF_EXISTS:
      return 'overwrite-if-exists';
    default:
      return 'set';
  }
}

function mutations(options: readonly HeaderValueOption[], responseHeader: boolean): HeaderMutation[] {
  const out: HeaderMutation[] = [];
  for (const opt of options) {
    const h = opt.header;
    if (!h || h.key === '') continue;
    const name = h.key.toLowerCase();
    if (name.startsWith(':') || name === 'host') continue;
    const value = h.value !== '' || h.rawValue.length === 0 ? h.value : textDecoder.decode(h.rawValue);
    out.push({ name, value, action: actionOf(opt, responseHeader) });
  }
  return out;
}

/**
 * Apply `muts` to a `[name, value]` list (names lower-case) and return the new list: the
 * semantics of {@link HeaderMutation}'s actions.
 */
export function applyHeaderMutations(headers: readonly (readonly [string, string])[], muts: readonly HeaderMutation[]): [string, string][] {
  let list: [string, string][] = headers.map(([n, v]) => [n, v]);
  for (const m of muts) {
    const present = list.some(([n]) => n === m.name);
    switch (m.action) {
      case 'add':
        list.push([m.name, m.value]);
        break;
      case 'add-if-absent':
        if (!present) list.push([m.name, m.value]);
        break;
      case 'append': {
        const i = list.findIndex(([n]) => n === m.name);
        if (i < 0) list.push([m.name, m.value]);
        else list[i] = [m.name, `${list[i][1]},${m.value}`];
        break;
      }
      case 'overwrite-if-exists':
      case 'set':
        if (!present && m.action === 'overwrite-if-exists') break;
        list = list.filter(([n]) => n !== m.name);
        list.push([m.name, m.value]);
        break;
    }
  }
  return list;
}

function denied(status: number, headers: readonly (readonly [string, string])[], body: string): CheckDenied {
  const clean = headers.filter(([n]) => !n.startsWith(':') && !HOP_BY_HOP.has(n));
  return { allow: false, status, headers: clean, body, reason: 'denied', responseFlag: ResponseFlag.UnauthorizedExternalService, details: 'ext_authz_denied' };
}

/** Result of a gRPC `Check` that returned a message; undefined never. */
export function outcomeFromCheckResponse(res: CheckResponse): CheckOutcome {
  const code = res.status?.code ?? 0;
  if (code === 0) {
    const ok = res.httpResponse.case === 'okResponse' ? res.httpResponse.value : undefined;
    const allowed: CheckAllowed = {
      allow: true,
      reason: 'ok',
      headersToUpstream: ok ? mutations(ok.headers, false) : [],
      headersToRemove: ok ? ok.headersToRemove.map((h) => h.toLowerCase()).filter((h) => !h.startsWith(':') && h !== 'host') : [],
      headersToDownstream: ok ? mutations(ok.responseHeadersToAdd, true) : [],
    };
    return allowed;
  }
  const d = res.httpResponse.case === 'deniedResponse' ? res.httpResponse.value : undefined;
  const status = d?.status && d.status.code > 0 ? d.status.code : 403;
  return denied(status, d ? applyHeaderMutations([], mutations(d.headers, true)) : [], d?.body ?? '');
}

/** An HTTP authorization server's answer (headers lower-case, in order). */
export interface HttpCheckAnswer {
  readonly status: number;
  readonly headers: readonly (readonly [string, string])[];
  readonly body: Buffer;
}

const ALWAYS_ON_DENY = new Set(['content-length', 'www-authenticate', 'location']);

/**
 * Result of an HTTP check answer, or `undefined` for a 5xx (an error: the caller applies
 * `failOpen` / `statusOnError`).
 */
export function outcomeFromHttpAnswer(answer: HttpCheckAnswer, settings: HttpProviderSettings): CheckOutcome | undefined {
  if (answer.status >= 500 && answer.status <= 599) return undefined;
  const headers = answer.headers.filter(([n]) => n !== HEADERS_TO_REMOVE_HEADER);
  if (answer.status === 200) {
    const remove: string[] = [];
    for (const [n, v] of answer.headers) {
      if (n !== HEADERS_TO_REMOVE_HEADER) continue;
      for (const part of v.split(',')) {
        const name = part.trim().toLowerCase();
        if (name && !name.startsWith(':') && name !== 'host') remove.push(name);
      }
    }
    const up = settings.headersToUpstreamOnAllow;
    const down = settings.headersToDownstreamOnAllow;
    return {
      allow: true,
      reason: 'ok',
      headersToUpstream: up ? headers.filter(([n]) => up(n) && n !== 'host' && !n.startsWith(':')).map(([name, value]) => ({ name, value, action: 'set' as const })) : [],
      headersToRemove: remove,
      headersToDownstream: down ? headers.filter(([n]) => down(n)).map(([name, value]) => ({ name, value, action: 'add' as const })) : [],
    };
  }
  const onDeny = settings.headersToDownstreamOnDeny;
  const pass = onDeny ? (n: string) => onDeny(n) || ALWAYS_ON_DENY.has(n) : (n: string) => n !== 'host';
  return denied(answer.status, headers.filter(([n]) => pass(n)), answer.body.toString('utf8'));
}
