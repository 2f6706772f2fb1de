/**
 * ext_authz over gRPC against a real in-process grpc-js `Authorization/Check` server: allow with
 * header mutations, denial with the server's status/headers/body, the default 403, timeouts and
 * errors under `failOpen` / `statusOnError`, request attributes, the body, TCP checks, and the
 * call going through an HBONE tunnel (the real ClusterManager + inbound role) when the provider's
 * endpoint is a mesh workload. Addresses: 127.0.170.x.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import * as grpc from '@grpc/grpc-js';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { log } from '../../../src/util/log.ts';
import { createExtAuthzHook, ExtAuthzClient } from '../../../src/ext-authz/index.ts';
import { HeaderList, type ConnectionContext, type StreamContext } from '../../../src/pipeline/index.ts';
import type { CheckInput } from '../../../src/ext-authz/types.ts';
import { HboneSessionPool } from '../../../src/hbone/pool.ts';
import { DEFAULT_HTTP2 } from '../../../src/hbone/settings.ts';
import { LocalCa } from '../../../src/identity/ca.ts';
import { WorkloadCertificate } from '../../../src/identity/workload-certificate.ts';
import { InboundRole } from '../../../src/ztunnel/inbound.ts';
import type { MeshSnapshot } from '../../../src/state/types.ts';
import { ClusterManager } from '../../../src/upstream/cluster-manager.ts';
import { SidecarTransport } from '../../../src/upstream/sidecar-transport.ts';
import { meshOf, plainDial, serviceWithPod, startGrpcAuthz, type CheckReply } from './helpers.ts';

// Expected failures (JWKS outages, invalid resources, failed checks) log warnings; keep the output readable.
log.level = 'silent';

const NET = '127.0.170';
const PLAIN_POD = `${NET}.12`;
const HBONE_POD = `${NET}.11`;
const DEAD_POD = `${NET}.13`;
const HANG_POD = `${NET}.14`;

const grpcProvider = (name: string, service: string, extra: object = {}) => ({ name, envoyExtAuthzGrpc: { service, port: 9000, ...extra } });

const providers = [
  grpcProvider('plain', 'ext-authz-plain.foo.svc.cluster.local', { timeout: '2s' }),
  grpcProvider('plain-ns', 'foo/ext-authz-plain.foo.svc.cluster.local'),
  grpcProvider('hbone', 'ext-authz.foo.svc.cluster.local', { timeout: '5s' }),
  grpcProvider('dead', 'ext-authz-dead.foo.svc.cluster.local', { timeout: '2s' }),
  grpcProvider('dead-open', 'ext-authz-dead.foo.svc.cluster.local', { timeout: '2s', failOpen: true }),
  grpcProvider('hang', 'ext-authz-hang.foo.svc.cluster.local', { timeout: '0.3s' }),
  grpcProvider('hang-open', 'ext-authz-hang.foo.svc.cluster.local', { timeout: '0.3s', failOpen: true }),
  grpcProvider('hang-503', 'ext-authz-hang.foo.svc.cluster.local', { timeout: '0.3s', statusOnError: '503' }),
  grpcProvider('body', 'ext-authz-plain.foo.svc.cluster.local', { includeRequestBodyInCheck: { maxRequestBytes: 4, allowPartialMessage: true } }),
  grpcProvider('body-bytes', 'ext-authz-plain.foo.svc.cluster.local', { includeRequestBodyInCheck: { maxRequestBytes: 64, packAsBytes: true } }),
  grpcProvider('missing', 'nowhere.foo.svc.cluster.local'),
  grpcProvider('bad-timeout', 'ext-authz-plain.foo.svc.cluster.local', { timeout: '500ms' }),
];

const mesh: MeshSnapshot = meshOf(providers, [
  ...serviceWithPod('ext-authz-plain', `${NET}.101`, PLAIN_POD, 9000),
  ...serviceWithPod('ext-authz', `${NET}.100`, HBONE_POD, 9000, { hbone: true }),
  ...serviceWithPod('ext-authz-dead', `${NET}.102`, DEAD_POD, 9000),
  ...serviceWithPod('ext-authz-hang', `${NET}.103`, HANG_POD, 9000),
]);

/** Server behaviour chosen by the request's `x-test` header. */
function scripted(req: import('../../../src/ext-authz/proto.ts').CheckRequest): CheckReply {
  const mode = req.attributes?.request?.http?.headers['x-test'] ?? 'allow';
  switch (mode) {
    case 'deny':
      return {
        kind: 'respond',
        response: {
          status: { code: grpc.status.PERMISSION_DENIED },
          httpResponse: {
            case: 'deniedResponse',
            value: {
              status: { code: 418 },
              headers: [
                { header: { key: 'X-Denied-By', value: 'test-authz' } },
                { header: { key: 'www-authenticate', value: 'Basic' }, append: false },
              ],
              body: 'go away',
            },
          },
        },
      };
    case 'deny-bare':
      return { kind: 'respond', response: { status: { code: grpc.status.UNAUTHENTICATED } } };
    case 'grpc-error':
      return { kind: 'grpc-error', code: grpc.status.UNAVAILABLE, message: 'backend down' };
    case 'hang':
      return { kind: 'hang' };
    default:
      return {
        kind: 'respond',
        response: {
          status: { code: 0 },
          httpResponse: {
            case: 'okResponse',
            value: {
              headers: [
                { header: { key: 'x-auth-user', value: 'alice' }, append: false },
                { header: { key: 'x-auth-groups', value: 'admins' }, append: true },
                { header: { key: 'x-auth-extra', value: '1' }, appendAction: 1 },
                { header: { key: ':path', value: '/hijack' }, append: false },
              ],
              headersToRemove: ['X-Secret', 'host'],
              responseHeadersToAdd: [{ header: { key: 'x-resp', value: 'yes' } }],
            },
          },
        },
      };
  }
}

const input = (over: Partial<NonNullable<CheckInput['http']>> = {}): CheckInput => ({
  source: { address: '127.0.170.50', port: 40000, principal: 'spiffe://cluster.local/ns/foo/sa/sleep' },
  destination: { address: `${NET}.200`, port: 8000, principal: 'spiffe://cluster.local/ns/foo/sa/waypoint' },
  http: {
    id: 'req-1',
    method: 'POST',
    path: '/api/items?x=1',
    host: 'httpbin.foo:8000',
    protocol: 'HTTP/2',
    headers: ['X-Foo', 'a', 'x-foo', 'b', ':authority', 'ignored', 'x-envoy-auth-partial-body', 'spoofed', 'content-type', 'text/plain'],
    time: new Date('2026-01-02T03:04:05.678Z'),
    ...over,
  },
});

const withTest = (mode: string) => input({ headers: ['x-test', mode] });

let plain: Awaited<ReturnType<typeof startGrpcAuthz>>;
let hang: Awaited<ReturnType<typeof startGrpcAuthz>>;
const dial = plainDial();
const client = new ExtAuthzClient({ dial, idleTimeoutMs: 5_000 });

beforeAll(async () => {
  plain = await startGrpcAuthz(`${PLAIN_POD}:9000`, scripted);
  hang = await startGrpcAuthz(`${HANG_POD}:9000`, () => ({ kind: 'hang' }));
});
afterAll(async () => {
  await client.close();
  await plain?.close();
  await hang?.close();
});

describe('gRPC provider over plain TCP', () => {
  test('OK: allowed, with the server\'s header mutations mapped to Envoy\'s actions', async () => {
    const before = plain.seen.length;
    const out = await client.check(mesh, 'plain', input());
    expect(out).toEqual({
      allow: true,
      reason: 'ok',
      headersToUpstream: [
        { name: 'x-auth-user', value: 'alice', action: 'set' },
        { name: 'x-auth-groups', value: 'admins', action: 'append' },
        { name: 'x-auth-extra', value: '1', action: 'add-if-absent' },
      ],
      headersToRemove: ['x-secret'],
      headersToDownstream: [{ name: 'x-resp', value: 'yes', action: 'add' }],
    });
    expect(plain.seen.length).toBe(before + 1);
  });

  test('the CheckRequest carries the attributes Envoy sends', async () => {
    await client.check(mesh, 'plain', input());
    const seen = plain.seen.at(-1)!;
    expect(seen.authority).toBe('outbound_.9000_._.ext-authz-plain.foo.svc.cluster.local');
    expect(seen.deadlineMs).toBeGreaterThan(1_500);
    expect(seen.deadlineMs).toBeLessThanOrEqual(2_000);
    const a = seen.request.attributes!;
    expect(a.source?.principal).toBe('spiffe://cluster.local/ns/foo/sa/sleep');
    expect(a.source?.address?.address).toEqual({ case: 'socketAddress', value: expect.objectContaining({ address: '127.0.170.50', portSpecifier: { case: 'portValue', value: 40000 } }) });
    expect(a.destination?.principal).toBe('spiffe://cluster.local/ns/foo/sa/waypoint');
    expect(a.destination?.address?.address.value).toMatchObject({ address: `${NET}.200`, portSpecifier: { value: 8000 } });
    const h = a.request!.http!;
    expect({ id: h.id, method: h.method, path: h.path, host: h.host, scheme: h.scheme, protocol: h.protocol, size: h.size, query: h.query, body: h.body }).toEqual({
      id: 'req-1',
      method: 'POST',
      path: '/api/items?x=1',
      host: 'httpbin.foo:8000',
      scheme: 'http',
      protocol: 'HTTP/2',
      size: 0n,
      query: '',
      body: '',
    });
    expect({ ...h.headers }).toEqual({
      ':authority': 'httpbin.foo:8000',
      ':method': 'POST',
      ':path': '/api/items?x=1',
      ':scheme': 'http',
      'x-foo': 'a,b',
      'content-type': 'text/plain',
    });
    expect(a.request!.time).toMatchObject({ seconds: BigInt(Date.parse('2026-01-02T03:04:05Z') / 1000), nanos: 678_000_000 });
  });

  test('a namespaced service reference `<ns>/<hostname>` resolves too', async () => {
    expect((await client.check(mesh, 'plain-ns', input())).allow).toBe(true);
  });

  test('PERMISSION_DENIED: the server\'s status, headers and body; flag UAEX', async () => {
    const out = await client.check(mesh, 'plain', withTest('deny'));
    expect(out).toEqual({
      allow: false,
      status: 418,
      headers: [
        ['x-denied-by', 'test-authz'],
        ['www-authenticate', 'Basic'],
      ],
      body: 'go away',
      reason: 'denied',
      responseFlag: 'UAEX',
      details: 'ext_authz_denied',
    });
  });

  test('a non-OK status without denied_response denies with 403 and an empty body', async () => {
    const out = await client.check(mesh, 'plain', withTest('deny-bare'));
    expect(out).toMatchObject({ allow: false, status: 403, body: '', headers: [], reason: 'denied' });
  });

  test('a gRPC error status (not a CheckResponse) is an error: statusOnError 403', async () => {
    const out = await client.check(mesh, 'plain', withTest('grpc-error'));
    expect(out).toMatchObject({ allow: false, status: 403, reason: 'error', details: 'ext_authz_error', responseFlag: 'UAEX' });
    expect(out.allow === false && out.error).toContain('gRPC status 14');
  });

  test('connections are reused across checks', async () => {
    const before = dial.count;
    for (let i = 0; i < 5; i++) await client.check(mesh, 'plain', input());
    expect(dial.count - before).toBeLessThanOrEqual(0);
  });
  test('prune: connections to endpoints that left the mesh are dropped, a later check dials again', async () => {
    await client.check(mesh, 'plain', input());
    const before = dial.count;
    const without = meshOf(providers, serviceWithPod('ext-authz', `${NET}.100`, HBONE_POD, 9000, { hbone: true }));
    client.prune(without);
    expect(await client.check(mesh, 'plain', input())).toMatchObject({ allow: true });
    expect(dial.count).toBe(before + 1);
  });
});

describe('timeouts and failures', () => {
  test('a hanging server: denied with 403 once the timeout passes', async () => {
    const t0 = Date.now();
    const out = await client.check(mesh, 'hang', input());
    const took = Date.now() - t0;
    expect(out).toMatchObject({ allow: false, status: 403, reason: 'error' });
    expect(out.allow === false && out.error).toMatch(/no answer within 300 ms/);
    expect(took).toBeGreaterThanOrEqual(280);
    expect(took).toBeLessThan(2_000);
    expect(hang.seen.at(-1)?.deadlineMs).toBeLessThanOrEqual(300);
  });

  test('failOpen: allowed after the timeout, marked failed-open', async () => {
    const out = await client.check(mesh, 'hang-open', input());
    expect(out).toMatchObject({ allow: true, reason: 'failed-open', headersToUpstream: [], headersToRemove: [] });
  });

  test('statusOnError: the configured status', async () => {
    const out = await client.check(mesh, 'hang-503', input());
    expect(out).toMatchObject({ allow: false, status: 503, body: '', reason: 'error' });
  });

  test('connection refused: statusOnError, or allowed with failOpen', async () => {
    expect(await client.check(mesh, 'dead', input())).toMatchObject({ allow: false, status: 403, reason: 'error' });
    expect(await client.check(mesh, 'dead-open', input())).toMatchObject({ allow: true, reason: 'failed-open' });
  });

  test('a service that is not in the mesh: an error, not a crash', async () => {
    const out = await client.check(mesh, 'missing', input());
    expect(out).toMatchObject({ allow: false, status: 403, reason: 'error' });
    expect(out.allow === false && out.error).toContain('not found in the mesh');
  });

  test('an unusable provider entry (timeout not a protobuf duration) and an undeclared one deny', async () => {
    expect(client.provider(mesh, 'bad-timeout')?.error).toMatch(/timeout must be a duration/);
    expect(await client.check(mesh, 'bad-timeout', input())).toMatchObject({ allow: false, status: 403, reason: 'error' });
    expect(await client.check(mesh, 'nope', input())).toMatchObject({ allow: false, status: 403, reason: 'error' });
  });
});

describe('request body and TCP checks', () => {
  test('includeRequestBodyInCheck: the first maxRequestBytes as `body`, partial flag true', async () => {
    const out = await client.check(mesh, 'body', input({ body: { data: Buffer.from('abcdefgh') } }));
    expect(out.allow).toBe(true);
    const h = plain.seen.at(-1)!.request.attributes!.request!.http!;
    expect(h.body).toBe('abcd');
    expect(h.size).toBe(8n);
    expect(h.headers['x-envoy-auth-partial-body']).toBe('true');
    expect(client.provider(mesh, 'body')?.body).toEqual({ maxRequestBytes: 4, allowPartialMessage: true, packAsBytes: false });
  });

  test('packAsBytes: the whole body as `raw_body`, partial flag false', async () => {
    await client.check(mesh, 'body-bytes', input({ body: { data: Buffer.from([0xff, 0x00, 0x41]) } }));
    const h = plain.seen.at(-1)!.request.attributes!.request!.http!;
    expect(Buffer.from(h.rawBody)).toEqual(Buffer.from([0xff, 0x00, 0x41]));
    expect(h.body).toBe('');
    expect(h.headers['x-envoy-auth-partial-body']).toBe('false');
  });

  test('without includeRequestBodyInCheck no body is sent even when the filter passes one', async () => {
    await client.check(mesh, 'plain', input({ body: { data: Buffer.from('secret') } }));
    const h = plain.seen.at(-1)!.request.attributes!.request!.http!;
    expect(h.body).toBe('');
    expect(h.headers['x-envoy-auth-partial-body']).toBeUndefined();
  });

  test('a TCP check sends only source and destination', async () => {
    const out = await client.check(mesh, 'plain', { source: { address: '127.0.170.50', port: 1 }, destination: { address: `${NET}.200`, port: 9 } });
    expect(out.allow).toBe(true);
    const a = plain.seen.at(-1)!.request.attributes!;
    expect(a.request).toBeUndefined();
    expect(a.source?.principal).toBe('');
  });
});

describe('the authz filter\'s ExtAuthzHook', () => {
  const conn = {
    info: { downstreamAddress: '127.0.170.60', downstreamPort: 41000, peer: { uri: 'spiffe://cluster.local/ns/foo/sa/sleep' }, targetIp: `${NET}.201`, targetPort: 8000 },
  } as unknown as ConnectionContext;
  const stream = (headers: [string, string][], over: object = {}) =>
    ({
      conn,
      method: 'GET',
      path: '/raw/../path',
      forwardPath: '/path',
      authority: 'httpbin.foo:8000',
      protocol: 'HTTP/1.1',
      requestId: '',
      startTime: Date.now(),
      bytesReceived: 0,
      requestHeaders: new HeaderList(headers.flat()),
      req: {},
      ...over,
    }) as unknown as StreamContext;
  const hook = createExtAuthzHook(client, { current: mesh });
  const custom = { provider: 'plain', policy: 'ns[foo]-policy[ext]-rule[0]' };

  test('allow: the request built from the tunnel and stream; actions resolved against the current headers', async () => {
    const d = await hook.check({}, stream([['x-auth-groups', 'users'], ['x-secret', 's']]), custom);
    expect(d).toEqual({
      allow: true,
      headers: { 'x-auth-user': 'alice', 'x-auth-groups': 'users,admins', 'x-auth-extra': '1' },
      removeHeaders: ['x-secret'],
      responseHeaders: [{ name: 'x-resp', value: 'yes', action: 'add' }],
    });
    const a = plain.seen.at(-1)!.request.attributes!;
    expect(a.source?.principal).toBe('spiffe://cluster.local/ns/foo/sa/sleep');
    expect(a.source?.address?.address.value).toMatchObject({ address: '127.0.170.60', portSpecifier: { value: 41000 } });
    expect(a.destination?.principal).toBe('spiffe://cluster.local/ns/foo/sa/waypoint');
    expect(a.request?.http?.path).toBe('/path');
  });

  test('deny: status, headers, body and details for the local reply', async () => {
    const d = await hook.check({}, stream([['x-test', 'deny']]), custom);
    expect(d).toEqual({ allow: false, status: 418, headers: { 'x-denied-by': 'test-authz', 'www-authenticate': 'Basic' }, body: 'go away', details: 'ext_authz_denied' });
    const e = await hook.check({}, stream([]), { ...custom, provider: 'hang-503' });
    expect(e).toMatchObject({ allow: false, status: 503, details: 'ext_authz_error' });
  });

  test('checkConnection: a TCP check', async () => {
    expect(await hook.checkConnection!({}, conn, custom)).toEqual({ allow: true, headers: { 'x-auth-user': 'alice', 'x-auth-groups': 'admins', 'x-auth-extra': '1' }, removeHeaders: ['x-secret'], responseHeaders: [{ name: 'x-resp', value: 'yes', action: 'add' }] });
    expect(plain.seen.at(-1)!.request.attributes!.request).toBeUndefined();
  });
});

describe('gRPC provider behind HBONE', () => {
  let dir: string;
  let server: Awaited<ReturnType<typeof startGrpcAuthz>>;
  let inbound: InboundRole;
  let sessions: HboneSessionPool;
  let clusters: ClusterManager;
  let hboneClient: ExtAuthzClient;
  const certs: WorkloadCertificate[] = [];

  beforeAll(async () => {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'wp-ext-authz-'));
    const ca = await LocalCa.init(dir, 'cluster.local');
    const podCert = await WorkloadCertificate.start(ca, 'spiffe://cluster.local/ns/foo/sa/ext-authz', 3_600_000);
    const wpCert = await WorkloadCertificate.start(ca, 'spiffe://cluster.local/ns/foo/sa/waypoint', 3_600_000);
    certs.push(podCert, wpCert);
    server = await startGrpcAuthz(`${HBONE_POD}:9000`, scripted);
    inbound = await InboundRole.start({ listen: `${HBONE_POD}:15008`, certificate: podCert });
    sessions = new HboneSessionPool({
      material: () => wpCert.current,
      http2: DEFAULT_HTTP2,
      trustDomain: () => 'cluster.local',
      connectTimeoutMs: 2_000,
      idleTimeoutMs: 10_000,
      maxStreamsPerConnection: 100,
    });
    clusters = new ClusterManager({
      sessions,
      sidecar: new SidecarTransport({ material: () => wpCert.current, local: () => { throw new Error('no sidecar here'); }, connectTimeoutMs: 2_000 }),
      hbonePort: 15008,
      loadBalancer: 'ROUND_ROBIN',
      connectTimeoutMs: 2_000,
      httpKeepAliveMs: 10_000,
      maxResponseHeadersBytes: 65_536,
      http2: DEFAULT_HTTP2,
    });
    hboneClient = new ExtAuthzClient({ dial: (ep, use) => clusters.openTcp(ep, use) });
  });
  afterAll(async () => {
    await hboneClient?.close();
    await clusters?.destroy();
    sessions?.destroy();
    await inbound?.close(10);
    await server?.close();
    for (const c of certs) c.close();
    fs.rmSync(dir, { recursive: true, force: true });
  });

  test('the endpoint is an HBONE workload: the check rides a CONNECT tunnel to podIP:15008', async () => {
    const ep = [...mesh.services.find((s) => s.name === 'ext-authz')!.endpoints.values()][0][0];
    expect(ep.tunnel).toBe('HBONE');
    const out = await hboneClient.check(mesh, 'hbone', input());
    expect(out.allow).toBe(true);
    expect(sessions.connectionCount).toBe(1);
    expect(server.seen.at(-1)?.authority).toBe('outbound_.9000_._.ext-authz.foo.svc.cluster.local');
    const denied = await hboneClient.check(mesh, 'hbone', withTest('deny'));
    expect(denied).toMatchObject({ allow: false, status: 418, body: 'go away' });
    expect(sessions.connectionCount).toBe(1);
  });
});
