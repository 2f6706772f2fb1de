/**
 * The ztunnel flavour of rule compilation (istiod `convertAuthorizationPolicy`/`handleRule` +
 * ztunnel `Authorization::matches`) and selector attachment (GLOBAL / NAMESPACE /
 * WORKLOAD_SELECTOR scopes), through `compileZtunnelAuthz` over a compiled
 * mesh. The waypoint's engine is checked to still ignore every policy here.
 */
import { describe, expect, test } from 'vitest';

import { compileAuthz } from '../../../src/authz/compile.ts';
import { compileZtunnelAuthz, rejectionReason, ZTUNNEL_AUTHZ, ztunnelAuthzFor } from '../../../src/ztunnel/authz.ts';
import type { AuthzResult, RequestAttributes } from '../../../src/authz/types.ts';
import { ConfigError } from '../../../src/util/errors.ts';
import { compileMesh } from '../../../src/state/compile.ts';
import type { MeshPart, MeshSnapshot } from '../../../src/state/types.ts';
import { authorizationPolicy, meshConfig as meshConfigDoc, meshText, namespace, pod, usesWaypoint, waypointGateway } from '../../helpers/mesh.ts';

const WEB = '127.0.114.10'; // foo/web (app: web, tier: front)
const DB = '127.0.114.11'; // foo/db (app: db)
const API = '127.0.114.12'; // bar/api (app: web)
const SLEEP = 'spiffe://cluster.local/ns/foo/sa/sleep';
const BAR_A = 'spiffe://cluster.local/ns/bar/sa/a';
const FOOBAR_A = 'spiffe://cluster.local/ns/foobar/sa/a';

const app = (name: string, ns: string, ip: string, labels: Record<string, string>) => pod({ name, namespace: ns, labels, sa: name, ip });

/** The test mesh plus `policies`, compiled with ztunnel's authorization part (`parts`). */
function mesh(policies: object[], meshConfig: Record<string, unknown> = {}, parts: readonly MeshPart<unknown>[] = [ZTUNNEL_AUTHZ]): MeshSnapshot {
  const text = meshText(
    meshConfigDoc({ trustDomain: 'cluster.local', ...meshConfig }),
    waypointGateway('foo', { for: 'all' }),
    namespace('foo', usesWaypoint()),
    namespace('bar'),
    app('web', 'foo', WEB, { app: 'web', tier: 'front' }),
    app('db', 'foo', DB, { app: 'db' }),
    app('api', 'bar', API, { app: 'web' }),
    ...policies,
  );
  return compileMesh({ text, file: 'ztunnel-test.yaml', parts });
}

const ap = (ns: string, name: string, spec: object, annotations?: Record<string, string>) => authorizationPolicy(name, spec, { namespace: ns, annotations });
const onWeb = { selector: { matchLabels: { app: 'web' } } };

/** Decide a connection to `dstIp:port` from `principal` (undefined: plaintext) at `src`. */
function decide(snap: MeshSnapshot, dstIp: string, port: number, principal: string | undefined, src = '127.0.116.5'): AuthzResult {
  const attrs: RequestAttributes = { ...(principal ? { principal } : {}), sourceIp: src, destinationIp: dstIp, destinationPort: port };
  return ztunnelAuthzFor(snap).forWorkload(snap.workloadByIp(dstIp)).evaluate(attrs);
}
const decision = (snap: MeshSnapshot, principal: string | undefined, port = 8080, dst = WEB, src?: string) => decide(snap, dst, port, principal, src).decision;

describe('ztunnel rule flavour (istiod handleRule + ztunnel matches)', () => {
  test('no policy: allow; ALLOW with no rules (allow-nothing): deny all', () => {
    expect(decision(mesh([]), SLEEP)).toBe('ALLOW');
    expect(decision(mesh([ap('foo', 'nothing', onWeb)]), SLEEP)).toBe('DENY');
  });

  test('rules: [{}] matches everything (ALLOW allows all, DENY denies all)', () => {
    expect(decision(mesh([ap('foo', 'all', { ...onWeb, rules: [{}] })]), undefined)).toBe('ALLOW');
    expect(decision(mesh([ap('foo', 'all', { ...onWeb, action: 'DENY', rules: [{}] })]), SLEEP)).toBe('DENY');
  });

  test('ALLOW: a rule with an L7 field is removed, the policy stays: deny all (GAP-01)', () => {
    const snap = mesh([ap('foo', 'a', { ...onWeb, rules: [{ from: [{ source: { principals: ['cluster.local/ns/foo/sa/sleep'] } }], to: [{ operation: { methods: ['GET'] } }] }] })]);
    expect(decision(snap, SLEEP)).toBe('DENY');
    // The waypoint's TCP flavour drops it too, but the L4-only sibling rule still allows.
    const mixed = mesh([
      ap('foo', 'a', {
        ...onWeb,
        rules: [{ to: [{ operation: { methods: ['GET'] } }] }, { from: [{ source: { principals: ['cluster.local/ns/foo/sa/sleep'] } }] }],
      }),
    ]);
    expect(decision(mixed, SLEEP)).toBe('ALLOW');
    expect(decision(mixed, BAR_A)).toBe('DENY');
  });

  test.each([
    ['trustDomains', { from: [{ source: { principals: ['*'], trustDomains: ['cluster.local'] } }] }],
    ['remoteIpBlocks', { from: [{ source: { principals: ['*'], remoteIpBlocks: ['127.0.0.0/8'] } }] }],
    ['requestPrincipals', { from: [{ source: { principals: ['*'], notRequestPrincipals: ['*'] } }] }],
    ['hosts', { to: [{ operation: { ports: ['8080'], hosts: ['web'] } }] }],
    ['paths', { to: [{ operation: { ports: ['8080'], notPaths: ['/x'] } }] }],
    ['source.serviceAccount', { when: [{ key: 'source.serviceAccount', values: ['foo/sleep'] }] }],
    ['source.trustDomain', { when: [{ key: 'source.trustDomain', values: ['cluster.local'] }] }],
    ['connection.sni', { when: [{ key: 'connection.sni', values: ['x'] }] }],
    ['remote.ip', { when: [{ key: 'remote.ip', values: ['127.0.0.0/8'] }] }],
    ['request.headers', { when: [{ key: 'request.headers[x]', values: ['y'] }] }],
  ])('ALLOW: %s is an HTTP attribute for ztunnel (rule removed)', (_name, rule) => {
    expect(decision(mesh([ap('foo', 'a', { ...onWeb, rules: [rule] })]), SLEEP)).toBe('DENY');
  });

  test('DENY with only L7 content has no effect (GAP-03: the to clause is an empty match, skipped)', () => {
    const snap = mesh([
      ap('foo', 'd', { ...onWeb, action: 'DENY', rules: [{ from: [{ source: { principals: ['cluster.local/ns/foo/sa/sleep'] } }], to: [{ operation: { methods: ['GET'] } }] }] }),
    ]);
    expect(decision(snap, SLEEP)).toBe('ALLOW');
    expect(decision(mesh([ap('foo', 'd', { ...onWeb, action: 'DENY', rules: [{ to: [{ operation: { methods: ['GET'] } }] }] })]), SLEEP)).toBe('ALLOW');
  });

  test('DENY with L4 from + L7 when is a no-op (GAP-05)', () => {
    const snap = mesh([
      ap('foo', 'd', {
        ...onWeb,
        action: 'DENY',
        rules: [{ from: [{ source: { principals: ['cluster.local/ns/foo/sa/sleep'] } }], when: [{ key: 'request.headers[x-token]', values: ['secret'] }] }],
      }),
    ]);
    expect(decision(snap, SLEEP)).toBe('ALLOW');
  });

  test('DENY: a Match keeping an L4 field loses its L7 part (wider); an empty Match beside it is skipped', () => {
    const wider = mesh([ap('foo', 'd', { ...onWeb, action: 'DENY', rules: [{ from: [{ source: { principals: ['cluster.local/ns/foo/sa/sleep'], notRequestPrincipals: ['*'] } }] }] })]);
    expect(decision(wider, SLEEP)).toBe('DENY'); // whatever the JWT
    expect(decision(wider, BAR_A)).toBe('ALLOW');
    const skipped = mesh([
      ap('foo', 'd', { ...onWeb, action: 'DENY', rules: [{ to: [{ operation: { methods: ['GET'] } }, { operation: { ports: ['9090'] } }] }] }),
    ]);
    expect(decision(skipped, SLEEP, 9090)).toBe('DENY');
    expect(decision(skipped, SLEEP, 8080)).toBe('ALLOW'); // the waypoint's TCP flavour would deny (methods-only operation = any)
  });

  test('principals: spiffe:// stripped, exact / prefix / suffix / presence; no trust-domain alias rewriting', () => {
    const allow = (v: string[], cfg = {}) => mesh([ap('foo', 'a', { ...onWeb, rules: [{ from: [{ source: { principals: v } }] }] })], cfg);
    expect(decision(allow(['cluster.local/ns/foo/sa/sleep']), SLEEP)).toBe('ALLOW');
    expect(decision(allow(['spiffe://cluster.local/ns/foo/sa/sleep']), SLEEP)).toBe('DENY');
    expect(decision(allow(['*/sa/sleep']), SLEEP)).toBe('ALLOW');
    expect(decision(allow(['cluster.local/ns/bar/*']), BAR_A)).toBe('ALLOW');
    expect(decision(allow(['*']), SLEEP)).toBe('ALLOW');
    expect(decision(allow(['*']), undefined)).toBe('DENY');
    // The waypoint would rewrite cluster.local to the mesh's trust domain; ztunnel gets the value as written.
    const aliased = allow(['td1/ns/foo/sa/sleep'], { trustDomain: 'td1', trustDomainAliases: ['cluster.local'] });
    expect(decision(aliased, SLEEP)).toBe('DENY');
    expect(compileAuthz(aliased).policies).toHaveLength(1);
  });

  test('notPrincipals ["*"] matches connections without identity (plaintext)', () => {
    const snap = mesh([ap('foo', 'd', { ...onWeb, action: 'DENY', rules: [{ from: [{ source: { notPrincipals: ['*'] } }] }] })]);
    expect(decision(snap, undefined)).toBe('DENY');
    expect(decision(snap, SLEEP)).toBe('ALLOW');
  });

  test('namespaces: a string match on the namespace, not a regex (foo ≠ foobar, foo* = prefix, f*o literal)', () => {
    const allow = (v: string[]) => mesh([ap('foo', 'a', { ...onWeb, rules: [{ from: [{ source: { namespaces: v } }] }] })]);
    expect(decision(allow(['foo']), SLEEP)).toBe('ALLOW');
    expect(decision(allow(['foo']), FOOBAR_A)).toBe('DENY');
    expect(decision(allow(['foo*']), FOOBAR_A)).toBe('ALLOW');
    expect(decision(allow(['*bar']), FOOBAR_A)).toBe('ALLOW');
    expect(decision(allow(['f*r']), FOOBAR_A)).toBe('DENY'); // Envoy's regex .*/ns/f.*r/.* would match
    expect(decision(allow(['*']), undefined)).toBe('DENY');
    const notNs = mesh([ap('foo', 'd', { ...onWeb, action: 'DENY', rules: [{ from: [{ source: { notNamespaces: ['foo'] } }] }] })]);
    expect(decision(notNs, BAR_A)).toBe('DENY');
    expect(decision(notNs, undefined)).toBe('DENY'); // no identity: the not* form matches
    expect(decision(notNs, SLEEP)).toBe('ALLOW');
  });

  test('serviceAccounts: <sa> in the policy namespace or <ns>/<sa>, exact', () => {
    const allow = (v: string[]) => mesh([ap('foo', 'a', { ...onWeb, rules: [{ from: [{ source: { serviceAccounts: v } }] }] })]);
    expect(decision(allow(['sleep']), SLEEP)).toBe('ALLOW');
    expect(decision(allow(['a']), BAR_A)).toBe('DENY');
    expect(decision(allow(['bar/a']), BAR_A)).toBe('ALLOW');
    expect(decision(allow(['bar/a']), undefined)).toBe('DENY');
  });

  test('ipBlocks / notIpBlocks on the peer address; ports / notPorts; when source.ip, destination.ip, destination.port, source.namespace, source.principal', () => {
    const rule = (r: object) => mesh([ap('foo', 'a', { ...onWeb, rules: [r] })]);
    expect(decision(rule({ from: [{ source: { ipBlocks: ['127.0.116.0/24'] } }] }), undefined, 8080, WEB, '127.0.116.9')).toBe('ALLOW');
    expect(decision(rule({ from: [{ source: { ipBlocks: ['127.0.116.0/24'] } }] }), undefined, 8080, WEB, '127.0.117.9')).toBe('DENY');
    expect(decision(rule({ from: [{ source: { notIpBlocks: ['127.0.116.5'] } }] }), SLEEP, 8080, WEB, '127.0.116.5')).toBe('DENY');
    expect(decision(rule({ to: [{ operation: { ports: ['8080'] } }] }), SLEEP, 8080)).toBe('ALLOW');
    expect(decision(rule({ to: [{ operation: { ports: ['8080'] } }] }), SLEEP, 9090)).toBe('DENY');
    expect(decision(rule({ to: [{ operation: { notPorts: ['8080'] } }] }), SLEEP, 9090)).toBe('ALLOW');
    expect(decision(rule({ when: [{ key: 'source.ip', values: ['127.0.116.5'] }] }), undefined)).toBe('ALLOW');
    expect(decision(rule({ when: [{ key: 'destination.ip', values: [DB] }] }), SLEEP)).toBe('DENY');
    expect(decision(rule({ when: [{ key: 'destination.ip', notValues: [DB] }] }), SLEEP)).toBe('ALLOW');
    expect(decision(rule({ when: [{ key: 'destination.port', values: ['8080'] }] }), SLEEP, 8080)).toBe('ALLOW');
    expect(decision(rule({ when: [{ key: 'source.namespace', values: ['bar'] }] }), BAR_A)).toBe('ALLOW');
    expect(decision(rule({ when: [{ key: 'source.principal', values: ['cluster.local/ns/bar/sa/a'] }] }), SLEEP)).toBe('DENY');
    // from AND to AND when; sources ORed
    const and = rule({
      from: [{ source: { principals: ['cluster.local/ns/foo/sa/sleep'] } }, { source: { namespaces: ['bar'] } }],
      to: [{ operation: { ports: ['8080'] } }],
      when: [{ key: 'source.ip', notValues: ['127.0.117.0/24'] }],
    });
    expect(decision(and, BAR_A, 8080)).toBe('ALLOW');
    expect(decision(and, BAR_A, 9090)).toBe('DENY');
    expect(decision(and, SLEEP, 8080, WEB, '127.0.117.1')).toBe('DENY');
  });

  test('denial wording is ztunnel’s', () => {
    const deny = mesh([ap('foo', 'deny-bar', { ...onWeb, action: 'DENY', rules: [{ from: [{ source: { namespaces: ['bar'] } }] }] })]);
    expect(rejectionReason(decide(deny, WEB, 8080, BAR_A))).toBe('explicitly denied by: foo/deny-bar');
    expect(rejectionReason(decide(mesh([ap('foo', 'nothing', onWeb)]), WEB, 8080, SLEEP))).toBe('allow policies exist, but none allowed');
  });
});

describe('selector attachment (ztunnel scopes)', () => {
  const denyAll = (ns: string, name: string, extra: object = {}) => ap(ns, name, { action: 'DENY', rules: [{}], ...extra });

  test('root namespace without selector: every workload of the mesh (GLOBAL)', () => {
    const snap = mesh([denyAll('istio-system', 'global')]);
    for (const ip of [WEB, DB, API]) expect(decision(snap, SLEEP, 8080, ip)).toBe('DENY');
    expect(decision(snap, SLEEP, 8080, '127.0.114.99')).toBe('DENY'); // unknown destination: GLOBAL only
  });

  test('other namespace without selector: its own workloads (NAMESPACE)', () => {
    const snap = mesh([denyAll('foo', 'ns-wide')]);
    expect(decision(snap, SLEEP, 8080, WEB)).toBe('DENY');
    expect(decision(snap, SLEEP, 8080, DB)).toBe('DENY');
    expect(decision(snap, SLEEP, 8080, API)).toBe('ALLOW');
    expect(decision(snap, SLEEP, 8080, '127.0.114.99')).toBe('ALLOW');
  });

  test('selector.matchLabels: workloads holding all the labels, in the policy namespace only', () => {
    const snap = mesh([denyAll('foo', 'web', { selector: { matchLabels: { app: 'web', tier: 'front' } } }), denyAll('foo', 'db-front', { selector: { matchLabels: { app: 'db', tier: 'front' } } })]);
    expect(decision(snap, SLEEP, 8080, WEB)).toBe('DENY');
    expect(decision(snap, SLEEP, 8080, DB)).toBe('ALLOW'); // lacks tier: front
    expect(decision(snap, SLEEP, 8080, API)).toBe('ALLOW'); // app: web, but in bar
  });

  test('a selector policy in the root namespace selects matching workloads of every namespace', () => {
    const snap = mesh([denyAll('istio-system', 'web-everywhere', { selector: { matchLabels: { app: 'web' } } })]);
    expect(decision(snap, SLEEP, 8080, WEB)).toBe('DENY');
    expect(decision(snap, SLEEP, 8080, API)).toBe('DENY');
    expect(decision(snap, SLEEP, 8080, DB)).toBe('ALLOW');
  });

  test('ALLOW policies add up across scopes: any one matching allows', () => {
    const snap = mesh([
      ap('istio-system', 'allow-sleep', { rules: [{ from: [{ source: { principals: ['cluster.local/ns/foo/sa/sleep'] } }] }] }),
      ap('foo', 'allow-bar', { ...onWeb, rules: [{ from: [{ source: { namespaces: ['bar'] } }] }] }),
    ]);
    expect(decision(snap, SLEEP, 8080, WEB)).toBe('ALLOW');
    expect(decision(snap, BAR_A, 8080, WEB)).toBe('ALLOW');
    expect(decision(snap, BAR_A, 8080, DB)).toBe('DENY');
    expect(decision(snap, FOOBAR_A, 8080, WEB)).toBe('DENY');
  });

  test('not sent to ztunnel: targetRefs policies, AUDIT and CUSTOM, dry-run', () => {
    const snap = mesh(
      [
        ap('foo', 'wp', { targetRefs: [{ group: 'gateway.networking.k8s.io', kind: 'Gateway', name: 'waypoint' }], action: 'DENY', rules: [{}] }),
        ap('foo', 'audit', { ...onWeb, action: 'AUDIT', rules: [{}] }),
        ap('foo', 'custom', { ...onWeb, action: 'CUSTOM', provider: { name: 'ext' }, rules: [{}] }),
        ap('foo', 'dry', { ...onWeb, action: 'DENY', rules: [{}] }, { 'istio.io/dry-run': 'true' }),
        ap('foo', 'sent', { ...onWeb, action: 'DENY', rules: [{ from: [{ source: { namespaces: ['nowhere'] } }] }] }),
      ],
      { extensionProviders: [{ name: 'ext', envoyExtAuthzGrpc: { service: 'ext.foo.svc.cluster.local', port: 9000 } }] },
    );
    expect(compileZtunnelAuthz(snap).policies).toEqual(['AuthorizationPolicy/foo/sent']);
    expect(decision(snap, SLEEP)).toBe('ALLOW');
  });

  test('the waypoint engine still ignores every selector / namespace-wide policy', () => {
    const snap = mesh([denyAll('istio-system', 'global'), denyAll('foo', 'ns-wide'), denyAll('foo', 'web', onWeb)]);
    expect(compileAuthz(snap).policies).toHaveLength(3);
    const target = snap.resolveTarget(WEB, 8080)!;
    expect(compileAuthz(snap).forTarget(target).tcp.empty).toBe(true);
    expect(decision(snap, SLEEP)).toBe('DENY');
  });

  test('an invalid policy throws a ConfigError naming it; a snapshot with it is refused whole', () => {
    const bad = ap('foo', 'bad', { ...onWeb, rules: [{ from: [{ source: { ipBlocks: ['not-an-ip'] } }] }] });
    const snap = mesh([bad], {}, []);
    expect(() => compileZtunnelAuthz(snap)).toThrow(ConfigError);
    try {
      compileZtunnelAuthz(snap);
    } catch (err) {
      expect(String(err)).toMatch(/AuthorizationPolicy\/foo\/bad.*ipBlocks.*bad IP address/);
    }
    expect(() => mesh([bad])).toThrow(ConfigError);
    expect(() => ztunnelAuthzFor(snap)).toThrow(/not compiled with the ztunnelAuthz part/);
  });
});
