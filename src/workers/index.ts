/**
 * `waypoint run --concurrency N`: the waypoint in N worker processes sharing the HBONE listener,
 * under a primary that holds the configuration, the identity and the admin and readiness servers.
 */
export { WaypointWorkers, type WorkersOptions } from './primary.ts';
export { defaultConcurrency, parseConcurrency } from './concurrency.ts';
