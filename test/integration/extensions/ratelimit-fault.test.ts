/**
 * The built-in `istio.local_ratelimit` and `istio.fault` attached by WaypointFilters on a running
 * waypoint: bounded bursts against token buckets (the default one, a fixed descriptor and per-value
 * descriptors), one set of buckets per attachment, the 429 with Envoy's headers, flag `RL` and the
 * `envoy_http_local_rate_limit_*` counters; faults injected at their configured percentage
 * (binomial bound), only on the HTTPRoute rule whose `ExtensionRef` names them, delays with `DI`,
 * aborts with `FI`. Real HBONE tunnels to plain HTTP backends. Addresses: 127.0.37.x.
 */
import { expect, test } from 'vitest';
import { spiffe } from '../../helpers/identity.ts';
import { route, waypointFilter } from '../../helpers/mesh.ts';
import { samplesOf, scrape } from '../../helpers/prometheus.ts';
import type { Backend } from '../../helpers/recorder.ts';
import { HTTP_PORT, meshYaml, startAll, type AuthzWaypoint } from '../authz/harness.ts';

const NET = '127.0.37';
const CLIENT = spiffe('foo', 'client');
const API = `${NET}.100:80`;
const API2 = `${NET}.101:80`;
const SHOP = `${NET}.102:80`;
const SLOW = `${NET}.103:80`;
const HOUR = '1h';

const apps = [
  { name: 'api', vip: `${NET}.100`, podIp: `${NET}.11`, ports: [HTTP_PORT] },
  { name: 'api2', vip: `${NET}.101`, app: 'api', ports: [HTTP_PORT] },
  { name: 'shop', vip: `${NET}.102`, app: 'api', ports: [HTTP_PORT] },
  { name: 'slow', vip: `${NET}.103`, app: 'api', ports: [HTTP_PORT] },
];

/** Buckets that never refill during the test: a burst of N gets exactly the tokens there are. */
const limit = waypointFilter('limit', {
  targetRefs: [
    { kind: 'Service', name: 'api' },
    { kind: 'Service', name: 'api2' },
  ],
  filter: 'istio.local_ratelimit',
  config: {
    statPrefix: 'api_limit',
    tokenBucket: { maxTokens: 4, tokensPerFill: 4, fillInterval: HOUR },
    enableXRatelimitHeaders: 'DRAFT_VERSION_03',
    responseHeadersToAdd: [{ name: 'retry-after', value: '3600' }],
    alwaysConsumeDefaultTokenBucket: false,
    rateLimits: [{ actions: [{ requestHeaders: { headerName: 'x-tenant', descriptorKey: 'tenant' } }] }],
    descriptors: [
      { entries: [{ key: 'tenant', value: 'gold' }], tokenBucket: { maxTokens: 6, tokensPerFill: 6, fillInterval: HOUR } },
      { entries: [{ key: 'tenant' }], tokenBucket: { maxTokens: 2, tokensPerFill: 2, fillInterval: HOUR } },
    ],
  },
});

const ABORT_PERCENT = 30;
const faults = waypointFilter('faults', { filter: 'istio.fault', config: { abort: { httpStatus: 503, percentage: { value: ABORT_PERCENT } } } });
const grpcAbort = waypointFilter('grpc-abort', { filter: 'istio.fault', config: { abort: { grpcStatus: 'UNAVAILABLE' } } });
const extensionRef = (name: string) => ({ type: 'ExtensionRef', extensionRef: { group: 'extensions.node-waypoint.dev', kind: 'WaypointFilter', name } });
const shopRoutes = route('shop-routes', 'foo', {
  parentRefs: [{ group: '', kind: 'Service', name: 'shop', port: 80 }],
  rules: [
    { matches: [{ path: { type: 'PathPrefix', value: '/checkout' } }], filters: [extensionRef('faults')], backendRefs: [{ name: 'shop', port: 80 }] },
    { matches: [{ path: { type: 'PathPrefix', value: '/grpc-abort' } }], filters: [extensionRef('grpc-abort')], backendRefs: [{ name: 'shop', port: 80 }] },
    { matches: [{ path: { type: 'PathPrefix', value: '/gone' } }], filters: [extensionRef('no-such-filter')], backendRefs: [{ name: 'shop', port: 80 }] },
    { backendRefs: [{ name: 'shop', port: 80 }] },
  ],
});
const DELAY_MS = 150;
const delay = waypointFilter('delay', { targetRefs: [{ kind: 'Service', name: 'slow' }], filter: 'istio.fault', config: { delay: { fixedDelay: `${DELAY_MS}ms`, percentage: 100 } } });

let wp: AuthzWaypoint;
let backend: Backend;

startAll(async (start) => {
  backend = await start.http(`${NET}.11`, 8080);
  wp = await start.waypoint({ ip: `${NET}.1`, mesh: meshYaml({ apps, docs: [limit, faults, grpcAbort, shopRoutes, delay] }) });
});

/** `n` requests one after another; the status of each. */
async function burst(authority: string, n: number, tag: string, headers: [string, string][] = []): Promise<number[]> {
  const out: number[] = [];
  for (let i = 0; i < n; i++) out.push((await wp.http(CLIENT, authority, { path: `/${tag}/${i}`, headers })).status);
  return out;
}
const count = (statuses: number[], status: number) => statuses.filter((s) => s === status).length;

test('a bounded burst gets exactly the tokens of its bucket: default, fixed descriptor, one bucket per descriptor value', async () => {
  const none = await burst(API, 10, 'none');
  expect(count(none, 200)).toBe(4);
  expect(count(none, 429)).toBe(6);
  expect(none.slice(0, 4)).toEqual([200, 200, 200, 200]);
  expect(count(await burst(API, 10, 'gold', [['x-tenant', 'gold']]), 200)).toBe(6);
  expect(count(await burst(API, 10, 'a', [['x-tenant', 'a']]), 200)).toBe(2);
  expect(count(await burst(API, 10, 'b', [['x-tenant', 'b']]), 200)).toBe(2);
  // A second attachment of the same WaypointFilter has buckets of its own.
  expect(count(await burst(API2, 10, 'api2'), 200)).toBe(4);
});

test('a limited request: 429 local_rate_limited, flag RL, x-ratelimit-* and the configured headers; counters as Envoy names them', async () => {
  const r = await wp.http(CLIENT, API, { path: '/limited' });
  expect([r.status, r.body]).toEqual([429, 'local_rate_limited']);
  expect(r.headers['x-ratelimit-limit']).toBe('4');
  expect(r.headers['x-ratelimit-remaining']).toBe('0');
  expect(Number(r.headers['x-ratelimit-reset'])).toBeGreaterThan(3500);
  expect(r.headers['retry-after']).toBe('3600');
  const rec = await wp.record('/limited');
  expect([rec.flags, rec.details]).toEqual(['RL', 'local_rate_limited']);
  expect(backend.received.some((q) => q.url === '/limited')).toBe(false);

  const samples = samplesOf(await scrape(wp.waypoint.addresses.admin), 'envoy_http_local_rate_limit_');
  const value = (stat: string) => samples.find((s) => s.name === `envoy_http_local_rate_limit_${stat}` && s.labels.envoy_local_http_ratelimit_prefix === 'api_limit')?.value;
  // 51 requests checked: 18 allowed (4 + 6 + 2 + 2 + 4), 33 limited and refused.
  expect([value('enabled'), value('ok'), value('rate_limited'), value('enforced')]).toEqual([51, 18, 33, 33]);
});

test('abort at its percentage, only on the route rule whose ExtensionRef names the WaypointFilter', async () => {
  const n = 300;
  const statuses = await burst(SHOP, n, 'checkout');
  const aborted = count(statuses, 503);
  expect(aborted + count(statuses, 200)).toBe(n);
  // Binomial(300, 0.3): mean 90, standard deviation ≈ 7.9; ±5 deviations.
  expect(aborted).toBeGreaterThanOrEqual(50);
  expect(aborted).toBeLessThanOrEqual(130);
  const flags = wp.rec.streams.filter((s) => s.path.startsWith('/checkout/'));
  expect(flags.filter((s) => s.code === 503).every((s) => s.flags === 'FI' && s.details === 'fault_filter_abort')).toBe(true);
  expect(count(await burst(SHOP, 50, 'other'), 200)).toBe(50);
});

test('a gRPC-status abort answers 200 with the text (non-gRPC request, as Envoy); an ExtensionRef to nothing answers 500', async () => {
  const r = await wp.http(CLIENT, SHOP, { path: '/grpc-abort' });
  expect([r.status, r.body]).toEqual([200, 'fault filter abort']);
  expect((await wp.record('/grpc-abort')).flags).toBe('FI');
  const gone = await wp.http(CLIENT, SHOP, { path: '/gone' });
  expect(gone.status).toBe(500);
  expect((await wp.record('/gone')).details).toBe('route_filter_not_found{WaypointFilter/foo/no-such-filter}');
});

test('a delay holds the request for fixedDelay, flag DI, then it goes upstream', async () => {
  const started = performance.now();
  const r = await wp.http(CLIENT, SLOW, { path: '/delayed' });
  expect(r.status).toBe(200);
  expect(performance.now() - started).toBeGreaterThanOrEqual(DELAY_MS - 5);
  expect((await wp.record('/delayed')).flags).toBe('DI');
});
