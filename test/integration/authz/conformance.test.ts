/**
 * End-to-end conformance against test/data/authz-cases-sample.yaml: every check the waypoint
 * enforces goes through a real waypoint with `istio.authz` over HBONE, from a client certificate
 * of the check's source principal (issued by the test CA) and from the check's source address
 * (remapped, bound as the local address), to the check's target (remapped VIP:port or pod
 * IP:port); the decision and status are asserted on the wire: HTTP 200 from the backend or 403
 * `RBAC: access denied`; TCP relayed bytes or CONNECT 401 (what the cases call `close`: a client
 * behind the tunnel role sees its connection closed). The forwarded path is what the backend
 * received; audit and dry-run results are read from the request's `AUTHZ_RESULT`.
 *
 * One waypoint serves all cases: each case's fixtures + policies are written as the mesh file and
 * applied with a reload, which must be accepted. Fixture addresses map per /24 into 127.0.160.x –
 * 127.0.165.x (VIPs .160, pods .161, clients .162–.164, the waypoint .165), so each check's
 * source is a distinct bindable address; the backends listen on the pod addresses (Pods marked
 * `istio.io/dataplane-mode: none`, so the waypoint dials them directly).
 *
 * Checks that carry a JWT send a real token (RS256, signed here with the case's claims) that the
 * waypoint's RequestAuthentication validates: the case's RequestAuthentications get this test's
 * key as inline `jwks` (instead of their `jwksUri`), and issuers no RequestAuthentication of the
 * case names get a waypoint-wide one (the engine-level cases assume a validated token).
 *
 * Skipped with their reason: checks other enforcers make (as in the unit conformance test),
 * and a peer of a foreign trust domain (the HBONE listener refuses it at the handshake
 * unless it is a mesh alias, and the test CA issues only cluster.local identities).
 */
import { exportJWK, generateKeyPair, SignJWT } from 'jose';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import {
  caseMeshText,
  cases,
  checkAuthority,
  checkSource,
  checkTarget,
  expectedName,
  fixtures,
  outOfScope,
  type Case,
  type Check,
  type FixtureOptions,
} from '../../helpers/authz-cases.ts';
import { startBackend, startTcpBackend, type Received } from '../../helpers/recorder.ts';
import { eventually } from '../../helpers/servers.ts';
import { AuthzWaypoint, remapByNets } from './harness.ts';

/** Fixture /24s → 127.0.16x (each bindable); any other 10.x (only ever in policies) → 127.x. */
const NETS: Readonly<Record<string, string>> = {
  '10.96.0.': '127.0.160.',
  '10.244.2.': '127.0.161.',
  '10.244.1.': '127.0.162.',
  '10.244.3.': '127.0.163.',
  '10.244.4.': '127.0.164.',
  '10.244.9.': '127.0.165.',
};
const remap = remapByNets(NETS);
const OPTIONS: FixtureOptions = { remap, podLabels: { 'istio.io/dataplane-mode': 'none' } };
const WAYPOINT_IP = remap('10.244.9.9');

/** Why the end-to-end run skips a check the waypoint does enforce, or undefined. */
function e2eSkip(check: Check): string | undefined {
  const r = check.request;
  const { principal } = checkSource(r);
  if (principal === undefined) return 'no peer identity: the HBONE listener requires a client certificate';
  if (!principal.startsWith('spiffe://cluster.local/')) return `peer ${principal}: the HBONE listener refuses trust domains other than the mesh's and its aliases`;
  return undefined;
}

const inScope = cases.filter((c) => c.checks.some((check) => !outOfScope(c, check) && !e2eSkip(check)));

/** The JWT claims a check sends, or undefined. */
const claimsOf = (check: Check): Record<string, unknown> | undefined => {
  const r = check.request;
  return r.jwt_claims ?? (r.jwt && r.jwt !== 'none' ? fixtures.jwt[r.jwt] : undefined);
};

let jwks = '';
let signer: (claims: Record<string, unknown>) => Promise<string>;

type Policy = Case['policies'][number] & { kind?: string; metadata?: object; spec?: { jwtRules?: Record<string, unknown>[] } };

/** `c` with this test's key in its RequestAuthentications, plus a waypoint-wide one for the other issuers its checks use. */
function withKeys(c: Case): Case {
  const covered = new Set<string>();
  const policies = (c.policies as Policy[]).map((p) => {
    if (p.kind !== 'RequestAuthentication' || !p.spec?.jwtRules) return p;
    const jwtRules = p.spec.jwtRules.map((rule) => {
      covered.add(String(rule.issuer));
      const { jwksUri: _uri, ...rest } = rule;
      return { ...rest, jwks };
    });
    return { ...p, spec: { ...p.spec, jwtRules } };
  });
  const issuers = new Set<string>();
  for (const check of c.checks) {
    const iss = claimsOf(check)?.iss;
    if (typeof iss === 'string' && !covered.has(iss)) issuers.add(iss);
  }
  if (issuers.size) {
    policies.push({
      apiVersion: 'security.istio.io/v1',
      kind: 'RequestAuthentication',
      metadata: { name: 'e2e-issuers', namespace: fixtures.waypoint.namespace },
      spec: {
        targetRefs: [{ kind: 'Gateway', group: 'gateway.networking.k8s.io', name: fixtures.waypoint.name }],
        jwtRules: [...issuers].map((issuer) => ({ issuer, jwks })),
      },
    } as Policy);
  }
  return policies === c.policies ? c : ({ ...c, policies } as Case);
}

/** A signed token with `claims` (`exp: in the past` → expired; no `exp` → valid for an hour). */
function tokenFor(claims: Record<string, unknown>): Promise<string> {
  const now = Math.floor(Date.now() / 1000);
  const exp = typeof claims.exp === 'number' ? claims.exp : claims.exp === undefined ? now + 3600 : now - 3600;
  return signer({ ...claims, exp });
}

let wp: AuthzWaypoint;
const http: { received: Received[]; close(): Promise<void> }[] = [];
const tcp: { close(): Promise<void> }[] = [];
let current = '';

beforeAll(async () => {
  const { publicKey, privateKey } = await generateKeyPair('RS256');
  jwks = JSON.stringify({ keys: [{ ...(await exportJWK(publicKey)), kid: 'e2e', alg: 'RS256', use: 'sig' }] });
  signer = (claims) => new SignJWT(claims).setProtectedHeader({ alg: 'RS256', kid: 'e2e', typ: 'JWT' }).sign(privateKey);
  // Backends on every fixture pod: httpbin, productpage and other speak HTTP, tcp-echo echoes.
  http.push(await startBackend(remap('10.244.2.10'), 8080));
  http.push(await startBackend(remap('10.244.2.11'), 9080));
  http.push(await startBackend(remap('10.244.2.12'), 8080));
  tcp.push(await startTcpBackend(remap('10.244.2.13'), 9000));
  tcp.push(await startTcpBackend(remap('10.244.2.13'), 9001));
  current = caseMeshText(withKeys(inScope[0]), OPTIONS);
  wp = await AuthzWaypoint.start({ ip: WAYPOINT_IP, mesh: current });
});
afterAll(async () => {
  await wp?.close();
  for (const b of [...http, ...tcp]) await b.close();
});

/** Make `c`'s mesh the waypoint's. */
async function useCase(c: Case): Promise<void> {
  const text = caseMeshText(withKeys(c), OPTIONS);
  if (text === current) return;
  expect(await wp.setMesh(text), `the waypoint accepts ${c.id}'s mesh`).toBe(true);
  current = text;
}

/** The backend request that carried `id` (its `x-check-id`), if any reached a backend. */
const receivedBy = (id: string) => http.flatMap((b) => b.received).find((q) => q.headers['x-check-id'] === id);

async function runHttp(check: Check): Promise<void> {
  const r = check.request;
  const target = remap(checkTarget(r));
  const { principal, ip } = checkSource(r);
  const headers: [string, string][] = [['x-check-id', check.id]];
  for (const [name, values] of Object.entries(r.headers ?? {})) for (const v of values) headers.push([name, v]);
  const claims = claimsOf(check);
  if (claims) headers.push(['authorization', `Bearer ${await tokenFor(claims)}`]);
  const answer = await wp.http(principal!, `${target.ip}:${target.port}`, { method: r.method ?? 'GET', path: r.path ?? '/', authority: checkAuthority(r, target), headers }, remap(ip));

  const e = check.expect;
  const decision = e.waypoint_decision ?? e.decision;
  const got = receivedBy(check.id);
  if (decision === 'allow') {
    expect(answer.status, answer.body).toBe(200);
    expect(got, 'the backend received the request').toBeDefined();
    if (e.forwarded_path !== undefined) expect(got!.url).toBe(e.forwarded_path);
  } else {
    expect(answer.status).toBe(e.status ?? 403);
    if (e.body !== undefined || (e.status ?? 403) === 403) expect(answer.body).toBe(e.body ?? 'RBAC: access denied');
    expect(got, 'the backend never saw the request').toBeUndefined();
  }
  if (e.audit !== undefined || e.shadow_result !== undefined) {
    const rec = await eventually(() => wp.rec.streams.find((s) => s.path === (r.path ?? '/') && s.result !== undefined && (got === undefined || s.code === answer.status)), `${check.id}'s record`);
    if (e.audit !== undefined) expect(rec.result?.audit !== undefined).toBe(e.audit);
    if (e.shadow_result !== undefined) expect(rec.result?.shadow?.decision).toBe(e.shadow_result === 'denied' ? 'DENY' : 'ALLOW');
  }
}

async function runTcp(check: Check): Promise<void> {
  const r = check.request;
  const target = remap(checkTarget(r));
  const { principal, ip } = checkSource(r);
  const t = await wp.connect(principal!, `${target.ip}:${target.port}`, remap(ip));
  const decision = check.expect.waypoint_decision ?? check.expect.decision;
  if (decision === 'allow') {
    expect(t.status).toBe(200);
    const echoed = new Promise<string>((resolve) => t.stream.once('data', (c: Buffer) => resolve(c.toString())));
    t.stream.write(check.id);
    expect(await echoed).toBe(check.id);
    t.stream.close();
  } else {
    // `close` / `reset` in the cases: the CONNECT is refused (401), so nothing is ever relayed.
    expect(t.status).toBe(401);
    expect(t.body).toMatch(/^rbac_access_denied_matched_policy\[/);
  }
}

for (const c of cases) {
  describe(`${c.id} ${c.title} [${c.enforcer}]`, () => {
    for (const check of c.checks) {
      const reason = outOfScope(c, check) ?? e2eSkip(check);
      if (reason) {
        test.skip(`${check.id} ${expectedName(check)}: out of scope, ${reason}`, () => {});
        continue;
      }
      test(`${check.id} → ${expectedName(check)}: ${check.why ?? ''}`, async () => {
        await useCase(c);
        if (check.request.protocol === 'tcp') await runTcp(check);
        else await runHttp(check);
      });
    }
  });
}

test('every source and target address is a 127.0.160–165 address (never a 10.x)', () => {
  for (const c of inScope) {
    for (const check of c.checks) {
      if (outOfScope(c, check) || e2eSkip(check)) continue;
      expect(remap(checkSource(check.request).ip)).toMatch(/^127\.0\.16[0-5]\.\d+$/);
      expect(remap(checkTarget(check.request).ip)).toMatch(/^127\.0\.16[0-5]\.\d+$/);
    }
  }
});
