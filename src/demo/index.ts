/**
 * A whole ambient path on loopback in one process (tunnel role → waypoint → inbound roles → echo
 * backends), for `waypoint demo`, the end-to-end tests and the bench.
 */
export { startTopology, topologyMesh, type Topology, type TopologyOptions } from './topology.ts';
