/**
 * The waypoint's connection phase: an authenticated CONNECT from the HBONE server is resolved to a
 * target, runs the chain's `onConnection` filters, and goes to the inner HTTP servers or the TCP
 * terminal by the port's protocol. Imports nothing from the upstream layer.
 *
 *   new HboneServer({ ..., onConnect: waypointConnectHandler({ mesh, chain, inner, tcp: new TcpProxy(clusters), ... }) });
 */
export { refuseDownstreamPeer } from './peer-policy.ts';
export { waypointConnectHandler } from './waypoint-listener.ts';
