/**
 * Principals, trust-domain aliases (istio/istio trustdomain `bundle_test.go`)
 * and request principals (§4.1 `requestPrincipals`, split at the last `/`).
 */
import { describe, expect, test } from 'vitest';

import { requestPrincipalMatcher } from '../../../src/authz/jwt.ts';
import { expandTrustDomainAliases, replaceTrustDomainAliases } from '../../../src/authz/trust-domain.ts';
import { engine, wp } from './mesh.ts';

describe('replaceTrustDomainAliases', () => {
  test.each([
    ['cluster.local is rewritten to the mesh trust domain only', ['td1'], ['cluster.local/ns/a/sa/b'], ['td1/ns/a/sa/b']],
    ['and to every alias', ['td1', 'cluster.local'], ['cluster.local/ns/a/sa/b'], ['td1/ns/a/sa/b', 'cluster.local/ns/a/sa/b']],
    ['a bundle member expands to all members', ['td1', 'td2', 'td3'], ['td2/ns/a/sa/b'], ['td1/ns/a/sa/b', 'td2/ns/a/sa/b', 'td3/ns/a/sa/b']],
    ['a foreign trust domain stays as written', ['td1', 'td2'], ['other/ns/a/sa/b'], ['other/ns/a/sa/b']],
    ['a * trust domain stays as written', ['td1', 'td2'], ['*/ns/a/sa/b'], ['*/ns/a/sa/b']],
    ['a non-SPIFFE shape stays as written', ['td1', 'td2'], ['cluster.local/ns/a', '*', 'a/b/c/d/e/f'], ['cluster.local/ns/a', '*', 'a/b/c/d/e/f']],
    ['a *-prefixed trust domain keeps itself for members it matches', ['old-td', 'new-td', 'foo'], ['*-td/ns/a/sa/b'], ['*-td/ns/a/sa/b', 'foo/ns/a/sa/b']],
  ])('%s', (_what, bundle, values, expected) => {
    expect(replaceTrustDomainAliases(values, bundle)).toEqual(expected);
  });

  test('expandTrustDomainAliases', () => {
    expect(expandTrustDomainAliases(['td2', 'x'], ['td1', 'td2'])).toEqual(['td1', 'td2', 'x']);
    expect(expandTrustDomainAliases(['cluster.local'], ['td1'])).toEqual(['cluster.local']);
  });
});

describe('in policies', () => {
  const mesh = { trustDomain: 'new-td', trustDomainAliases: ['old-td'] };

  test('principals written with cluster.local match the mesh trust domain and its aliases', () => {
    const e = engine([wp('p', 'ALLOW', [{ from: [{ source: { principals: ['cluster.local/ns/foo/sa/sleep'] } }] }])], mesh);
    expect(e.http({ principal: 'spiffe://new-td/ns/foo/sa/sleep' }).decision).toBe('ALLOW');
    expect(e.http({ principal: 'spiffe://old-td/ns/foo/sa/sleep' }).decision).toBe('ALLOW');
    expect(e.http({ principal: 'spiffe://cluster.local/ns/foo/sa/sleep' }).decision).toBe('DENY');
  });

  test('notPrincipals and source.principal get the aliases too', () => {
    const e = engine(
      [
        wp('d', 'DENY', [{ from: [{ source: { notPrincipals: ['old-td/ns/foo/sa/sleep'] } }] }]),
        wp('a', 'ALLOW', [{ when: [{ key: 'source.principal', values: ['old-td/ns/foo/sa/*'] }] }]),
      ],
      mesh,
    );
    expect(e.http({ principal: 'spiffe://new-td/ns/foo/sa/sleep' }).decision).toBe('ALLOW');
    expect(e.http({ principal: 'spiffe://new-td/ns/foo/sa/other' }).decision).toBe('DENY');
  });

  test('a value that is not <td>/ns/<ns>/sa/<sa> is not rewritten (Istio needs exactly 5 parts)', () => {
    const e = engine([wp('a', 'ALLOW', [{ from: [{ source: { principals: ['old-td/ns/foo/*'] } }] }])], mesh);
    expect(e.http({ principal: 'spiffe://old-td/ns/foo/sa/sleep' }).decision).toBe('ALLOW');
    expect(e.http({ principal: 'spiffe://new-td/ns/foo/sa/sleep' }).decision).toBe('DENY');
  });

  test('trustDomains equal to a bundle member accept every member', () => {
    const e = engine([wp('p', 'ALLOW', [{ from: [{ source: { trustDomains: ['old-td'] } }] }])], mesh);
    expect(e.http({ principal: 'spiffe://new-td/ns/x/sa/y' }).decision).toBe('ALLOW');
    expect(e.http({ principal: 'spiffe://other/ns/x/sa/y' }).decision).toBe('DENY');
  });
});

describe('request principals: split at the last "/"', () => {
  const jwt = (iss?: string, sub?: string) => ({ payload: { ...(iss !== undefined ? { iss } : {}), ...(sub !== undefined ? { sub } : {}) } });
  test.each([
    ['*', jwt('i', 's'), [jwt('i'), jwt(undefined, 's'), jwt('', 's'), undefined]],
    ['https://issuer.example.com/user-42', jwt('https://issuer.example.com', 'user-42'), [jwt('https://issuer.example.com', 'user-4'), jwt('https://issuer.example.com/user-42')]],
    ['https://issuer.example.com/*', jwt('https://issuer.example.com', 'anyone'), [jwt('https://issuer.example.com', ''), jwt('https://issuer.example.co', 'x')]],
    ['https://issuer.example.com/user-*', jwt('https://issuer.example.com', 'user-7'), [jwt('https://issuer.example.com', 'admin')]],
    ['*@istio.io/sub-1', jwt('test-issuer-1@istio.io', 'sub-1'), [jwt('test-issuer-1@istio.io', 'sub-2'), jwt('x@example.com', 'sub-1')]],
    ['*/sub-1', jwt('anything', 'sub-1'), [jwt('anything', 'sub-11')]],
    ['*-1', jwt('whoever', 'sub-1'), [jwt('whoever', 'sub-2')]],
    ['test-issuer-*', jwt('test-issuer-9', 'x'), [jwt('other', 'x'), jwt('test-issuer-9')]],
    ['test-issuer-1@istio.io', jwt('test-issuer-1@istio.io', ''), [jwt('test-issuer-1@istio.io', 'sub-1'), jwt('test-issuer-1@istio.io')]],
  ])('%s', (value, good, bad) => {
    const m = requestPrincipalMatcher(value);
    expect(m(good)).toBe(true);
    for (const b of bad) expect(m(b), JSON.stringify(b)).toBe(false);
  });
});
