/**
 * The protobuf messages of Envoy's external authorization gRPC API, `envoy.service.auth.v3`
 * (`Authorization/Check`), described for @bufbuild/protobuf at run time: no code generation, only
 * the fields this client reads or writes, with Envoy's field numbers and types (envoyproxy/envoy
 * api/envoy/service/auth/v3/external_auth.proto, attribute_context.proto;
 * api/envoy/config/core/v3/base.proto, address.proto; api/envoy/type/v3/http_status.proto;
 * googleapis google/rpc/status.proto). Fields left out are skipped on decode (unknown fields) and
 * never written, so the wire format stays compatible with a full implementation.
 *
 * Included:
 * - `CheckRequest{attributes=1}`; `AttributeContext{source=1, destination=2, request=4,
 *   context_extensions=10}`; `Peer{address=1, service=2, labels=3, principal=4, certificate=5}`;
 *   `Request{time=1, http=2}`; `HttpRequest{id=1, method=2, headers=3, path=4, host=5, scheme=6,
 *   query=7, fragment=8, size=9, protocol=10, body=11, raw_body=12}`;
 *   `config.core.v3.Address{socket_address=1}`, `SocketAddress{protocol=1, address=2,
 *   port_value=3}`.
 * - `CheckResponse{status=1, denied_response=2 | ok_response=3 (oneof http_response),
 *   dynamic_metadata=4}`; `DeniedHttpResponse{status=1, headers=2, body=3}`;
 *   `OkHttpResponse{headers=2, dynamic_metadata=3, headers_to_remove=5,
 *   response_headers_to_add=6}`; `google.rpc.Status{code=1, message=2, details=3}`;
 *   `type.v3.HttpStatus{code=1}`; `config.core.v3.HeaderValueOption{header=1, append=2,
 *   append_action=3, keep_empty_value=4}`, `HeaderValue{key=1, value=2, raw_value=3}`.
 */
import type { JsonObject, Message, DescFile } from '@bufbuild/protobuf';
import type { GenMessage } from '@bufbuild/protobuf/codegenv2';
import {
  file_google_protobuf_any,
  file_google_protobuf_struct,
  file_google_protobuf_timestamp,
  file_google_protobuf_wrappers,
  type FileDescriptorProto,
  type Timestamp,
} from '@bufbuild/protobuf/wkt';
import { field, mapField, messageRegistry, msgField, protoFile as file, ProtoType as T, RPC_STATUS_FILE } from '../util/index.ts';

/** gRPC method path of the check call. */
export const CHECK_METHOD_PATH = '/envoy.service.auth.v3.Authorization/Check';

// ---------------------------------------------------------------------------------------------
// The files.

const httpStatus = file(
  'envoy/type/v3/http_status.proto',
  'envoy.type.v3',
  [],
  [{ name: 'HttpStatus', field: [field('code', 1, T.ENUM, { typeName: '.envoy.type.v3.StatusCode' })] }],
  // Open enum: any HTTP status number decodes as itself; only the zero value must be declared.
  [{ name: 'StatusCode', value: [{ name: 'Empty', number: 0 }, { name: 'OK', number: 200 }, { name: 'Forbidden', number: 403 }] }],
);

const coreBase = file('envoy/config/core/v3/base.proto', 'envoy.config.core.v3', ['google/protobuf/wrappers.proto'], [
  { name: 'HeaderValue', field: [field('key', 1, T.STRING), field('value', 2, T.STRING), field('raw_value', 3, T.BYTES)] },
  {
    name: 'HeaderValueOption',
    field: [
      msgField('header', 1, '.envoy.config.core.v3.HeaderValue'),
      msgField('append', 2, '.google.protobuf.BoolValue'),
      field('append_action', 3, T.ENUM, { typeName: '.envoy.config.core.v3.HeaderValueOption.HeaderAppendAction' }),
      field('keep_empty_value', 4, T.BOOL),
    ],
    enumType: [
      {
        name: 'HeaderAppendAction',
        value: [
          { name: 'APPEND_IF_EXISTS_OR_ADD', number: 0 },
          { name: 'ADD_IF_ABSENT', number: 1 },
          { name: 'OVERWRITE_IF_EXISTS_OR_ADD', number: 2 },
          { name: 'OVERWRITE_IF_EXISTS', number: 3 },
        ],
      },
    ],
  },
]);

const coreAddress = file('envoy/config/core/v3/address.proto', 'envoy.config.core.v3', [], [
  {
    name: 'SocketAddress',
    field: [
      field('protocol', 1, T.ENUM, { typeName: '.envoy.config.core.v3.SocketAddress.Protocol' }),
      field('address', 2, T.STRING),
      field('port_value', 3, T.UINT32, { oneof: 0 }),
    ],
    oneofDecl: [{ name: 'port_specifier' }],
    enumType: [{ name: 'Protocol', value: [{ name: 'TCP', number: 0 }, { name: 'UDP', number: 1 }] }],
  },
  { name: 'Address', field: [msgField('socket_address', 1, '.envoy.config.core.v3.SocketAddress', { oneof: 0 })], oneofDecl: [{ name: 'address' }] },
]);

const AC = '.envoy.service.auth.v3.AttributeContext';
const peerLabels = mapField(`${AC}.Peer`, 'labels', 3);
const httpHeaders = mapField(`${AC}.HttpRequest`, 'headers', 3);
const contextExtensions = mapField(AC, 'context_extensions', 10);

const attributeContext = file(
  'envoy/service/auth/v3/attribute_context.proto',
  'envoy.service.auth.v3',
  ['envoy/config/core/v3/address.proto', 'google/protobuf/timestamp.proto'],
  [
    {
      name: 'AttributeContext',
      field: [msgField('source', 1, `${AC}.Peer`), msgField('destination', 2, `${AC}.Peer`), msgField('request', 4, `${AC}.Request`), contextExtensions.field],
      nestedType: [
        {
          name: 'Peer',
          field: [
            msgField('address', 1, '.envoy.config.core.v3.Address'),
            field('service', 2, T.STRING),
            peerLabels.field,
            field('principal', 4, T.STRING),
            field('certificate', 5, T.STRING),
          ],
          nestedType: [peerLabels.entry],
        },
        { name: 'Request', field: [msgField('time', 1, '.google.protobuf.Timestamp'), msgField('http', 2, `${AC}.HttpRequest`)] },
        {
          name: 'HttpRequest',
          field: [
            field('id', 1, T.STRING),
            field('method', 2, T.STRING),
            httpHeaders.field,
            field('path', 4, T.STRING),
            field('host', 5, T.STRING),
            field('scheme', 6, T.STRING),
            field('query', 7, T.STRING),
            field('fragment', 8, T.STRING),
            field('size', 9, T.INT64),
            field('protocol', 10, T.STRING),
            field('body', 11, T.STRING),
            field('raw_body', 12, T.BYTES),
          ],
          nestedType: [httpHeaders.entry],
        },
        contextExtensions.entry,
      ],
    },
  ],
);

const externalAuth = file(
  'envoy/service/auth/v3/external_auth.proto',
  'envoy.service.auth.v3',
  ['envoy/config/core/v3/base.proto', 'envoy/type/v3/http_status.proto', 'envoy/service/auth/v3/attribute_context.proto', 'google/rpc/status.proto', 'google/protobuf/struct.proto'],
  [
    { name: 'CheckRequest', field: [msgField('attributes', 1, AC)] },
    {
      name: 'DeniedHttpResponse',
      field: [
        msgField('status', 1, '.envoy.type.v3.HttpStatus'),
        msgField('headers', 2, '.envoy.config.core.v3.HeaderValueOption', { repeated: true }),
        field('body', 3, T.STRING),
      ],
    },
    {
      name: 'OkHttpResponse',
      field: [
        msgField('headers', 2, '.envoy.config.core.v3.HeaderValueOption', { repeated: true }),
        msgField('dynamic_metadata', 3, '.google.protobuf.Struct'),
        field('headers_to_remove', 5, T.STRING, { repeated: true }),
        msgField('response_headers_to_add', 6, '.envoy.config.core.v3.HeaderValueOption', { repeated: true }),
      ],
    },
    {
      name: 'CheckResponse',
      field: [
        msgField('status', 1, '.google.rpc.Status'),
        msgField('denied_response', 2, '.envoy.service.auth.v3.DeniedHttpResponse', { oneof: 0 }),
        msgField('ok_response', 3, '.envoy.service.auth.v3.OkHttpResponse', { oneof: 0 }),
        msgField('dynamic_metadata', 4, '.google.protobuf.Struct'),
      ],
      oneofDecl: [{ name: 'http_response' }],
    },
  ],
);

const deps = new Map<string, FileDescriptorProto | DescFile>([
  ['google/protobuf/any.proto', file_google_protobuf_any],
  ['google/protobuf/struct.proto', file_google_protobuf_struct],
  ['google/protobuf/timestamp.proto', file_google_protobuf_timestamp],
  ['google/protobuf/wrappers.proto', file_google_protobuf_wrappers],
  ['google/rpc/status.proto', RPC_STATUS_FILE],
  ['envoy/type/v3/http_status.proto', httpStatus],
  ['envoy/config/core/v3/base.proto', coreBase],
  ['envoy/config/core/v3/address.proto', coreAddress],
  ['envoy/service/auth/v3/attribute_context.proto', attributeContext],
]);

const message = messageRegistry('ext_authz', externalAuth, deps);

// ---------------------------------------------------------------------------------------------
// Typed shapes (what protoc-gen-es would generate for the fields above).

/** `envoy.config.core.v3.HeaderValueOption.HeaderAppendAction`. */
export const HeaderAppendAction = Object.freeze({
  APPEND_IF_EXISTS_OR_ADD: 0,
  ADD_IF_ABSENT: 1,
  OVERWRITE_IF_EXISTS_OR_ADD: 2,
  OVERWRITE_IF_EXISTS: 3,
});

export type HeaderValue = Message<'envoy.config.core.v3.HeaderValue'> & { key: string; value: string; rawValue: Uint8Array };
export type HeaderValueOption = Message<'envoy.config.core.v3.HeaderValueOption'> & {
  header?: HeaderValue;
  /** Deprecated `append` (google.protobuf.BoolValue): undefined when unset. */
  append?: boolean;
  appendAction: number;
  keepEmptyValue: boolean;
};
export type SocketAddress = Message<'envoy.config.core.v3.SocketAddress'> & {
  protocol: number;
  address: string;
  portSpecifier: { case: 'portValue'; value: number } | { case: undefined; value?: undefined };
};
export type Address = Message<'envoy.config.core.v3.Address'> & {
  address: { case: 'socketAddress'; value: SocketAddress } | { case: undefined; value?: undefined };
};
export type Peer = Message<'envoy.service.auth.v3.AttributeContext.Peer'> & {
  address?: Address;
  service: string;
  labels: Record<string, string>;
  principal: string;
  certificate: string;
};
export type HttpRequest = Message<'envoy.service.auth.v3.AttributeContext.HttpRequest'> & {
  id: string;
  method: string;
  headers: Record<string, string>;
  path: string;
  host: string;
  scheme: string;
  query: string;
  fragment: string;
  size: bigint;
  protocol: string;
  body: string;
  rawBody: Uint8Array;
};
export type Request = Message<'envoy.service.auth.v3.AttributeContext.Request'> & { time?: Timestamp; http?: HttpRequest };
export type AttributeContext = Message<'envoy.service.auth.v3.AttributeContext'> & {
  source?: Peer;
  destination?: Peer;
  request?: Request;
  contextExtensions: Record<string, string>;
};
export type CheckRequest = Message<'envoy.service.auth.v3.CheckRequest'> & { attributes?: AttributeContext };
export type RpcStatus = Message<'google.rpc.Status'> & { code: number; message: string };
export type HttpStatus = Message<'envoy.type.v3.HttpStatus'> & { code: number };
export type DeniedHttpResponse = Message<'envoy.service.auth.v3.DeniedHttpResponse'> & {
  status?: HttpStatus;
  headers: HeaderValueOption[];
  body: string;
};
export type OkHttpResponse = Message<'envoy.service.auth.v3.OkHttpResponse'> & {
  headers: HeaderValueOption[];
  dynamicMetadata?: JsonObject;
  headersToRemove: string[];
  responseHeadersToAdd: HeaderValueOption[];
};
export type CheckResponse = Message<'envoy.service.auth.v3.CheckResponse'> & {
  status?: RpcStatus;
  httpResponse:
    | { case: 'deniedResponse'; value: DeniedHttpResponse }
    | { case: 'okResponse'; value: OkHttpResponse }
    | { case: undefined; value?: undefined };
  dynamicMetadata?: JsonObject;
};

export const CheckRequestSchema: GenMessage<CheckRequest> = message<CheckRequest>('envoy.service.auth.v3.CheckRequest');
export const CheckResponseSchema: GenMessage<CheckResponse> = message<CheckResponse>('envoy.service.auth.v3.CheckResponse');
export const DeniedHttpResponseSchema: GenMessage<DeniedHttpResponse> = message<DeniedHttpResponse>('envoy.service.auth.v3.DeniedHttpResponse');
export const OkHttpResponseSchema: GenMessage<OkHttpResponse> = message<OkHttpResponse>('envoy.service.auth.v3.OkHttpResponse');
export const HeaderValueOptionSchema: GenMessage<HeaderValueOption> = message<HeaderValueOption>('envoy.config.core.v3.HeaderValueOption');
