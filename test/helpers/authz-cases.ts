/**
 * The authorization conformance cases (test/data/authz-cases-sample.yaml, plus this project's own
 * in test/data/authz-cases-local.yaml, which may stand in for a sample case) and how a test turns
 * them into mesh state and requests: the fixtures → mesh builder (every fixture address remapped,
 * 10.x must never be dialed), the check → target / source / JWT resolution, and which checks the
 * waypoint enforces. Shared by the decision-level test (test/unit/authz/conformance.test.ts) and
 * the end-to-end one through a real waypoint (test/integration/authz/conformance.test.ts).
 */
import { readFileSync } from 'node:fs';
import { parse, stringify } from 'yaml';

import type { JwtInfo } from '../../src/authz/types.ts';
import { compileMesh } from '../../src/state/compile.ts';
import type { MeshSnapshot } from '../../src/state/types.ts';

// --- The cases file ---------------------------------------------------------------------------

export interface CaseEndpoint {
  readonly service?: string;
  readonly pod?: string;
  readonly ip?: string;
  readonly port?: number;
}
export interface CheckRequest {
  readonly via?: string;
  readonly addressing?: 'service' | 'workload';
  readonly protocol?: string;
  readonly src?: { readonly principal?: string | null; readonly ip?: string };
  readonly dst?: CaseEndpoint;
  readonly method?: string;
  readonly authority?: string;
  readonly path?: string;
  readonly headers?: Record<string, string[]>;
  readonly jwt?: string;
  readonly jwt_claims?: Record<string, unknown>;
  readonly packet?: unknown;
}
export interface Check {
  readonly id: string;
  readonly request: CheckRequest;
  readonly expect: {
    readonly decision: string;
    readonly status?: number | string;
    readonly body?: string;
    readonly audit?: boolean;
    readonly shadow_result?: string;
    readonly forwarded_path?: string;
    readonly waypoint_decision?: string;
    readonly destination_ztunnel_decision?: string;
  };
  readonly why?: string;
}
export interface Case {
  readonly id: string;
  readonly title: string;
  readonly enforcer: string;
  readonly policies: readonly Record<string, unknown>[];
  readonly checks: readonly Check[];
}
export interface ServiceFixture {
  readonly namespace: string;
  readonly vip: string;
  readonly ports: readonly { name: string; port: number; targetPort: number; appProtocol?: string }[];
  readonly podIP: string;
  readonly useWaypoint?: string;
}
export interface Fixtures {
  readonly mesh: { trustDomain: string; trustDomainAliases: string[]; rootNamespace: string; pathNormalization: string };
  readonly waypoint: { name: string; namespace: string; gatewayClassName: string };
  readonly services: Readonly<Record<string, ServiceFixture>>;
  readonly clients: Readonly<Record<string, { principal: string | null; ip: string }>>;
  readonly jwt: Readonly<Record<string, Record<string, unknown>>>;
}

const FILE = new URL('../data/authz-cases-sample.yaml', import.meta.url);
/** This project's own cases on the sample's fixtures; `replaces: <id>` stands in for a sample case. */
const LOCAL_FILE = new URL('../data/authz-cases-local.yaml', import.meta.url);
const doc = parse(readFileSync(FILE, 'utf8')) as { fixtures: Fixtures; cases: Case[] };
const local = parse(readFileSync(LOCAL_FILE, 'utf8')) as { cases: (Case & { replaces?: string })[] };
export const fixtures: Fixtures = doc.fixtures;

function mergeCases(sample: readonly Case[], own: readonly (Case & { replaces?: string })[]): Case[] {
  const out = [...sample];
  for (const c of own) {
    if (c.replaces === undefined) {
      if (out.some((s) => s.id === c.id)) throw new Error(`${LOCAL_FILE.pathname}: case ${c.id} exists in the sample; say replaces: ${c.id}`);
      out.push(c);
      continue;
    }
    const at = out.findIndex((s) => s.id === c.replaces);
    if (at < 0) throw new Error(`${LOCAL_FILE.pathname}: case ${c.id} replaces ${c.replaces}, which the sample does not have`);
    out[at] = c;
  }
  return out;
}

/** The sample's cases with this project's own merged in (see authz-cases-local.yaml). */
export const cases: readonly Case[] = mergeCases(doc.cases, local.cases);

// --- Fixtures as mesh state -------------------------------------------------------------------

/** Rewrites every address string of the fixtures and policies (objects and lists deeply). */
export type Remap = <T>(value: T) => T;

/** Deep remap with a function on strings. */
export function remapWith(fn: (s: string) => string): Remap {
  const walk = <T>(value: T): T => {
    if (typeof value === 'string') return fn(value) as T;
    if (Array.isArray(value)) return value.map(walk) as T;
    if (value && typeof value === 'object') return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, walk(v)])) as T;
    return value;
  };
  return walk;
}

/** 10.a.b.c (optionally /n) → 127.a.b.c: the waypoint must never see a 10.x address here. */
const TEN = /^10\.(\d+\.\d+\.\d+(?:\/\d+)?)$/;
export const remapTo127: Remap = remapWith((s) => (TEN.test(s) ? s.replace(TEN, '127.$1') : s));

/** How the fixtures become mesh objects. */
export interface FixtureOptions {
  readonly remap: Remap;
  /** Extra labels on every fixture Pod (e.g. `istio.io/dataplane-mode: none` for plain-TCP backends). */
  readonly podLabels?: Readonly<Record<string, string>>;
}

/** The fixture objects (MeshConfig, the waypoint Gateway, namespaces, a Service and a Pod per service). */
export function fixtureObjects(opts: FixtureOptions): object[] {
  const { mesh, waypoint } = fixtures;
  const { remap } = opts;
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
        labels: { app: name, ...(s.useWaypoint ? { 'istio.io/use-waypoint': s.useWaypoint } : {}), ...opts.podLabels },
      },
      spec: { serviceAccountName: name },
      status: { podIP: remap(s.podIP) },
    });
  }
  return objects;
}

/** The mesh YAML of one case: the fixtures plus the case's policies (remapped). */
export function caseMeshText(c: Case, opts: FixtureOptions): string {
  return [...fixtureObjects(opts), ...c.policies.map(opts.remap)].map((o) => stringify(o)).join('---\n');
}

/** The compiled mesh of one case with addresses remapped to 127.x. */
export function caseMesh(c: Case, opts: FixtureOptions = { remap: remapTo127 }): MeshSnapshot {
  return compileMesh({ text: caseMeshText(c, opts), file: `${c.id}.yaml` });
}

// --- Checks -----------------------------------------------------------------------------------

export const SLEEP = fixtures.clients.sleep;

/** `httpbin.foo` → the fixture service; no destination at all → httpbin (the checks that omit it). */
export function serviceOf(dst: CaseEndpoint | undefined, authority: string | undefined): { name: string; s: ServiceFixture } {
  const ref = dst?.service ?? dst?.pod ?? authority?.split(':')[0] ?? 'httpbin';
  const name = ref.split('.')[0];
  const s = fixtures.services[name] ?? fixtures.services.httpbin;
  return { name: fixtures.services[name] ? name : 'httpbin', s };
}

/** The CONNECT target of a check (not remapped): the service VIP:port, or the pod IP:targetPort for workload addressing. */
export function checkTarget(r: CheckRequest): { ip: string; port: number } {
  const { s } = serviceOf(r.dst, r.authority);
  return r.addressing === 'workload'
    ? { ip: r.dst?.ip ?? s.podIP, port: r.dst?.port ?? s.ports[0].targetPort }
    : { ip: r.dst?.ip ?? s.vip, port: r.dst?.port ?? s.ports[0].port };
}

/** The source of a check (not remapped): its principal (undefined = none) and IP. */
export function checkSource(r: CheckRequest): { principal: string | undefined; ip: string } {
  const principal = r.src && 'principal' in r.src ? (r.src.principal ?? undefined) : SLEEP.principal!;
  const client = Object.values(fixtures.clients).find((cl) => cl.principal === (principal ?? null));
  return { principal, ip: r.src?.ip ?? client?.ip ?? SLEEP.ip };
}

/** The `:authority` an HTTP check sends. */
export function checkAuthority(r: CheckRequest, target: { port: number }): string {
  return r.authority ?? `${r.dst?.service ?? 'httpbin.foo'}:${target.port}`;
}

/** The JWT the check sends, with the space-delimited claims its issuer's RequestAuthentication names. */
export function jwtOf(c: Case, r: CheckRequest): JwtInfo | undefined {
  const payload = r.jwt_claims ?? (r.jwt && r.jwt !== 'none' ? fixtures.jwt[r.jwt] : undefined);
  if (!payload) return undefined;
  const ra = c.policies.find((p) => p.kind === 'RequestAuthentication') as { spec?: { jwtRules?: { issuer: string; spaceDelimitedClaims?: string[] }[] } } | undefined;
  const rule = ra?.spec?.jwtRules?.find((j) => j.issuer === payload.iss);
  return { payload, spaceDelimitedClaims: rule?.spaceDelimitedClaims ?? [] };
}

// --- Scope ------------------------------------------------------------------------------------

const WAYPOINT_ENFORCERS = new Set(['waypoint-http', 'waypoint-tcp', 'waypoint-http + ztunnel']);

/** Why a check is not the waypoint's to decide, or undefined when it is. */
export function outOfScope(c: Case, check: Check): string | undefined {
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

/** `allow (status 200)`, `deny (status 403)`, ... for test names. */
export function expectedName(check: Check): string {
  const e = check.expect;
  const relayed = check.request.protocol === 'tcp' ? 'relayed' : 'status 200';
  const status = e.status === undefined ? (e.decision === 'allow' ? relayed : '') : `status ${e.status}`;
  return `${e.decision}${status ? ` (${status})` : ''}`;
}
