/**
 * Mesh state: the mesh file parsed and validated into immutable snapshots (services, workloads,
 * mesh config, kept resources), the compiled parts every snapshot carries (`definePart`: engines
 * compile theirs before the store publishes), and the store that holds the current snapshot.
 *
 *   const mesh = await MeshStore.open({ meshFile, watch: true, parts });
 *   const target = mesh.current.resolveTarget(ip, port);   // undefined: nothing served there
 */
export { MeshStore } from './store.ts';
export { definePart } from './parts.ts';
export type { AccessLogEncoding, DiscoveredMesh, DiscoveryContext, Endpoint, KeptResource, MeshConfig, MeshPart, MeshSnapshot, PortProtocol, Service, ServicePort, Target, Workload, WaypointIdentity } from './types.ts';
export { isHttpProtocol } from './protocol.ts';
export { clusterName, serviceClusterName } from './cluster-name.ts';
// Addresses, and where a resource's field is in the mesh file (for ConfigError positions).
export { formatHostPort, normalizeIp, normalizeIpOrCidr, parseCidr, parseHostPort, type Cidr } from './ip.ts';
export { locateField } from './resource-location.ts';
export { formatFieldPath, type FieldPath } from './yaml-locate.ts';
export { upstreamEndpoints } from './service-waypoints.ts';
// MeshConfig's telemetry fields (extension providers, default providers, tracing defaults) and the access-log format strings.
export type { CustomTag, ExtensionProvider, FileAccessLogProvider, MeshTelemetryConfig, OpenTelemetryProvider } from './telemetry-config.ts';
export { parseFormat, type FormatOperator, type FormatParts, type LogFormat, type LogOperator } from './log-format.ts';
