/**
 * `istio.authz` on HTTP ports end to end (pitfall I1): an L7 ALLOW on one Service (principal X,
 * GET only) enforced per request, not leaking to another Service; selector and namespace-wide
 * policies ignored by the waypoint; the denial's body, flag and details (`[none]` and a DENY rule's
 * id); AUDIT and dry-run results recorded; `remote.ip` from the right-most X-Forwarded-For; a gRPC
 * call denied with status 7 (PERMISSION_DENIED). Addresses: 127.0.150.x.
 */
import * as grpc from '@grpc/grpc-js';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { spiffe } from '../../helpers/identity.ts';
import { authorizationPolicy } from '../../helpers/mesh.ts';
import type { Backend } from '../../helpers/recorder.ts';
import { addEntry } from '../../helpers/topology.ts';
import { DRY_RUN, HTTP_PORT, meshYaml, servicePolicy, startAll, type AuthzWaypoint } from './harness.ts';

const NET = '127.0.150';
const X = spiffe('a', 'x');
const Y = spiffe('a', 'y');
const S = `${NET}.100:80`;
const T = `${NET}.101:80`;
const G = `${NET}.102:9000`;

const MESH = meshYaml({
  apps: [
    { name: 's', vip: `${NET}.100`, podIp: `${NET}.11`, ports: [HTTP_PORT] },
    { name: 't', vip: `${NET}.101`, podIp: `${NET}.12`, ports: [HTTP_PORT] },
    { name: 'g', vip: `${NET}.102`, podIp: `${NET}.13`, ports: [{ name: 'grpc', port: 9000, targetPort: 9000 }] },
  ],
  docs: [
    // Pitfall I1: only X, only GET, on Service s.
    servicePolicy(
      's-x-get',
      's',
      `rules:
- from: [{ source: { principals: ["cluster.local/ns/a/sa/x"] } }]
  to: [{ operation: { methods: ["GET"] } }]`,
    ),
    // Selector policy: ztunnel's, never the waypoint's (it would deny everything on t).
    authorizationPolicy('t-selector-deny-all', 'selector: { matchLabels: { app: t } }\naction: DENY\nrules: [{}]'),
    // Namespace-wide allow-nothing without targetRefs: also ztunnel's.
    authorizationPolicy('ns-allow-nothing', {}),
    servicePolicy(
      't-deny-forbidden',
      't',
      `action: DENY
rules:
- to: [{ operation: { paths: ["/forbidden"] } }]
- to: [{ operation: { paths: ["/xff"] } }]
  when: [{ key: remote.ip, values: ["1.2.3.4"] }]`,
    ),
    servicePolicy('t-audit', 't', 'action: AUDIT\nrules: [{ to: [{ operation: { paths: ["/audited"] } }] }]'),
    servicePolicy('t-shadow-deny', 't', 'action: DENY\nrules: [{ to: [{ operation: { paths: ["/shadow"] } }] }]', { annotations: DRY_RUN }),
    servicePolicy('g-only-x', 'g', 'rules: [{ from: [{ source: { principals: ["cluster.local/ns/a/sa/x"] } }] }]'),
  ],
});

let wp: AuthzWaypoint;
let s: Backend;
let t: Backend;

startAll(async (start) => {
  s = await start.http(`${NET}.11`, 8080);
  t = await start.http(`${NET}.12`, 8080);
  wp = await start.waypoint({ ip: `${NET}.1`, mesh: MESH });
});

describe('pitfall I1: an L7 ALLOW (principal X, GET) on Service s', () => {
  test('X GET → 200, reaching the backend', async () => {
    const r = await wp.http(X, S, { path: '/i1/x-get' });
    expect(r.status).toBe(200);
    expect(s.received.map((q) => `${q.method} ${q.url}`)).toContain('GET /i1/x-get');
  });

  test('X DELETE → 403 `RBAC: access denied`, flag -, details [none]; the backend never sees it', async () => {
    const r = await wp.http(X, S, { method: 'DELETE', path: '/i1/x-delete' });
    expect(r.status).toBe(403);
    expect(r.body).toBe('RBAC: access denied');
    const rec = await wp.record('/i1/x-delete');
    expect(rec).toMatchObject({ code: 403, flags: '-', details: 'rbac_access_denied_matched_policy[none]' });
    expect(rec.result?.decision).toBe('DENY');
    expect(s.received.some((q) => q.url === '/i1/x-delete')).toBe(false);
  });

  test('Y GET → 403', async () => {
    const r = await wp.http(Y, S, { path: '/i1/y-get' });
    expect(r.status).toBe(403);
    expect(r.body).toBe('RBAC: access denied');
    expect(s.received.some((q) => q.url === '/i1/y-get')).toBe(false);
  });

  test('the policy on s does not affect t; selector and namespace-wide policies are not the waypoint’s', async () => {
    expect((await wp.http(Y, T, { path: '/i1/t-y-get' })).status).toBe(200);
    expect((await wp.http(X, T, { method: 'DELETE', path: '/i1/t-x-delete' })).status).toBe(200);
    expect(t.received.map((q) => `${q.method} ${q.url}`)).toEqual(expect.arrayContaining(['GET /i1/t-y-get', 'DELETE /i1/t-x-delete']));
  });
});

describe('what a decision leaves for the access log and stats', () => {
  test('a matching DENY rule is named in the details', async () => {
    const r = await wp.http(X, T, { path: '/forbidden' });
    expect(r.status).toBe(403);
    expect((await wp.record('/forbidden')).details).toBe('rbac_access_denied_matched_policy[ns[foo]-policy[t-deny-forbidden]-rule[0]]');
  });

  test('AUDIT marks the request and never changes the decision', async () => {
    expect((await wp.http(X, T, { path: '/audited' })).status).toBe(200);
    const rec = await wp.record('/audited');
    expect(rec.result).toMatchObject({ decision: 'ALLOW', audit: 'ns[foo]-policy[t-audit]-rule[0]' });
    expect(rec.details).toBe('via_upstream');
  });

  test('a dry-run DENY is recorded as the shadow result and not enforced', async () => {
    expect((await wp.http(X, T, { path: '/shadow' })).status).toBe(200);
    expect((await wp.record('/shadow')).result?.shadow).toEqual({ decision: 'DENY', policy: 'ns[foo]-policy[t-shadow-deny]-rule[0]' });
    expect((await wp.http(X, T, { path: '/no-shadow' })).status).toBe(200);
    expect((await wp.record('/no-shadow')).result?.shadow).toEqual({ decision: 'ALLOW' });
  });
});

test('remote.ip is the right-most X-Forwarded-For address', async () => {
  const xff = async (path: string, values: string[]) => (await wp.http(X, T, { path, headers: values.map((v): [string, string] => ['x-forwarded-for', v]) })).status;
  expect(await xff('/xff?1', ['9.9.9.9, 1.2.3.4'])).toBe(403);
  expect(await xff('/xff?2', ['1.2.3.4, 9.9.9.9'])).toBe(200);
  expect(await xff('/xff?3', ['9.9.9.9', '1.2.3.4'])).toBe(403); // two headers: the last value of the last one
  expect(await xff('/xff?4', ['1.2.3.4', 'not-an-ip'])).toBe(200); // unparsable: the peer address
  expect(await xff('/xff?5', [])).toBe(200);
});

describe('gRPC (pitfall I1 for gRPC: PERMISSION_DENIED, never a bare 403)', () => {
  const id = (b: Buffer) => b;
  const definition = { unary: { path: '/test.Echo/Unary', requestStream: false, responseStream: false, requestSerialize: id, requestDeserialize: id, responseSerialize: id, responseDeserialize: id } };
  const EchoClient = grpc.makeGenericClientConstructor(definition as unknown as grpc.ServiceDefinition, 'Echo');
  let server: grpc.Server;
  const closers: (() => unknown)[] = [];

  /** A source ztunnel stand-in for `principal` from `ip`, CONNECTing to g, and a gRPC client through it. */
  async function clientAs(principal: string, ip: string): Promise<grpc.Client & { unary: (b: Buffer, cb: (e: grpc.ServiceError | null, v?: Buffer) => void) => void }> {
    const entry = await addEntry(wp.topology, G, { principal, clientIp: ip });
    const client = new EchoClient(`${ip}:${entry.port}`, grpc.credentials.createInsecure());
    closers.push(() => client.close(), () => entry.close());
    return client as unknown as grpc.Client & { unary: (b: Buffer, cb: (e: grpc.ServiceError | null, v?: Buffer) => void) => void };
  }
  const call = (c: { unary: (b: Buffer, cb: (e: grpc.ServiceError | null, v?: Buffer) => void) => void }, text: string) =>
    new Promise<{ err: grpc.ServiceError | null; value?: Buffer }>((resolve) => c.unary(Buffer.from(text), (err, value) => resolve({ err, value })));

  beforeAll(async () => {
    server = new grpc.Server();
    server.addService(definition as unknown as grpc.ServiceDefinition, {
      unary: (c: grpc.ServerUnaryCall<Buffer, Buffer>, cb: grpc.sendUnaryData<Buffer>) => cb(null, Buffer.concat([Buffer.from('ok:'), c.request])),
    });
    await new Promise<void>((resolve, reject) => server.bindAsync(`${NET}.13:9000`, grpc.ServerCredentials.createInsecure(), (err) => (err ? reject(err) : resolve())));
  });
  afterAll(async () => {
    for (const c of closers.reverse()) await c();
    server?.forceShutdown();
  });

  test('Y is denied with status 7; X gets through', async () => {
    const y = await clientAs(Y, `${NET}.51`);
    const denied = await call(y, 'from-y');
    expect(denied.err?.code).toBe(grpc.status.PERMISSION_DENIED);
    expect(denied.err?.details).toBe('RBAC: access denied');
    const rec = await wp.record('/test.Echo/Unary');
    expect(rec).toMatchObject({ code: 200, grpcStatus: '7', details: 'rbac_access_denied_matched_policy[none]' });

    const x = await clientAs(X, `${NET}.50`);
    const ok = await call(x, 'from-x');
    expect(ok.err).toBeNull();
    expect(ok.value?.toString()).toBe('ok:from-x');
  });
});
