/**
 * Stand-ins for the two ztunnel roles around a waypoint, for the demo, tests and local use:
 * `waypoint tunnel` (the source ztunnel: plain TCP in, one HBONE CONNECT out per connection) and
 * `waypoint inbound` (the destination ztunnel: HBONE in, the application dialed), with the
 * policies ztunnel itself enforces (selector AuthorizationPolicies with L4 semantics and
 * PeerAuthentication), compiled into the snapshots of the inbound role's own mesh store.
 *
 *   const mesh = await MeshStore.open({ meshFile, withoutWaypoint: true, parts: INBOUND_PARTS });
 *   const inbound = await InboundRole.start({ listen, certificate, forward, mesh });
 *   const tunnel = await TunnelRole.start({ listen, to: waypointAddress, authority, certificate });
 */
export { INBOUND_PARTS, InboundRole, type InboundOptions } from './inbound.ts';
export { TunnelRole, type TunnelOptions } from './tunnel.ts';
export { ZTUNNEL_AUTHZ, compileZtunnelAuthz, rejectionReason, ztunnelAuthzFor, type ZtunnelAuthz } from './authz.ts';
export { PEER_AUTHENTICATION, compilePeerAuthentication, peerAuthenticationFor, type CompiledPeerAuthentication } from './peer-authentication.ts';
