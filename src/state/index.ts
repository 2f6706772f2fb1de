/**
 * Mesh state: the mesh file (or the same objects from the API server, with workloads and services
 * discovered from istiod) parsed and validated into immutable snapshots (services, workloads,
 * mesh config, kept resources), the compiled parts every snapshot carries (`definePart`: engines
 * compile theirs before the store publishes), and the store that holds the current snapshot.
 *
 *   const mesh = await MeshStore.open({ meshFile, watch: true, parts });
 *   const live = await MeshStore.live({ objects: () => watcher.objects(), discovered, parts });
 *   watcher.on('change', () => void live.refresh());
 *   const target = mesh.current.resolveTarget(ip, port);   // undefined: nothing served there
 */
export { MeshStore, type MeshStoreLiveOptions } from './store.ts';
export { definePart } from './parts.ts';
export type { AccessLogEncoding, DiscoveredMesh, DiscoveryContext, Endpoint, KeptResource, MeshConfig, MeshPart, MeshSnapshot, PortProtocol, Service, ServicePort, ServiceWaypoint, Target, TunnelProtocol, WaypointRef, Workload, WorkloadType, WaypointIdentity } from './types.ts';
export { isHttpProtocol } from './protocol.ts';
export { clusterName, serviceClusterName } from './cluster-name.ts';
// Addresses, and where a resource's field is in the mesh file (for ConfigError positions).
export { formatHostPort, ipFamily, normalizeIp, normalizeIpOrCidr, parseCidr, parseHostPort, type Cidr } from './ip.ts';
export { locateField } from './resource-location.ts';
export { formatFieldPath, type FieldPath } from './yaml-locate.ts';
export { upstreamEndpoints } from './service-waypoints.ts';
// For discovery sources (istiod's WDS, src/istiod) building the same model objects the file does.
export { throughWaypoint, WAYPOINT_HBONE_PORT } from './service-waypoints.ts';
export { endpointsByPort, type TargetPortOf } from './services.ts';
export { canonicalService } from './workload-names.ts';
export { portProtocol } from './protocol.ts';
export { servesServices, servesWorkloads } from './attachment.ts';
// MeshConfig's telemetry fields (extension providers, default providers, tracing defaults) and the access-log format strings.
export type { CustomTag, ExtensionProvider, FileAccessLogProvider, MeshTelemetryConfig, OpenTelemetryProvider } from './telemetry-config.ts';
export { UNSUPPORTED_PROVIDER_KINDS } from './telemetry-config.ts';
export { parseFormat, type FormatOperator, type FormatParts, type LogFormat, type LogOperator } from './log-format.ts';
