/**
 * Every Source, Operation and Condition field, with its `not*` form (istio/istio pilot/pkg/security/authz/model/generator.go): each row
 * is one ALLOW rule; the listed requests must be allowed (the rule matches) or denied (it does not,
 * so default deny applies).
 */
import { describe, expect, test } from 'vitest';

import type { JwtInfo, RequestAttributes } from '../../../src/authz/types.ts';
import { headersFromRaw } from '../../../src/authz/index.ts';
import { BAR_A, engine, SLEEP, wp } from './mesh.ts';

/** Request headers from a record (a list = several fields of one name), as the engine reads them. */
const headersOf = (h: Readonly<Record<string, string | readonly string[]>>) => headersFromRaw(Object.entries(h).flatMap(([n, v]) => (typeof v === 'string' ? [n, v] : v.flatMap((x) => [n, x]))));

type Attrs = Partial<RequestAttributes>;

interface Row {
  readonly name: string;
  readonly rule: object;
  readonly match: readonly Attrs[];
  readonly miss: readonly Attrs[];
}

const FOOBAR_A = 'spiffe://cluster.local/ns/foobar/sa/a';
const OTHER_TD = 'spiffe://other-td.example/ns/foo/sa/sleep';
const jwt = (payload: Record<string, unknown>, spaceDelimitedClaims?: string[]): JwtInfo => ({ payload, ...(spaceDelimitedClaims ? { spaceDelimitedClaims } : {}) });
const src = (source: object) => ({ from: [{ source }] });
const op = (operation: object) => ({ to: [{ operation }] });
const when = (key: string, values?: string[], notValues?: string[]) => ({ when: [{ key, ...(values ? { values } : {}), ...(notValues ? { notValues } : {}) }] });
const headers = (h: Record<string, string | string[]>) => ({ headers: headersOf(h) });
const none = { principal: undefined };

const SOURCE: readonly Row[] = [
  { name: 'principals exact (no spiffe://)', rule: src({ principals: ['cluster.local/ns/foo/sa/sleep'] }), match: [{}], miss: [{ principal: BAR_A }, none] },
  { name: 'principals * = any identity', rule: src({ principals: ['*'] }), match: [{}, { principal: BAR_A }], miss: [none] },
  { name: 'principals prefix', rule: src({ principals: ['cluster.local/ns/foo/*'] }), match: [{}], miss: [{ principal: BAR_A }, none] },
  { name: 'principals suffix spans trust domains', rule: src({ principals: ['*/ns/foo/sa/sleep'] }), match: [{}, { principal: OTHER_TD }], miss: [{ principal: `${SLEEP}er` }, none] },
  { name: 'principals with spiffe:// never match', rule: src({ principals: ['spiffe://cluster.local/ns/foo/sa/sleep'] }), match: [], miss: [{}] },
  { name: 'notPrincipals * = no identity', rule: src({ notPrincipals: ['*'] }), match: [none], miss: [{}] },
  { name: 'notPrincipals', rule: src({ notPrincipals: ['cluster.local/ns/foo/sa/sleep'] }), match: [{ principal: BAR_A }, none], miss: [{}] },
  {
    name: 'principals and notPrincipals are ANDed',
    rule: src({ principals: ['cluster.local/ns/*'], notPrincipals: ['cluster.local/ns/bar/*'] }),
    match: [{}],
    miss: [{ principal: BAR_A }, none],
  },
  {
    name: 'requestPrincipals',
    rule: src({ requestPrincipals: ['iss.example/alice'] }),
    match: [{ jwt: jwt({ iss: 'iss.example', sub: 'alice' }) }],
    miss: [{ jwt: jwt({ iss: 'iss.example', sub: 'bob' }) }, {}],
  },
  { name: 'notRequestPrincipals * = no JWT', rule: src({ notRequestPrincipals: ['*'] }), match: [{}], miss: [{ jwt: jwt({ iss: 'i', sub: 's' }) }] },
  { name: 'namespaces exact: foo is not foobar', rule: src({ namespaces: ['foo'] }), match: [{}], miss: [{ principal: FOOBAR_A }, { principal: BAR_A }, none] },
  { name: 'namespaces foo* matches foobar', rule: src({ namespaces: ['foo*'] }), match: [{}, { principal: FOOBAR_A }], miss: [{ principal: BAR_A }] },
  { name: 'namespaces: a * anywhere is a wildcard', rule: src({ namespaces: ['f*r'] }), match: [{ principal: FOOBAR_A }], miss: [{}, { principal: BAR_A }] },
  { name: 'notNamespaces', rule: src({ notNamespaces: ['foo'] }), match: [{ principal: BAR_A }, { principal: FOOBAR_A }, none], miss: [{}] },
  {
    name: 'serviceAccounts: bare name is in the policy namespace',
    rule: src({ serviceAccounts: ['sleep'] }),
    match: [{}, { principal: OTHER_TD }],
    miss: [{ principal: 'spiffe://cluster.local/ns/bar/sa/sleep' }, { principal: `${SLEEP}er` }, none],
  },
  { name: 'serviceAccounts ns/sa', rule: src({ serviceAccounts: ['bar/a'] }), match: [{ principal: BAR_A }], miss: [{}, { principal: FOOBAR_A }] },
  { name: 'notServiceAccounts', rule: src({ notServiceAccounts: ['sleep'] }), match: [{ principal: BAR_A }, none], miss: [{}] },
  { name: 'trustDomains exact', rule: src({ trustDomains: ['cluster.local'] }), match: [{}, { principal: BAR_A }], miss: [{ principal: OTHER_TD }, none] },
  { name: 'trustDomains * = any SPIFFE identity', rule: src({ trustDomains: ['*'] }), match: [{}, { principal: OTHER_TD }], miss: [none] },
  {
    name: 'trustDomains suffix stays in the trust-domain segment',
    rule: src({ trustDomains: ['*.example'] }),
    match: [{ principal: OTHER_TD }],
    miss: [{}, { principal: 'spiffe://x.example.evil/ns/foo/sa/a' }, { principal: 'spiffe://evil/ns/a.example/sa/x' }],
  },
  { name: 'trustDomains prefix', rule: src({ trustDomains: ['other-*'] }), match: [{ principal: OTHER_TD }], miss: [{}] },
  { name: 'notTrustDomains', rule: src({ notTrustDomains: ['cluster.local'] }), match: [{ principal: OTHER_TD }, none], miss: [{}] },
  {
    name: 'ipBlocks: CIDR and single IP, IPv4-mapped peers unwrapped',
    rule: src({ ipBlocks: ['127.244.1.0/24', '192.0.2.7'] }),
    match: [{ sourceIp: '127.244.1.200' }, { sourceIp: '192.0.2.7' }, { sourceIp: '::ffff:127.244.1.9' }],
    miss: [{ sourceIp: '127.244.2.1' }, { sourceIp: '192.0.2.8' }, { sourceIp: undefined }],
  },
  { name: 'ipBlocks IPv6', rule: src({ ipBlocks: ['2001:db8::/32'] }), match: [{ sourceIp: '2001:db8:1::5' }], miss: [{ sourceIp: '2001:db9::1' }, { sourceIp: '127.244.1.5' }] },
  { name: 'notIpBlocks', rule: src({ notIpBlocks: ['127.244.1.0/24'] }), match: [{ sourceIp: '127.244.3.5' }, { sourceIp: undefined }], miss: [{}] },
  {
    name: 'remoteIpBlocks: remote.ip, falling back to the peer address',
    rule: src({ remoteIpBlocks: ['203.0.113.0/24'] }),
    match: [{ remoteIp: '203.0.113.9' }, { sourceIp: '203.0.113.1' }],
    miss: [{ remoteIp: '198.51.100.1', sourceIp: '203.0.113.1' }, {}],
  },
  { name: 'notRemoteIpBlocks', rule: src({ notRemoteIpBlocks: ['203.0.113.0/24'] }), match: [{ remoteIp: '198.51.100.1' }], miss: [{ remoteIp: '203.0.113.4' }] },
  {
    name: 'several fields of one source are ANDed',
    rule: src({ namespaces: ['foo'], ipBlocks: ['127.244.1.0/24'] }),
    match: [{}],
    miss: [{ sourceIp: '127.244.3.1' }, { principal: BAR_A }],
  },
];

const OPERATION: readonly Row[] = [
  {
    name: 'hosts: exact, case-insensitive, port-sensitive',
    rule: op({ hosts: ['httpbin.foo:8000'] }),
    match: [{}, { host: 'HttpBin.Foo:8000' }],
    miss: [{ host: 'httpbin.foo' }, { host: 'httpbin.foo:8001' }, { host: undefined }],
  },
  { name: 'hosts: host:* takes any port', rule: op({ hosts: ['httpbin.foo', 'httpbin.foo:*'] }), match: [{ host: 'httpbin.foo' }, { host: 'HTTPBIN.FOO:1' }], miss: [{ host: 'httpbin.foobar:1' }] },
  { name: 'hosts: suffix, case-insensitive', rule: op({ hosts: ['*.Suffix.com'] }), match: [{ host: 'a.suffix.COM' }], miss: [{ host: 'suffix.com.evil' }] },
  { name: 'hosts: * = present, even empty', rule: op({ hosts: ['*'] }), match: [{ host: '' }], miss: [{ host: undefined }] },
  { name: 'notHosts', rule: op({ notHosts: ['deny.example.com'] }), match: [{ host: 'allow.example.com' }, { host: undefined }], miss: [{ host: 'DENY.example.com' }] },
  { name: 'ports: destination port, exact', rule: op({ ports: ['8000'] }), match: [{}], miss: [{ destinationPort: 8001 }, { destinationPort: undefined }] },
  { name: 'notPorts', rule: op({ notPorts: ['9080'] }), match: [{}], miss: [{ destinationPort: 9080 }] },
  { name: 'methods: case-sensitive', rule: op({ methods: ['GET', 'HEAD'] }), match: [{}, { method: 'HEAD' }], miss: [{ method: 'get' }, { method: 'POST' }] },
  { name: 'methods: a lower-case value never matches an upper-case method', rule: op({ methods: ['get'] }), match: [], miss: [{}] },
  { name: 'methods: prefix', rule: op({ methods: ['P*'] }), match: [{ method: 'PUT' }, { method: 'POST' }], miss: [{}] },
  { name: 'notMethods', rule: op({ notMethods: ['DELETE'] }), match: [{}], miss: [{ method: 'DELETE' }] },
  { name: 'paths: exact, case-sensitive', rule: op({ paths: ['/api'] }), match: [{ path: '/api' }], miss: [{ path: '/API' }, { path: '/api/' }, { path: undefined }] },
  { name: 'paths: prefix includes the bare prefix', rule: op({ paths: ['/api/*'] }), match: [{ path: '/api/' }, { path: '/api/x/y' }], miss: [{ path: '/api' }, { path: '/apix' }] },
  { name: 'paths: suffix', rule: op({ paths: ['*/info'] }), match: [{ path: '/a/info' }], miss: [{ path: '/a/info/' }] },
  { name: 'paths: * = any non-empty path', rule: op({ paths: ['*'] }), match: [{ path: '/' }], miss: [{ path: undefined }] },
  { name: 'paths: a * in the middle is literal', rule: op({ paths: ['/a*b'] }), match: [{ path: '/a*b' }], miss: [{ path: '/axb' }] },
  {
    name: 'paths: {*} is one segment, {**} zero or more (last)',
    rule: op({ paths: ['/store/{*}/item', '/files/{**}'] }),
    match: [{ path: '/store/a/item' }, { path: '/files/' }, { path: '/files/a/b.txt' }],
    miss: [{ path: '/store//item' }, { path: '/store/a/b/item' }, { path: '/files' }],
  },
  { name: 'paths: {**} between literals', rule: op({ paths: ['/store/{**}/cart'] }), match: [{ path: '/store//cart' }, { path: '/store/a/b/cart' }], miss: [{ path: '/store/cart' }] },
  { name: 'notPaths', rule: op({ notPaths: ['/admin*'] }), match: [{ path: '/public' }], miss: [{ path: '/admin/x' }] },
  {
    name: 'two operations in one `to` are ORed',
    rule: { to: [{ operation: { hosts: ['internal.svc.com'] } }, { operation: { paths: ['/private'] } }] },
    match: [{ host: 'internal.svc.com', path: '/x' }, { host: 'www.svc.com', path: '/private' }],
    miss: [{ host: 'www.svc.com', path: '/x' }],
  },
];

const CONDITION: readonly Row[] = [
  {
    name: 'request.headers: name case-insensitive, values',
    rule: when('request.headers[X-Foo]', ['foo']),
    match: [headers({ 'x-foo': 'foo' }), headers({ 'X-FOO': 'foo' })],
    miss: [headers({ 'x-foo': 'bar' }), headers({}), {}],
  },
  { name: 'request.headers: notValues match a missing header', rule: when('request.headers[x-foo]', undefined, ['bar']), match: [headers({}), headers({ 'x-foo': 'baz' })], miss: [headers({ 'x-foo': 'bar' })] },
  { name: 'request.headers: * = present even when empty', rule: when('request.headers[x-foo]', ['*']), match: [headers({ 'x-foo': '' })], miss: [headers({})] },
  {
    name: 'request.headers: a header sent as several fields is matched field by field, not joined (GHSA-ghc4-35x6-crw5)',
    rule: when('request.headers[x-h]', ['foo,bar']),
    match: [headers({ 'x-h': 'foo,bar' }), headers({ 'x-h': ['baz', 'foo,bar'] })],
    miss: [headers({ 'x-h': ['foo', 'bar'] }), headers({ 'x-h': 'foo' }), headers({ 'x-h': 'foo, bar' })],
  },
  {
    name: 'request.headers: any field may match a value, prefix or suffix',
    rule: when('request.headers[x-h]', ['admin', 'ad*', '*in']),
    match: [headers({ 'x-h': ['user', 'admin'] }), headers({ 'x-h': ['user', 'adm'] }), headers({ 'x-h': ['login', 'user'] })],
    miss: [headers({ 'x-h': ['user', 'guest'] }), headers({ 'x-h': 'user,adm' })],
  },
  {
    name: 'request.headers: notValues hold only when no field matches',
    rule: when('request.headers[x-h]', undefined, ['admin']),
    match: [headers({ 'x-h': ['user', 'guest'] }), headers({ 'x-h': 'user,admin' }), headers({})],
    miss: [headers({ 'x-h': ['user', 'admin'] }), headers({ 'x-h': ['admin', 'user'] })],
  },
  {
    name: 'request.headers: cookie crumbs are one value joined with "; " (RFC 9113 §8.2.3)',
    rule: when('request.headers[cookie]', ['a=1; b=2']),
    match: [headers({ cookie: ['a=1', 'b=2'] })],
    miss: [headers({ cookie: 'a=1' })],
  },
  { name: 'request.headers: :authority is the host', rule: when('request.headers[:authority]', ['httpbin*']), match: [{}], miss: [{ host: 'other' }] },
  { name: 'source.ip', rule: when('source.ip', ['127.244.1.0/24']), match: [{}], miss: [{ sourceIp: '127.1.1.1' }] },
  { name: 'source.ip notValues', rule: when('source.ip', undefined, ['127.244.1.5']), match: [{ sourceIp: '127.244.1.6' }], miss: [{}] },
  { name: 'remote.ip', rule: when('remote.ip', ['203.0.113.0/24']), match: [{ remoteIp: '203.0.113.5' }], miss: [{}] },
  { name: 'source.namespace', rule: when('source.namespace', ['bar']), match: [{ principal: BAR_A }], miss: [{}, none] },
  { name: 'source.namespace notValues', rule: when('source.namespace', undefined, ['bar']), match: [{}, none], miss: [{ principal: BAR_A }] },
  { name: 'source.serviceAccount', rule: when('source.serviceAccount', ['bar/a']), match: [{ principal: BAR_A }], miss: [{}] },
  { name: 'source.principal', rule: when('source.principal', ['cluster.local/ns/bar/sa/a']), match: [{ principal: BAR_A }], miss: [{}, none] },
  { name: 'source.principal notValues', rule: when('source.principal', undefined, ['*']), match: [none], miss: [{}] },
  { name: 'source.trustDomain', rule: when('source.trustDomain', ['other-td.example']), match: [{ principal: OTHER_TD }], miss: [{}] },
  {
    name: 'request.auth.principal',
    rule: when('request.auth.principal', ['https://issuer.example.com/*']),
    match: [{ jwt: jwt({ iss: 'https://issuer.example.com', sub: 'u' }) }],
    miss: [{ jwt: jwt({ iss: 'https://issuer.example.com' }) }, {}],
  },
  {
    name: 'request.auth.audiences: string or list',
    rule: when('request.auth.audiences', ['foo']),
    match: [{ jwt: jwt({ aud: 'foo' }) }, { jwt: jwt({ aud: ['bar', 'foo'] }) }],
    miss: [{ jwt: jwt({ aud: ['bar'] }) }, {}],
  },
  { name: 'request.auth.presenter', rule: when('request.auth.presenter', ['app-*']), match: [{ jwt: jwt({ azp: 'app-1' }) }], miss: [{ jwt: jwt({ azp: 'web' }) }] },
  {
    name: 'request.auth.claims: nested, list, space-delimited',
    rule: { when: [{ key: 'request.auth.claims[nested][key1]', values: ['valueB'] }, { key: 'request.auth.claims[teams]', values: ['blue'] }] },
    match: [{ jwt: jwt({ nested: { key1: ['valueA', 'valueB'] }, teams: 'red blue' }, ['teams']) }],
    miss: [{ jwt: jwt({ nested: { key1: ['valueA', 'valueB'] }, teams: 'red blue' }) }, { jwt: jwt({ nested: { key2: 'valueB' }, teams: ['blue'] }) }],
  },
  { name: 'request.auth.claims: non-string values never match', rule: when('request.auth.claims[admin]', ['true']), match: [{ jwt: jwt({ admin: 'true' }) }], miss: [{ jwt: jwt({ admin: true }) }] },
  { name: 'request.auth.claims notValues: true without a JWT', rule: when('request.auth.claims[group]', undefined, ['x']), match: [{}], miss: [{ jwt: jwt({ group: 'x' }) }] },
  { name: 'destination.ip', rule: when('destination.ip', ['127.96.0.0/16']), match: [{}], miss: [{ destinationIp: '127.97.0.1' }] },
  { name: 'destination.port', rule: when('destination.port', ['8000']), match: [{}], miss: [{ destinationPort: 1 }] },
  { name: 'destination.port notValues', rule: when('destination.port', undefined, ['8000']), match: [{ destinationPort: 8001 }], miss: [{}] },
  { name: 'connection.sni', rule: when('connection.sni', ['*.example.com']), match: [{ sni: 'a.example.com' }], miss: [{}, { sni: 'example.org' }] },
  { name: 'connection.sni notValues * = no SNI', rule: when('connection.sni', undefined, ['*']), match: [{}], miss: [{ sni: 'a.example.com' }] },
  {
    name: 'experimental.envoy.filters metadata, string and [list] forms',
    rule: { when: [{ key: 'experimental.envoy.filters.http.foo[role]', values: ['admin'] }, { key: 'experimental.envoy.filters.http.foo[groups]', values: ['[ops]'] }] },
    match: [{ metadata: { 'envoy.filters.http.foo': { role: 'admin', groups: ['dev', 'ops'] } } }],
    miss: [{ metadata: { 'envoy.filters.http.foo': { role: 'admin', groups: 'ops' } } }, {}],
  },
  {
    name: 'every when condition must hold',
    rule: { when: [{ key: 'source.namespace', values: ['foo'] }, { key: 'destination.port', values: ['8000'] }] },
    match: [{}],
    miss: [{ destinationPort: 9 }, { principal: BAR_A }],
  },
];

function run(rows: readonly Row[]): void {
  for (const row of rows) {
    test(row.name, () => {
      const e = engine([wp('p', 'ALLOW', [row.rule])]);
      for (const attrs of row.match) expect(e.http(attrs).decision, `should match ${JSON.stringify(attrs)}`).toBe('ALLOW');
      for (const attrs of row.miss) expect(e.http(attrs).decision, `should not match ${JSON.stringify(attrs)}`).toBe('DENY');
    });
  }
}

describe('from.source fields', () => run(SOURCE));
describe('to.operation fields', () => run(OPERATION));
describe('when conditions', () => run(CONDITION));

describe('rule structure (§3)', () => {
  test('from, to and when are ANDed; entries of from (and of to) are ORed', () => {
    const e = engine([
      wp('p', 'ALLOW', [
        {
          from: [{ source: { namespaces: ['foo'] } }, { source: { namespaces: ['bar'] } }],
          to: [{ operation: { methods: ['GET'] } }],
          when: [{ key: 'request.headers[x-ok]', values: ['1'] }],
        },
      ]),
    ]);
    const ok = headers({ 'x-ok': '1' });
    expect(e.http(ok).decision).toBe('ALLOW');
    expect(e.http({ ...ok, principal: BAR_A }).decision).toBe('ALLOW');
    expect(e.http({ ...ok, principal: FOOBAR_A }).decision).toBe('DENY');
    expect(e.http({ ...ok, method: 'POST' }).decision).toBe('DENY');
    expect(e.http({}).decision).toBe('DENY');
  });

  test('rules of a policy are ORed', () => {
    const e = engine([wp('p', 'ALLOW', [op({ paths: ['/a'] }), op({ paths: ['/b'] })])]);
    expect(e.http({ path: '/a' }).policy).toBe('ns[foo]-policy[p]-rule[0]');
    expect(e.http({ path: '/b' }).policy).toBe('ns[foo]-policy[p]-rule[1]');
    expect(e.http({ path: '/c' }).decision).toBe('DENY');
  });
});
