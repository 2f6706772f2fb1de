/**
 * The filter API: everything a filter (filters/*) and the code that runs chains may use of the
 * pipeline. Filters import this entry and engine entries (src/authz, src/authn, src/netpol,
 * src/peer), never a pipeline module directly.
 *
 *   onRequestHeaders(stream) {
 *     if (stream.requestHeaders.get('x-debug') !== undefined) stream.requestHeaders.remove('x-debug');
 *     if (denied) {
 *       sendLocalReply(stream, 403, 'RBAC: access denied', ResponseFlag.None, 'rbac_access_denied');
 *       return FilterStatus.StopAndReply;
 *     }
 *     return FilterStatus.Continue;
 *   }
 */
export { FilterStatus, type Filter, type FilterEnv, type FilterFactory, type FilterModuleFactory, type PhaseResult, type TerminalFilter } from './filter.ts';
export {
  ConnectionContext,
  StreamContext,
  type BufferedBody,
  type ConnectInfo,
  type DownstreamRequest,
  type DownstreamResponse,
  type Http2DownstreamRequest,
  type Http2DownstreamResponse,
  type RequestHead,
  type StreamPhases,
} from './context.ts';
export { HeaderList, isHopByHop, namesMoreHeaders, stripHopByHop } from './headers.ts';
export { defineSlot, type Slot } from './slots.ts';
export { downstreamClosed, grpcMessageEncode, httpToGrpcStatus, resetDownstream, respond, responseComplete, sendLocalReply } from './local-reply.ts';
export { asksForContinue, bodyAfterBuffer, bufferRequestBody, discardUnreadBody, requestBody, requestHasBody } from './request-body.ts';
export { FilterChain } from './chain.ts';
export { heldBy, OverloadManager, RelayAccount, OVERLOAD_BODY, OVERLOAD_DETAILS, type BufferAccount, type BufferHolder, type OverloadSettings } from './overload.ts';
export { FilterRegistry } from './registry.ts';
// Envoy's response flags and the status each local failure answers with (one table).
export { ResponseFlag, type ResponseFlagName, LOCAL_REPLY_STATUS } from './response-flags.ts';
/** Whether a tunnel's port protocol is HTTP-family (per-request phases apply). */
export { isHttpProtocol } from '../state/index.ts';
