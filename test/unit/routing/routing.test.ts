/**
 * Route compilation and matching (src/routing): attachment (producer/consumer, ports, waypoint
 * Gateway), Gateway API precedence, each match type, validation (invalid routes ignored with the
 * reason), backend resolution (ReferenceGrant, invalid backends), filters' pure parts (redirect
 * Location, path modifiers, header edits, shadow host) and weighted choice.
 */
import { describe, expect, test } from 'vitest';
import { HeaderList } from '../../../src/pipeline/headers.ts';
import { parseDuration } from '../../../src/routing/duration.ts';
import { applyHeaderModifier, compileRoutes, modifyPath, pickBackend, redirectLocation, selectMatch, shadowAuthority, tableFor, type CompiledMatch, type ServicePortRoutes } from '../../../src/routing/index.ts';
import { compileRegex, pathMatches } from '../../../src/routing/match.ts';
import { httpRoute, mesh, target } from './mesh.ts';

const parent = `  parentRefs: [{ group: "", kind: Service, name: web }]`;

function routesOf(extra: string, ip = '10.0.0.1', port = 80): ServicePortRoutes {
  const snap = mesh(extra);
  const r = compileRoutes(snap).forTarget(target(snap, ip, port));
  if (!r) throw new Error('no routes attached');
  return r;
}

function pick(routes: ServicePortRoutes, req: { method?: string; path: string; headers?: Record<string, string> }, clientNs = 'shop'): CompiledMatch | undefined {
  const table = tableFor(routes, clientNs, 'shop');
  if (!table) return undefined;
  const q = req.path.indexOf('?');
  return selectMatch(table, {
    method: req.method ?? 'GET',
    path: q < 0 ? req.path : req.path.slice(0, q),
    query: q < 0 ? '' : req.path.slice(q + 1),
    headers: req.headers ?? {},
  });
}

/** The backend service name a request goes to. */
function dest(routes: ServicePortRoutes, req: Parameters<typeof pick>[1], clientNs = 'shop'): string | undefined {
  const m = pick(routes, req, clientNs);
  return m ? (pickBackend(m.rule)?.backend?.service.name ?? 'INVALID') : undefined;
}

describe('durations', () => {
  test('Gateway API durations in ms; other forms refused', () => {
    expect(parseDuration('10s')).toBe(10_000);
    expect(parseDuration('1m30s')).toBe(90_000);
    expect(parseDuration('250ms')).toBe(250);
    expect(parseDuration('1h')).toBe(3_600_000);
    expect(parseDuration('0s')).toBe(0);
    for (const bad of ['1.5s', '10', '5us', '', '1s1s1s1s1s']) expect(() => parseDuration(bad)).toThrow(/Gateway API duration/);
  });
});

describe('matching', () => {
  test('PathPrefix is element-wise; trailing slash ignored; Exact is exact', () => {
    const prefix = { kind: 'PathPrefix', value: '/abc', re: undefined } as const;
    expect(pathMatches(prefix, '/abc')).toBe(true);
    expect(pathMatches(prefix, '/abc/')).toBe(true);
    expect(pathMatches(prefix, '/abc/def')).toBe(true);
    expect(pathMatches(prefix, '/abcd')).toBe(false);
    expect(pathMatches({ kind: 'Exact', value: '/abc', re: undefined }, '/abc/')).toBe(false);
  });

  test('regexes match the whole value; RE2-only features refused', () => {
    const re = compileRegex('/v[0-9]+');
    expect(re.matches('/v12')).toBe(true);
    expect(re.matches('/v12/x')).toBe(false);
    expect(() => compileRegex('(?=x)y')).toThrow(/RE2/);
    expect(() => compileRegex('(a)\\1')).toThrow(/RE2/);
    expect(() => compileRegex('([')).toThrow(/invalid regular expression/);
  });

  test('each match type: path kinds, headers (exact, regex), query params, method', () => {
    const r = routesOf(
      httpRoute(
        'm',
        `${parent}
  rules:
  - matches: [{ path: { type: Exact, value: /exact } }]
    backendRefs: [{ name: web, port: 80 }]
  - matches: [{ path: { type: RegularExpression, value: "/re/[0-9]+" } }]
    backendRefs: [{ name: web-v2, port: 80 }]
  - matches: [{ headers: [{ name: X-Canary, value: "yes" }] }]
    backendRefs: [{ name: web-v2, port: 80 }]
  - matches: [{ headers: [{ type: RegularExpression, name: x-user, value: "adm.*" }] }]
    backendRefs: [{ name: web-v2, port: 80 }]
  - matches: [{ queryParams: [{ name: v, value: "2" }] }]
    backendRefs: [{ name: web-v2, port: 80 }]
  - matches: [{ method: DELETE }]
    backendRefs: [{ name: web-v2, port: 80 }]
  - matches: [{ path: { type: PathPrefix, value: /app } }]
    backendRefs: [{ name: web, port: 80 }]`,
      ),
    );
    expect(pick(r, { path: '/exact' })?.rule.index).toBe(0);
    expect(pick(r, { path: '/exact/x' })).toBeUndefined();
    expect(pick(r, { path: '/re/42' })?.rule.index).toBe(1);
    expect(pick(r, { path: '/re/4x' })).toBeUndefined();
    expect(pick(r, { path: '/x', headers: { 'x-canary': 'yes' } })?.rule.index).toBe(2);
    expect(pick(r, { path: '/x', headers: { 'x-canary': 'YES' } })).toBeUndefined();
    expect(pick(r, { path: '/x', headers: { 'x-user': 'admin' } })?.rule.index).toBe(3);
    expect(pick(r, { path: '/x', headers: { 'x-user': 'xadmin' } })).toBeUndefined();
    expect(pick(r, { path: '/x?a=1&v=2' })?.rule.index).toBe(4);
    expect(pick(r, { path: '/x?v=3' })).toBeUndefined();
    expect(pick(r, { method: 'DELETE', path: '/x' })?.rule.index).toBe(5);
    expect(pick(r, { path: '/app/y' })?.rule.index).toBe(6);
    expect(pick(r, { path: '/apple' })).toBeUndefined();
  });

  test('precedence across rules and routes: exact > longest prefix > method > headers > query, then oldest route, then name', () => {
    const r = routesOf(
      [
        httpRoute(
          'b-newer',
          `${parent}
  rules:
  - matches: [{ path: { type: PathPrefix, value: / } }]
    backendRefs: [{ name: web, port: 80 }]
  - matches: [{ path: { type: PathPrefix, value: /a }, headers: [{ name: h, value: "1" }] }]
    backendRefs: [{ name: web, port: 80 }]
  - matches: [{ path: { type: PathPrefix, value: /a }, method: GET }]
    backendRefs: [{ name: web, port: 80 }]
  - matches: [{ path: { type: PathPrefix, value: /a/b } }]
    backendRefs: [{ name: web, port: 80 }]`,
          'shop',
          ', creationTimestamp: "2024-02-01T00:00:00Z"',
        ),
        httpRoute(
          'c-older',
          `${parent}
  rules:
  - matches: [{ path: { type: Exact, value: /a/b } }]
    backendRefs: [{ name: web-v2, port: 80 }]
  - matches: [{ path: { type: PathPrefix, value: /q }, queryParams: [{ name: x, value: "1" }] }]
    backendRefs: [{ name: web-v2, port: 80 }]
  - matches: [{ path: { type: PathPrefix, value: /q }, headers: [{ name: h, value: "1" }] }]
    backendRefs: [{ name: web-v2, port: 80 }]`,
          'shop',
          ', creationTimestamp: "2024-01-01T00:00:00Z"',
        ),
        httpRoute(
          'a-same-age',
          `${parent}
  rules:
  - matches: [{ path: { type: PathPrefix, value: /same } }]
    backendRefs: [{ name: web, port: 80 }]`,
          'shop',
          ', creationTimestamp: "2024-03-01T00:00:00Z"',
        ),
        httpRoute(
          'z-same-age',
          `${parent}
  rules:
  - matches: [{ path: { type: PathPrefix, value: /same } }]
    backendRefs: [{ name: web-v2, port: 80 }]`,
          'shop',
          ', creationTimestamp: "2024-03-01T00:00:00Z"',
        ),
        httpRoute(
          'y-oldest',
          `${parent}
  rules:
  - matches: [{ path: { type: PathPrefix, value: /old } }]
    backendRefs: [{ name: web-v2, port: 80 }]`,
          'shop',
          ', creationTimestamp: "2023-01-01T00:00:00Z"',
        ),
        httpRoute(
          'x-newest',
          `${parent}
  rules:
  - matches: [{ path: { type: PathPrefix, value: /old } }]
    backendRefs: [{ name: web, port: 80 }]`,
          'shop',
          ', creationTimestamp: "2025-01-01T00:00:00Z"',
        ),
      ].join('---\n'),
    );
    const at = (req: Parameters<typeof pick>[1]) => {
      const m = pick(r, req)!;
      return `${m.rule.route.split('/')[2]}#${m.rule.index}`;
    };
    expect(at({ path: '/a/b' })).toBe('c-older#0'); // exact beats the longer-lived prefix
    expect(at({ path: '/a/b/c' })).toBe('b-newer#3'); // longest prefix
    expect(at({ path: '/a/x', headers: { h: '1' } })).toBe('b-newer#2'); // method before headers
    expect(at({ method: 'POST', path: '/a/x', headers: { h: '1' } })).toBe('b-newer#1');
    expect(at({ path: '/q?x=1', headers: { h: '1' } })).toBe('c-older#2'); // headers before query
    expect(at({ path: '/same' })).toBe('a-same-age#0'); // same age: namespace/name
    expect(at({ path: '/old' })).toBe('y-oldest#0'); // oldest route wins
    expect(at({ path: '/zzz' })).toBe('b-newer#0');
  });
});

describe('attachment', () => {
  test('producer routes for all clients; consumer routes replace them for their namespace only', () => {
    const r = routesOf(
      [
        httpRoute('prod', `${parent}\n  rules: [{ backendRefs: [{ name: web, port: 80 }] }]`),
        httpRoute(
          'cons',
          `  parentRefs: [{ group: "", kind: Service, name: web, namespace: shop }]\n  rules: [{ backendRefs: [{ name: web-v2, namespace: shop, port: 80 }] }]`,
          'other',
        ),
        `apiVersion: gateway.networking.k8s.io/v1beta1
kind: ReferenceGrant
metadata: { name: allow-other, namespace: shop }
spec:
  from: [{ group: gateway.networking.k8s.io, kind: HTTPRoute, namespace: other }]
  to: [{ group: "", kind: Service }]
`,
      ].join('---\n'),
    );
    expect(dest(r, { path: '/' }, 'shop')).toBe('web');
    expect(dest(r, { path: '/' }, 'third')).toBe('web');
    expect(dest(r, { path: '/' }, 'other')).toBe('web-v2');
  });

  test('only consumer routes: other clients keep the default route', () => {
    const r = routesOf(httpRoute('cons', `  parentRefs: [{ group: "", kind: Service, name: web, namespace: shop }]\n  rules: [{ backendRefs: [{ name: api, port: 9090 }] }]`, 'other'));
    expect(tableFor(r, 'shop', 'shop')).toBeUndefined();
    expect(dest(r, { path: '/' }, 'other')).toBe('api');
  });

  test('parentRef port limits the route to that port; the waypoint Gateway and unserved services attach nothing', () => {
    const snap = mesh(
      [
        httpRoute('p', `  parentRefs: [{ group: "", kind: Service, name: web, port: 8080 }]\n  rules: [{ backendRefs: [{ name: web-v2, port: 80 }] }]`),
        httpRoute('gw', `  parentRefs: [{ name: waypoint }]\n  rules: [{ backendRefs: [{ name: web-v2, port: 80 }] }]`),
        httpRoute('unserved', `  parentRefs: [{ group: "", kind: Service, name: api }]\n  rules: [{ backendRefs: [{ name: api, port: 9090 }] }]`, 'other'),
      ].join('---\n'),
    );
    const c = compileRoutes(snap);
    expect(c.forTarget(target(snap, '10.0.0.1', 8080))).toBeDefined();
    expect(c.forTarget(target(snap, '10.0.0.1', 80))).toBeUndefined();
    expect(c.forTarget(target(snap, '10.0.0.2', 80))).toBeUndefined();
    expect(c.routes).toHaveLength(3);
  });
});

describe('validation: invalid routes are ignored with the reason', () => {
  const cases: [string, string, RegExp][] = [
    ['bad path', `  rules: [{ matches: [{ path: { type: Exact, value: "no-slash" } }] }]`, /spec\.rules\[0\]\.matches\[0\]\.path\.value: must be an absolute path/],
    ['bad regex', `  rules: [{ matches: [{ path: { type: RegularExpression, value: "([" } }] }]`, /invalid regular expression/],
    ['bad method', `  rules: [{ matches: [{ method: FETCH }] }]`, /method: must be one of GET/],
    ['redirect + rewrite', `  rules: [{ filters: [{ type: RequestRedirect, requestRedirect: { hostname: a.b } }, { type: URLRewrite, urlRewrite: { hostname: c.d } }] }]`, /not both/],
    ['repeated header filter', `  rules: [{ filters: [{ type: RequestHeaderModifier, requestHeaderModifier: {} }, { type: RequestHeaderModifier, requestHeaderModifier: {} }] }]`, /cannot be repeated/],
    ['missing filter field', `  rules: [{ filters: [{ type: URLRewrite }] }]`, /filter\.urlRewrite must be specified/],
    ['prefix rewrite with exact match', `  rules: [{ matches: [{ path: { type: Exact, value: /a } }], filters: [{ type: URLRewrite, urlRewrite: { path: { type: ReplacePrefixMatch, replacePrefixMatch: /b } } }] }]`, /exactly one PathPrefix match/],
    ['bad duration', `  rules: [{ timeouts: { request: 1.5s } }]`, /timeouts\.request: must be a Gateway API duration/],
    ['backendRequest > request', `  rules: [{ timeouts: { request: 1s, backendRequest: 2s } }]`, /cannot be longer than request/],
    ['bad status', `  rules: [{ filters: [{ type: RequestRedirect, requestRedirect: { statusCode: 304 } }] }]`, /statusCode: must be one of 301/],
  ];
  test.each(cases)('%s', (_name, rules, reason) => {
    const c = compileRoutes(mesh(httpRoute('bad', `${parent}\n${rules}`)));
    expect(c.routes).toEqual([]);
    expect(c.rejected).toHaveLength(1);
    expect(c.rejected[0].route).toBe('HTTPRoute/shop/bad');
    expect(c.rejected[0].reason).toMatch(/HTTPRoute\/shop\/bad: field spec/);
    // File and line of the field in the mesh text: the `rules:` line of the route (line 39).
    expect(c.rejected[0].reason).toMatch(/^<inline>:39: document 5: /);
    expect(c.rejected[0].reason).toMatch(reason);
  });

  test('an invalid route does not stop the valid ones', () => {
    const snap = mesh([httpRoute('bad', `${parent}\n  rules: [{ matches: [{ method: FETCH }] }]`), httpRoute('good', `${parent}\n  rules: [{ backendRefs: [{ name: web-v2, port: 80 }] }]`)].join('---\n'));
    const c = compileRoutes(snap);
    expect(c.routes).toEqual(['HTTPRoute/shop/good']);
    expect(c.forTarget(target(snap))).toBeDefined();
  });

  test('unsupported filters and invalid backends do not invalidate the route: the rule or the share answers 500', () => {
    const r = routesOf(
      httpRoute(
        'partial',
        `${parent}
  rules:
  - matches: [{ path: { value: /ext } }]
    filters: [{ type: ExtensionRef, extensionRef: { group: x.io, kind: Thing, name: t } }]
    backendRefs: [{ name: web, port: 80 }]
  - matches: [{ path: { value: /missing } }]
    backendRefs: [{ name: nope, port: 80 }]
  - matches: [{ path: { value: /xns } }]
    backendRefs: [{ name: api, namespace: other, port: 9090 }]
  - matches: [{ path: { value: /badport } }]
    backendRefs: [{ name: web, port: 81 }]
  - matches: [{ path: { value: /noport } }]
    backendRefs: [{ name: web }]
  - matches: [{ path: { value: /zero } }]
    backendRefs: [{ name: web, port: 80, weight: 0 }]`,
      ),
    );
    expect(pick(r, { path: '/ext' })!.rule.filterError).toMatch(/ExtensionRef/);
    expect(pickBackend(pick(r, { path: '/missing' })!.rule)!.invalid).toMatch(/Service shop\/nope not found/);
    expect(pickBackend(pick(r, { path: '/xns' })!.rule)!.invalid).toMatch(/no ReferenceGrant in other/);
    expect(pickBackend(pick(r, { path: '/badport' })!.rule)!.invalid).toMatch(/has no port 81/);
    expect(pickBackend(pick(r, { path: '/noport' })!.rule)!.invalid).toMatch(/port is required/);
    expect(pickBackend(pick(r, { path: '/zero' })!.rule)).toBeUndefined();
  });
});

describe('backends', () => {
  test('cluster names: inbound-vip for services this waypoint serves, outbound otherwise', () => {
    const r = routesOf(
      [
        httpRoute(
          'c',
          `${parent}
  rules:
  - matches: [{ path: { value: /in } }]
    backendRefs: [{ name: web-v2, port: 80 }]
  - matches: [{ path: { value: /out } }]
    backendRefs: [{ name: api, namespace: other, port: 9090 }]`,
        ),
        `apiVersion: gateway.networking.k8s.io/v1beta1
kind: ReferenceGrant
metadata: { name: g, namespace: other }
spec:
  from: [{ group: gateway.networking.k8s.io, kind: HTTPRoute, namespace: shop }]
  to: [{ group: "", kind: Service, name: api }]
`,
      ].join('---\n'),
    );
    expect(pickBackend(pick(r, { path: '/in' })!.rule)!.backend!.cluster).toBe('inbound-vip|80|http|web-v2.shop.svc.cluster.local');
    expect(pickBackend(pick(r, { path: '/out' })!.rule)!.backend!.cluster).toBe('outbound|9090||api.other.svc.cluster.local');
  });

  test('weighted choice follows the weights', () => {
    const r = routesOf(httpRoute('w', `${parent}\n  rules: [{ backendRefs: [{ name: web, port: 80, weight: 80 }, { name: web-v2, port: 80, weight: 20 }] }]`));
    const rule = pick(r, { path: '/' })!.rule;
    expect(pickBackend(rule, 0)!.backend!.service.name).toBe('web');
    expect(pickBackend(rule, 0.79)!.backend!.service.name).toBe('web');
    expect(pickBackend(rule, 0.8)!.backend!.service.name).toBe('web-v2');
    expect(pickBackend(rule, 0.999)!.backend!.service.name).toBe('web-v2');
  });
});

describe('GRPCRoute', () => {
  test('service/method matches become paths: exact, service prefix, method-only and regex', () => {
    const r = routesOf(
      `apiVersion: gateway.networking.k8s.io/v1
kind: GRPCRoute
metadata: { name: g, namespace: shop }
spec:
  parentRefs: [{ group: "", kind: Service, name: web }]
  rules:
  - matches: [{ method: { service: pkg.Echo, method: Say } }]
    backendRefs: [{ name: web, port: 80 }]
  - matches: [{ method: { service: pkg.Echo } }]
    backendRefs: [{ name: web-v2, port: 80 }]
  - matches: [{ method: { method: Ping } }]
    backendRefs: [{ name: web-v2, port: 80 }]
  - matches: [{ method: { type: RegularExpression, service: "pkg\\\\.Other.*" } }]
    backendRefs: [{ name: web-v2, port: 80 }]
`,
    );
    expect(pick(r, { method: 'POST', path: '/pkg.Echo/Say' })!.rule.index).toBe(0);
    expect(pick(r, { method: 'POST', path: '/pkg.Echo/Other' })!.rule.index).toBe(1);
    expect(pick(r, { method: 'POST', path: '/x.Y/Ping' })!.rule.index).toBe(2);
    expect(pick(r, { method: 'POST', path: '/pkg.OtherThing/Z' })!.rule.index).toBe(3);
    expect(pick(r, { method: 'POST', path: '/x.Y/Z' })).toBeUndefined();
  });
});

describe('filters', () => {
  const prefixMatch = { path: { kind: 'PathPrefix', value: '/foo', re: undefined } } as unknown as CompiledMatch;
  const rootMatch = { path: { kind: 'PathPrefix', value: '', re: undefined } } as unknown as CompiledMatch;

  test('ReplacePrefixMatch per the spec table; ReplaceFullPath; the query is kept', () => {
    const p = (value: string, path: string, m = prefixMatch, query = '') => modifyPath({ type: 'ReplacePrefixMatch', value }, m, path, query);
    expect(p('/xyz', '/foo/bar')).toBe('/xyz/bar');
    expect(p('/xyz/', '/foo/bar')).toBe('/xyz/bar');
    expect(p('/xyz', '/foo')).toBe('/xyz');
    expect(p('/xyz', '/foo/')).toBe('/xyz/');
    expect(p('/', '/foo/bar')).toBe('/bar');
    expect(p('/', '/foo')).toBe('/');
    expect(p('/xyz', '/foo', rootMatch)).toBe('/xyz/foo');
    expect(p('/xyz', '/foo/bar', prefixMatch, 'a=1')).toBe('/xyz/bar?a=1');
    expect(modifyPath({ type: 'ReplaceFullPath', value: '/new' }, prefixMatch, '/foo/bar', 'a=1')).toBe('/new?a=1');
  });

  test('redirect Location: scheme, host, port rules, path', () => {
    const req = { authority: 'web.shop:80', path: '/foo/bar', query: 'q=1', listenerPort: 80 };
    const base = { scheme: undefined, hostname: undefined, port: undefined, path: undefined, statusCode: 302 };
    expect(redirectLocation({ ...base, hostname: 'new.example' }, prefixMatch, req)).toBe('http://new.example/foo/bar?q=1');
    expect(redirectLocation({ ...base, scheme: 'https' }, prefixMatch, req)).toBe('https://web.shop/foo/bar?q=1');
    expect(redirectLocation({ ...base, port: 8443, scheme: 'https' }, prefixMatch, req)).toBe('https://web.shop:8443/foo/bar?q=1');
    expect(redirectLocation(base, prefixMatch, { ...req, listenerPort: 8080 })).toBe('http://web.shop:8080/foo/bar?q=1');
    expect(redirectLocation({ ...base, path: { type: 'ReplacePrefixMatch', value: '/v2' } }, prefixMatch, req)).toBe('http://web.shop/v2/bar?q=1');
  });

  test('header modifier: remove, then set, then add (case-insensitive names)', () => {
    const h = new HeaderList(['X-A', '1', 'x-b', '2', 'X-Keep', 'k']);
    applyHeaderModifier(h, { remove: ['x-a'], set: [['x-b', 'set']], add: [['x-c', 'added'], ['x-keep', 'more']] });
    expect(h.raw).toEqual(['X-Keep', 'k', 'x-b', 'set', 'x-c', 'added', 'x-keep', 'more']);
  });

  test('mirror host gets -shadow before the port', () => {
    expect(shadowAuthority('web.shop:80')).toBe('web.shop-shadow:80');
    expect(shadowAuthority('web.shop')).toBe('web.shop-shadow');
  });
});
