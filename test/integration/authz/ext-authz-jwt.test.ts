/**
 * `istio.authz` with the waypoint's own ext_authz client and RequestAuthentication (app.ts wiring),
 * in Istio's order CUSTOM → JWT → AUDIT/DENY/ALLOW (istio/istio listener_waypoint.go `buildWaypointHTTPFilters`): a CUSTOM policy checked
 * by a real grpc-js `Authorization/Check` server reached through the mesh (a Service in the mesh
 * file, MeshConfig `extensionProviders`): an allow reaches the backend with the server's header, a
 * denial answers the server's status, headers and body with flag UAEX. A RequestAuthentication
 * with inline jwks and an ALLOW on `requestPrincipals`: valid token 200, none 403 (RBAC), bad 401.
 * Addresses: 127.0.180.x.
 */
import * as grpc from '@grpc/grpc-js';
import { exportJWK, generateKeyPair, SignJWT } from 'jose';
import { describe, expect, test } from 'vitest';
import type { CheckRequest } from '../../../src/ext-authz/proto.ts';
import { log } from '../../../src/util/log.ts';
import { spiffe } from '../../helpers/identity.ts';
import type { Backend } from '../../helpers/recorder.ts';
import { startGrpcAuthz, type CheckReply } from '../ext-authz/helpers.ts';
import { AuthzWaypoint, HTTP_PORT, meshYaml, servicePolicy, startAll } from './harness.ts';

log.level = 'silent';

const NET = '127.0.180';
const X = spiffe('a', 'x');
const C = `${NET}.100:80`;
const J = `${NET}.101:80`;
const ISSUER = 'https://issuer.test';

const mesh = (jwks: string) =>
  meshYaml({
    meshConfig: `extensionProviders:
- name: test-grpc
  envoyExtAuthzGrpc: { service: ext-authz.foo.svc.cluster.local, port: 9000, timeout: 2s }`,
    apps: [
      { name: 'ext-authz', vip: `${NET}.120`, podIp: `${NET}.20`, ports: [{ name: 'grpc', port: 9000, targetPort: 9000 }] },
      { name: 'c', vip: `${NET}.100`, podIp: `${NET}.11`, ports: [HTTP_PORT] },
      { name: 'j', vip: `${NET}.101`, podIp: `${NET}.12`, ports: [HTTP_PORT] },
    ],
    docs: [
      servicePolicy('c-ext-authz', 'c', 'action: CUSTOM\nprovider: { name: test-grpc }\nrules: [{ to: [{ operation: { paths: ["/checked/*"] } }] }]'),
      `apiVersion: security.istio.io/v1
kind: RequestAuthentication
metadata: { name: j-jwt, namespace: foo }
spec:
  targetRefs: [{ kind: Service, group: "", name: j }]
  jwtRules:
  - issuer: "${ISSUER}"
    jwks: '${jwks}'
    outputClaimToHeaders: [{ header: x-jwt-sub, claim: sub }]
`,
      servicePolicy('j-alice', 'j', `rules: [{ from: [{ source: { requestPrincipals: ["${ISSUER}/alice"] } }] }]`),
    ],
  });

function reply(req: CheckRequest): CheckReply {
  const path = req.attributes?.request?.http?.path ?? '';
  if (path.startsWith('/checked/deny')) {
    return {
      kind: 'respond',
      response: {
        status: { code: grpc.status.PERMISSION_DENIED },
        httpResponse: {
          case: 'deniedResponse',
          value: { status: { code: 418 }, headers: [{ header: { key: 'x-denied-by', value: 'test-authz' } }], body: 'go away' },
        },
      },
    };
  }
  return {
    kind: 'respond',
    response: {
      status: { code: 0 },
      httpResponse: { case: 'okResponse', value: { headers: [{ header: { key: 'x-auth-user', value: 'alice' }, append: false }] } },
    },
  };
}

let wp: AuthzWaypoint;
let authz: Awaited<ReturnType<typeof startGrpcAuthz>>;
let c: Backend;
let j: Backend;
let sign: (sub: string) => Promise<string>;

startAll(async (start) => {
  const { publicKey, privateKey } = await generateKeyPair('RS256');
  const jwk = { ...(await exportJWK(publicKey)), kid: 'k1', alg: 'RS256', use: 'sig' };
  sign = (sub) =>
    new SignJWT({}).setProtectedHeader({ alg: 'RS256', kid: 'k1' }).setIssuer(ISSUER).setSubject(sub).setIssuedAt().setExpirationTime('1h').sign(privateKey);
  authz = start.add(await startGrpcAuthz(`${NET}.20:9000`, reply));
  c = await start.http(`${NET}.11`, 8080);
  j = await start.http(`${NET}.12`, 8080);
  wp = await start.waypoint({ ip: `${NET}.1`, mesh: mesh(JSON.stringify({ keys: [jwk] })) });
});

describe('CUSTOM through the waypoint’s ext_authz client', () => {
  test('allowed: reaches the backend with the header the server added', async () => {
    const r = await wp.http(X, C, { path: '/checked/ok' });
    expect(r.status).toBe(200);
    const got = c.received.find((q) => q.url === '/checked/ok');
    expect(got?.headers['x-auth-user']).toBe('alice');
    expect(authz.seen.some((s) => s.request.attributes?.request?.http?.path === '/checked/ok')).toBe(true);
  });

  test('denied: the server’s status, headers and body, flag UAEX; the backend never sees it', async () => {
    const r = await wp.http(X, C, { path: '/checked/deny' });
    expect(r.status).toBe(418);
    expect(r.body).toBe('go away');
    expect(r.headers['x-denied-by']).toBe('test-authz');
    expect(await wp.record('/checked/deny')).toMatchObject({ code: 418, flags: 'UAEX', details: 'ext_authz_denied' });
    expect(c.received.some((q) => q.url === '/checked/deny')).toBe(false);
  });

  test('requests no CUSTOM rule matches are not checked', async () => {
    const before = authz.seen.length;
    expect((await wp.http(X, C, { path: '/free' })).status).toBe(200);
    expect(authz.seen.length).toBe(before);
  });
});

describe('RequestAuthentication + ALLOW requestPrincipals', () => {
  test('a valid token: 200, principal matched, claim header added, token not forwarded (forwardOriginalToken unset)', async () => {
    const token = await sign('alice');
    const r = await wp.http(X, J, { path: '/jwt/valid', headers: [['authorization', `Bearer ${token}`]] });
    expect(r.status).toBe(200);
    const got = j.received.find((q) => q.url === '/jwt/valid');
    expect(got?.headers['x-jwt-sub']).toBe('alice');
    expect(got?.headers.authorization).toBeUndefined();
    expect((await wp.record('/jwt/valid')).result?.decision).toBe('ALLOW');
  });

  test('a valid token of another principal: 403 RBAC', async () => {
    const r = await wp.http(X, J, { path: '/jwt/bob', headers: [['authorization', `Bearer ${await sign('bob')}`]] });
    expect(r.status).toBe(403);
    expect(r.body).toBe('RBAC: access denied');
  });

  test('no token: 403 RBAC (no request principal)', async () => {
    const r = await wp.http(X, J, { path: '/jwt/none' });
    expect(r.status).toBe(403);
    expect(r.body).toBe('RBAC: access denied');
    expect((await wp.record('/jwt/none')).details).toBe('rbac_access_denied_matched_policy[none]');
  });

  test('a bad token: 401 with www-authenticate; the backend never sees it', async () => {
    const token = await sign('alice');
    const bad = `${token.slice(0, -4)}AAAA`;
    const r = await wp.http(X, J, { path: '/jwt/bad', headers: [['authorization', `Bearer ${bad}`]] });
    expect(r.status).toBe(401);
    expect(r.body).toBe('Jwt verification fails');
    expect(r.headers['www-authenticate']).toMatch(/^Bearer realm="http:\/\/.*\/jwt\/bad", error="invalid_token"$/);
    expect((await wp.record('/jwt/bad')).details).toMatch(/^jwt_authn_access_denied/);
    expect(j.received.some((q) => q.url === '/jwt/bad')).toBe(false);
  });
});

test('an invalid RequestAuthentication refuses the reload (the last good state stays)', async () => {
  const ok = wp.waypoint.mesh.current.version;
  const applied = await wp.setMesh(mesh('{not json'));
  expect(applied).toBe(false);
  expect(wp.waypoint.mesh.current.version).toBe(ok);
});

test('an invalid RequestAuthentication stops the start, naming it', async () => {
  await expect(AuthzWaypoint.start({ ip: `127.0.181.1`, mesh: mesh('{not json') })).rejects.toThrow(/j-jwt|jwks/);
});
