/**
 * Decision-level conformance against test/data/authz-cases-sample.yaml (a copy of
 * shared/reference/authz-cases-sample.yaml). For every case, the fixtures plus the case's policies
 * become one mesh file (every fixture address remapped 10.x → 127.x), compiled by the real mesh
 * compiler; each check whose enforcer is the waypoint is evaluated with the engine for the target
 * the waypoint would resolve, and its decision (plus audit flag, shadow result and forwarded path
 * where the case states them) is asserted. The expected status is in the test name; statuses are
 * asserted end to end by the authz filter's integration tests.
 *
 * Out of scope here, listed as skipped with the reason: ztunnel checks (the `inbound` role's L4
 * enforcement), CNI (NetworkPolicy) checks, ingress-gateway checks, and the waypoint listener's
 * TLS handshake.
 */
import { readFileSync } from 'node:fs';
import { describe, expect, test } from 'vitest';
import { parse, stringify } from 'yaml';

import { compileAuthz } from '../../../src/authz/compile.ts';
import { headersFromRecord } from '../../../src/authz/headers.ts';
import type { AuthzResult, JwtInfo, RequestAttributes } from '../../../src/authz/types.ts';
import { compileMesh } from '../../../src/state/compile.ts';
import type { MeshSnapshot } from '../../../src/state/types.ts';

// --- The cases file ---------------------------------------------------------------------------

interface Endpoint {
  readonly service?: string;
  readonly pod?: string;
  readonly ip?: string;
  readonly port?: number;
}
interface CheckRequest {
  readonly via?: string;
  readonly addressing?: 'service' | 'workload';
  readonly protocol?: string;
  readonly src?: { readonly principal?: string | null; readonly ip?: string };
  readonly dst?: Endpoint;
  readonly method?: string;
  readonly authority?: string;
  readonly path?: string;
  readonly headers?: Record<string, string[]>;
  readonly jwt?: string;
  readonly jwt_claims?: Record<string, unknown>;
  readonly packet?: unknown;
}
interface Check {
  readonly id: string;
  readonly request: CheckRequest;
  readonly expect: {
    readonly decision: string;
    readonly status?: number | string;
    readonly audit?: boolean;
    readonly shadow_result?: string;
    readonly forwarded_path?: string;
    readonly waypoint_decision?: string;
    readonly destination_ztunnel_decision?: string;
  };
  readonly why?: string;
}
interface Case {
  readonly id: string;
  readonly title: string;
  readonly enforcer: string;
  readonly policies: readonly Record<string, unknown>[];
  readonly checks: readonly Check[];
}
interface ServiceFixture {
  readonly namespace: string;
  readonly vip: string;
  readonly ports: readonly { name: string; port: number; targetPort: number; appProtocol?: string }[];
  readonly podIP: string;
  readonly useWaypoint?: string;
}
interface Fixtures {
  readonly mesh: { trustDomain: string; trustDomainAliases: string[]; rootNamespace: string; pathNormalization: string };
  readonly waypoint: { name: string; namespace: string; gatewayClassName: string };
  readonly services: Readonly<Record<string, ServiceFixture>>;
  readonly clients: Readonly<Record<string, { principal: string | null; ip: string }>>;
  readonly jwt: Readonly<Record<string, Record<string, unknown>>>;
}

const FILE = new URL('../../data/authz-cases-sample.yaml', import.meta.url);
const doc = parse(readFileSync(FILE, 'utf8')) as { fixtures: Fixtures; cases: Case[] };
const { fixtures } = doc;

// --- Fixtures as mesh state -------------------------------------------------------------------

/** 10.a.b.c (optionally /n) → 127.a.b.c: the waypoint must never see a 10.x address here. */
const TEN = /^10\.(\d+\.\d+\.\d+(?:\/\d+)?)$/;
function remap<T>(value: T): T {
  if (typeof value === 'string') return (TEN.test(value) ? value.replace(TEN, '127.$1') : value) as T;
  if (Array.isArray(value)) return value.map(remap) as T;
  if (value && typeof value === 'object') return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, remap(v)])) as T;
  return value;
}

function fixtureObjects(): object[] {
  const { mesh, waypoint } = fixtures;
  const objects: object[] = [
    {
      apiVersion: 'v1',
      kind: 'ConfigMap',
      metadata: { name: 'istio', namespace: mesh.rootNamespace },
      data: {
        mesh: stringify({
          trustDomain: mesh.trustDomain,
          trustDomainAliases: mesh.trustDomainAliases,
          rootNamespace: mesh.rootNamespace,
          pathNormalization: { normalization: mesh.pathNormalization },
        }),
      },
    },
    {
      apiVersion: 'gateway.networking.k8s.io/v1',
      kind: 'Gateway',
      // ATT-07 needs a waypoint that also serves workload-addressed traffic.
      metadata: { name: waypoint.name, namespace: waypoint.namespace, labels: { 'istio.io/waypoint-for': 'all' } },
      spec: { gatewayClassName: waypoint.gatewayClassName, listeners: [{ name: 'mesh', port: 15008, protocol: 'HBONE' }] },
    },
  ];
  const namespaces = new Set([waypoint.namespace, ...Object.values(fixtures.services).map((s) => s.namespace)]);
  for (const ns of namespaces) objects.push({ apiVersion: 'v1', kind: 'Namespace', metadata: { name: ns } });
  for (const [name, s] of Object.entries(fixtures.services)) {
    objects.push({
      apiVersion: 'v1',
      kind: 'Service',
      metadata: { name, namespace: s.namespace, labels: s.useWaypoint ? { 'istio.io/use-waypoint': s.useWaypoint } : {} },
      spec: { clusterIP: remap(s.vip), selector: { app: name }, ports: s.ports },
    });
    objects.push({
      apiVersion: 'v1',
      kind: 'Pod',
      metadata: {
        name: `${name}-0`,
        namespace: s.namespace,
        labels: { app: name, ...(s.useWaypoint ? { 'istio.io/use-waypoint': s.useWaypoint } : {}) },
      },
      spec: { serviceAccountName: name },
      status: { podIP: remap(s.podIP) },
    });
  }
  return objects;
}

function meshFor(c: Case): MeshSnapshot {
  const text = [...fixtureObjects(), ...c.policies.map(remap)].map((o) => stringify(o)).join('---\n');
  return compileMesh({ text, file: `${c.id}.yaml` });
}

// --- Checks as request attributes -------------------------------------------------------------

const SLEEP = fixtures.clients.sleep;

/** `httpbin.foo` → the fixture service; no destination at all → httpbin (the checks that omit it). */
function serviceOf(dst: Endpoint | undefined, authority: string | undefined): { name: string; s: ServiceFixture } {
  const ref = dst?.service ?? dst?.pod ?? authority?.split(':')[0] ?? 'httpbin';
  const name = ref.split('.')[0];
  const s = fixtures.services[name] ?? fixtures.services.httpbin;
  return { name: fixtures.services[name] ? name : 'httpbin', s };
}

/** The JWT the check sends, with the space-delimited claims its issuer's RequestAuthentication names. */
function jwtOf(c: Case, r: CheckRequest): JwtInfo | undefined {
  const payload = r.jwt_claims ?? (r.jwt && r.jwt !== 'none' ? fixtures.jwt[r.jwt] : undefined);
  if (!payload) return undefined;
  const ra = c.policies.find((p) => p.kind === 'RequestAuthentication') as { spec?: { jwtRules?: { issuer: string; spaceDelimitedClaims?: string[] }[] } } | undefined;
  const rule = ra?.spec?.jwtRules?.find((j) => j.issuer === payload.iss);
  return { payload, spaceDelimitedClaims: rule?.spaceDelimitedClaims ?? [] };
}

interface Prepared {
  readonly attrs: RequestAttributes;
  readonly target: { ip: string; port: number };
  readonly forward?: string;
  readonly rejected?: boolean;
}

function prepare(c: Case, check: Check, authz: ReturnType<typeof compileAuthz>): Prepared {
  const r = check.request;
  const { s } = serviceOf(r.dst, r.authority);
  const workload = r.addressing === 'workload';
  const target = workload
    ? { ip: remap(r.dst?.ip ?? s.podIP), port: r.dst?.port ?? s.ports[0].targetPort }
    : { ip: remap(r.dst?.ip ?? s.vip), port: r.dst?.port ?? s.ports[0].port };
  const principal = r.src && 'principal' in r.src ? (r.src.principal ?? undefined) : SLEEP.principal!;
  const client = Object.values(fixtures.clients).find((cl) => cl.principal === (principal ?? null));
  const base: RequestAttributes = {
    ...(principal !== undefined ? { principal } : {}),
    sourceIp: remap(r.src?.ip ?? client?.ip ?? SLEEP.ip),
    destinationIp: target.ip,
    destinationPort: target.port,
  };
  if (r.protocol === 'tcp') return { attrs: base, target };
  const normalized = authz.normalizePath(r.path ?? '/');
  if (!normalized) return { attrs: base, target, rejected: true };
  const jwt = jwtOf(c, r);
  return {
    attrs: {
      ...base,
      host: r.authority ?? `${r.dst?.service ?? 'httpbin.foo'}:${target.port}`,
      method: r.method ?? 'GET',
      path: normalized.path,
      headers: headersFromRecord(r.headers ?? {}),
      ...(jwt ? { jwt } : {}),
    },
    target,
    forward: normalized.forward,
  };
}

// --- Scope ------------------------------------------------------------------------------------

const WAYPOINT_ENFORCERS = new Set(['waypoint-http', 'waypoint-tcp', 'waypoint-http + ztunnel']);

/** Why a check is not evaluated here, or undefined when it is. */
function outOfScope(c: Case, check: Check): string | undefined {
  if (!WAYPOINT_ENFORCERS.has(c.enforcer)) {
    if (c.enforcer.startsWith('ztunnel')) return 'ztunnel enforcer: checked against the inbound role (L4), not the waypoint engine';
    if (c.enforcer.startsWith('cni')) return 'CNI enforcer: Kubernetes NetworkPolicy on packets, not a waypoint decision';
    if (c.enforcer.startsWith('ingress-gateway')) return 'ingress-gateway enforcer (selector policy on a gateway, XFF trusted hops): not a waypoint';
    return `enforcer ${c.enforcer} is not the waypoint`;
  }
  if (check.request.via !== 'waypoint') return `request via ${check.request.via}, not the waypoint`;
  if (check.request.protocol !== 'http' && check.request.protocol !== 'tcp') {
    return `protocol ${check.request.protocol}: decided by the HBONE listener's TLS handshake (client certificate required), not by the authz engine`;
  }
  return undefined;
}

function expectedName(check: Check): string {
  const e = check.expect;
  const relayed = check.request.protocol === 'tcp' ? 'relayed' : 'status 200';
  const status = e.status === undefined ? (e.decision === 'allow' ? relayed : '') : `status ${e.status}`;
  return `${e.decision}${status ? ` (${status})` : ''}`;
}

// --- The tests --------------------------------------------------------------------------------

for (const c of doc.cases) {
  describe(`${c.id} ${c.title} [${c.enforcer}]`, () => {
    const inScope = c.checks.some((check) => outOfScope(c, check) === undefined);
    const snap = inScope ? meshFor(c) : undefined;
    const authz = snap ? compileAuthz(snap) : undefined;

    for (const check of c.checks) {
      const reason = outOfScope(c, check);
      if (reason) {
        test.skip(`${check.id} ${expectedName(check)}: out of scope, ${reason}`, () => {});
        continue;
      }
      test(`${check.id} → ${expectedName(check)}: ${check.why ?? ''}`, () => {
        const p = prepare(c, check, authz!);
        expect(p.rejected ?? false, 'the path was rejected before authz').toBe(false);
        const target = snap!.resolveTarget(p.target.ip, p.target.port);
        expect(target, `the waypoint serves ${p.target.ip}:${p.target.port}`).toBeDefined();
        const evaluators = authz!.forTarget(target!);
        const result: AuthzResult = (check.request.protocol === 'tcp' ? evaluators.tcp : evaluators.http).evaluate(p.attrs);

        const expected = (check.expect.waypoint_decision ?? check.expect.decision).toUpperCase();
        expect(result.decision, JSON.stringify(result)).toBe(expected);
        if (check.expect.audit !== undefined) expect(result.audit !== undefined).toBe(check.expect.audit);
        if (check.expect.shadow_result !== undefined) {
          expect(result.shadow?.decision).toBe(check.expect.shadow_result === 'denied' ? 'DENY' : 'ALLOW');
        }
        if (check.expect.forwarded_path !== undefined) expect(p.forward).toBe(check.expect.forwarded_path);
      });
      if (check.expect.destination_ztunnel_decision !== undefined) {
        test.skip(`${check.id} destination ztunnel → ${check.expect.destination_ztunnel_decision}: out of scope, ztunnel (inbound role) part of the check`, () => {});
      }
    }
  });
}

describe('fixture mesh', () => {
  test('every fixture address is remapped to 127.x', () => {
    const c = doc.cases[0];
    const snap = meshFor(c);
    const addresses = [...snap.services.flatMap((s) => s.addresses), ...snap.workloads.flatMap((w) => w.addresses)];
    expect(addresses.length).toBeGreaterThan(0);
    for (const a of addresses) expect(a.startsWith('127.'), a).toBe(true);
  });
});
