/**
 * Shared pieces of the ext_authz tests: an in-process gRPC ext_authz server (real @grpc/grpc-js,
 * `envoy.service.auth.v3.Authorization/Check` with the project's @bufbuild/protobuf messages), a
 * scriptable HTTP authorization server, a mesh file builder and a plain-TCP `dial`.
 */
import net from 'node:net';
import type { Duplex } from 'node:stream';
import { create, fromBinary, toBinary, type MessageInitShape } from '@bufbuild/protobuf';
import * as grpc from '@grpc/grpc-js';
import { CHECK_METHOD_PATH, CheckRequestSchema, CheckResponseSchema, type CheckRequest, type CheckResponse } from '../../../src/ext-authz/proto.ts';
import type { Dial } from '../../../src/ext-authz/types.ts';
import { EXT_AUTHZ_PROVIDERS } from '../../../src/ext-authz/index.ts';
import { compileMesh } from '../../../src/state/compile.ts';
import type { Endpoint, MeshSnapshot } from '../../../src/state/types.ts';
import { DATAPLANE_MODE, meshConfig, meshText, namespace, pod, service, servicePort, usesWaypoint, waypointGateway, type Doc } from '../../helpers/mesh.ts';
import { startBackend, type Received } from '../../helpers/recorder.ts';

/** What the gRPC server saw of one call. */
export interface SeenCheck {
  readonly request: CheckRequest;
  /** `:authority` of the call. */
  readonly authority: string;
  /** Milliseconds left before the call's deadline (from `grpc-timeout`) when it arrived. */
  readonly deadlineMs: number;
}

export type CheckReply =
  | { readonly kind: 'respond'; readonly response: MessageInitShape<typeof CheckResponseSchema> }
  | { readonly kind: 'hang' }
  | { readonly kind: 'grpc-error'; readonly code: grpc.status; readonly message: string };

/**
 * A grpc-js server implementing `Check`: `reply` decides per request (by default from the
 * `x-test` request header: `allow`, `deny`, `hang`).
 */
export async function startGrpcAuthz(address: string, reply: (req: CheckRequest) => CheckReply): Promise<{ seen: SeenCheck[]; close: () => Promise<void> }> {
  const seen: SeenCheck[] = [];
  const server = new grpc.Server();
  const hanging: (() => void)[] = [];
  server.addService(
    {
      Check: {
        path: CHECK_METHOD_PATH,
        requestStream: false,
        responseStream: false,
        requestSerialize: (m: CheckRequest) => Buffer.from(toBinary(CheckRequestSchema, m)),
        requestDeserialize: (b: Buffer) => fromBinary(CheckRequestSchema, b),
        responseSerialize: (m: CheckResponse) => Buffer.from(toBinary(CheckResponseSchema, m)),
        responseDeserialize: (b: Buffer) => fromBinary(CheckResponseSchema, b),
      },
    },
    {
      Check: (call: grpc.ServerUnaryCall<CheckRequest, CheckResponse>, callback: grpc.sendUnaryData<CheckResponse>) => {
        const deadline = call.getDeadline();
        const deadlineMs = (deadline instanceof Date ? deadline.getTime() : deadline) - Date.now();
        seen.push({ request: call.request, authority: call.getHost(), deadlineMs });
        const r = reply(call.request);
        if (r.kind === 'hang') {
          hanging.push(() => callback({ code: grpc.status.CANCELLED, details: 'closing' }));
          return;
        }
        if (r.kind === 'grpc-error') {
          callback({ code: r.code, details: r.message });
          return;
        }
        callback(null, create(CheckResponseSchema, r.response));
      },
    },
  );
  await new Promise<void>((resolve, reject) =>
    server.bindAsync(address, grpc.ServerCredentials.createInsecure(), (err) => (err ? reject(err) : resolve())),
  );
  return {
    seen,
    close: async () => {
      for (const h of hanging) h();
      server.forceShutdown();
    },
  };
}

/** One request the HTTP authorization server received. */
export type SeenHttp = Received;

export interface HttpReply {
  readonly status: number;
  readonly headers?: Readonly<Record<string, string>>;
  readonly body?: string;
  readonly hang?: boolean;
}

/** A plain HTTP/1.1 authorization server; `reply` decides per request. */
export async function startHttpAuthz(ip: string, port: number, reply: (req: SeenHttp) => HttpReply): Promise<{ seen: SeenHttp[]; close: () => Promise<void> }> {
  const backend = await startBackend(ip, port, (r) => {
    const answer = reply(r);
    return answer.hang ? undefined : { status: answer.status, headers: answer.headers, body: answer.body ?? '' };
  });
  return { seen: backend.received, close: backend.close };
}

/** `dial` for endpoints outside the mesh: plain TCP to `address:targetPort`. Counts dials. */
export function plainDial(): Dial & { count: number } {
  const dial = ((ep: Endpoint) =>
    new Promise<Duplex>((resolve, reject) => {
      dial.count++;
      const s = net.connect(ep.targetPort, ep.address);
      s.once('connect', () => resolve(s));
      s.once('error', reject);
    })) as unknown as Dial & { count: number };
  dial.count = 0;
  return dial;
}

/** A Service `name` in `foo` at `vip` with one Pod `pod` on `podIp` (opted out of the mesh unless `hbone`). */
export function serviceWithPod(name: string, vip: string, podIp: string, port: number, opts: { hbone?: boolean; portName?: string } = {}): Doc[] {
  return [
    service({ name, namespace: 'foo', vip, ports: [servicePort(opts.portName ?? 'grpc', port)] }),
    pod({ name: `${name}-1`, namespace: 'foo', labels: { app: name, ...(opts.hbone ? {} : { [DATAPLANE_MODE]: 'none' }) }, sa: name, ip: podIp }),
  ];
}

/** A mesh with the waypoint `foo/waypoint`, MeshConfig `extensionProviders` and `objects`. */
export function meshOf(extensionProviders: readonly object[], objects: readonly object[]): MeshSnapshot {
  const text = meshText(meshConfig({ extensionProviders }), waypointGateway('foo'), namespace('foo', usesWaypoint()), ...objects);
  return compileMesh({ text, file: 'ext-authz-test.yaml', parts: [EXT_AUTHZ_PROVIDERS] });
}
