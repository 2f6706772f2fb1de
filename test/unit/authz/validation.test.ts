/**
 * What Istio's admission validation rejects is a ConfigError naming the policy and the field
 * (istio/istio pkg/config/validation/validation.go).
 */
import { describe, expect, test, vi } from 'vitest';

import { compileAuthz } from '../../../src/authz/compile.ts';
import { parsePolicy } from '../../../src/authz/policy.ts';
import type { KeptResource } from '../../../src/state/types.ts';
import { caught } from '../../helpers/config-error.ts';
import { log } from '../../../src/util/log.ts';
import { meshWith, policy, TO_WAYPOINT } from './mesh.ts';

function kept(spec: unknown, annotations?: Record<string, string>): KeptResource {
  return {
    apiVersion: 'security.istio.io/v1',
    kind: 'AuthorizationPolicy',
    name: 'p',
    namespace: 'foo',
    object: { apiVersion: 'security.istio.io/v1', kind: 'AuthorizationPolicy', metadata: { name: 'p', namespace: 'foo', ...(annotations ? { annotations } : {}) }, spec },
  };
}

const rule = (r: object) => ({ targetRefs: TO_WAYPOINT, rules: [r] });

/** [what, spec, field, message pattern, annotations?] */
const REJECTED: readonly [string, unknown, string | undefined, RegExp, Record<string, string>?][] = [
  ['unknown field (typo)', rule({ from: [{ source: { notPrincipal: ['x'] } }] }), 'spec.rules[0].from[0].source', /unknown field "notPrincipal"/],
  ['unknown action', { targetRefs: TO_WAYPOINT, action: 'REJECT' }, 'spec.action', /must be one of ALLOW, DENY, AUDIT, CUSTOM/],
  ['a number where a string is due', rule({ to: [{ operation: { ports: [8080] } }] }), 'spec.rules[0].to[0].operation.ports[0]', /quote numbers/],
  ['DENY without rules', { targetRefs: TO_WAYPOINT, action: 'DENY' }, 'spec.rules', /DENY action without `rules` is meaningless/],
  ['CUSTOM without rules', { targetRefs: TO_WAYPOINT, action: 'CUSTOM', provider: { name: 'x' } }, 'spec.rules', /CUSTOM action without `rules`/],
  ['CUSTOM without provider', { targetRefs: TO_WAYPOINT, action: 'CUSTOM', rules: [{}] }, 'spec.provider.name', /`provider.name` must not be empty/],
  ['provider with a non-CUSTOM action', { targetRefs: TO_WAYPOINT, action: 'ALLOW', provider: { name: 'x' }, rules: [{}] }, 'spec.provider', /must not be with non CUSTOM action/],
  [
    'CUSTOM with a source identity field',
    { targetRefs: TO_WAYPOINT, action: 'CUSTOM', provider: { name: 'x' }, rules: [{ from: [{ source: { principals: ['a'] } }] }] },
    'spec.rules[0].from[0].source.principals',
    /not supported with CUSTOM action/,
  ],
  [
    'CUSTOM with request.auth.* in when',
    { targetRefs: TO_WAYPOINT, action: 'CUSTOM', provider: { name: 'x' }, rules: [{ when: [{ key: 'request.auth.claims[a]', values: ['b'] }] }] },
    'spec.rules[0].when[0].key',
    /not supported with CUSTOM action/,
  ],
  ['selector and targetRefs together', { targetRefs: TO_WAYPOINT, selector: { matchLabels: { app: 'a' } } }, 'spec', /only one of selector, targetRef or targetRefs/],
  ['targetRef with a namespace', { targetRefs: [{ ...TO_WAYPOINT[0], namespace: 'bar' }] }, 'spec.targetRefs[0].namespace', /cross namespace referencing is not supported/],
  ['targetRef to an unsupported kind', { targetRefs: [{ group: 'apps', kind: 'Deployment', name: 'x' }] }, 'spec.targetRefs[0]', /targetRef must be to/],
  ['Service targetRef with a wrong group', { targetRefs: [{ group: 'networking.istio.io', kind: 'Service', name: 'x' }] }, 'spec.targetRefs[0]', /targetRef must be to/],
  ['targetRef without name', { targetRef: { kind: 'Service', name: '' } }, 'spec.targetRef.name', /name must be set/],
  [
    'more than 16 targetRefs',
    { targetRefs: Array.from({ length: 17 }, (_, i) => ({ kind: 'Service', name: `s${i}` })) },
    'spec.targetRefs',
    /at most 16 target references/,
  ],
  ['wildcard in selector', { selector: { matchLabels: { app: 'a*' } } }, 'spec.selector.matchLabels.app', /wildcard is not supported/],
  ['null rule', { targetRefs: TO_WAYPOINT, rules: [null] }, 'spec.rules[0]', /`rule` must not be null/],
  ['from: []', rule({ from: [] }), 'spec.rules[0].from', /`from` must not be empty/],
  ['to: []', rule({ to: [] }), 'spec.rules[0].to', /`to` must not be empty/],
  ['from without source', rule({ from: [{}] }), 'spec.rules[0].from[0].source', /must not be null/],
  ['empty source', rule({ from: [{ source: {} }] }), 'spec.rules[0].from[0].source', /`from.source` must not be empty/],
  ['empty operation', rule({ to: [{ operation: {} }] }), 'spec.rules[0].to[0].operation', /`to.operation` must not be empty/],
  ['empty string value', rule({ to: [{ operation: { methods: ['GET', ''] } }] }), 'spec.rules[0].to[0].operation.methods[1]', /empty value not allowed/],
  ['serviceAccounts with principals', rule({ from: [{ source: { serviceAccounts: ['a'], principals: ['b'] } }] }), 'spec.rules[0].from[0].source', /cannot set serviceAccounts with namespaces or principals/],
  ['serviceAccounts with a wildcard', rule({ from: [{ source: { serviceAccounts: ['a*'] } }] }), 'spec.rules[0].from[0].source.serviceAccounts[0]', /wildcard/],
  [
    'more than 16 serviceAccounts',
    rule({ from: [{ source: { serviceAccounts: Array.from({ length: 17 }, (_, i) => `sa${i}`) } }] }),
    'spec.rules[0].from[0].source.serviceAccounts',
    /at most 16/,
  ],
  ['trust domain with /', rule({ from: [{ source: { trustDomains: ['a/b'] } }] }), 'spec.rules[0].from[0].source.trustDomains[0]', /must not contain "\/"/],
  ['trust domain with * in the middle', rule({ from: [{ source: { trustDomains: ['a*b'] } }] }), 'spec.rules[0].from[0].source.trustDomains[0]', /one "\*"/],
  ['trust domain with two *', rule({ from: [{ source: { notTrustDomains: ['*a*'] } }] }), 'spec.rules[0].from[0].source.notTrustDomains[0]', /one "\*"/],
  ['bad IP', rule({ from: [{ source: { ipBlocks: ['10.0.0.256'] } }] }), 'spec.rules[0].from[0].source.ipBlocks[0]', /bad IP address \(10.0.0.256\)/],
  ['bad CIDR', rule({ from: [{ source: { notRemoteIpBlocks: ['10.0.0.0/33'] } }] }), 'spec.rules[0].from[0].source.notRemoteIpBlocks[0]', /bad CIDR range/],
  ['port out of range', rule({ to: [{ operation: { ports: ['65536'] } }] }), 'spec.rules[0].to[0].operation.ports[0]', /bad port \(65536\)/],
  ['port not decimal', rule({ to: [{ operation: { notPorts: ['http'] } }] }), 'spec.rules[0].to[0].operation.notPorts[0]', /bad port/],
  ['named variable in a path template', rule({ to: [{ operation: { paths: ['/a/{name}/{*}'] } }] }), 'spec.rules[0].to[0].operation.paths[0]', /path template/],
  ['{**} not last', rule({ to: [{ operation: { paths: ['/a/{**}/b/{*}'] } }] }), 'spec.rules[0].to[0].operation.paths[0]', /must be the last operator/],
  ['bare * segment in a template', rule({ to: [{ operation: { paths: ['/a/*/{*}'] } }] }), 'spec.rules[0].to[0].operation.paths[0]', /path template/],
  ['condition without values', rule({ when: [{ key: 'source.ip' }] }), 'spec.rules[0].when[0]', /at least one of `values` or `notValues`/],
  ['unknown condition key', rule({ when: [{ key: 'source.user', values: ['a'] }] }), 'spec.rules[0].when[0].key', /unknown attribute: source.user/],
  ['destination.namespace', rule({ when: [{ key: 'destination.namespace', values: ['a'] }] }), 'spec.rules[0].when[0].key', /replaced by the metadata.namespace/],
  ['destination.labels', rule({ when: [{ key: 'destination.labels[app]', values: ['a'] }] }), 'spec.rules[0].when[0].key', /replaced by the workload selector/],
  ['header key without name', rule({ when: [{ key: 'request.headers[]', values: ['a'] }] }), 'spec.rules[0].when[0].key', /should have format/],
  ['claims key malformed', rule({ when: [{ key: 'request.auth.claims[a]b]', values: ['a'] }] }), 'spec.rules[0].when[0].key', /\[name\] groups/],
  ['bad condition IP', rule({ when: [{ key: 'destination.ip', notValues: ['x'] }] }), 'spec.rules[0].when[0].notValues[0]', /bad IP address/],
  ['bad condition port', rule({ when: [{ key: 'destination.port', values: ['-1'] }] }), 'spec.rules[0].when[0].values[0]', /bad port/],
  ['dry-run with a value that is not a bool', { targetRefs: TO_WAYPOINT }, 'metadata.annotations["istio.io/dry-run"]', /must be "true" or "false"/, { 'istio.io/dry-run': 'yes' }],
  ['dry-run on AUDIT', { targetRefs: TO_WAYPOINT, action: 'AUDIT', rules: [{}] }, 'metadata.annotations["istio.io/dry-run"]', /only supports action ALLOW\/DENY/, { 'istio.io/dry-run': 'true' }],
];

describe('rejected like Istio admission, naming policy and field', () => {
  for (const [what, spec, field, message, annotations] of REJECTED) {
    test(what, () => {
      const err = caught(() => parsePolicy(kept(spec, annotations)));
      expect(err.location.object).toBe('AuthorizationPolicy/foo/p');
      expect(err.location.field).toBe(field);
      expect(err.message).toMatch(message);
    });
  }
});

describe('accepted', () => {
  test.each([
    ['no spec at all (allow-nothing for ztunnel)', undefined],
    ['spec: {} in the root namespace', {}],
    ['rules: [{}]', { targetRefs: TO_WAYPOINT, rules: [{}] }],
    ['deprecated singular targetRef', { targetRef: { kind: 'Service', name: 'httpbin' } }],
    ['group core', { targetRefs: [{ group: 'core', kind: 'Service', name: 'httpbin' }] }],
    ['AUDIT without rules', { targetRefs: TO_WAYPOINT, action: 'AUDIT' }],
    ['nulls where lists are optional', { targetRefs: TO_WAYPOINT, rules: [{ from: null, to: [{ operation: { paths: ['/a'], methods: null } }], when: null }] }],
    ['every condition key', {
      targetRefs: TO_WAYPOINT,
      rules: [
        {
          when: [
            'request.headers[x]',
            'source.namespace',
            'source.principal',
            'source.serviceAccount',
            'source.trustDomain',
            'request.auth.principal',
            'request.auth.audiences',
            'request.auth.presenter',
            'request.auth.claims[a][b]',
            'connection.sni',
            'experimental.envoy.filters.http.x[y]',
          ].map((key) => ({ key, values: ['a'] })),
        },
      ],
    }],
  ])('%s', (_what, spec) => {
    expect(parsePolicy(kept(spec)).name).toBe('p');
  });

  test('the singular targetRef is read as a one-element list, groups made canonical', () => {
    expect(parsePolicy(kept({ targetRef: { kind: 'Service', name: 'httpbin' } })).targetRefs).toEqual([{ group: 'core', kind: 'Service', name: 'httpbin' }]);
  });

  test('dry-run parses like Go strconv.ParseBool', () => {
    expect(parsePolicy(kept({ targetRefs: TO_WAYPOINT }, { 'istio.io/dry-run': 'True' })).dryRun).toBe(true);
    expect(parsePolicy(kept({ targetRefs: TO_WAYPOINT }, { 'istio.io/dry-run': '0' })).dryRun).toBe(false);
  });
});

describe('in a mesh', () => {
  test('compileAuthz reports the invalid policy; a regex Envoy could not build is one too', () => {
    const snap = meshWith([policy('bad', { targetRefs: TO_WAYPOINT, rules: [{ from: [{ source: { principals: ['*(/ns/foo/sa/a'] } }] }] })]);
    const err = caught(() => compileAuthz(snap));
    expect(err.toString()).toMatch(/^authz-test\.yaml:\d+: document \d+: AuthorizationPolicy\/foo\/bad: field spec\.rules\[0\]\.from\[0\]\.source\.principals\[0\]: does not make a valid regular expression/);
  });

  test('an invalid selector policy is reported too (the mesh file is the admission point)', () => {
    const snap = meshWith([policy('z', { selector: { matchLabels: { app: 'x' } }, action: 'DENY' })]);
    expect(caught(() => compileAuthz(snap)).location.object).toBe('AuthorizationPolicy/foo/z');
  });
});

describe("Istio's warning about DENY rules of HTTP attributes only", () => {
  const warned = (calls: unknown[][]) => calls.filter((c) => String(c[1]).startsWith('authz: this DENY rule uses only HTTP attributes')).length;

  test('is logged once per version of the policy, not at every reload', () => {
    const warn = vi.spyOn(log, 'warn');
    try {
      const deny = (methods: string[]) => policy('http-only-deny', { targetRefs: TO_WAYPOINT, action: 'DENY', rules: [{ to: [{ operation: { methods } }] }] });
      compileAuthz(meshWith([deny(['DELETE'])]));
      expect(warned(warn.mock.calls)).toBe(1);
      // The same policy in the next snapshots (reloads of an unchanged or otherwise edited mesh).
      compileAuthz(meshWith([deny(['DELETE'])]));
      compileAuthz(meshWith([deny(['DELETE'])]));
      expect(warned(warn.mock.calls)).toBe(1);
      // A new version of its rules is warned about again.
      compileAuthz(meshWith([deny(['DELETE', 'PUT'])]));
      expect(warned(warn.mock.calls)).toBe(2);
    } finally {
      warn.mockRestore();
    }
  });
});
