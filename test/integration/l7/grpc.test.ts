/**
 * gRPC through the whole path (tunnel → waypoint → inbound → backend) with @grpc/grpc-js on both
 * ends: a service port named `grpc` makes the waypoint speak HTTP/2 both ways; unary and every
 * streaming kind, a non-OK status with trailing metadata, and a long idle-then-talk bidi stream.
 * Addresses: 127.0.34.x.
 */
import * as grpc from '@grpc/grpc-js';
import { afterAll, beforeAll, expect, test } from 'vitest';
import { startTestTopology, type TestTopology } from '../../helpers/topology.ts';

const id = (b: Buffer) => b;
const method = (name: string, requestStream: boolean, responseStream: boolean) => ({
  path: `/test.Echo/${name}`,
  requestStream,
  responseStream,
  requestSerialize: id,
  requestDeserialize: id,
  responseSerialize: id,
  responseDeserialize: id,
});
const definition = {
  unary: method('Unary', false, false),
  fail: method('Fail', false, false),
  serverStream: method('ServerStream', false, true),
  clientStream: method('ClientStream', true, false),
  bidi: method('Bidi', true, true),
};
type Def = typeof definition;
const EchoClient = grpc.makeGenericClientConstructor(definition as unknown as grpc.ServiceDefinition, 'Echo');

let topo: TestTopology;
const servers: grpc.Server[] = [];
let client: grpc.Client & Record<keyof Def, (...args: unknown[]) => unknown>;

beforeAll(async () => {
  topo = await startTestTopology(34, { portName: 'grpc', backends: false });
  for (const ip of ['127.0.34.11', '127.0.34.12']) {
    const server = new grpc.Server();
    server.addService(definition as unknown as grpc.ServiceDefinition, {
      unary: (call: grpc.ServerUnaryCall<Buffer, Buffer>, cb: grpc.sendUnaryData<Buffer>) => {
        call.sendMetadata(new grpc.Metadata());
        cb(null, Buffer.concat([Buffer.from(`${ip}:`), call.request]));
      },
      fail: (_call: grpc.ServerUnaryCall<Buffer, Buffer>, cb: grpc.sendUnaryData<Buffer>) => {
        const md = new grpc.Metadata();
        md.set('x-why', 'because');
        cb({ code: grpc.status.PERMISSION_DENIED, details: 'nope', metadata: md });
      },
      serverStream: (call: grpc.ServerWritableStream<Buffer, Buffer>) => {
        const n = Number(call.request.toString());
        for (let i = 0; i < n; i++) call.write(Buffer.from(String(i)));
        call.end();
      },
      clientStream: (call: grpc.ServerReadableStream<Buffer, Buffer>, cb: grpc.sendUnaryData<Buffer>) => {
        let total = 0;
        call.on('data', (b: Buffer) => (total += b.length));
        call.on('end', () => cb(null, Buffer.from(String(total))));
      },
      bidi: (call: grpc.ServerDuplexStream<Buffer, Buffer>) => {
        call.on('data', (b: Buffer) => call.write(Buffer.concat([Buffer.from('echo:'), b])));
        call.on('end', () => call.end());
      },
    });
    await new Promise<void>((resolve, reject) => server.bindAsync(`${ip}:8080`, grpc.ServerCredentials.createInsecure(), (err) => (err ? reject(err) : resolve())));
    servers.push(server);
  }
  client = new EchoClient(`${topo.entry.host}:${topo.entry.port}`, grpc.credentials.createInsecure()) as unknown as typeof client;
});

afterAll(async () => {
  client?.close();
  for (const s of servers) s.forceShutdown();
  await topo?.close();
});

function unary(name: keyof Def, body: Buffer): Promise<{ err: grpc.ServiceError | null; value?: Buffer }> {
  return new Promise((resolve) => (client[name] as (b: Buffer, cb: (e: grpc.ServiceError | null, v?: Buffer) => void) => void).call(client, body, (err, value) => resolve({ err, value })));
}

test('unary calls succeed and spread over both endpoints', async () => {
  const seen = new Set<string>();
  for (let i = 0; i < 10; i++) {
    const { err, value } = await unary('unary', Buffer.from(`m${i}`));
    expect(err).toBeNull();
    const text = value!.toString();
    expect(text.endsWith(`:m${i}`)).toBe(true);
    seen.add(text.split(':')[0]);
  }
  expect(seen.size).toBe(2);
});

test('a non-OK status, its message and trailing metadata pass through', async () => {
  const { err } = await unary('fail', Buffer.from('x'));
  expect(err?.code).toBe(grpc.status.PERMISSION_DENIED);
  expect(err?.details).toBe('nope');
  expect(err?.metadata.get('x-why')).toEqual(['because']);
});

test('server streaming delivers every message and the OK status', async () => {
  const call = (client.serverStream as (b: Buffer) => grpc.ClientReadableStream<Buffer>).call(client, Buffer.from('50'));
  const got: string[] = [];
  call.on('data', (b: Buffer) => got.push(b.toString()));
  const status = await new Promise<grpc.StatusObject>((resolve) => call.on('status', resolve));
  expect(status.code).toBe(grpc.status.OK);
  expect(got).toEqual(Array.from({ length: 50 }, (_, i) => String(i)));
});

test('client streaming sums a 2 MiB upload', async () => {
  const result = new Promise<{ err: grpc.ServiceError | null; value?: Buffer }>((resolve) => {
    const call = (client.clientStream as (cb: (e: grpc.ServiceError | null, v?: Buffer) => void) => grpc.ClientWritableStream<Buffer>).call(client, (err, value) =>
      resolve({ err, value }),
    );
    for (let i = 0; i < 32; i++) call.write(Buffer.alloc(64 * 1024, i));
    call.end();
  });
  const { err, value } = await result;
  expect(err).toBeNull();
  expect(value!.toString()).toBe(String(32 * 64 * 1024));
});

test('a bidi stream stays open across a quiet spell and keeps exchanging (pitfall E3, scaled)', async () => {
  const call = (client.bidi as () => grpc.ClientDuplexStream<Buffer, Buffer>).call(client);
  const got: string[] = [];
  call.on('data', (b: Buffer) => got.push(b.toString()));
  call.write(Buffer.from('a'));
  await expect.poll(() => got.length, { timeout: 5000 }).toBe(1);
  await new Promise((r) => setTimeout(r, 1500));
  call.write(Buffer.from('b'));
  await expect.poll(() => got.length, { timeout: 5000 }).toBe(2);
  call.end();
  const status = await new Promise<grpc.StatusObject>((resolve) => call.on('status', resolve));
  expect(status.code).toBe(grpc.status.OK);
  expect(got).toEqual(['echo:a', 'echo:b']);
});
