/**
 * PeerAuthentication as ztunnel applies it (istio/api peer_authentication.proto; istio/istio architecture/ambient/peer-authentication.md): scopes and precedence, oldest
 * wins within a scope, UNSET inherits, portLevelMtls, DISABLE as PERMISSIVE, root-namespace
 * selector policies ignored; invalid ones refused with file, line and field.
 */
import { describe, expect, test } from 'vitest';

import { compilePeerAuthentication, PEER_AUTHENTICATION, peerAuthenticationFor } from '../../../src/ztunnel/peer-authentication.ts';
import { ConfigError } from '../../../src/util/errors.ts';
import { compileMesh } from '../../../src/state/compile.ts';
import type { MeshSnapshot, Workload } from '../../../src/state/types.ts';
import { meshText, namespace, pod, waypointGateway } from '../../helpers/mesh.ts';

const app = (name: string, ns: string, ip: string, label: string) => pod({ name, namespace: ns, labels: { app: label }, sa: label, ip });

interface PaOptions {
  readonly selector?: Record<string, string>;
  readonly mode?: string;
  readonly ports?: Record<string, string | undefined>;
  readonly created?: string;
}

const pa = (ns: string, name: string, o: PaOptions = {}) => ({
  apiVersion: 'security.istio.io/v1',
  kind: 'PeerAuthentication',
  metadata: { name, namespace: ns, ...(o.created ? { creationTimestamp: o.created } : {}) },
  spec: {
    ...(o.selector ? { selector: { matchLabels: o.selector } } : {}),
    ...(o.mode ? { mtls: { mode: o.mode } } : {}),
    ...(o.ports ? { portLevelMtls: Object.fromEntries(Object.entries(o.ports).map(([p, m]) => [p, m ? { mode: m } : {}])) } : {}),
  },
});

/** The test mesh plus `policies`, with its PeerAuthentication part compiled (which validates them). */
function mesh(...policies: object[]): MeshSnapshot {
  const text = meshText(
    waypointGateway('foo'),
    namespace('foo'),
    namespace('bar'),
    app('web', 'foo', '127.0.186.10', 'web'),
    app('db', 'foo', '127.0.186.11', 'db'),
    app('api', 'bar', '127.0.186.12', 'api'),
    ...policies,
  );
  return compileMesh({ text, file: 'pa-test.yaml', parts: [PEER_AUTHENTICATION] });
}

const wl = (m: MeshSnapshot, ip: string): Workload => m.workloadByIp(ip)!;
const modes = (m: MeshSnapshot, port = 8080) => {
  const c = compilePeerAuthentication(m);
  return { web: c.modeFor(wl(m, '127.0.186.10'), port), db: c.modeFor(wl(m, '127.0.186.11'), port), api: c.modeFor(wl(m, '127.0.186.12'), port) };
};

describe('PeerAuthentication: scopes and precedence', () => {
  test('no policy at all ⇒ PERMISSIVE', () => {
    const c = compilePeerAuthentication(mesh());
    expect(c.any).toBe(false);
    expect(c.modeFor(undefined, 80)).toBe('PERMISSIVE');
    expect(modes(mesh())).toEqual({ web: 'PERMISSIVE', db: 'PERMISSIVE', api: 'PERMISSIVE' });
  });

  test('mesh-wide STRICT (root namespace, no selector) applies everywhere, also to unknown workloads', () => {
    const m = mesh(pa('istio-system', 'default', { mode: 'STRICT' }));
    expect(modes(m)).toEqual({ web: 'STRICT', db: 'STRICT', api: 'STRICT' });
    expect(compilePeerAuthentication(m).explain(undefined, 80)).toEqual({ mode: 'STRICT', policy: 'istio-system/default' });
  });

  test('namespace overrides mesh; workload overrides namespace', () => {
    const m = mesh(
      pa('istio-system', 'default', { mode: 'STRICT' }),
      pa('foo', 'ns', { mode: 'PERMISSIVE' }),
      pa('foo', 'db-strict', { selector: { app: 'db' }, mode: 'STRICT' }),
    );
    expect(modes(m)).toEqual({ web: 'PERMISSIVE', db: 'STRICT', api: 'STRICT' });
    expect(compilePeerAuthentication(m).explain(wl(m, '127.0.186.11'), 8080).policy).toBe('foo/db-strict');
  });

  test('UNSET inherits from the parent scope', () => {
    const m = mesh(pa('istio-system', 'default', { mode: 'STRICT' }), pa('foo', 'ns'), pa('foo', 'web', { selector: { app: 'web' }, mode: 'UNSET' }));
    expect(modes(m)).toEqual({ web: 'STRICT', db: 'STRICT', api: 'STRICT' });
  });

  test('selector policies in the root namespace are ignored', () => {
    const m = mesh(pa('istio-system', 'sel', { selector: { app: 'web' }, mode: 'STRICT' }));
    expect(modes(m)).toEqual({ web: 'PERMISSIVE', db: 'PERMISSIVE', api: 'PERMISSIVE' });
  });

  test('a selector policy only applies in its own namespace', () => {
    const m = mesh(pa('bar', 'web', { selector: { app: 'web' }, mode: 'STRICT' }));
    expect(modes(m).web).toBe('PERMISSIVE');
  });

  test('several at one scope: the oldest wins (creationTimestamp, then name), not file order', () => {
    const ns = mesh(
      pa('foo', 'newer', { mode: 'PERMISSIVE', created: '2024-05-01T00:00:00Z' }),
      pa('foo', 'older', { mode: 'STRICT', created: '2024-01-01T00:00:00Z' }),
    );
    expect(modes(ns).web).toBe('STRICT');
    const byName = mesh(pa('istio-system', 'b', { mode: 'PERMISSIVE' }), pa('istio-system', 'a', { mode: 'STRICT' }));
    expect(modes(byName).api).toBe('STRICT');
    const wlScope = mesh(
      pa('foo', 'w2', { selector: { app: 'web' }, mode: 'STRICT', created: '2024-05-01T00:00:00Z' }),
      pa('foo', 'w1', { selector: { app: 'web' }, mode: 'PERMISSIVE', created: '2024-01-01T00:00:00Z' }),
    );
    expect(modes(wlScope).web).toBe('PERMISSIVE');
  });

  test('DISABLE is treated as PERMISSIVE (ambient does not support it) at every scope', () => {
    expect(modes(mesh(pa('istio-system', 'default', { mode: 'DISABLE' }))).web).toBe('PERMISSIVE');
    expect(modes(mesh(pa('istio-system', 'default', { mode: 'STRICT' }), pa('foo', 'ns', { mode: 'DISABLE' }))).web).toBe('PERMISSIVE');
    const m = mesh(pa('istio-system', 'default', { mode: 'STRICT' }), pa('foo', 'web', { selector: { app: 'web' }, mode: 'DISABLE' }));
    expect(modes(m)).toEqual({ web: 'PERMISSIVE', db: 'STRICT', api: 'STRICT' });
  });

  test('other API groups named PeerAuthentication are not ours', () => {
    const other = { ...pa('istio-system', 'default', { mode: 'STRICT' }), apiVersion: 'example.com/v1' };
    expect(modes(mesh(other)).web).toBe('PERMISSIVE');
  });
});

describe('PeerAuthentication: portLevelMtls', () => {
  test('STRICT workload with a PERMISSIVE port: only that port accepts plaintext', () => {
    const m = mesh(pa('foo', 'web', { selector: { app: 'web' }, mode: 'STRICT', ports: { '9090': 'PERMISSIVE' } }));
    expect(modes(m, 8080).web).toBe('STRICT');
    expect(modes(m, 9090).web).toBe('PERMISSIVE');
    expect(modes(m, 9090).db).toBe('PERMISSIVE');
  });

  test('PERMISSIVE mesh, port-level STRICT under an UNSET workload mode (istio#53884 merge)', () => {
    const m = mesh(pa('istio-system', 'default', { mode: 'PERMISSIVE' }), pa('foo', 'web', { selector: { app: 'web' }, ports: { '9090': 'STRICT' } }));
    expect(modes(m, 9090).web).toBe('STRICT');
    expect(modes(m, 8080).web).toBe('PERMISSIVE');
  });

  test('STRICT mesh, workload UNSET with a port-level PERMISSIVE exception', () => {
    const m = mesh(pa('istio-system', 'default', { mode: 'STRICT' }), pa('foo', 'web', { selector: { app: 'web' }, ports: { '9090': 'PERMISSIVE' } }));
    expect(modes(m, 9090).web).toBe('PERMISSIVE');
    expect(modes(m, 8080).web).toBe('STRICT');
  });

  test('port-level UNSET inherits the workload mode; port-level DISABLE is PERMISSIVE', () => {
    const m = mesh(pa('foo', 'web', { selector: { app: 'web' }, mode: 'STRICT', ports: { '9090': undefined, '9091': 'DISABLE' } }));
    expect(modes(m, 9090).web).toBe('STRICT');
    expect(modes(m, 9091).web).toBe('PERMISSIVE');
  });

});

describe('invalid PeerAuthentications are refused (CRD schema, istiod ValidatePeerAuthentication)', () => {
  const refusal = (policy: object): ConfigError => {
    try {
      mesh(policy);
    } catch (err) {
      expect(err).toBeInstanceOf(ConfigError);
      return err as ConfigError;
    }
    throw new Error('compiled');
  };
  const withSpec = (spec: object) => ({ apiVersion: 'security.istio.io/v1', kind: 'PeerAuthentication', metadata: { name: 'bad', namespace: 'foo' }, spec });

  test.each([
    ['an unknown mode (a typo)', pa('foo', 'bad', { mode: 'STRICTT' }), 'spec.mtls.mode', 'Unsupported value: "STRICTT": supported values: "UNSET", "DISABLE", "PERMISSIVE", "STRICT"'],
    ['a lower-case mode (the enum is case-sensitive)', pa('foo', 'bad', { mode: 'strict' }), 'spec.mtls.mode', 'Unsupported value: "strict"'],
    ['an unknown port-level mode', pa('foo', 'bad', { selector: { app: 'web' }, ports: { '9090': 'OFF' } }), 'spec.portLevelMtls["9090"].mode', 'Unsupported value: "OFF"'],
    ['portLevelMtls without a selector', pa('foo', 'bad', { mode: 'STRICT', ports: { '9090': 'PERMISSIVE' } }), 'spec.portLevelMtls', 'portLevelMtls requires selector'],
    ['portLevelMtls with an empty selector', withSpec({ selector: { matchLabels: {} }, portLevelMtls: { '9090': { mode: 'STRICT' } } }), 'spec.portLevelMtls', 'portLevelMtls requires selector'],
    ['an empty portLevelMtls', withSpec({ selector: { matchLabels: { app: 'web' } }, portLevelMtls: {} }), 'spec.portLevelMtls', 'port level mTLS, if defined, must have at least one element'],
    ['port 0', pa('foo', 'bad', { selector: { app: 'web' }, ports: { '0': 'PERMISSIVE' } }), 'spec.portLevelMtls["0"]', 'port must be between 1-65535'],
    ['port 70000', pa('foo', 'bad', { selector: { app: 'web' }, ports: { '70000': 'PERMISSIVE' } }), 'spec.portLevelMtls["70000"]', 'port must be between 1-65535'],
    ['a port that is not a number', pa('foo', 'bad', { selector: { app: 'web' }, ports: { http: 'PERMISSIVE' } }), 'spec.portLevelMtls.http', 'port must be between 1-65535'],
    ['an unknown field', withSpec({ mtls: { mode: 'STRICT' }, portLevelMTLS: {} }), 'spec', 'unknown field "portLevelMTLS"'],
    ['a wildcard in the selector', withSpec({ selector: { matchLabels: { app: 'web*' } }, mtls: { mode: 'STRICT' } }), 'spec.selector.matchLabels.app', 'wildcard is not supported in selector: "app=web*"'],
  ])('%s', (_what, policy, field, message) => {
    const err = refusal(policy);
    expect(err.message).toContain(message);
    expect(err.location).toMatchObject({ file: 'pa-test.yaml', object: 'PeerAuthentication/foo/bad', field });
    expect(err.location.line).toBeGreaterThan(0);
  });
});

test('compiled once per snapshot, with it', () => {
  const m = mesh(pa('istio-system', 'default', { mode: 'STRICT' }));
  expect(peerAuthenticationFor(m)).toBe(peerAuthenticationFor(m));
  expect(peerAuthenticationFor(mesh())).not.toBe(peerAuthenticationFor(m));
  expect(peerAuthenticationFor(m).modeFor(undefined, 80)).toBe('STRICT');
});
