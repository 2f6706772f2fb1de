/**
 * An in-process OTLP trace collector for tests: OTLP/HTTP (`POST /v1/traces`, JSON, what
 * @opentelemetry/exporter-trace-otlp-http sends) and OTLP/gRPC
 * (`opentelemetry.proto.collector.trace.v1.TraceService/Export`, decoded with @bufbuild/protobuf
 * declarations of the fields read here, field numbers from opentelemetry-proto
 * opentelemetry/proto/trace/v1/trace.proto, common/v1/common.proto, resource/v1/resource.proto).
 * Both record spans in one normalized shape.
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import * as grpc from '@grpc/grpc-js';
import { create, createFileRegistry, fromBinary, type DescMessage } from '@bufbuild/protobuf';
import { FieldDescriptorProto_Label as L, FieldDescriptorProto_Type as T, FileDescriptorProtoSchema } from '@bufbuild/protobuf/wkt';

/** One received span. Ids are lower-case hex ('' when absent); kind is OTLP's number (2 SERVER, 3 CLIENT). */
export interface ReceivedSpan {
  readonly traceId: string;
  readonly spanId: string;
  readonly parentSpanId: string;
  readonly name: string;
  readonly kind: number;
  readonly attributes: Record<string, string | number | boolean>;
  /** 0 unset, 1 ok, 2 error. */
  readonly status: number;
  readonly resource: Record<string, string | number | boolean>;
  readonly via: 'http' | 'grpc';
}

const f = (name: string, number: number, type: T, typeName?: string, repeated = false) => ({
  name,
  number,
  type,
  label: repeated ? L.REPEATED : L.OPTIONAL,
  jsonName: name.replace(/_([a-z])/g, (_, c: string) => c.toUpperCase()),
  ...(typeName ? { typeName } : {}),
});
const P = '.otlp';
const registry = createFileRegistry(
  create(FileDescriptorProtoSchema, {
    name: 'otlp-test.proto',
    package: 'otlp',
    syntax: 'proto3',
    messageType: [
      { name: 'Export', field: [f('resource_spans', 1, T.MESSAGE, `${P}.ResourceSpans`, true)] },
      { name: 'ResourceSpans', field: [f('resource', 1, T.MESSAGE, `${P}.Resource`), f('scope_spans', 2, T.MESSAGE, `${P}.ScopeSpans`, true)] },
      { name: 'Resource', field: [f('attributes', 1, T.MESSAGE, `${P}.KeyValue`, true)] },
      { name: 'ScopeSpans', field: [f('spans', 2, T.MESSAGE, `${P}.Span`, true)] },
      {
        name: 'Span',
        field: [
          f('trace_id', 1, T.BYTES),
          f('span_id', 2, T.BYTES),
          f('parent_span_id', 4, T.BYTES),
          f('name', 5, T.STRING),
          f('kind', 6, T.INT32),
          f('attributes', 9, T.MESSAGE, `${P}.KeyValue`, true),
          f('status', 15, T.MESSAGE, `${P}.Status`),
        ],
      },
      { name: 'Status', field: [f('message', 2, T.STRING), f('code', 3, T.INT32)] },
      { name: 'KeyValue', field: [f('key', 1, T.STRING), f('value', 2, T.MESSAGE, `${P}.AnyValue`)] },
      { name: 'AnyValue', field: [f('string_value', 1, T.STRING), f('bool_value', 2, T.BOOL), f('int_value', 3, T.INT64), f('double_value', 4, T.DOUBLE)] },
    ],
  }),
  () => undefined,
);
const ExportSchema = registry.getMessage('otlp.Export') as DescMessage;

type Kv = { key: string; value?: { stringValue?: string; boolValue?: boolean; intValue?: string | number | bigint; doubleValue?: number } };
const hex = (b: Uint8Array | string | undefined): string => (b === undefined ? '' : typeof b === 'string' ? b.toLowerCase() : Buffer.from(b).toString('hex'));

function attrs(list: readonly Kv[] | undefined): Record<string, string | number | boolean> {
  const out: Record<string, string | number | boolean> = {};
  for (const kv of list ?? []) {
    const v = kv.value ?? {};
    out[kv.key] = v.stringValue || (v.boolValue ?? (v.intValue !== undefined && v.intValue !== '0' && v.intValue !== 0n ? Number(v.intValue) : (v.doubleValue ?? v.stringValue ?? '')));
  }
  return out;
}

interface ExportShape {
  resourceSpans?: { resource?: { attributes?: Kv[] }; scopeSpans?: { spans?: { traceId?: Uint8Array | string; spanId?: Uint8Array | string; parentSpanId?: Uint8Array | string; name?: string; kind?: number; attributes?: Kv[]; status?: { code?: number } }[] }[] }[];
}

function normalize(e: ExportShape, via: 'http' | 'grpc'): ReceivedSpan[] {
  const out: ReceivedSpan[] = [];
  for (const rs of e.resourceSpans ?? []) {
    const resource = attrs(rs.resource?.attributes);
    for (const ss of rs.scopeSpans ?? []) {
      for (const s of ss.spans ?? []) {
        out.push({
          traceId: hex(s.traceId),
          spanId: hex(s.spanId),
          parentSpanId: hex(s.parentSpanId),
          name: s.name ?? '',
          kind: s.kind ?? 0,
          attributes: attrs(s.attributes),
          status: s.status?.code ?? 0,
          resource,
          via,
        });
      }
    }
  }
  return out;
}

/** A running receiver; `spans` fills as exports arrive. */
export interface OtlpReceiver {
  readonly spans: ReceivedSpan[];
  readonly httpPort: number;
  readonly grpcPort: number;
  /** Export requests received (per protocol). */
  readonly requests: { http: number; grpc: number };
  close(): Promise<void>;
}

/** Start both receivers on `ip` (ports chosen by the OS). */
export async function startOtlpReceiver(ip: string): Promise<OtlpReceiver> {
  const spans: ReceivedSpan[] = [];
  const requests = { http: 0, grpc: 0 };
  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      requests.http++;
      if (req.url !== '/v1/traces' || !String(req.headers['content-type']).startsWith('application/json')) {
        res.writeHead(415).end();
        return;
      }
      spans.push(...normalize(JSON.parse(Buffer.concat(chunks).toString('utf8')) as ExportShape, 'http'));
      res.writeHead(200, { 'content-type': 'application/json' }).end('{}');
    });
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, ip, () => resolve());
  });
  const g = new grpc.Server();
  g.addService(
    {
      Export: {
        path: '/opentelemetry.proto.collector.trace.v1.TraceService/Export',
        requestStream: false,
        responseStream: false,
        requestSerialize: (b: Buffer) => b,
        requestDeserialize: (b: Buffer) => b,
        responseSerialize: (b: Buffer) => b,
        responseDeserialize: (b: Buffer) => b,
      },
    },
    {
      Export: (call: grpc.ServerUnaryCall<Buffer, Buffer>, cb: grpc.sendUnaryData<Buffer>) => {
        requests.grpc++;
        spans.push(...normalize(fromBinary(ExportSchema, call.request) as unknown as ExportShape, 'grpc'));
        cb(null, Buffer.alloc(0));
      },
    },
  );
  const grpcPort = await new Promise<number>((resolve, reject) => g.bindAsync(`${ip}:0`, grpc.ServerCredentials.createInsecure(), (err, port) => (err ? reject(err) : resolve(port))));
  return {
    spans,
    requests,
    httpPort: (server.address() as AddressInfo).port,
    grpcPort,
    close: async () => {
      g.forceShutdown();
      server.closeAllConnections();
      await new Promise((r) => server.close(r));
    },
  };
}
