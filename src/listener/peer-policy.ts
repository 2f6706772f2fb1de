/**
 * Who may open HBONE tunnels to the waypoint: a client whose certificate chains to the mesh root
 * (checked by TLS) and whose SPIFFE trust domain is the mesh's `trustDomain` or one of its
 * `trustDomainAliases` (Envoy's waypoint validates the client URI SAN against `spiffe://<td>/` for
 * the trust domain and each alias: istio/istio pilot/pkg/networking/core/listener_waypoint.go,
 * pilot/pkg/security/model).
 */
import { trustDomainAllowed, type SpiffeId } from '../identity/index.ts';
import type { MeshConfig } from '../state/index.ts';

/** Undefined when `peer` may connect, else the reason it may not (for the log line). */
export function refuseDownstreamPeer(peer: SpiffeId | undefined, mesh: MeshConfig): string | undefined {
  if (!peer) return 'client certificate has no SPIFFE identity';
  if (!trustDomainAllowed(peer, mesh.trustDomain, mesh.trustDomainAliases)) {
    return `trust domain "${peer.trustDomain}" is neither "${mesh.trustDomain}" nor one of trustDomainAliases`;
  }
  return undefined;
}
