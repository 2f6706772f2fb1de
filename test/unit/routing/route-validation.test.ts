/**
 * Route validation and filter compilation found missing in a user trial: RE2 syntax (accepted and
 * refused, linear time), header modifier rules (one action per name, CR/LF, Host as an authority
 * rewrite, connection-specific headers ignored), empty `replacePrefixMatch`, mirror fractions,
 * the CRD's path characters, served apiVersions, and the warnings for unknown Gateway API kinds
 * and unresolvable parentRefs.
 */
import { afterEach, describe, expect, test, vi } from 'vitest';
import { compileRoutes, modifyPath, routesFor, selectMatch, tableFor, type CompiledMatch, type ServicePortRoutes } from '../../../src/routing/index.ts';
import { compileRegex } from '../../../src/routing/match.ts';
import { log } from '../../../src/util/log.ts';
import { httpRoute, mesh, target } from './mesh.ts';

const parent = `  parentRefs: [{ group: "", kind: Service, name: web }]`;

function routesOf(extra: string): ServicePortRoutes {
  const snap = mesh(extra);
  const r = compileRoutes(snap).forTarget(target(snap));
  if (!r) throw new Error('no routes attached');
  return r;
}

function first(routes: ServicePortRoutes, path: string): CompiledMatch {
  const m = selectMatch(tableFor(routes, 'shop', 'shop')!, { method: 'GET', path, query: '', headers: {} });
  if (!m) throw new Error(`no match for ${path}`);
  return m;
}

/** The warnings logged while `fn` runs. */
function warnings(fn: () => void): string[] {
  const out: string[] = [];
  const spy = vi.spyOn(log, 'warn').mockImplementation(((_obj: unknown, msg?: string) => void out.push(String(msg))) as never);
  try {
    fn();
  } finally {
    spy.mockRestore();
  }
  return out;
}

afterEach(() => vi.restoreAllMocks());

describe('regular expressions: RE2 (Envoy safe_regex)', () => {
  test.each(['\\d+', '(?i)abc', '\\p{Greek}+', '(?P<name>a)', '[[:alpha:]]+', '\\Qa.b\\E', 'a{2,1000}', '/v[0-9]+/.*'])('accepted: %s', (src) => {
    expect(() => compileRegex(src)).not.toThrow();
  });

  test.each(['(?=a)b', '(?!a)b', '(?<=a)b', '(a)\\1', '\\k<n>', 'a{1001}', '\\Z', 'a**', '(['])('refused: %s', (src) => {
    expect(() => compileRegex(src)).toThrow(/invalid regular expression .*RE2/);
  });

  test('whole-value match', () => {
    const re = compileRegex('ab|cd');
    expect(re.matches('ab')).toBe(true);
    expect(re.matches('abcd')).toBe(false);
    expect(re.matches('xab')).toBe(false);
  });

  // A backtracking engine takes seconds (2^29 steps) on this value; RE2 is linear.
  test('catastrophic-backtracking pattern answers promptly', { timeout: 2000 }, () => {
    const re = compileRegex('(a+)+b');
    expect(re.matches(`${'a'.repeat(29)}c`)).toBe(false);
    expect(re.matches(`${'a'.repeat(100_000)}c`)).toBe(false);
    expect(re.matches('aaab')).toBe(true);
  });
});

describe('validation: routes the CRDs or Envoy refuse', () => {
  const hm = (mod: string) => `  rules: [{ filters: [{ type: RequestHeaderModifier, requestHeaderModifier: ${mod} }] }]`;
  const cases: [string, string, RegExp][] = [
    ['set and remove of one name', hm('{ set: [{ name: X-A, value: "1" }], remove: [x-a] }'), /requestHeaderModifier\.remove\[0\]: header "x-a" is both set and removed/],
    ['a name twice in set', hm('{ set: [{ name: X-A, value: "1" }, { name: x-a, value: "2" }] }'), /requestHeaderModifier\.set\[1\]: header "x-a" appears twice in set/],
    ['a name twice in add', hm('{ add: [{ name: x-b, value: "1" }, { name: X-B, value: "2" }] }'), /appears twice in add/],
    ['a name twice in remove', hm('{ remove: [x-c, X-C] }'), /appears twice in remove/],
    ['CR/LF in a value', hm('{ set: [{ name: x-a, value: "a\\r\\nx-injected: 1" }] }'), /set\[0\]\.value: must not contain CR, LF or NUL/],
    ['a pseudo-header', hm('{ set: [{ name: ":path", value: /x }] }'), /must be a valid HTTP header name/],
    ['a backend filter with CR/LF', `  rules: [{ backendRefs: [{ name: web-v2, port: 80, filters: [{ type: ResponseHeaderModifier, responseHeaderModifier: { add: [{ name: x-a, value: "a\\nb" }] } }] }] }]`, /backendRefs\[0\]\.filters\[0\]\.responseHeaderModifier\.add\[0\]\.value: must not contain CR/],
    ['mirror numerator > denominator', `  rules: [{ filters: [{ type: RequestMirror, requestMirror: { backendRef: { name: web-v2, port: 80 }, fraction: { numerator: 3, denominator: 2 } } }] }]`, /fraction: numerator must be less than or equal to denominator/],
    ['mirror numerator > default denominator 100', `  rules: [{ filters: [{ type: RequestMirror, requestMirror: { backendRef: { name: web-v2, port: 80 }, fraction: { numerator: 150 } } }] }]`, /numerator must be less than or equal/],
    ['mirror denominator 0', `  rules: [{ filters: [{ type: RequestMirror, requestMirror: { backendRef: { name: web-v2, port: 80 }, fraction: { numerator: 0, denominator: 0 } } }] }]`, /denominator: must be between 1/],
    ['a space in a path', `  rules: [{ matches: [{ path: { type: Exact, value: "/a b" } }] }]`, /path\.value: must only contain valid characters/],
    ['a bad percent-escape', `  rules: [{ matches: [{ path: { value: "/a%zz" } }] }]`, /must only contain valid characters/],
    ['an encoded slash', `  rules: [{ matches: [{ path: { value: "/a%2Fb" } }] }]`, /must not contain "%2f"/],
    ['a control character in replaceFullPath', `  rules: [{ filters: [{ type: URLRewrite, urlRewrite: { path: { type: ReplaceFullPath, replaceFullPath: "/a\\r\\nb" } } }] }]`, /replaceFullPath: must only contain valid characters/],
  ];
  test.each(cases)('%s', (_name, rules, reason) => {
    const c = compileRoutes(mesh(httpRoute('bad', `${parent}\n${rules}`)));
    expect(c.routes).toEqual([]);
    expect(c.rejected.map((r) => r.route)).toEqual(['HTTPRoute/shop/bad']);
    expect(c.rejected[0].reason).toMatch(reason);
  });

  test.each([
    ['HTTPRoute', 'v1alpha2', false],
    ['HTTPRoute', 'v2', false],
    ['HTTPRoute', 'v1beta1', true],
    ['HTTPRoute', 'v1', true],
    ['GRPCRoute', 'v1alpha2', false],
    ['GRPCRoute', 'v1beta1', false],
    ['GRPCRoute', 'v1', true],
  ] as const)('%s apiVersion %s: accepted %s', (kind, version, ok) => {
    const doc = httpRoute('r', `${parent}\n  rules: [{ backendRefs: [{ name: web-v2, port: 80 }] }]`).replace('gateway.networking.k8s.io/v1', `gateway.networking.k8s.io/${version}`).replace('kind: HTTPRoute', `kind: ${kind}`);
    const c = compileRoutes(mesh(doc));
    expect(c.routes).toEqual(ok ? [`${kind}/shop/r`] : []);
    if (!ok) expect(c.rejected[0].reason).toMatch(new RegExp(`field apiVersion: apiVersion gateway.networking.k8s.io/${version} is not served for ${kind}`));
  });
});

describe('header modifiers: what Envoy never modifies, and Host', () => {
  test('connection-specific and framing headers are ignored with a warning; the rest applies', () => {
    let routes: ServicePortRoutes | undefined;
    const logged = warnings(() => {
      routes = routesOf(
        httpRoute(
          'h',
          `${parent}
  rules:
  - filters:
    - type: RequestHeaderModifier
      requestHeaderModifier: { set: [{ name: Connection, value: close }, { name: x-ok, value: "1" }], add: [{ name: content-length, value: "2" }, { name: te, value: gzip }], remove: [transfer-encoding, host, x-gone] }
    - type: ResponseHeaderModifier
      responseHeaderModifier: { set: [{ name: transfer-encoding, value: chunked }, { name: host, value: h }, { name: keep-alive, value: "1" }, { name: upgrade, value: x }, { name: proxy-connection, value: x }] }`,
        ),
      );
    });
    const rule = first(routes!, '/').rule;
    expect(rule.requestHeaders).toEqual({ set: [['x-ok', '1']], add: [], remove: ['x-gone'] });
    expect(rule.responseHeaders).toBeUndefined();
    expect(rule.requestAuthority).toBeUndefined();
    expect(logged.find((m) => m.includes('requestHeaderModifier') || m.includes('set connection'))).toMatch(/header edits ignored .*set connection, add content-length, add te, remove transfer-encoding, remove host/);
    expect(logged.some((m) => /set transfer-encoding, set host, set keep-alive, set upgrade, set proxy-connection/.test(m))).toBe(true);
  });

  test('a request Host set/add is an authority rewrite (set wins); on a backend too', () => {
    const routes = routesOf(
      httpRoute(
        'host',
        `${parent}
  rules:
  - matches: [{ path: { value: /set } }]
    filters: [{ type: RequestHeaderModifier, requestHeaderModifier: { add: [{ name: Host, value: added.example }], set: [{ name: HOST, value: set.example }] } }]
  - matches: [{ path: { value: /add } }]
    filters: [{ type: RequestHeaderModifier, requestHeaderModifier: { add: [{ name: host, value: added.example }] } }]
  - matches: [{ path: { value: /backend } }]
    backendRefs: [{ name: web-v2, port: 80, filters: [{ type: RequestHeaderModifier, requestHeaderModifier: { set: [{ name: host, value: b.example }] } }] }]`,
      ),
    );
    expect(first(routes, '/set').rule.requestAuthority).toBe('set.example');
    expect(first(routes, '/set').rule.requestHeaders).toBeUndefined();
    expect(first(routes, '/add').rule.requestAuthority).toBe('added.example');
    expect(first(routes, '/backend').rule.backends[0].requestAuthority).toBe('b.example');
  });
});

test('replacePrefixMatch "" removes the matched prefix (GW HTTPPathModifier table)', () => {
  const routes = routesOf(
    httpRoute('p', `${parent}\n  rules:\n  - matches: [{ path: { value: /foo } }]\n    filters: [{ type: URLRewrite, urlRewrite: { path: { type: ReplacePrefixMatch, replacePrefixMatch: "" } } }]`),
  );
  const m = first(routes, '/foo/bar');
  const mod = m.rule.rewrite!.path!;
  expect(mod).toEqual({ type: 'ReplacePrefixMatch', value: '' });
  expect(modifyPath(mod, m, '/foo/bar', '')).toBe('/bar');
  expect(modifyPath(mod, m, '/foo/', '')).toBe('/');
  expect(modifyPath(mod, m, '/foo', 'q=1')).toBe('/?q=1');
});

describe('warnings once per snapshot', () => {
  test('a kind of the Gateway API group that does not exist (typo) is named', () => {
    // Logged when the snapshot compiles its routes; reading them later logs nothing more.
    const logged = warnings(() => routesFor(mesh(httpRoute('typo', `${parent}\n  rules: [{}]`).replace('kind: HTTPRoute', 'kind: HttpRoute'))));
    expect(logged.filter((m) => m.includes('"HttpRoute" is not a kind of gateway.networking.k8s.io'))).toHaveLength(1);
  });

  test('parentRefs to a missing Service or to a port it lacks say Accepted=False', () => {
    const logged = warnings(() => {
      const c = compileRoutes(
        mesh(
          [
            httpRoute('nosvc', `  parentRefs: [{ group: "", kind: Service, name: nope }]\n  rules: [{}]`),
            httpRoute('noport', `  parentRefs: [{ group: "", kind: Service, name: web, port: 8443 }]\n  rules: [{}]`),
            httpRoute('nosection', `  parentRefs: [{ group: "", kind: Service, name: web, sectionName: grpc }]\n  rules: [{}]`),
          ].join('---\n'),
        ),
      );
      expect(c.routes).toHaveLength(3);
    });
    expect(logged).toContainEqual(expect.stringMatching(/parentRef Service shop\/nope not found.*Accepted=False/));
    expect(logged).toContainEqual(expect.stringMatching(/parentRef Service shop\/web has no port 8443.*Accepted=False/));
    expect(logged).toContainEqual(expect.stringMatching(/parentRef Service shop\/web has no sectionName "grpc".*Accepted=False/));
  });
});
