/**
 * In-cluster mode's control plane: the waypoint's identity from istiod's CA and its workloads and
 * services from istiod's WDS (delta ADS), over one TLS gRPC channel authenticated by the pod's
 * projected service-account token.
 *
 *   const roots = await TrustRootFiles.open([rootCertFile]);            // identity layer
 *   const channel = new IstiodChannel({ address, roots, tokenFile, clusterId });
 *   const certificate = WorkloadCertificate.begin(new IstiodCertificateIssuer({ channel, roots }), spiffe, ttlMs);
 *   const wds = new WdsClient({ channel, node: xdsNodeFromEnv() }).start();
 *   await Promise.all([certificate.ready, wds.whenSynced()]);
 *   const discovered = wdsDiscoveredMesh(wds, { instanceIps: [env.INSTANCE_IP] });   // compile input
 *   wds.on('update', () => recompile());
 *   // shutdown: wds.close(); certificate.close(); channel.close(); roots.close();
 */
export { DEFAULT_ISTIOD_ADDRESS, IstiodChannel, ISTIOD_SERVER_NAME, parseIstiodAddress, type IstiodAddress, type IstiodChannelOptions } from './channel.ts';
export { describeCallError, describeIstiodFailure, IstiodCertificateIssuer, type IstiodIssuerOptions } from './ca-client.ts';
export { DEFAULT_NODE_TYPE, nodeMetadataFromEnv, xdsNode, xdsNodeFromEnv, type XdsNode, type XdsNodeOptions } from './node.ts';
export { WdsClient, type WdsClientEvents, type WdsClientOptions, type WdsState } from './wds-client.ts';
export { wdsDiscoveredMesh, type WdsMeshOptions, type WdsStateSource } from './mesh.ts';
export { registerCertificateMetrics, registerWdsMetrics } from './metrics.ts';
// The declared messages, for tests and tools that speak them (a fake istiod).
export * as wdsProto from './proto-workload.ts';
export * as xdsProto from './proto-xds.ts';
export { ipFromBytes } from './wds-resource.ts';
