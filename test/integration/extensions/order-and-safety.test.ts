/**
 * Where WaypointFilters run and what a misbehaving one can do: phases and priorities around
 * `istio.authz` and `istio.stats` (an AuthorizationPolicy sees exactly the marks of the AUTHN and
 * AUTHZ phases), and a module filter that throws, rejects, or never finishes: 500 `FILTER_ERROR`,
 * 504 `FILTER_TIMEOUT` at the deadline, a failing tunnel phase refused, while other requests and
 * services go on. Real HBONE tunnels to a plain HTTP backend. Addresses: 127.0.36.x.
 */
import fs from 'node:fs';
import path from 'node:path';
import { expect, test } from 'vitest';
import { FilterStatus, type FilterFactory } from '../../../src/pipeline/index.ts';
import { spiffe } from '../../helpers/identity.ts';
import { waypointFilter } from '../../helpers/mesh.ts';
import { RECORDER, type Backend } from '../../helpers/recorder.ts';
import { HTTP_PORT, meshYaml, servicePolicy, startAll, type AuthzWaypoint } from '../authz/harness.ts';

const NET = '127.0.36';
const CLIENT = spiffe('foo', 'client');
const CATALOG = `${NET}.100:80`;
const FLAKY = `${NET}.101:80`;
const TIMEOUT_MS = 300;

/** `test.mark`: appends its `config.mark` to the request's `x-order` header. */
const mark: FilterFactory<unknown> = {
  name: 'test.mark',
  parseConfig: (raw) => String((raw as { mark: string }).mark),
  create: (m) => ({
    name: 'test.mark',
    onRequestHeaders(stream) {
      const was = stream.requestHeaders.get('x-order');
      stream.requestHeaders.set('x-order', was ? `${was},${String(m)}` : String(m));
      return FilterStatus.Continue;
    },
  }),
};

const marker = (name: string, phase: string | undefined, priority: number | undefined) =>
  waypointFilter(name, { targetRefs: [{ kind: 'Service', name: 'catalog' }], filter: 'test.mark', phase, priority, config: { mark: name } });

/** A module filter that misbehaves on purpose, by path. */
const FLAKY_MODULE = `import { FilterStatus } from 'node-waypoint/filter-api';
export default {
  create: () => ({
    name: 'flaky',
    onConnection(conn) {
      if (conn.info.peer.uri.endsWith('/sa/refused')) throw new Error('no tunnel for you');
      return FilterStatus.Continue;
    },
    onRequestHeaders(stream) {
      if (stream.path === '/throw') throw new Error('boom');
      if (stream.path === '/reject') return Promise.reject(new Error('async boom'));
      if (stream.path === '/hang') return new Promise(() => {});
      if (stream.path === '/late') return new Promise((r) => setTimeout(() => r(FilterStatus.Continue), 50));
      return FilterStatus.Continue;
    },
    onResponseHeaders(stream) {
      if (stream.path === '/throw-response') throw new Error('response boom');
    },
    onStreamComplete() {
      throw new Error('completion boom');
    },
  }),
};
`;

let wp: AuthzWaypoint;
let backend: Backend;

const apps = [
  { name: 'catalog', vip: `${NET}.100`, podIp: `${NET}.11`, ports: [HTTP_PORT] },
  { name: 'flaky', vip: `${NET}.101`, app: 'catalog', ports: [HTTP_PORT] },
];

/**
 * Five marks on catalog in scrambled order, and a policy allowing catalog only when, at the time
 * `istio.authz` runs, the marks are exactly those of the AUTHN and AUTHZ phases in order.
 */
const ordered = [
  marker('m-default', undefined, undefined),
  marker('m-stats', 'STATS', 5),
  marker('m-authz-lo', 'AUTHZ', 1),
  marker('m-authz-hi', 'AUTHZ', 10),
  marker('m-authn', 'AUTHN', undefined),
  servicePolicy('at-authz', 'catalog', { action: 'ALLOW', rules: [{ when: [{ key: 'request.headers[x-order]', values: ['m-authn,m-authz-hi,m-authz-lo'] }] }] }),
];
const flaky = waypointFilter('flaky', { targetRefs: [{ kind: 'Service', name: 'flaky' }], module: './flaky.ts' });

startAll(async (start) => {
  backend = await start.http(`${NET}.11`, 8080);
  wp = await start.waypoint({
    ip: `${NET}.1`,
    mesh: meshYaml({ apps, docs: ordered }),
    filters: [{ name: 'istio.peer_metadata' }, { name: 'istio.authz' }, { name: 'istio.stats' }, { name: RECORDER }, { name: 'envoy.filters.http.router' }],
    extraFilters: [mark],
    bootstrap: { extensions: { phaseTimeoutMs: TIMEOUT_MS } },
  });
  fs.writeFileSync(path.join(path.dirname(wp.meshFile), 'flaky.ts'), FLAKY_MODULE);
  if (!(await wp.setMesh(meshYaml({ apps, docs: [...ordered, flaky] })))) throw new Error('the flaky filter was refused');
});

test('phases in order (AUTHN, AUTHZ by priority, STATS, unset), istio.authz between AUTHZ and STATS', async () => {
  const r = await wp.http(CLIENT, CATALOG, { path: '/ordered' });
  expect(r.status).toBe(200);
  expect(backend.received.find((q) => q.url === '/ordered')?.headers['x-order']).toBe('m-authn,m-authz-hi,m-authz-lo,m-stats,m-default');
  expect((await wp.record('/ordered')).result?.decision).toBe('ALLOW');
});

test('a filter that throws or rejects answers 500 FILTER_ERROR; other requests are unaffected', async () => {
  for (const p of ['/throw', '/reject']) {
    const r = await wp.http(CLIENT, FLAKY, { path: p });
    expect([r.status, r.body]).toEqual([500, 'filter failed']);
    const rec = await wp.record(p);
    expect([rec.flags, rec.details]).toEqual(['FILTER_ERROR', 'filter_failed{WaypointFilter/foo/flaky}']);
  }
  expect(backend.received.some((q) => q.url === '/throw' || q.url === '/reject')).toBe(false);
  // A response-header or completion hook that throws is logged; the answer goes out as it was.
  const ok = await wp.http(CLIENT, FLAKY, { path: '/throw-response' });
  expect(ok.status).toBe(200);
  expect((await wp.http(CLIENT, CATALOG, { path: '/still-fine' })).status).toBe(200);
});

test('an asynchronous phase past its deadline answers 504 FILTER_TIMEOUT; one within it goes on', async () => {
  const started = performance.now();
  const r = await wp.http(CLIENT, FLAKY, { path: '/hang' });
  expect([r.status, r.body]).toEqual([504, 'filter timed out']);
  expect(performance.now() - started).toBeGreaterThanOrEqual(TIMEOUT_MS - 5);
  const rec = await wp.record('/hang');
  expect([rec.flags, rec.details]).toEqual(['FILTER_TIMEOUT', 'filter_timeout{WaypointFilter/foo/flaky}']);
  expect((await wp.http(CLIENT, FLAKY, { path: '/late' })).status).toBe(200);
});

test('a tunnel phase that throws refuses that tunnel only', async () => {
  const refused = await wp.connect(spiffe('foo', 'refused'), FLAKY);
  expect([refused.status, refused.body]).toEqual([500, 'filter_failed{WaypointFilter/foo/flaky}']);
  expect((await wp.http(CLIENT, FLAKY, { path: '/after-refusal' })).status).toBe(200);
});
