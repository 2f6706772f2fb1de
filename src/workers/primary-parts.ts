/** The mesh parts the primary of `waypoint run --concurrency N` compiles (primary.ts). */
import { RequestAuthn } from '../authn/index.ts';
import { AUTHZ } from '../authz/index.ts';
import { EXT_AUTHZ_PROVIDERS } from '../ext-authz/index.ts';
import { NETWORK_POLICIES } from '../netpol/index.ts';
import { compileDestinationRules, DESTINATION_RULES, ROUTES, type LbAlgorithm } from '../routing/index.ts';
import type { MeshPart } from '../state/index.ts';
import { TELEMETRY } from '../tracing/index.ts';
import { PEER_AUTHENTICATION } from '../ztunnel/index.ts';

/**
 * The parts the primary compiles the mesh with: those of a waypoint (app.ts waypointParts) that
 * decide whether an update is taken, without the state a worker binds its own to (the cluster
 * table's pools and timers, the tracing runtime's collectors, WaypointFilter modules, which only
 * the workers import). So the primary publishes, and sends its workers, the updates they take (an
 * invalid AuthorizationPolicy or DestinationRule is refused here, once, as in one process), and
 * its snapshot answers routing and policy questions as theirs do.
 */
export function primaryParts(fallback: LbAlgorithm): MeshPart<unknown>[] {
  return [
    AUTHZ,
    // Its JWKS cache is only read by requests: none here.
    new RequestAuthn().part,
    NETWORK_POLICIES,
    PEER_AUTHENTICATION,
    ROUTES,
    DESTINATION_RULES.with({ compile: (s) => compileDestinationRules(s, fallback) }),
    EXT_AUTHZ_PROVIDERS,
    TELEMETRY,
  ];
}
