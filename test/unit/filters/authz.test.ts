/**
 * `istio.authz` on fake contexts over compiled mesh snapshots, each request admitted by the
 * connection manager first as on the data path: the request attributes it builds (seen through an
 * ext_authz hook), method and path handling (400s, the forwarded path, absolute form), CUSTOM with and without an ext_authz client, TCP decisions at CONNECT time for declared
 * and undeclared ports, re-checks of tracked tunnels on mesh updates, and requests on an old
 * tunnel decided with the current snapshot. End to end: test/integration/authz/.
 */
import { describe, expect, test } from 'vitest';
import { authzFactory, authzFilterFactory, remoteAddress } from '../../../filters/authz/index.ts';
import { AUTHZ, AUTHZ_RESULT, REQUEST_JWT, TCP_AUTHZ_RESULT, type CustomCheck, type ExtAuthzDecision, type ExtAuthzHook, type RequestAttributes } from '../../../src/authz/index.ts';
import { FilterStatus, grpcMessageEncode, type ConnectInfo, type ConnectionContext, type Filter, type StreamContext } from '../../../src/pipeline/index.ts';
import type { MeshSnapshot } from '../../../src/state/index.ts';
import { HTTPBIN, HTTPBIN_POD, TCP_ECHO, meshWith as compiledMesh, policy, wp, type MeshConfigOptions } from '../authz/mesh.ts';
import { FilterHarness, MeshStub as FakeMesh, filterEnv, type ClientResponse } from '../../helpers/filter-harness.ts';

/** The test mesh with its AuthorizationPolicies compiled in (the part the filter reads). */
const meshWith = (policies: readonly object[], mesh?: MeshConfigOptions): MeshSnapshot => compiledMesh(policies, mesh, [AUTHZ]);

const CLIENT = 'spiffe://cluster.local/ns/foo/sa/sleep';
const OTHER = 'spiffe://cluster.local/ns/bar/sa/a';
const PROVIDERS: MeshConfigOptions = { extensionProviders: [{ name: 'grpc-authz', envoyExtAuthzGrpc: { service: 'foo/authz.foo.svc.cluster.local', port: 9000 } }] };

/** The filter over `mesh` (a snapshot, or a {@link FakeMesh} a test publishes updates to). */
function create(mesh: MeshSnapshot | FakeMesh, extAuthz?: ExtAuthzHook): Filter {
  const env = mesh instanceof FakeMesh ? { ...filterEnv(), mesh } : filterEnv({ mesh });
  const factory = extAuthz ? authzFilterFactory({ extAuthz }) : authzFactory;
  return factory.create(factory.parseConfig(undefined), env);
}

/** A tunnel from foo/sleep (127.244.1.5) to `at`, admitted under `snap`. */
function connection(snap: MeshSnapshot, at: { ip: string; port: number }, over: Partial<ConnectInfo> = {}): ConnectionContext {
  const info = { peer: { uri: CLIENT, trustDomain: 'cluster.local', namespace: 'foo', serviceAccount: 'sleep' }, downstreamAddress: '127.244.1.5', ...over };
  return new FilterHarness([], snap).connection({ at, info });
}

interface Req {
  method?: string;
  url?: string;
  headers?: [string, string][];
}
/** Run the request phase for one request on `conn`; returns the phase status, the stream and what the client received. */
async function request(filter: Filter, conn: ConnectionContext, r: Req = {}): Promise<{ status: FilterStatus; stream: StreamContext; res: ClientResponse }> {
  const { status, stream, response } = await new FilterHarness(filter, conn.mesh).request(conn, { ...r, headers: r.headers ?? [['host', 'httpbin.foo:8000']] });
  return { status, stream, res: response };
}

/** An ext_authz hook answering `decision` and recording what it was asked. */
function hook(decision: ExtAuthzDecision | Error): ExtAuthzHook & { calls: { attrs: RequestAttributes; custom: CustomCheck }[] } {
  const calls: { attrs: RequestAttributes; custom: CustomCheck }[] = [];
  const answer = (attrs: RequestAttributes, custom: CustomCheck) => {
    calls.push({ attrs, custom });
    return decision instanceof Error ? Promise.reject(decision) : Promise.resolve(decision);
  };
  return { calls, check: (attrs, _stream, custom) => answer(attrs, custom), checkConnection: (attrs, _conn, custom) => answer(attrs, custom) };
}

const customAll = wp('ext', 'CUSTOM', [{}], { provider: { name: 'grpc-authz' } });

describe('HTTP requests', () => {
  test('the attributes come from the tunnel and the request (seen by the ext_authz hook)', async () => {
    const snap = meshWith([customAll], PROVIDERS);
    const h = hook({ allow: true });
    const conn = connection(snap, HTTPBIN);
    const { stream, status } = await request(create(snap, h), conn, {
      method: 'POST',
      url: '/a/../b%2D?q=1',
      headers: [
        ['host', 'HTTPBIN.foo:8000'],
        ['x-forwarded-for', '1.1.1.1, 2.2.2.2'],
        ['x-dup', 'a'],
        ['X-Dup', 'b'],
      ],
    });
    expect(status).toBe(FilterStatus.Continue);
    const a = h.calls[0].attrs;
    expect(a).toMatchObject({
      principal: CLIENT,
      sourceIp: '127.244.1.5',
      remoteIp: '2.2.2.2',
      destinationIp: HTTPBIN.ip,
      destinationPort: HTTPBIN.port,
      host: 'HTTPBIN.foo:8000',
      method: 'POST',
      path: '/b-',
    });
    expect(a.headers?.get('x-dup')).toBe('a,b');
    expect(a.jwt).toBeUndefined();
    expect(h.calls[0].custom).toEqual({ provider: 'grpc-authz', policy: 'ns[foo]-policy[ext]-rule[0]' });
    expect(stream.path).toBe('/b-?q=1');
    expect(stream.get(AUTHZ_RESULT)).toMatchObject({ decision: 'ALLOW', custom: { provider: 'grpc-authz' } });
  });

  test('the validated JWT comes from the REQUEST_JWT slot; no Host means no host attribute', async () => {
    const snap = meshWith([customAll], PROVIDERS);
    const h = hook({ allow: true });
    const filter = create(snap, h);
    const conn = connection(snap, HTTPBIN);
    // Set the slot the way an authn filter listed before would.
    const jwtFilter: Filter = { name: 'jwt', onRequestHeaders: (s) => (s.set(REQUEST_JWT, { payload: { iss: 'i', sub: 's' } }), FilterStatus.Continue) };
    // (HTTP/1.0: a request without Host passes the connection manager.)
    const harness = new FilterHarness([jwtFilter, filter], snap);
    await harness.run(harness.stream(conn, { version: '1.0' }));
    expect(h.calls[0].attrs.jwt).toEqual({ payload: { iss: 'i', sub: 's' } });
    expect(h.calls[0].attrs.host).toBeUndefined();
  });

  test('remote.ip: the right-most X-Forwarded-For address, else the peer', () => {
    expect(remoteAddress(undefined, '10.0.0.1')).toBe('10.0.0.1');
    expect(remoteAddress('1.2.3.4', '10.0.0.1')).toBe('1.2.3.4');
    expect(remoteAddress(' 1.2.3.4 ,  5.6.7.8 ', '10.0.0.1')).toBe('5.6.7.8');
    expect(remoteAddress('1.2.3.4,2001:db8::1', '10.0.0.1')).toBe('2001:db8::1');
    expect(remoteAddress('1.2.3.4, junk', '10.0.0.1')).toBe('10.0.0.1');
    expect(remoteAddress('1.2.3.4:80', '10.0.0.1')).toBe('10.0.0.1');
  });

  test('a method that is not upper case: 400 from the connection manager, before authz', async () => {
    const snap = meshWith([wp('allow-all', 'ALLOW', [{}])]);
    const { status, res, stream } = await request(create(snap), connection(snap, HTTPBIN), { method: 'get' });
    expect(status).toBe(FilterStatus.StopAndReply);
    expect(res.status).toBe(400);
    expect([stream.responseFlags, stream.responseCodeDetails]).toEqual(['DPE', 'invalid_method']);
  });

  test('paths: normalized by the connection manager before authz even with no policy; malformed → 400 (no flag, as Envoy)', async () => {
    const snap = meshWith([]);
    const filter = create(snap);
    const conn = connection(snap, HTTPBIN);
    const a = await request(filter, conn, { url: '/x/./y/../z?a=%2e' });
    expect(a.status).toBe(FilterStatus.Continue);
    expect([a.stream.path, a.stream.forwardPath]).toEqual(['/x/z?a=%2e', undefined]);
    expect(a.stream.get(AUTHZ_RESULT)).toBeUndefined();
    const b = await request(filter, conn, { url: '/plain?x=1' });
    expect([b.stream.path, b.stream.forwardPath]).toEqual(['/plain?x=1', undefined]);
    const c = await request(filter, conn, { url: '/bad%00' });
    expect(c.status).toBe(FilterStatus.StopAndReply);
    expect([c.res.status, c.stream.responseFlags, c.stream.responseCodeDetails]).toEqual([400, '-', 'path_normalization_failed']);
  });

  test('an absolute-form target: its path is normalized and matched, its authority is the host', async () => {
    const snap = meshWith([customAll], PROVIDERS);
    const h = hook({ allow: true });
    const { stream } = await request(create(snap, h), connection(snap, HTTPBIN), { url: 'http://Other.example:81/p/../admin?q', headers: [['host', 'httpbin.foo:8000']] });
    expect(h.calls[0].attrs).toMatchObject({ path: '/admin', host: 'Other.example:81' });
    expect(stream.path).toBe('/admin?q');
  });

  test('DENY: 403 `RBAC: access denied`, flag -, details naming the rule; gRPC gets status 7 with a readable message', async () => {
    const snap = meshWith([wp('deny-admin', 'DENY', [{ to: [{ operation: { paths: ['/admin'] } }] }])]);
    const { res, stream } = await request(create(snap), connection(snap, HTTPBIN), { url: '/admin' });
    expect([res.status, res.body]).toEqual([403, 'RBAC: access denied']);
    expect([stream.responseFlags, stream.responseCodeDetails]).toEqual(['-', 'rbac_access_denied_matched_policy[ns[foo]-policy[deny-admin]-rule[0]]']);
    expect(grpcMessageEncode('RBAC: access denied')).toBe('RBAC: access denied');
    expect(grpcMessageEncode('100% é\n')).toBe('100%25 %C3%A9%0A');
  });

  test('a request on an old tunnel is decided with the current snapshot (Service policies included)', async () => {
    const before = meshWith([]);
    const after = meshWith([policy('svc-deny', { targetRefs: [{ kind: 'Service', group: '', name: 'httpbin' }], action: 'DENY', rules: [{}] })]);
    const mesh = new FakeMesh(before);
    const filter = create(mesh);
    const conn = connection(before, HTTPBIN);
    expect((await request(filter, conn)).status).toBe(FilterStatus.Continue);
    mesh.current = after;
    const r = await request(filter, conn);
    expect(r.res.status).toBe(403);
    expect(r.stream.responseCodeDetails).toBe('rbac_access_denied_matched_policy[ns[foo]-policy[svc-deny]-rule[0]]');
  });
});

describe('CUSTOM', () => {
  const denyBar = wp('deny-bar', 'DENY', [{ from: [{ source: { principals: ['cluster.local/ns/bar/sa/a'] } }] }]);

  test('no ext_authz client: the matching requests are denied as for an unusable provider', async () => {
    const snap = meshWith([customAll], PROVIDERS);
    const { res, stream } = await request(create(snap), connection(snap, HTTPBIN));
    expect([res.status, res.body]).toEqual([403, 'RBAC: access denied']);
    expect(stream.responseCodeDetails).toBe('rbac_access_denied_matched_policy[istio-ext-authz-ns[foo]-policy[ext]-rule[0]-deny-due-to-bad-CUSTOM-action]');
  });

  test('allowed by the provider: DENY still applies after it; its headers go upstream', async () => {
    const snap = meshWith([customAll, denyBar], PROVIDERS);
    const filter = create(snap, hook({ allow: true, headers: { 'X-Authz': 'ok' }, removeHeaders: ['authorization'] }));
    const ok = await request(filter, connection(snap, HTTPBIN), {
      headers: [
        ['host', 'httpbin.foo:8000'],
        ['Authorization', 'secret'],
        ['x-authz', 'forged'],
      ],
    });
    expect(ok.status).toBe(FilterStatus.Continue);
    // The changes are made to the request's header list, which the router sends upstream.
    const up = ok.stream.requestHeaders;
    expect([up.getAll('authorization'), up.getAll('x-authz'), up.get('host')]).toEqual([[], ['ok'], 'httpbin.foo:8000']);
    const denied = await request(filter, connection(snap, HTTPBIN, { peer: { uri: OTHER, trustDomain: 'cluster.local', namespace: 'bar', serviceAccount: 'a' } }));
    expect([denied.res.status, denied.stream.responseCodeDetails]).toEqual([403, 'rbac_access_denied_matched_policy[ns[foo]-policy[deny-bar]-rule[0]]']);
  });

  test('denied by the provider: its status, body and headers, flag UAEX', async () => {
    const snap = meshWith([customAll], PROVIDERS);
    const { res, stream, status } = await request(create(snap, hook({ allow: false, status: 401, body: 'go away', headers: { 'www-authenticate': 'Bearer' } })), connection(snap, HTTPBIN));
    expect(status).toBe(FilterStatus.StopAndReply);
    expect([res.status, res.body]).toEqual([401, 'go away']);
    expect(res.headers.get('www-authenticate')).toBe('Bearer');
    expect([stream.responseFlags, stream.responseCodeDetails]).toEqual(['UAEX', 'ext_authz_denied']);
  });

  test('the check fails: 403 UAEX ext_authz_error', async () => {
    const snap = meshWith([customAll], PROVIDERS);
    const { res, stream } = await request(create(snap, hook(new Error('unreachable'))), connection(snap, HTTPBIN));
    expect(res.status).toBe(403);
    expect([stream.responseFlags, stream.responseCodeDetails]).toEqual(['UAEX', 'ext_authz_error']);
  });

  test('TCP: asked through checkConnection; a denial refuses the CONNECT (401, UAEX); without it, denied', async () => {
    const snap = meshWith([customAll], PROVIDERS);
    const denied = connection(snap, TCP_ECHO);
    expect(await create(snap, hook({ allow: false })).onConnection!(denied)).toBe(FilterStatus.StopAndReply);
    expect([denied.rejectStatus, denied.rejectDetails, denied.responseFlags]).toEqual([401, 'ext_authz_denied', 'UAEX']);
    const allowed = connection(snap, TCP_ECHO);
    expect(await create(snap, hook({ allow: true })).onConnection!(allowed)).toBe(FilterStatus.Continue);
    const noClient = connection(snap, TCP_ECHO);
    expect(await create(snap).onConnection!(noClient)).toBe(FilterStatus.StopAndReply);
    expect(noClient.rejectDetails).toBe('rbac_access_denied_matched_policy[istio-ext-authz-ns[foo]-policy[ext]-rule[0]-deny-due-to-bad-CUSTOM-action]');
  });
});

describe('TCP tunnels', () => {
  const onlyBar = wp('only-bar', 'ALLOW', [{ from: [{ source: { namespaces: ['bar'] } }] }]);

  test('declared TCP port: decided at CONNECT, a denial is a 401 refusal', () => {
    const snap = meshWith([onlyBar]);
    const conn = connection(snap, TCP_ECHO);
    expect(create(snap).onConnection!(conn)).toBe(FilterStatus.StopAndReply);
    expect([conn.rejectStatus, conn.rejectDetails]).toEqual([401, 'rbac_access_denied_matched_policy[none]']);
    expect(conn.get(TCP_AUTHZ_RESULT)?.decision).toBe('DENY');
  });

  test('HTTP port: nothing decided at CONNECT', () => {
    const snap = meshWith([onlyBar]);
    const conn = connection(snap, HTTPBIN);
    expect(create(snap).onConnection!(conn)).toBe(FilterStatus.Continue);
    expect([conn.rejectStatus, conn.rejectIfTcp, conn.get(TCP_AUTHZ_RESULT)]).toEqual([0, '', undefined]);
  });

  test('undeclared port (workload-addressed): admitted, refused only should it carry TCP', () => {
    const snap = meshWith([onlyBar]);
    const conn = connection(snap, HTTPBIN_POD);
    expect(conn.protocol).toBe('UNKNOWN');
    expect(create(snap).onConnection!(conn)).toBe(FilterStatus.Continue);
    expect([conn.rejectStatus, conn.rejectIfTcp]).toEqual([0, 'rbac_access_denied_matched_policy[none]']);
  });

  test('mesh updates re-check tracked tunnels: a now-denied TCP tunnel is terminated, a sniffing one re-decided, HTTP ones dropped', () => {
    const open = meshWith([]);
    const mesh = new FakeMesh(open);
    const filter = create(mesh);
    const tcp = connection(open, TCP_ECHO);
    const sniffing = connection(open, HTTPBIN_POD);
    const http = connection(open, HTTPBIN_POD);
    const closed: string[] = [];
    tcp.closer = () => closed.push('tcp');
    for (const c of [tcp, sniffing, http]) expect(filter.onConnection!(c)).toBe(FilterStatus.Continue);
    tcp.innerProtocol = 'TCP';
    http.innerProtocol = 'HTTP/1.1';
    expect(mesh.subscribers).toBe(1);

    mesh.publish(meshWith([onlyBar]));
    expect(closed).toEqual(['tcp']);
    expect(tcp.rejectDetails).toBe('rbac_access_denied_matched_policy[none]');
    expect(sniffing.rejectIfTcp).toBe('rbac_access_denied_matched_policy[none]');
    expect(http.rejectIfTcp).toBe('');

    // Allowed again before the payload was known: the pending refusal is lifted.
    mesh.publish(meshWith([]));
    expect(sniffing.rejectIfTcp).toBe('');
    expect(closed).toEqual(['tcp']);

    filter.onConnectionComplete!(tcp);
    filter.onConnectionComplete!(sniffing);
    filter.onConnectionComplete!(http);
    expect(mesh.subscribers).toBe(0);
  });

  test('an allowed TCP tunnel stays open across an update that still allows it', () => {
    const snap = meshWith([wp('allow-foo', 'ALLOW', [{ from: [{ source: { namespaces: ['foo'] } }] }])]);
    const mesh = new FakeMesh(snap);
    const conn = connection(snap, TCP_ECHO);
    let closes = 0;
    conn.closer = () => closes++;
    expect(create(mesh).onConnection!(conn)).toBe(FilterStatus.Continue);
    conn.innerProtocol = 'TCP';
    mesh.publish(meshWith([wp('allow-foo', 'ALLOW', [{ from: [{ source: { namespaces: ['foo'] } }] }]), onlyBar]));
    expect(closes).toBe(0);
    expect(conn.get(TCP_AUTHZ_RESULT)).toEqual({ decision: 'ALLOW', policy: 'ns[foo]-policy[allow-foo]-rule[0]' });
  });
});

test('the filter takes no configuration', () => {
  expect(authzFactory.parseConfig(undefined)).toEqual({});
  expect(authzFactory.parseConfig({})).toEqual({});
  expect(() => authzFactory.parseConfig({ mode: 'strict' })).toThrow(/no configuration/);
});
