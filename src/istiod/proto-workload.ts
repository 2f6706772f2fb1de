/**
 * The `istio.workload` messages istiod serves over WDS (`type.googleapis.com/istio.workload.Address`),
 * declared for @bufbuild/protobuf at run time with the field numbers of istio/ztunnel
 * proto/workload.proto (identical to istio/istio pkg/workloadapi/workload.proto; read at ztunnel
 * 1.31 / master of 2026-08). Every field of those messages is declared, so nothing istiod sends is
 * dropped as unknown, but only the ones the mesh model uses are read (mesh.ts).
 */
import type { Any } from '@bufbuild/protobuf/wkt';
import { file_google_protobuf_any, file_google_protobuf_wrappers } from '@bufbuild/protobuf/wkt';
import type { Message } from '@bufbuild/protobuf';
import type { GenMessage } from '@bufbuild/protobuf/codegenv2';
import { enumField, enumType, field, mapField, messageRegistry, msgField, protoFile, ProtoType as T } from '../util/index.ts';

/** Type URL of a WDS resource (`Any.type_url` and the xDS `type_url`). */
export const ADDRESS_TYPE_URL = 'type.googleapis.com/istio.workload.Address';

const P = '.istio.workload';

/** Enum values (proto3 open enums: a number not listed here decodes as itself and is refused by validation). */
export const TunnelProtocolValue = Object.freeze({ NONE: 0, HBONE: 1, LEGACY_ISTIO_MTLS: 2 });
export const WorkloadTypeValue = Object.freeze({ DEPLOYMENT: 0, CRONJOB: 1, POD: 2, JOB: 3 });
export const WorkloadStatusValue = Object.freeze({ HEALTHY: 0, UNHEALTHY: 1 });
export const NetworkModeValue = Object.freeze({ STANDARD: 0, HOST_NETWORK: 1 });
export const AppProtocolValue = Object.freeze({ UNKNOWN: 0, HTTP11: 1, HTTP2: 2, GRPC: 3, TCP: 4, TLS: 5 });
export const IpFamiliesValue = Object.freeze({ AUTOMATIC: 0, IPV4_ONLY: 1, IPV6_ONLY: 2, DUAL: 3 });
export const LbScopeValue = Object.freeze({ UNSPECIFIED_SCOPE: 0, REGION: 1, ZONE: 2, SUBZONE: 3, NODE: 4, CLUSTER: 5, NETWORK: 6 });
export const LbModeValue = Object.freeze({ UNSPECIFIED_MODE: 0, STRICT: 1, FAILOVER: 2, PASSTHROUGH: 3 });
export const LbHealthPolicyValue = Object.freeze({ ONLY_HEALTHY: 0, ALLOW_ALL: 1 });
export const VisibilityValue = Object.freeze({ PUBLIC: 0, NAMESPACE: 1 });
export const AppTunnelProtocolValue = Object.freeze({ NONE: 0, PROXY: 1 });

const services = mapField(`${P}.Workload`, 'services', 22, msgField('value', 2, `${P}.PortList`));

const workloadFile = protoFile(
  'workload.proto',
  'istio.workload',
  ['google/protobuf/wrappers.proto', 'google/protobuf/any.proto'],
  [
    { name: 'Address', field: [msgField('workload', 1, `${P}.Workload`, { oneof: 0 }), msgField('service', 2, `${P}.Service`, { oneof: 0 })], oneofDecl: [{ name: 'type' }] },
    {
      name: 'Service',
      field: [
        field('name', 1, T.STRING),
        field('namespace', 2, T.STRING),
        field('hostname', 3, T.STRING),
        msgField('addresses', 4, `${P}.NetworkAddress`, { repeated: true }),
        msgField('ports', 5, `${P}.Port`, { repeated: true }),
        field('subject_alt_names', 6, T.STRING, { repeated: true }),
        msgField('waypoint', 7, `${P}.GatewayAddress`),
        msgField('load_balancing', 8, `${P}.LoadBalancing`),
        enumField('ip_families', 9, `${P}.IPFamilies`),
        msgField('extensions', 10, `${P}.Extension`, { repeated: true }),
        field('canonical', 11, T.BOOL),
        field('ingress_use_waypoint', 12, T.BOOL),
        msgField('weighted_waypoints', 13, `${P}.WeightedWaypoint`, { repeated: true }),
        enumField('visibility', 14, `${P}.Service.Visibility`),
      ],
      enumType: [enumType('Visibility', VisibilityValue)],
    },
    {
      name: 'LoadBalancing',
      field: [
        enumField('routing_preference', 1, `${P}.LoadBalancing.Scope`, { repeated: true }),
        enumField('mode', 2, `${P}.LoadBalancing.Mode`),
        enumField('health_policy', 3, `${P}.LoadBalancing.HealthPolicy`),
      ],
      enumType: [enumType('Scope', LbScopeValue), enumType('Mode', LbModeValue), enumType('HealthPolicy', LbHealthPolicyValue)],
    },
    {
      name: 'Workload',
      field: [
        field('uid', 20, T.STRING),
        field('name', 1, T.STRING),
        field('namespace', 2, T.STRING),
        field('addresses', 3, T.BYTES, { repeated: true }),
        field('hostname', 21, T.STRING),
        field('network', 4, T.STRING),
        enumField('tunnel_protocol', 5, `${P}.TunnelProtocol`),
        field('trust_domain', 6, T.STRING),
        field('service_account', 7, T.STRING),
        msgField('waypoint', 8, `${P}.GatewayAddress`),
        msgField('network_gateway', 19, `${P}.GatewayAddress`),
        field('node', 9, T.STRING),
        field('canonical_name', 10, T.STRING),
        field('canonical_revision', 11, T.STRING),
        enumField('workload_type', 12, `${P}.WorkloadType`),
        field('workload_name', 13, T.STRING),
        field('native_tunnel', 14, T.BOOL),
        msgField('application_tunnel', 23, `${P}.ApplicationTunnel`),
        services.field,
        field('authorization_policies', 16, T.STRING, { repeated: true }),
        enumField('status', 17, `${P}.WorkloadStatus`),
        field('cluster_id', 18, T.STRING),
        msgField('locality', 24, `${P}.Locality`),
        enumField('network_mode', 25, `${P}.NetworkMode`),
        msgField('extensions', 26, `${P}.Extension`, { repeated: true }),
        msgField('capacity', 27, '.google.protobuf.UInt32Value'),
      ],
      nestedType: [services.entry],
      reservedRange: [{ start: 15, end: 16 }],
    },
    { name: 'Locality', field: [field('region', 1, T.STRING), field('zone', 2, T.STRING), field('subzone', 3, T.STRING)] },
    { name: 'PortList', field: [msgField('ports', 1, `${P}.Port`, { repeated: true })] },
    { name: 'Port', field: [field('service_port', 1, T.UINT32), field('target_port', 2, T.UINT32), enumField('app_protocol', 3, `${P}.AppProtocol`)] },
    {
      name: 'ApplicationTunnel',
      field: [enumField('protocol', 1, `${P}.ApplicationTunnel.Protocol`), field('port', 2, T.UINT32)],
      enumType: [enumType('Protocol', AppTunnelProtocolValue)],
    },
    {
      name: 'GatewayAddress',
      field: [
        msgField('hostname', 1, `${P}.NamespacedHostname`, { oneof: 0 }),
        msgField('address', 2, `${P}.NetworkAddress`, { oneof: 0 }),
        field('hbone_mtls_port', 3, T.UINT32),
      ],
      oneofDecl: [{ name: 'destination' }],
      reservedRange: [{ start: 4, end: 5 }],
    },
    { name: 'WeightedWaypoint', field: [msgField('destination', 1, `${P}.GatewayAddress`), field('weight', 2, T.UINT32)] },
    {
      name: 'NetworkAddress',
      field: [field('network', 1, T.STRING), field('address', 2, T.BYTES), field('length', 3, T.UINT32, { oneof: 0, proto3Optional: true })],
      oneofDecl: [{ name: '_length' }],
    },
    { name: 'NamespacedHostname', field: [field('namespace', 1, T.STRING), field('hostname', 2, T.STRING)] },
    { name: 'Extension', field: [field('name', 1, T.STRING), msgField('config', 2, '.google.protobuf.Any')] },
  ],
  [
    enumType('IPFamilies', IpFamiliesValue),
    enumType('NetworkMode', NetworkModeValue),
    enumType('WorkloadStatus', WorkloadStatusValue),
    enumType('WorkloadType', WorkloadTypeValue),
    enumType('AppProtocol', AppProtocolValue),
    enumType('TunnelProtocol', TunnelProtocolValue),
  ],
);

const message = messageRegistry(
  'WDS',
  workloadFile,
  new Map([
    ['google/protobuf/wrappers.proto', file_google_protobuf_wrappers],
    ['google/protobuf/any.proto', file_google_protobuf_any],
  ]),
);

// ---------------------------------------------------------------------------------------------
// Typed shapes (what protoc-gen-es would generate for the fields above).

export type NamespacedHostname = Message<'istio.workload.NamespacedHostname'> & { namespace: string; hostname: string };
export type NetworkAddress = Message<'istio.workload.NetworkAddress'> & { network: string; address: Uint8Array; length?: number };
export type GatewayAddress = Message<'istio.workload.GatewayAddress'> & {
  destination:
    | { case: 'hostname'; value: NamespacedHostname }
    | { case: 'address'; value: NetworkAddress }
    | { case: undefined; value?: undefined };
  hboneMtlsPort: number;
};
export type Port = Message<'istio.workload.Port'> & { servicePort: number; targetPort: number; appProtocol: number };
export type PortList = Message<'istio.workload.PortList'> & { ports: Port[] };
export type LoadBalancing = Message<'istio.workload.LoadBalancing'> & { routingPreference: number[]; mode: number; healthPolicy: number };
export type Locality = Message<'istio.workload.Locality'> & { region: string; zone: string; subzone: string };
export type ApplicationTunnel = Message<'istio.workload.ApplicationTunnel'> & { protocol: number; port: number };
export type WeightedWaypoint = Message<'istio.workload.WeightedWaypoint'> & { destination?: GatewayAddress; weight: number };
export type Extension = Message<'istio.workload.Extension'> & { name: string; config?: Any };

export type WdsService = Message<'istio.workload.Service'> & {
  name: string;
  namespace: string;
  hostname: string;
  addresses: NetworkAddress[];
  ports: Port[];
  subjectAltNames: string[];
  waypoint?: GatewayAddress;
  loadBalancing?: LoadBalancing;
  ipFamilies: number;
  extensions: Extension[];
  canonical: boolean;
  ingressUseWaypoint: boolean;
  weightedWaypoints: WeightedWaypoint[];
  visibility: number;
};

export type WdsWorkload = Message<'istio.workload.Workload'> & {
  uid: string;
  name: string;
  namespace: string;
  addresses: Uint8Array[];
  hostname: string;
  network: string;
  tunnelProtocol: number;
  trustDomain: string;
  serviceAccount: string;
  waypoint?: GatewayAddress;
  networkGateway?: GatewayAddress;
  node: string;
  canonicalName: string;
  canonicalRevision: string;
  workloadType: number;
  workloadName: string;
  nativeTunnel: boolean;
  applicationTunnel?: ApplicationTunnel;
  services: { [key: string]: PortList };
  authorizationPolicies: string[];
  status: number;
  clusterId: string;
  locality?: Locality;
  networkMode: number;
  extensions: Extension[];
  /** google.protobuf.UInt32Value: undefined when unset (ztunnel then assumes 1). */
  capacity?: number;
};

export type WdsAddress = Message<'istio.workload.Address'> & {
  type: { case: 'workload'; value: WdsWorkload } | { case: 'service'; value: WdsService } | { case: undefined; value?: undefined };
};

export const AddressSchema: GenMessage<WdsAddress> = message<WdsAddress>('istio.workload.Address');
export const WorkloadSchema: GenMessage<WdsWorkload> = message<WdsWorkload>('istio.workload.Workload');
export const ServiceSchema: GenMessage<WdsService> = message<WdsService>('istio.workload.Service');
export const GatewayAddressSchema: GenMessage<GatewayAddress> = message<GatewayAddress>('istio.workload.GatewayAddress');
export const NetworkAddressSchema: GenMessage<NetworkAddress> = message<NetworkAddress>('istio.workload.NetworkAddress');
