/**
 * Upstream connections and the choice of endpoint (Envoy's cluster manager, reduced): HBONE, plain
 * TCP and sidecar mTLS transports, one HTTP/2 or HTTP/1 client per endpoint, the table of
 * DestinationRule-shaped clusters (load balancing, circuit breakers, outlier detection) compiled
 * with every mesh snapshot, and the mapping of upstream failures to status and response flag.
 *
 *   const lease = leaseEndpoint(clusters, target, dialedIp, { hash, admit });   // undefined: 503 UH
 *   clusters.dispatch(target, lease.endpoint, request, handler, h2);
 */
export { ClusterManager, connectResponseHeaders, exchangePeer, connectTcp } from './cluster-manager.ts';
export { ClusterTable } from './cluster-table.ts';
export { SidecarTransport } from './sidecar-transport.ts';
export { H2Upstream, type UpstreamHandler, UpstreamResetError, type UpstreamRequest } from './h2-upstream.ts';
export {
  answerFailure,
  isConnectFailure,
  NO_HEALTHY_UPSTREAM,
  PER_TRY_TIMEOUT,
  RESPONSE_TIMEOUT,
  upstreamFailure,
  CONNECT_FAILURE,
  CONNECTION_OVERFLOW,
  type UpstreamFailure,
} from './failure.ts';
export type { UpstreamLease } from './pick-endpoint.ts';
export { pickEndpoint, leaseEndpoint } from './pick-endpoint.ts';
export { UpstreamOverflowError, type ClusterState } from './cluster-state.ts';
export { connectionHash, requestHash, type HashRequest } from './hash-policy.ts';
