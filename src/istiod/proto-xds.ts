/**
 * The control-plane messages spoken to istiod, declared for @bufbuild/protobuf at run time from
 * upstream field numbers (the subset ztunnel declares, istio/ztunnel proto/xds.proto and
 * proto/citadel.proto; same numbers as envoyproxy/envoy api/envoy/service/discovery/v3/discovery.proto,
 * api/envoy/config/core/v3/base.proto and istio/api security/v1alpha1/ca.proto):
 * - delta ADS: `DeltaDiscoveryRequest{node=1, type_url=2, resource_names_subscribe=3,
 *   resource_names_unsubscribe=4, initial_resource_versions=5, response_nonce=6, error_detail=7}`,
 *   `DeltaDiscoveryResponse{system_version_info=1, resources=2, type_url=4, nonce=5,
 *   removed_resources=6}`, `Resource{version=1, resource=2, name=3, aliases=4, ttl=6,
 *   cache_control=7}`, `config.core.v3.Node{id=1, cluster=2, metadata=3}`, `google.rpc.Status`;
 * - CA: `IstioCertificateRequest{csr=1, validity_duration=3, metadata=4}`,
 *   `IstioCertificateResponse{cert_chain=1}`.
 */
import type { DescFile, JsonObject, Message } from '@bufbuild/protobuf';
import type { GenMessage } from '@bufbuild/protobuf/codegenv2';
import {
  file_google_protobuf_any,
  file_google_protobuf_duration,
  file_google_protobuf_struct,
  type Any,
  type Duration,
  type FileDescriptorProto,
} from '@bufbuild/protobuf/wkt';
import { field, mapField, messageRegistry, msgField, protoFile, ProtoType as T, RPC_STATUS_FILE } from '../util/index.ts';

/** gRPC method of delta ADS. */
export const DELTA_ADS_METHOD = '/envoy.service.discovery.v3.AggregatedDiscoveryService/DeltaAggregatedResources';
/** gRPC method of istiod's CA. */
export const CREATE_CERTIFICATE_METHOD = '/istio.v1.auth.IstioCertificateService/CreateCertificate';

const D = '.envoy.service.discovery.v3';
const WKT = new Map<string, FileDescriptorProto | DescFile>([
  ['google/protobuf/any.proto', file_google_protobuf_any],
  ['google/protobuf/duration.proto', file_google_protobuf_duration],
  ['google/protobuf/struct.proto', file_google_protobuf_struct],
]);

const coreBase = protoFile('envoy/config/core/v3/base.proto', 'envoy.config.core.v3', ['google/protobuf/struct.proto'], [
  { name: 'Node', field: [field('id', 1, T.STRING), field('cluster', 2, T.STRING), msgField('metadata', 3, '.google.protobuf.Struct')] },
]);

const initialVersions = mapField(`${D}.DeltaDiscoveryRequest`, 'initial_resource_versions', 5);

const discovery = protoFile(
  'envoy/service/discovery/v3/discovery.proto',
  'envoy.service.discovery.v3',
  ['envoy/config/core/v3/base.proto', 'google/rpc/status.proto', 'google/protobuf/any.proto', 'google/protobuf/duration.proto'],
  [
    {
      name: 'DeltaDiscoveryRequest',
      field: [
        msgField('node', 1, '.envoy.config.core.v3.Node'),
        field('type_url', 2, T.STRING),
        field('resource_names_subscribe', 3, T.STRING, { repeated: true }),
        field('resource_names_unsubscribe', 4, T.STRING, { repeated: true }),
        initialVersions.field,
        field('response_nonce', 6, T.STRING),
        msgField('error_detail', 7, '.google.rpc.Status'),
      ],
      nestedType: [initialVersions.entry],
    },
    {
      name: 'DeltaDiscoveryResponse',
      field: [
        field('system_version_info', 1, T.STRING),
        msgField('resources', 2, `${D}.Resource`, { repeated: true }),
        field('type_url', 4, T.STRING),
        field('nonce', 5, T.STRING),
        field('removed_resources', 6, T.STRING, { repeated: true }),
      ],
    },
    {
      name: 'Resource',
      field: [
        field('version', 1, T.STRING),
        msgField('resource', 2, '.google.protobuf.Any'),
        field('name', 3, T.STRING),
        field('aliases', 4, T.STRING, { repeated: true }),
        msgField('ttl', 6, '.google.protobuf.Duration'),
        msgField('cache_control', 7, `${D}.Resource.CacheControl`),
      ],
      nestedType: [{ name: 'CacheControl', field: [field('do_not_cache', 1, T.BOOL)] }],
    },
  ],
);

const ca = protoFile('ca.proto', 'istio.v1.auth', ['google/protobuf/struct.proto'], [
  {
    name: 'IstioCertificateRequest',
    field: [field('csr', 1, T.STRING), field('validity_duration', 3, T.INT64), msgField('metadata', 4, '.google.protobuf.Struct')],
  },
  { name: 'IstioCertificateResponse', field: [field('cert_chain', 1, T.STRING, { repeated: true })] },
]);

const discoveryMessage = messageRegistry(
  'xDS',
  discovery,
  new Map([...WKT, ['envoy/config/core/v3/base.proto', coreBase], ['google/rpc/status.proto', RPC_STATUS_FILE]]),
);
const caMessage = messageRegistry('CA', ca, WKT);

// ---------------------------------------------------------------------------------------------
// Typed shapes (what protoc-gen-es would generate for the fields above).

export type Node = Message<'envoy.config.core.v3.Node'> & { id: string; cluster: string; metadata?: JsonObject };
export type RpcStatus = Message<'google.rpc.Status'> & { code: number; message: string; details: Any[] };
export type DeltaDiscoveryRequest = Message<'envoy.service.discovery.v3.DeltaDiscoveryRequest'> & {
  node?: Node;
  typeUrl: string;
  resourceNamesSubscribe: string[];
  resourceNamesUnsubscribe: string[];
  initialResourceVersions: { [name: string]: string };
  responseNonce: string;
  errorDetail?: RpcStatus;
};
export type Resource = Message<'envoy.service.discovery.v3.Resource'> & {
  version: string;
  resource?: Any;
  name: string;
  aliases: string[];
  ttl?: Duration;
};
export type DeltaDiscoveryResponse = Message<'envoy.service.discovery.v3.DeltaDiscoveryResponse'> & {
  systemVersionInfo: string;
  resources: Resource[];
  typeUrl: string;
  nonce: string;
  removedResources: string[];
};
export type IstioCertificateRequest = Message<'istio.v1.auth.IstioCertificateRequest'> & {
  csr: string;
  validityDuration: bigint;
  metadata?: JsonObject;
};
export type IstioCertificateResponse = Message<'istio.v1.auth.IstioCertificateResponse'> & { certChain: string[] };

export const DeltaDiscoveryRequestSchema: GenMessage<DeltaDiscoveryRequest> = discoveryMessage<DeltaDiscoveryRequest>('envoy.service.discovery.v3.DeltaDiscoveryRequest');
export const DeltaDiscoveryResponseSchema: GenMessage<DeltaDiscoveryResponse> = discoveryMessage<DeltaDiscoveryResponse>('envoy.service.discovery.v3.DeltaDiscoveryResponse');
export const ResourceSchema: GenMessage<Resource> = discoveryMessage<Resource>('envoy.service.discovery.v3.Resource');
export const IstioCertificateRequestSchema: GenMessage<IstioCertificateRequest> = caMessage<IstioCertificateRequest>('istio.v1.auth.IstioCertificateRequest');
export const IstioCertificateResponseSchema: GenMessage<IstioCertificateResponse> = caMessage<IstioCertificateResponse>('istio.v1.auth.IstioCertificateResponse');
