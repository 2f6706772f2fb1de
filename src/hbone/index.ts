/**
 * HBONE (HTTP/2 CONNECT over mutual TLS): the server the waypoint and the inbound role accept tunnels
 * on, the client session pool toward HBONE servers, the byte relay with half-close, and the HTTP/2
 * and TLS settings they share.
 */
export { HboneSessionPool, HboneConnectError } from './pool.ts';
export { HboneServer, type HboneRequest, respondAndClose } from './server.ts';
export { HboneListenerStats } from './listener-stats.ts';
export { PeerLimits, type PeerLimitSettings } from './peer-limits.ts';
export type { Http2Params, TlsMaterial } from './settings.ts';
export { DEFAULT_HTTP2, http2Settings } from './settings.ts';
export { joinWritev } from './writev-fix.ts';
export { readChunkwise } from './chunk-reads.ts';
export { clearIdleTimer, clearTimerOnDestroy } from './stream-timer-fix.ts';
export { guardJsStreamShutdown } from './js-stream-guard.ts';
export { teardown, relay } from './relay.ts';
export { resetStream, asHttp1Socket, endStreamReceived, resetOf, watchEndStream, type StreamReset } from './stream-end.ts';
