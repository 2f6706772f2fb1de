/**
 * The HTTP servers that run inside HBONE tunnels (HTTP/1.x and h2c, fed CONNECT streams by the
 * listener) and the HTTP connection manager's checks every inner request passes before the filters.
 */
export { InnerHttpServer } from './server.ts';
export { H2Request, H2Response } from './h2-exchange.ts';
export { admitRequest, requestHead } from './conn-manager.ts';
