/**
 * The {@link ExtAuthzHook} the authz filter (filters/authz) calls, backed by an
 * {@link ExtAuthzClient}:
 *
 *   const extAuthz = new ExtAuthzClient({ dial: (ep, use) => clusterManager.openTcp(ep, use) });
 *   authzFilterFactory({ extAuthz: createExtAuthzHook(extAuthz, mesh) })   // mesh: the store
 *
 * It builds the check from the tunnel and the request (source = HBONE peer address, port and
 * SPIFFE id; destination = CONNECT target and this waypoint's identity; `:path` as forwarded
 * upstream, i.e. normalized) against the current mesh snapshot, and turns the outcome into the
 * filter's {@link ExtAuthzDecision}. That shape holds headers as one value per name, so the
 * server's header actions are resolved here against the request as it is now: `append`/`add` join
 * with `,` to the current value, `add-if-absent` and `overwrite-if-exists` apply only when the
 * header is absent / present. Headers the server adds to the downstream response on allow are
 * passed on as mutations (`responseHeaders`).
 *
 * Request body (`includeRequestBodyInCheck`, Envoy `with_request_body`; ext_authz.cc
 * `decodeHeaders`/`decodeData`/`isBufferFull`): when the provider asks for it and the request has a
 * body (not a WebSocket upgrade), the body is read up to `maxRequestBytes` first
 * (`bufferRequestBody`; the router later forwards all of it untouched). A body longer than that is
 * answered 413 `Payload Too Large` (details `request_payload_too_large`, no flag, even with
 * `failOpen`) unless `allowPartialMessage`, in which case the check carries the first
 * `maxRequestBytes` and `x-envoy-auth-partial-body: true`.
 */
import { type ExtAuthzDecision, type ExtAuthzHook, headersFromRaw, type CustomCheck, type HeaderLookup, type RequestAttributes } from '../authz/index.ts';
import { bufferRequestBody, requestHasBody, ResponseFlag, type ConnectionContext, type StreamContext } from '../pipeline/index.ts';
import type { MeshSnapshot } from '../state/index.ts';
import type { ExtAuthzClient } from './client.ts';
import type { BodySettings } from './config.ts';
import type { CheckBody, CheckInput, CheckOutcome, HeaderMutation } from './types.ts';

const NO_HEADERS: HeaderLookup = { get: () => undefined, values: () => undefined };

/** Where the current mesh snapshot is read (the mesh store). */
export interface MeshSource {
  readonly current: MeshSnapshot;
}

/** Resolve mutations to one value per name against the request's current headers (lower-case names). */
export function resolveMutations(current: HeaderLookup, muts: readonly HeaderMutation[]): Record<string, string> {
  const out: Record<string, string> = {};
  const valueOf = (name: string) => (name in out ? out[name] : current.get(name));
  for (const m of muts) {
    const now = valueOf(m.name);
    switch (m.action) {
      case 'set':
        out[m.name] = m.value;
        break;
      case 'append':
      case 'add':
        out[m.name] = now === undefined ? m.value : `${now},${m.value}`;
        break;
      case 'add-if-absent':
        if (now === undefined) out[m.name] = m.value;
        break;
      case 'overwrite-if-exists':
        if (now !== undefined) out[m.name] = m.value;
        break;
    }
  }
  return out;
}

function decision(outcome: CheckOutcome, requestHeaders: HeaderLookup): ExtAuthzDecision {
  if (outcome.allow) {
    const headers = resolveMutations(requestHeaders, outcome.headersToUpstream);
    return {
      allow: true,
      ...(Object.keys(headers).length ? { headers } : {}),
      ...(outcome.headersToRemove.length ? { removeHeaders: outcome.headersToRemove } : {}),
      ...(outcome.headersToDownstream.length ? { responseHeaders: outcome.headersToDownstream } : {}),
      ...(outcome.reason === 'failed-open' ? { failedOpen: true } : {}),
    };
  }
  const headers: Record<string, string> = {};
  for (const [n, v] of outcome.headers) headers[n] = n in headers ? `${headers[n]}, ${v}` : v;
  return { allow: false, status: outcome.status, headers, body: outcome.body, details: outcome.details };
}

function peers(conn: ConnectionContext, mesh: MeshSnapshot): Pick<CheckInput, 'source' | 'destination'> {
  const info = conn.info;
  return {
    source: { address: info.downstreamAddress, port: info.downstreamPort, ...(info.peer.uri ? { principal: info.peer.uri } : {}) },
    destination: { address: info.targetIp, port: info.targetPort, principal: mesh.waypoint.identity },
  };
}

/** Envoy's answer to a body over the buffer limit (connection manager `request_payload_too_large`). */
export const PAYLOAD_TOO_LARGE: ExtAuthzDecision = Object.freeze({
  allow: false,
  status: 413,
  body: 'Payload Too Large',
  details: 'request_payload_too_large',
  responseFlag: ResponseFlag.None,
});

/** Read the body the provider wants (see the module comment); a decision when it is too large. */
async function readBody(stream: StreamContext, settings: BodySettings | undefined): Promise<CheckBody | ExtAuthzDecision | undefined> {
  if (!settings || settings.maxRequestBytes === 0 || !requestHasBody(stream)) return undefined;
  if ((stream.req as { upgrade?: boolean }).upgrade === true) return undefined;
  const read = await bufferRequestBody(stream, settings.maxRequestBytes);
  if (read.data.length > settings.maxRequestBytes && !settings.allowPartialMessage) return PAYLOAD_TOO_LARGE;
  return { data: read.data };
}

/** An {@link ExtAuthzHook} over `client`, reading providers from `mesh.current`. */
export function createExtAuthzHook(client: ExtAuthzClient, mesh: MeshSource): ExtAuthzHook {
  return {
    async check(_attrs: RequestAttributes, stream: StreamContext, custom: CustomCheck): Promise<ExtAuthzDecision> {
      const snapshot = mesh.current;
      const body = await readBody(stream, client.provider(snapshot, custom.provider)?.body);
      if (body && !('data' in body)) return body;
      const outcome = await client.check(snapshot, custom.provider, {
        ...peers(stream.conn, snapshot),
        http: {
          ...(stream.requestId ? { id: stream.requestId, requestId: stream.requestId } : {}),
          method: stream.method,
          path: stream.forwardPath ?? stream.path,
          host: stream.authority,
          protocol: stream.protocol,
          headers: stream.requestHeaders.raw,
          time: new Date(stream.startTime),
          size: body ? body.data.length : stream.bytesReceived,
          ...(body ? { body } : {}),
        },
      });
      return decision(outcome, headersFromRaw(stream.requestHeaders.raw));
    },
    async checkConnection(_attrs: RequestAttributes, conn: ConnectionContext, custom: CustomCheck): Promise<ExtAuthzDecision> {
      const snapshot = mesh.current;
      return decision(await client.check(snapshot, custom.provider, peers(conn, snapshot)), NO_HEADERS);
    },
  };
}
