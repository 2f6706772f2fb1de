/**
 * The request side of `istio.authz` (index.ts): the attributes it builds from a tunnel and a
 * request, the changes it makes to the request's header list and to responses, and its local
 * replies.
 */
import { isIP } from 'node:net';
import { rbacDeniedDetails, type AuthzResult, type CustomCheck, type HeaderMutation, type RequestAttributes } from '../../src/authz/index.ts';
import { FilterStatus, ResponseFlag, discardUnreadBody, sendLocalReply, type ConnectionContext, type HeaderList, type ResponseFlagName, type StreamContext } from '../../src/pipeline/index.ts';

/** Envoy's RBAC denial body. */
export const RBAC_DENIED_BODY = 'RBAC: access denied';

/** Apply request header changes (ext_authz allow, JWT output) to the request's header list: value undefined = remove. */
export function editRequestHeaders(headers: HeaderList, changes: readonly (readonly [string, string | undefined])[]): void {
  for (const [name, value] of changes) {
    if (value === undefined) headers.remove(name);
    else headers.set(name, value);
  }
}

/**
 * `remote.ip` at a waypoint: the right-most X-Forwarded-For address (`xff`: every value joined
 * with `,`), else the peer (Envoy, use_remote_address false).
 */
export function remoteAddress(xff: string | undefined, peer: string): string {
  if (xff === undefined) return peer;
  const last = xff.slice(xff.lastIndexOf(',') + 1).trim();
  return isIP(last) ? last : peer;
}

/** The attributes of a tunnel, for TCP decisions (`remote.ip` defaults to the peer). */
export function connectionAttributes(conn: ConnectionContext): RequestAttributes {
  const info = conn.info;
  return {
    principal: info.peer.uri || undefined,
    sourceIp: info.downstreamAddress,
    destinationIp: info.targetIp,
    destinationPort: info.targetPort,
  };
}

/** Details of a CUSTOM rule whose provider cannot be called: Istio's generated deny rule. */
export function unavailableProviderDetails(custom: CustomCheck): string {
  return rbacDeniedDetails({ decision: 'DENY', policy: `istio-ext-authz-${custom.policy}-deny-due-to-bad-CUSTOM-action` });
}

/** This filter's local replies: the unread rest of a body read for ext_authz is dropped first. */
export function localReply(stream: StreamContext, status: number, body: string, flag: ResponseFlagName, details: string): void {
  discardUnreadBody(stream);
  sendLocalReply(stream, status, body, flag, details);
}

/** Envoy ext_authz `encodeHeaders`: add, set, add-if-absent, overwrite-if-exists (append joins with `,`). */
export function applyResponseMutations(headers: HeaderList, edits: readonly HeaderMutation[]): void {
  for (const m of edits) {
    const current = headers.get(m.name);
    switch (m.action) {
      case 'add':
        headers.append(m.name, m.value);
        break;
      case 'add-if-absent':
        if (current === undefined) headers.append(m.name, m.value);
        break;
      case 'overwrite-if-exists':
        if (current !== undefined) headers.set(m.name, m.value);
        break;
      case 'append':
        headers.set(m.name, current === undefined ? m.value : `${current},${m.value}`);
        break;
      case 'set':
        headers.set(m.name, m.value);
        break;
    }
  }
}

/** DENY → 403 `RBAC: access denied` (gRPC: status 7 via the local reply). */
export function enforceDecision(stream: StreamContext, result: AuthzResult): FilterStatus {
  if (result.decision !== 'DENY') return FilterStatus.Continue;
  localReply(stream, 403, RBAC_DENIED_BODY, ResponseFlag.None, rbacDeniedDetails(result));
  return FilterStatus.StopAndReply;
}
