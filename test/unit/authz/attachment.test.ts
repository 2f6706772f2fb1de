/**
 * Which policies this waypoint enforces, for which traffic (istio/istio pilot/pkg/model/policyattachment.go).
 */
import { afterEach, describe, expect, test, vi } from 'vitest';

import { AUTHZ, authzFor, compileAuthz } from '../../../src/authz/compile.ts';
import { ConfigError } from '../../../src/util/errors.ts';
import { log } from '../../../src/util/log.ts';
import { engine, EXT, HTTPBIN, HTTPBIN_POD, meshWith, OTHER, policy, targetOf, TCP_ECHO, TO_WAYPOINT } from './mesh.ts';

const allowNothing = (name: string, targetRefs: object[] | undefined, ns = 'foo', extra: object = {}) =>
  policy(name, { ...(targetRefs ? { targetRefs } : {}), ...extra }, { namespace: ns });
const GW_CLASS = [{ group: 'gateway.networking.k8s.io', kind: 'GatewayClass', name: 'istio-waypoint' }];
const svc = (name: string, group = '') => [{ group, kind: 'Service', name }];

afterEach(() => vi.restoreAllMocks());

describe('targetRefs (§1.2)', () => {
  test('Gateway of this waypoint, from its namespace: all traffic, service- and workload-addressed', () => {
    const e = engine([allowNothing('gw', TO_WAYPOINT)]);
    expect(e.http().decision).toBe('DENY');
    expect(e.http({}, OTHER).decision).toBe('DENY');
    expect(e.http({}, HTTPBIN_POD).decision).toBe('DENY');
    expect(e.tcp().decision).toBe('DENY');
  });

  test('Gateway reference from another namespace, or to another Gateway, does not bind', () => {
    expect(engine([allowNothing('gw', TO_WAYPOINT, 'bar')]).http().decision).toBe('ALLOW');
    expect(engine([allowNothing('gw', [{ ...TO_WAYPOINT[0], name: 'other-waypoint' }])]).http().decision).toBe('ALLOW');
  });

  test('GatewayClass istio-waypoint binds only from the root namespace', () => {
    expect(engine([allowNothing('gc', GW_CLASS, 'istio-system')]).http({}, HTTPBIN_POD).decision).toBe('DENY');
    expect(engine([allowNothing('gc', GW_CLASS, 'foo')]).http().decision).toBe('ALLOW');
    expect(engine([allowNothing('gc', [{ ...GW_CLASS[0], name: 'istio' }], 'istio-system')]).http().decision).toBe('ALLOW');
  });

  test('the root namespace follows MeshConfig rootNamespace', () => {
    expect(engine([allowNothing('gc', GW_CLASS, 'mesh-root')], { rootNamespace: 'mesh-root' }).http().decision).toBe('DENY');
    expect(engine([allowNothing('gc', GW_CLASS, 'istio-system')], { rootNamespace: 'mesh-root' }).http().decision).toBe('ALLOW');
  });

  test('Service: only traffic addressed to that service, never workload-addressed traffic', () => {
    for (const group of ['', 'core']) {
      const e = engine([allowNothing('svc', svc('httpbin', group))]);
      expect(e.http().decision).toBe('DENY');
      expect(e.http({}, OTHER).decision).toBe('ALLOW');
      expect(e.http({}, HTTPBIN_POD).decision).toBe('ALLOW');
    }
  });

  test('Service reference from another namespace does not bind', () => {
    expect(engine([allowNothing('svc', svc('httpbin'), 'bar')]).http().decision).toBe('ALLOW');
  });

  test('ServiceEntry by its name; a Service reference does not reach a ServiceEntry of the same name', () => {
    const e = engine([allowNothing('se', [{ group: 'networking.istio.io', kind: 'ServiceEntry', name: 'ext' }])]);
    expect(e.http({}, EXT).decision).toBe('DENY');
    expect(e.http().decision).toBe('ALLOW');
    expect(engine([allowNothing('se', svc('ext'))]).http({}, EXT).decision).toBe('ALLOW');
  });

  test('any one matching targetRef binds; service and waypoint policies combine', () => {
    const e = engine([
      allowNothing('either', [{ kind: 'Service', name: 'nope' }, ...TO_WAYPOINT]),
      policy('svc-deny', { targetRefs: svc('tcp-echo'), action: 'DENY', rules: [{ to: [{ operation: { ports: ['9001'] } }] }] }),
      policy('gw-allow', { targetRefs: TO_WAYPOINT, rules: [{}] }),
    ]);
    expect(e.tcp().decision).toBe('ALLOW');
    expect(e.tcp({}, { ...TCP_ECHO, port: 9001 })).toEqual({ decision: 'DENY', policy: 'ns[foo]-policy[svc-deny]-rule[0]' });
  });

  test('a policy attached by two refs is compiled in once', () => {
    const snap = meshWith([policy('both', { targetRefs: [...TO_WAYPOINT, ...svc('httpbin')], rules: [{}] })]);
    expect(compileAuthz(snap).forTarget(targetOf(snap, HTTPBIN)).http.policies).toEqual(['AuthorizationPolicy/foo/both']);
  });
});

describe('policies without targetRefs are ztunnel policies (§1.1, §1.3)', () => {
  test('selector, namespace-wide and root-namespace policies are ignored, with a debug line', () => {
    const debug = vi.spyOn(log, 'debug');
    const e = engine([
      policy('sel', { selector: { matchLabels: { app: 'httpbin' } }, action: 'DENY', rules: [{}] }),
      policy('ns-wide', {}),
      policy('mesh-wide', {}, { namespace: 'istio-system' }),
    ]);
    expect(e.http().decision).toBe('ALLOW');
    const ignored = debug.mock.calls.filter((c) => String(c[1]).includes('without targetRefs')).map((c) => (c[0] as { policy: string }).policy);
    expect(ignored.sort()).toEqual(['AuthorizationPolicy/foo/ns-wide', 'AuthorizationPolicy/foo/sel', 'AuthorizationPolicy/istio-system/mesh-wide']);
  });

  test('they are still validated and listed, for the inbound role', () => {
    const snap = meshWith([policy('sel', { selector: { matchLabels: { app: 'httpbin' } }, rules: [{}] })]);
    expect(compileAuthz(snap).policies.map((p) => p.ref)).toEqual(['AuthorizationPolicy/foo/sel']);
  });
});

describe('per-target evaluators (compiled once, nothing else walked)', () => {
  test('a target only holds the policies that apply to it', () => {
    const snap = meshWith([
      policy('gw', { targetRefs: TO_WAYPOINT, rules: [{}] }),
      policy('httpbin-only', { targetRefs: svc('httpbin'), rules: [{}] }),
      policy('other-only', { targetRefs: svc('other'), rules: [{}] }),
      policy('elsewhere', { targetRefs: svc('httpbin') }, { namespace: 'bar' }),
    ]);
    const authz = compileAuthz(snap);
    expect(authz.forTarget(targetOf(snap, HTTPBIN)).http.policies).toEqual(['AuthorizationPolicy/foo/gw', 'AuthorizationPolicy/foo/httpbin-only']);
    expect(authz.forTarget(targetOf(snap, OTHER)).http.policies).toEqual(['AuthorizationPolicy/foo/gw', 'AuthorizationPolicy/foo/other-only']);
    const shared = authz.forTarget(targetOf(snap, HTTPBIN_POD));
    expect(shared.http.policies).toEqual(['AuthorizationPolicy/foo/gw']);
    expect(authz.forTarget(targetOf(snap, TCP_ECHO))).toBe(shared);
  });

  test('authzFor reads the AUTHZ part compiled with the snapshot; a snapshot with an uncompilable policy is refused whole', () => {
    const snap = meshWith([policy('gw', { targetRefs: TO_WAYPOINT, rules: [{}] })], {}, [AUTHZ]);
    expect(authzFor(snap)).toBe(authzFor(snap));
    expect(authzFor(snap).forTarget(targetOf(snap, HTTPBIN)).http.policies).toEqual(['AuthorizationPolicy/foo/gw']);
    const bad = [policy('bad', { targetRefs: TO_WAYPOINT, rules: [{ from: [{ source: { principals: ['*(x'] } }] }] })];
    expect(() => meshWith(bad, {}, [AUTHZ])).toThrow(ConfigError);
    // Without the part (a snapshot nobody compiled policies for), reading it is a programming error, never "allow".
    expect(() => authzFor(meshWith(bad))).toThrow(/not compiled with the authz part/);
  });
});
