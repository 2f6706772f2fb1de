/**
 * Evaluation order and actions (istio/istio pilot/pkg/security/authz/builder/builder.go): CUSTOM → AUDIT → DENY → ALLOW, allow-nothing,
 * allow-all, dry-run, CUSTOM providers, the reported policy id.
 */
import { describe, expect, test } from 'vitest';

import { Evaluator, rbacDeniedDetails } from '../../../src/authz/evaluator.ts';
import { BAR_A, engine, policy, TCP_ECHO, wp, type MeshConfigOptions } from './mesh.ts';

const ALL = [{}];
const fromBar = [{ from: [{ source: { namespaces: ['bar'] } }] }];
const getOnly = [{ to: [{ operation: { methods: ['GET'] } }] }];

const providers: MeshConfigOptions = {
  extensionProviders: [
    { name: 'grpc-authz', envoyExtAuthzGrpc: { service: 'foo/authz.foo.svc.cluster.local', port: 9000 } },
    { name: 'http-authz', envoyExtAuthzHttp: { service: 'authz.foo.svc.cluster.local', port: 9000 } },
    { name: 'broken', envoyExtAuthzGrpc: { service: 'foo/missing.foo.svc.cluster.local', port: 9000 } },
    { name: 'tracer', zipkin: { service: 'zipkin.istio-system.svc.cluster.local', port: 9411 } },
  ],
};

describe('no policies, allow-nothing, allow-all (§2.1)', () => {
  test('no policies at all → allow, and the evaluator says it is empty', () => {
    const e = engine([]);
    expect(e.http()).toEqual({ decision: 'ALLOW' });
    expect(e.authz.forTarget(e.snap.resolveTarget('127.96.0.10', 8000)!).http.empty).toBe(true);
  });

  test('ALLOW without rules (spec {targetRefs}) → deny everything, details name no policy', () => {
    const e = engine([wp('allow-nothing', 'ALLOW')]);
    const r = e.http();
    expect(r).toEqual({ decision: 'DENY' });
    expect(rbacDeniedDetails(r)).toBe('rbac_access_denied_matched_policy[none]');
    expect(e.tcp().decision).toBe('DENY');
  });

  test('action defaults to ALLOW', () => {
    const e = engine([policy('p', { targetRefs: [{ group: 'gateway.networking.k8s.io', kind: 'Gateway', name: 'waypoint' }], rules: getOnly })]);
    expect(e.http({ method: 'GET' }).decision).toBe('ALLOW');
    expect(e.http({ method: 'PUT' }).decision).toBe('DENY');
  });

  test('ALLOW rules [{}] → allow all; DENY rules [{}] → deny all', () => {
    expect(engine([wp('all', 'ALLOW', ALL)]).http({ method: 'DELETE', principal: undefined })).toEqual({ decision: 'ALLOW', policy: 'ns[foo]-policy[all]-rule[0]' });
    const r = engine([wp('none', 'DENY', ALL)]).http();
    expect(r).toEqual({ decision: 'DENY', policy: 'ns[foo]-policy[none]-rule[0]' });
    expect(rbacDeniedDetails(r)).toBe('rbac_access_denied_matched_policy[ns[foo]-policy[none]-rule[0]]');
  });

  test('a matching DENY wins over a matching ALLOW', () => {
    const e = engine([wp('allow', 'ALLOW', ALL), wp('deny', 'DENY', fromBar)]);
    expect(e.http({ principal: BAR_A })).toEqual({ decision: 'DENY', policy: 'ns[foo]-policy[deny]-rule[0]' });
    expect(e.http()).toEqual({ decision: 'ALLOW', policy: 'ns[foo]-policy[allow]-rule[0]' });
  });

  test('several ALLOW policies: any one matching allows', () => {
    const e = engine([wp('a', 'ALLOW', fromBar), wp('b', 'ALLOW', getOnly)]);
    expect(e.http({ principal: BAR_A, method: 'PUT' }).policy).toBe('ns[foo]-policy[a]-rule[0]');
    expect(e.http({ method: 'GET' }).policy).toBe('ns[foo]-policy[b]-rule[0]');
    expect(e.http({ method: 'PUT' }).decision).toBe('DENY');
  });

  test('the reported rule is the first matching one in policy-id order, as Envoy walks its sorted map', () => {
    const rules = Array.from({ length: 11 }, () => ({}));
    expect(engine([wp('z', 'DENY', ALL), wp('a', 'DENY', rules)]).http().policy).toBe('ns[foo]-policy[a]-rule[0]');
    expect(engine([wp('a', 'DENY', [{ to: [{ operation: { paths: ['/x'] } }] }, {}])]).http().policy).toBe('ns[foo]-policy[a]-rule[1]');
    // rule[10] sorts before rule[2]
    const only = [...Array.from({ length: 10 }, () => ({ to: [{ operation: { paths: ['/x'] } }] })), {}, {}];
    expect(engine([wp('a', 'DENY', only)]).http().policy).toBe('ns[foo]-policy[a]-rule[10]');
  });
});

describe('AUDIT (§2.2)', () => {
  test('marks without deciding', () => {
    const e = engine([wp('audit', 'AUDIT', fromBar)]);
    expect(e.http({ principal: BAR_A })).toEqual({ decision: 'ALLOW', audit: 'ns[foo]-policy[audit]-rule[0]' });
    expect(e.http()).toEqual({ decision: 'ALLOW' });
  });

  test('the mark stays when a DENY then rejects, and when ALLOW rejects', () => {
    expect(engine([wp('audit', 'AUDIT', ALL), wp('deny', 'DENY', ALL)]).http()).toEqual({
      decision: 'DENY',
      policy: 'ns[foo]-policy[deny]-rule[0]',
      audit: 'ns[foo]-policy[audit]-rule[0]',
    });
    expect(engine([wp('audit', 'AUDIT', ALL), wp('allow', 'ALLOW', fromBar)]).http()).toEqual({ decision: 'DENY', audit: 'ns[foo]-policy[audit]-rule[0]' });
  });
});

describe('dry-run (§2.4)', () => {
  const dry = { annotations: { 'istio.io/dry-run': 'true' } };

  test('a dry-run ALLOW alone does not switch on deny-by-default; shadow says what it would do', () => {
    const e = engine([policy('dry', { targetRefs: [{ group: 'gateway.networking.k8s.io', kind: 'Gateway', name: 'waypoint' }], rules: getOnly }, dry)]);
    expect(e.http({ method: 'PUT' })).toEqual({ decision: 'ALLOW', shadow: { decision: 'DENY' } });
    expect(e.http({ method: 'GET' })).toEqual({ decision: 'ALLOW', shadow: { decision: 'ALLOW', policy: 'ns[foo]-policy[dry]-rule[0]' } });
  });

  test('a dry-run DENY never denies', () => {
    const e = engine([policy('dry', { targetRefs: [{ group: 'gateway.networking.k8s.io', kind: 'Gateway', name: 'waypoint' }], action: 'DENY', rules: ALL }, dry)]);
    expect(e.http()).toEqual({ decision: 'ALLOW', shadow: { decision: 'DENY', policy: 'ns[foo]-policy[dry]-rule[0]' } });
  });

  test('after an enforced DENY, dry-run ALLOW policies are not evaluated (the ALLOW stage is not reached)', () => {
    const gw = [{ group: 'gateway.networking.k8s.io', kind: 'Gateway', name: 'waypoint' }];
    const e = engine([wp('deny', 'DENY', ALL), policy('dry', { targetRefs: gw, rules: getOnly }, dry)]);
    expect(e.http()).toEqual({ decision: 'DENY', policy: 'ns[foo]-policy[deny]-rule[0]' });
    const both = engine([wp('deny', 'DENY', ALL), policy('dry-deny', { targetRefs: gw, action: 'DENY', rules: fromBar }, dry)]);
    expect(both.http()).toEqual({ decision: 'DENY', policy: 'ns[foo]-policy[deny]-rule[0]', shadow: { decision: 'ALLOW' } });
  });

  test('"false" enforces; mixed with enforced policies the enforced ones decide', () => {
    const notDry = { annotations: { 'istio.io/dry-run': 'false' } };
    const e1 = engine([policy('p', { targetRefs: [{ group: 'gateway.networking.k8s.io', kind: 'Gateway', name: 'waypoint' }], action: 'DENY', rules: ALL }, notDry)]);
    expect(e1.http().decision).toBe('DENY');
    const e2 = engine([
      wp('allow', 'ALLOW', getOnly),
      policy('dry', { targetRefs: [{ group: 'gateway.networking.k8s.io', kind: 'Gateway', name: 'waypoint' }], action: 'DENY', rules: fromBar }, dry),
    ]);
    expect(e2.http({ principal: BAR_A, method: 'GET' })).toEqual({
      decision: 'ALLOW',
      policy: 'ns[foo]-policy[allow]-rule[0]',
      shadow: { decision: 'DENY', policy: 'ns[foo]-policy[dry]-rule[0]' },
    });
  });
});

describe('CUSTOM (§2.3)', () => {
  const custom = (name: string, provider: string, rules: object[] = [{ to: [{ operation: { paths: ['/secure*'] } }] }]) =>
    wp(name, 'CUSTOM', rules, { provider: { name: provider } });

  test('a matching CUSTOM rule names the provider to ask; evaluation goes on', () => {
    const e = engine([custom('ext', 'grpc-authz')], providers);
    expect(e.http({ path: '/secure/x' })).toEqual({ decision: 'ALLOW', custom: { provider: 'grpc-authz', policy: 'ns[foo]-policy[ext]-rule[0]' } });
    expect(e.http({ path: '/public' })).toEqual({ decision: 'ALLOW' });
  });

  test('CUSTOM cannot grant: DENY and ALLOW still apply after it', () => {
    const e = engine([custom('ext', 'grpc-authz'), wp('deny', 'DENY', fromBar), wp('allow', 'ALLOW', getOnly)], providers);
    expect(e.http({ path: '/secure', principal: BAR_A })).toMatchObject({ decision: 'DENY', policy: 'ns[foo]-policy[deny]-rule[0]', custom: { provider: 'grpc-authz' } });
    expect(e.http({ path: '/secure', method: 'PUT' })).toMatchObject({ decision: 'DENY', custom: { provider: 'grpc-authz' } });
  });

  test('an unknown, unusable or non-ext_authz provider denies the requests its rules match', () => {
    for (const provider of ['nope', 'broken', 'tracer']) {
      const e = engine([custom('ext', provider)], providers);
      expect(e.http({ path: '/secure' })).toEqual({ decision: 'DENY', policy: 'istio-ext-authz-ns[foo]-policy[ext]-rule[0]-deny-due-to-bad-CUSTOM-action' });
      expect(e.http({ path: '/other' })).toEqual({ decision: 'ALLOW' });
    }
  });

  test('two providers on one target: every CUSTOM rule denies', () => {
    const e = engine([custom('a', 'grpc-authz'), custom('b', 'http-authz', [{ to: [{ operation: { paths: ['/b'] } }] }])], providers);
    expect(e.http({ path: '/secure' }).decision).toBe('DENY');
    expect(e.http({ path: '/b' }).policy).toBe('istio-ext-authz-ns[foo]-policy[b]-rule[0]-deny-due-to-bad-CUSTOM-action');
    expect(e.http({ path: '/c' }).decision).toBe('ALLOW');
  });

  test('on TCP, a gRPC provider is asked (HTTP-only values dropped, DENY semantics); an HTTP provider is ignored', () => {
    const rules = [{ to: [{ operation: { paths: ['/x'], ports: ['9000'] } }] }];
    const grpc = engine([custom('ext', 'grpc-authz', rules)], providers);
    expect(grpc.tcp()).toEqual({ decision: 'ALLOW', custom: { provider: 'grpc-authz', policy: 'ns[foo]-policy[ext]-rule[0]' } });
    expect(grpc.tcp({}, { ...TCP_ECHO, port: 9001 })).toEqual({ decision: 'ALLOW' });
    const http = engine([custom('ext', 'http-authz', rules)], providers);
    expect(http.tcp()).toEqual({ decision: 'ALLOW' });
  });
});

describe('evaluators', () => {
  test('denyAll denies every check', () => {
    expect(Evaluator.denyAll().evaluate({})).toEqual({ decision: 'DENY' });
    expect(Evaluator.denyAll().empty).toBe(false);
  });

  test('results of distinct checks do not leak into each other (one context is reused)', () => {
    const e = engine([wp('deny', 'DENY', [{ from: [{ source: { ipBlocks: ['127.244.3.0/24'] } }] }])]);
    expect(e.http({ sourceIp: '127.244.3.5' }).decision).toBe('DENY');
    expect(e.http({ sourceIp: '127.244.1.5' }).decision).toBe('ALLOW');
    expect(e.http({ sourceIp: '127.244.3.5' }).decision).toBe('DENY');
  });
});
