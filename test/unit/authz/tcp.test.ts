/**
 * TCP services through the waypoint (Istio builder testdata `tcp/allow-only-http-*`,
 * `tcp/deny-both-http-tcp-*`; istio.io authz-tcp task): ALLOW rules that use an HTTP-only field
 * are dropped (fail closed); DENY and AUDIT rules lose only their HTTP-only values (wider).
 * Also pitfall I2: L4-only policies bound to the waypoint apply to TCP and HTTP alike.
 */
import { describe, expect, test } from 'vitest';

import { BAR_A, engine, TCP_ECHO, wp } from './mesh.ts';

const port9001 = { ...TCP_ECHO, port: 9001 };
const GOOD = 'spiffe://cluster.local/ns/good/sa/client';

describe('ALLOW on TCP', () => {
  test('methods + ports: the rule is dropped, the policy still exists → both ports denied', () => {
    const e = engine([wp('tcp-policy', 'ALLOW', [{ to: [{ operation: { methods: ['GET'], ports: ['9000'] } }] }])]);
    expect(e.tcp()).toEqual({ decision: 'DENY' });
    expect(e.tcp({}, port9001)).toEqual({ decision: 'DENY' });
    // The same policy on HTTP keeps its meaning: GET to port 9000 only.
    expect(e.http({ method: 'GET', destinationPort: 9000 }).decision).toBe('ALLOW');
    expect(e.http({ method: 'GET' }).decision).toBe('DENY');
  });

  test.each([
    ['hosts', { to: [{ operation: { hosts: ['a'] } }] }],
    ['notHosts', { to: [{ operation: { notHosts: ['a'] } }] }],
    ['notMethods', { to: [{ operation: { notMethods: ['GET'] } }] }],
    ['paths', { to: [{ operation: { paths: ['/a'] } }] }],
    ['notPaths', { to: [{ operation: { notPaths: ['/a'] } }] }],
    ['requestPrincipals', { from: [{ source: { requestPrincipals: ['*'] } }] }],
    ['notRequestPrincipals', { from: [{ source: { notRequestPrincipals: ['*'] } }] }],
    ['request.headers', { when: [{ key: 'request.headers[x]', notValues: ['a'] }] }],
    ['request.auth.claims', { when: [{ key: 'request.auth.claims[a]', notValues: ['a'] }] }],
    ['request.auth.audiences', { when: [{ key: 'request.auth.audiences', values: ['a'] }] }],
    ['request.auth.presenter', { when: [{ key: 'request.auth.presenter', values: ['a'] }] }],
    ['request.auth.principal', { when: [{ key: 'request.auth.principal', values: ['a'] }] }],
  ])('an ALLOW rule using %s is dropped (an otherwise allow-all rule denies)', (_field, rule) => {
    const e = engine([wp('p', 'ALLOW', [rule, { from: [{ source: { namespaces: ['bar'] } }] }])]);
    expect(e.tcp().decision).toBe('DENY');
    expect(e.tcp({ principal: BAR_A })).toEqual({ decision: 'ALLOW', policy: 'ns[foo]-policy[p]-rule[1]' });
  });

  test('L4 fields work on TCP: principals, namespaces, ipBlocks, remoteIpBlocks, ports, source.ip, destination.*', () => {
    const e = engine([
      wp('p', 'ALLOW', [
        {
          from: [{ source: { namespaces: ['foo'], ipBlocks: ['127.244.0.0/16'], remoteIpBlocks: ['127.244.1.0/24'] } }],
          to: [{ operation: { ports: ['9000'] } }],
          when: [
            { key: 'destination.ip', values: [TCP_ECHO.ip] },
            { key: 'source.principal', values: ['cluster.local/ns/foo/*'] },
          ],
        },
      ]),
    ]);
    expect(e.tcp().decision).toBe('ALLOW');
    expect(e.tcp({}, port9001).decision).toBe('DENY');
    expect(e.tcp({ principal: BAR_A }).decision).toBe('DENY');
    expect(e.tcp({ sourceIp: '127.245.0.1' }).decision).toBe('DENY');
    expect(e.tcp({ remoteIp: '127.244.9.9' }).decision).toBe('DENY');
  });

  test('I2: ALLOW from namespace good bound to the waypoint refuses bad on TCP and on HTTP', () => {
    const e = engine([wp('good-only', 'ALLOW', [{ from: [{ source: { namespaces: ['good'] } }] }])]);
    expect(e.tcp({ principal: GOOD }).decision).toBe('ALLOW');
    expect(e.http({ principal: GOOD }).decision).toBe('ALLOW');
    expect(e.tcp({ principal: 'spiffe://cluster.local/ns/bad/sa/client' }).decision).toBe('DENY');
    expect(e.http({ principal: 'spiffe://cluster.local/ns/bad/sa/client' }).decision).toBe('DENY');
  });
});

describe('DENY and AUDIT on TCP are widened', () => {
  test('methods + ports: only the port survives', () => {
    const e = engine([wp('tcp-policy', 'DENY', [{ to: [{ operation: { methods: ['GET'], ports: ['9000'] } }] }])]);
    expect(e.tcp()).toEqual({ decision: 'DENY', policy: 'ns[foo]-policy[tcp-policy]-rule[0]' });
    expect(e.tcp({}, port9001)).toEqual({ decision: 'ALLOW' });
  });

  test('methods only: every TCP connection is denied', () => {
    const e = engine([wp('get', 'DENY', [{ to: [{ operation: { methods: ['GET'] } }] }])]);
    expect(e.tcp().decision).toBe('DENY');
    expect(e.tcp({}, port9001).decision).toBe('DENY');
    expect(e.http({ method: 'POST' }).decision).toBe('ALLOW');
  });

  test('a source mixing L4 and HTTP fields keeps the L4 one: principal X denied whatever the JWT', () => {
    const e = engine([wp('d', 'DENY', [{ from: [{ source: { principals: ['cluster.local/ns/bar/sa/a'], notRequestPrincipals: ['*'] } }] }])]);
    expect(e.tcp({ principal: BAR_A }).decision).toBe('DENY');
    expect(e.tcp().decision).toBe('ALLOW');
    expect(e.http({ principal: BAR_A, jwt: { payload: { iss: 'i', sub: 's' } } }).decision).toBe('ALLOW');
  });

  test('a when on a header only: the condition disappears → the rule matches every connection', () => {
    const e = engine([wp('d', 'DENY', [{ from: [{ source: { principals: ['cluster.local/ns/bar/sa/a'] } }], when: [{ key: 'request.headers[x-token]', values: ['secret'] }] }])]);
    expect(e.tcp({ principal: BAR_A }).decision).toBe('DENY');
    expect(e.tcp().decision).toBe('ALLOW');
  });

  test('one from entry reduced to nothing makes the whole from clause match', () => {
    const e = engine([wp('d', 'DENY', [{ from: [{ source: { requestPrincipals: ['x/y'] } }, { source: { namespaces: ['bar'] } }] }])]);
    expect(e.tcp().decision).toBe('DENY');
  });

  test('AUDIT is widened the same way', () => {
    const e = engine([wp('a', 'AUDIT', [{ to: [{ operation: { paths: ['/x'], ports: ['9001'] } }] }])]);
    expect(e.tcp({}, port9001)).toEqual({ decision: 'ALLOW', audit: 'ns[foo]-policy[a]-rule[0]' });
    expect(e.tcp()).toEqual({ decision: 'ALLOW' });
  });

  test('remote.ip keeps working on TCP', () => {
    const e = engine([wp('d', 'DENY', [{ when: [{ key: 'remote.ip', values: ['203.0.113.0/24'] }] }])]);
    expect(e.tcp({ remoteIp: '203.0.113.7' }).decision).toBe('DENY');
    expect(e.tcp().decision).toBe('ALLOW');
  });
});
