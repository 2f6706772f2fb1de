/**
 * Graceful drain with an HTTP/2 call in flight (pitfall E2): a gRPC unary call whose backend
 * answers after 1.5 s; the waypoint's shutdown starts at 0.5 s. The client still gets the reply,
 * its trailers and the OK status; a new CONNECT after the drain started is refused; shutdown then
 * completes. Addresses: 127.0.91.x.
 */
import * as grpc from '@grpc/grpc-js';
import { afterAll, beforeAll, expect, test } from 'vitest';
import { connect, hboneSession } from '../../helpers/hbone-client.ts';
import { identityFrom } from '../../helpers/identity.ts';
import { sleep } from '../../helpers/servers.ts';
import { startTestTopology, type TestTopology } from '../../helpers/topology.ts';

const NET = 91;
const id = (b: Buffer) => b;
const definition = {
  slow: { path: '/test.Drain/Slow', requestStream: false, responseStream: false, requestSerialize: id, requestDeserialize: id, responseSerialize: id, responseDeserialize: id },
};
const DrainClient = grpc.makeGenericClientConstructor(definition as unknown as grpc.ServiceDefinition, 'Drain');

let topo: TestTopology;
const servers: grpc.Server[] = [];

beforeAll(async () => {
  topo = await startTestTopology(NET, { portName: 'grpc', backends: false, bootstrap: { drain: { timeoutMs: 5000 } } });
  for (const ip of [`127.0.${NET}.11`, `127.0.${NET}.12`]) {
    const server = new grpc.Server();
    server.addService(definition as unknown as grpc.ServiceDefinition, {
      slow: (call: grpc.ServerUnaryCall<Buffer, Buffer>, cb: grpc.sendUnaryData<Buffer>) => {
        setTimeout(() => {
          const trailer = new grpc.Metadata();
          trailer.set('x-drain-trailer', 'kept');
          cb(null, Buffer.concat([Buffer.from('late:'), call.request]), trailer);
        }, 1500);
      },
    });
    await new Promise<void>((resolve, reject) => server.bindAsync(`${ip}:8080`, grpc.ServerCredentials.createInsecure(), (err) => (err ? reject(err) : resolve())));
    servers.push(server);
  }
});

afterAll(async () => {
  for (const s of servers) s.forceShutdown();
  await topo?.close();
});

test('E2: a call in flight when the drain starts completes with its trailers; new CONNECTs are refused', async () => {
  const client = new DrainClient(`${topo.entry.host}:${topo.entry.port}`, grpc.credentials.createInsecure()) as unknown as grpc.Client & {
    slow(b: Buffer, cb: (e: grpc.ServiceError | null, v?: Buffer) => void): grpc.ClientUnaryCall;
  };
  const identity = await identityFrom(topo.caDir);
  try {
    let status: grpc.StatusObject | undefined;
    const result = new Promise<{ err: grpc.ServiceError | null; value?: Buffer }>((resolve) => {
      const call = client.slow(Buffer.from('m'), (err, value) => resolve({ err, value }));
      call.on('status', (s) => (status = s));
    });
    await sleep(500);
    const stopped = topo.waypoint!.shutdown();
    let stoppedAt = 0;
    void stopped.then(() => (stoppedAt = Date.now()));

    // A new tunnel after the drain started: the listener no longer accepts, or the CONNECT is refused.
    const fresh = await hboneSession(`127.0.${NET}.1`, topo.waypoint!.addresses.hbone.port, identity).then(
      async (session) => {
        try {
          const r = await connect(session, `127.0.${NET}.100:80`);
          return `answered ${r.status}`;
        } catch {
          return 'refused';
        } finally {
          session.destroy();
        }
      },
      () => 'refused',
    );
    expect(fresh).toBe('refused');

    const { err, value } = await result;
    const answeredAt = Date.now();
    expect(err).toBeNull();
    expect(value!.toString()).toBe('late:m');
    expect(status?.code).toBe(grpc.status.OK);
    expect(status?.metadata.get('x-drain-trailer')).toEqual(['kept']);
    await stopped;
    // The drain waited for the call rather than cutting it.
    expect(stoppedAt).toBeGreaterThanOrEqual(answeredAt - 50);
  } finally {
    client.close();
  }
}, 15_000);
