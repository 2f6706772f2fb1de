/**
 * Route settings of the bootstrap `http` section and request headers the router adds:
 *  - `requestTimeoutMs`: a backend that never answers gives 504 `UT` and its request is
 *    cancelled; by default (no timeout) a gRPC server stream quiet for 2 s is not cut (E3);
 *  - `appendForwardedFor` (J1): the client pod IP from the tunnel's `forwarded` is appended to
 *    `x-forwarded-for`; off by default (XFF untouched);
 *  - `x-request-id` generated (UUID v4) when absent, kept when present;
 *  - HTTP/1.0 accepted by default, 426 with `rejectHttp10`.
 * Addresses: 127.0.89.x (settings on), 127.0.90.x (defaults).
 */
import http from 'node:http';
import net from 'node:net';
import * as grpc from '@grpc/grpc-js';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { parseHttpResponse, readAll } from '../../helpers/hbone-client.ts';
import { servicePort } from '../../helpers/mesh.ts';
import { recorder, startBackend } from '../../helpers/recorder.ts';
import { sleep } from '../../helpers/servers.ts';
import { addEntry, addToMesh, echoService, startTestTopology, type TestTopology } from '../../helpers/topology.ts';

const id = (b: Buffer) => b;
const definition = {
  stream: { path: '/test.Quiet/Stream', requestStream: false, responseStream: true, requestSerialize: id, requestDeserialize: id, responseSerialize: id, responseDeserialize: id },
  hang: { path: '/test.Quiet/Hang', requestStream: false, responseStream: false, requestSerialize: id, requestDeserialize: id, responseSerialize: id, responseDeserialize: id },
};
const QuietClient = grpc.makeGenericClientConstructor(definition as unknown as grpc.ServiceDefinition, 'Quiet');
type Quiet = grpc.Client & {
  stream(b: Buffer): grpc.ClientReadableStream<Buffer>;
  hang(b: Buffer, cb: (e: grpc.ServiceError | null, v?: Buffer) => void): void;
};

/** gRPC servers on the topology's pods (:9090): `stream` sends, is quiet 2 s, sends, ends; `hang` never answers. */
async function grpcBackends(net4: number, closers: (() => Promise<unknown>)[], hung: { started: number; closed: number }): Promise<void> {
  for (const ip of [`127.0.${net4}.11`, `127.0.${net4}.12`]) {
    const server = new grpc.Server();
    server.addService(definition as unknown as grpc.ServiceDefinition, {
      stream: (call: grpc.ServerWritableStream<Buffer, Buffer>) => {
        call.write(Buffer.from('first'));
        setTimeout(() => {
          call.write(Buffer.from('second'));
          call.end();
        }, 2000);
      },
      hang: (call: grpc.ServerUnaryCall<Buffer, Buffer>) => {
        hung.started++;
        call.once('cancelled', () => hung.closed++);
      },
    });
    await new Promise<void>((resolve, reject) => server.bindAsync(`${ip}:9090`, grpc.ServerCredentials.createInsecure(), (err) => (err ? reject(err) : resolve())));
    closers.push(async () => server.forceShutdown());
  }
}

const UUID_V4 = /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/;

/** Backends answering with the request headers (and body length) as JSON once the body is read; `/hang` never answers (its close is recorded). */
async function backends(net4: number, closers: (() => Promise<unknown>)[], hung: { started: number; closed: number }): Promise<void> {
  for (const ip of [`127.0.${net4}.11`, `127.0.${net4}.12`]) {
    // The answer comes once the request body has been read.
    const b = await startBackend(ip, 8080, (r, _req, res) => {
      if (!r.url.startsWith('/hang')) return { body: { version: r.httpVersion, headers: r.headers, length: r.body.length } };
      hung.started++;
      res.once('close', () => hung.closed++);
      return undefined;
    });
    closers.push(b.close);
  }
}

function get(entry: { host: string; port: number }, path: string, headers: Record<string, string> = {}): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    http
      .get({ host: entry.host, port: entry.port, path, headers: { host: 'echo.demo', ...headers }, agent: false }, (res) => {
        let b = '';
        res.on('data', (c) => (b += c));
        res.on('end', () => resolve({ status: res.statusCode!, body: b }));
      })
      .on('error', reject);
  });
}

/** Raw request on a fresh connection, read until the server closes it. */
async function raw(entry: { host: string; port: number }, text: string): Promise<ReturnType<typeof parseHttpResponse>> {
  const s = net.connect(entry.port, entry.host);
  const all = readAll(s);
  s.write(text);
  return parseHttpResponse(await all);
}

describe('requestTimeoutMs 300, appendForwardedFor, rejectHttp10', () => {
  const NET = 89;
  let topo: TestTopology;
  const rec = recorder();
  const closers: (() => Promise<unknown>)[] = [];
  const hung = { started: 0, closed: 0 };
  const grpcHung = { started: 0, closed: 0 };
  let grpcEntry: { host: string; port: number };

  beforeAll(async () => {
    topo = await startTestTopology(NET, {
      backends: false,
      extraFilters: [rec.factory],
      bootstrap: { filters: rec.filters, http: { requestTimeoutMs: 300, appendForwardedFor: true, rejectHttp10: true } },
    });
    await backends(NET, closers, hung);
    await grpcBackends(NET, closers, grpcHung);
    await addToMesh(topo, echoService('quiet', `127.0.${NET}.102`, servicePort('grpc', 9090)));
    const e = await addEntry(topo, `127.0.${NET}.102:9090`);
    closers.push(e.close);
    grpcEntry = e;
  });
  afterAll(async () => {
    for (const c of closers.reverse()) await c().catch(() => {});
    await topo?.close();
  });

  test('a backend that never answers: 504 UT and the upstream request is cancelled', async () => {
    const r = await get(topo.entry, '/hang');
    expect(r.status).toBe(504);
    expect(r.body).toBe('upstream request timeout');
    const s = await rec.find('/hang');
    expect(s.flags).toBe('UT');
    expect(s.code).toBe(504);
    expect(hung.started).toBe(1);
    await expect.poll(() => hung.closed, { timeout: 5000 }).toBe(1);
  }, 10_000);

  test('the timeout runs from the end of the request, as Envoy\'s route timeout: a slow upload answered at once is not cut', async () => {
    const res = await new Promise<{ status: number; body: string }>((resolve, reject) => {
      const req = http.request({ host: topo.entry.host, port: topo.entry.port, method: 'POST', path: '/headers?slow-upload', headers: { host: 'echo.demo' }, agent: false }, (r) => {
        let b = '';
        r.on('data', (c) => (b += c));
        r.on('end', () => resolve({ status: r.statusCode!, body: b }));
      });
      req.on('error', reject);
      let n = 0;
      const tick = () => {
        if (++n === 4) return void req.end('last');
        req.write(`part${n}`);
        setTimeout(tick, 200);
      };
      tick();
    });
    expect(res.status).toBe(200);
    expect(JSON.parse(res.body).length).toBe('part1part2part3last'.length);
    expect((await rec.find('/headers?slow-upload')).flags).toBe('-');
  });

  test('a gRPC call over HTTP/2 both ways that is never answered: the timeout is a gRPC UNAVAILABLE (HTTP 200, as Envoy), flag UT, the upstream call cancelled', async () => {
    const client = new QuietClient(`${grpcEntry.host}:${grpcEntry.port}`, grpc.credentials.createInsecure()) as unknown as Quiet;
    try {
      const err = await new Promise<grpc.ServiceError | null>((resolve) => client.hang(Buffer.from('x'), (e) => resolve(e)));
      expect(err?.code).toBe(grpc.status.UNAVAILABLE);
      expect(err?.details).toBe('upstream request timeout');
      const s = await rec.find('/test.Quiet/Hang');
      expect(s).toMatchObject({ code: 200, flags: 'UT', protocol: 'HTTP/2' });
      expect(grpcHung.started).toBe(1);
      await expect.poll(() => grpcHung.closed, { timeout: 5000 }).toBe(1);
    } finally {
      client.close();
    }
  }, 10_000);

  test('J1: the client pod IP is appended to x-forwarded-for', async () => {
    const none = JSON.parse((await get(topo.entry, '/headers')).body);
    expect(none.headers['x-forwarded-for']).toBe(`127.0.${NET}.50`);
    const some = JSON.parse((await get(topo.entry, '/headers', { 'x-forwarded-for': '1.2.3.4' })).body);
    expect(some.headers['x-forwarded-for']).toBe(`1.2.3.4, 127.0.${NET}.50`);
  });

  test('HTTP/1.0 is answered 426 and the connection closed', async () => {
    const r = await raw(topo.entry, 'GET /http10 HTTP/1.0\r\nHost: echo.demo\r\n\r\n');
    expect(r.status).toBe(426);
    const s = await rec.find('/http10');
    expect(s.code).toBe(426);
    expect(s.attempts).toBe(0);
  });
});

describe('defaults', () => {
  const NET = 90;
  let topo: TestTopology;
  const closers: (() => Promise<unknown>)[] = [];
  const hung = { started: 0, closed: 0 };
  let grpcEntry: { host: string; port: number };

  beforeAll(async () => {
    topo = await startTestTopology(NET, { backends: false });
    await backends(NET, closers, hung);
    await grpcBackends(NET, closers, { started: 0, closed: 0 });
    await addToMesh(topo, echoService('quiet', `127.0.${NET}.102`, servicePort('grpc', 9090)));
    const e = await addEntry(topo, `127.0.${NET}.102:9090`);
    closers.push(e.close);
    grpcEntry = e;
  });
  afterAll(async () => {
    for (const c of closers.reverse()) await c().catch(() => {});
    await topo?.close();
  });

  test('x-forwarded-for is left as the client sent it', async () => {
    const none = JSON.parse((await get(topo.entry, '/headers')).body);
    expect(none.headers['x-forwarded-for']).toBeUndefined();
    const some = JSON.parse((await get(topo.entry, '/headers', { 'x-forwarded-for': '1.2.3.4' })).body);
    expect(some.headers['x-forwarded-for']).toBe('1.2.3.4');
  });

  test('x-request-id: a UUID v4 is generated when absent, a client value is kept', async () => {
    const a = JSON.parse((await get(topo.entry, '/headers')).body);
    const b = JSON.parse((await get(topo.entry, '/headers')).body);
    expect(a.headers['x-request-id']).toMatch(UUID_V4);
    expect(b.headers['x-request-id']).toMatch(UUID_V4);
    expect(a.headers['x-request-id']).not.toBe(b.headers['x-request-id']);
    const kept = JSON.parse((await get(topo.entry, '/headers', { 'x-request-id': 'client-chosen-id' })).body);
    expect(kept.headers['x-request-id']).toBe('client-chosen-id');
  });

  test('HTTP/1.0 is accepted (with and without Host)', async () => {
    for (const text of ['GET /headers HTTP/1.0\r\nHost: echo.demo\r\n\r\n', 'GET /headers HTTP/1.0\r\n\r\n']) {
      const r = await raw(topo.entry, text);
      expect(r.status).toBe(200);
      expect(JSON.parse(r.body.toString()).version).toBe('1.1');
    }
  });

  test('E3: a gRPC server stream quiet for 2 s is not cut', async () => {
    const client = new QuietClient(`${grpcEntry.host}:${grpcEntry.port}`, grpc.credentials.createInsecure()) as unknown as Quiet;
    try {
      const call = client.stream(Buffer.from('go'));
      const got: string[] = [];
      call.on('data', (b: Buffer) => got.push(b.toString()));
      call.on('error', () => {}); // the status below tells
      const status = await new Promise<grpc.StatusObject>((resolve) => call.on('status', resolve));
      expect(status.code).toBe(grpc.status.OK);
      expect(got).toEqual(['first', 'second']);
    } finally {
      client.close();
    }
  }, 10_000);

  test('no request timeout by default: a slow answer is waited for', async () => {
    const start = hung.started;
    const req = http.get({ host: topo.entry.host, port: topo.entry.port, path: '/hang', agent: false });
    let answered = false;
    req.on('response', () => (answered = true));
    req.on('error', () => {});
    await expect.poll(() => hung.started, { timeout: 5000 }).toBe(start + 1);
    await sleep(1500);
    // Still pending: no 504 came back.
    expect(answered).toBe(false);
    expect(hung.closed).toBe(0);
    // A client that resets its connection (a FIN alone would be a half-close still owed the answer: B3)
    // cancels the upstream request.
    req.socket!.resetAndDestroy();
    await expect.poll(() => hung.closed, { timeout: 5000 }).toBe(1);
  });
});
