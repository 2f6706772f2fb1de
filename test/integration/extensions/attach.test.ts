/**
 * WaypointFilters on a running waypoint: the example tenant filter (examples/tenant-filter) loaded
 * from a path and from a package installed in a node_modules next to the mesh file, attached to
 * one Service and not another, and to one rule of an HTTPRoute only; config and module code
 * reloaded live; a module that cannot load or an invalid config refused with the last good state
 * kept. Real HBONE tunnels to plain HTTP backends. Addresses: 127.0.35.x.
 */
import fs from 'node:fs';
import { stripTypeScriptTypes } from 'node:module';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { expect, test } from 'vitest';
import { exchange } from '../../helpers/hbone-client.ts';
import { spiffe } from '../../helpers/identity.ts';
import { route, waypointFilter, type Doc } from '../../helpers/mesh.ts';
import type { Backend } from '../../helpers/recorder.ts';
import { HTTP_PORT, meshYaml, startAll, type AuthzWaypoint } from '../authz/harness.ts';

const NET = '127.0.35';
const CLIENT = spiffe('foo', 'client');
const ORDERS = `${NET}.100:80`;
const BILLING = `${NET}.101:80`;
const REPO = fileURLToPath(new URL('../../../', import.meta.url));
const EXAMPLE = path.join(REPO, 'examples/tenant-filter/index.ts');

let wp: AuthzWaypoint;
let orders: Backend;
let billing: Backend;

const apps = [
  { name: 'orders', vip: `${NET}.100`, podIp: `${NET}.11`, ports: [HTTP_PORT] },
  { name: 'billing', vip: `${NET}.101`, podIp: `${NET}.12`, ports: [HTTP_PORT] },
];

/** billing's routes: rule `admin` (/admin) and rule `rest` (everything else), both to billing. */
const billingRoutes = route('billing-routes', 'foo', {
  parentRefs: [{ group: '', kind: 'Service', name: 'billing', port: 80 }],
  rules: [
    { name: 'admin', matches: [{ path: { type: 'PathPrefix', value: '/admin' } }], backendRefs: [{ name: 'billing', port: 80 }] },
    { name: 'rest', backendRefs: [{ name: 'billing', port: 80 }] },
  ],
});

const tenants = (module: string, targetRefs: object[], config: object = { tenants: ['acme'] }) => waypointFilter('tenants', { targetRefs, module, config });
const toOrders = [{ kind: 'Service', name: 'orders' }];
const toAdminRule = [{ group: 'gateway.networking.k8s.io', kind: 'HTTPRoute', name: 'billing-routes', sectionName: 'admin' }];

const mesh = (...docs: Doc[]) => meshYaml({ apps, docs: [billingRoutes, ...docs] });

startAll(async (start) => {
  orders = await start.http(`${NET}.11`, 8080);
  billing = await start.http(`${NET}.12`, 8080);
  wp = await start.waypoint({ ip: `${NET}.1`, mesh: mesh(tenants(EXAMPLE, toOrders)) });
});

const get = (authority: string, p: string, tenant?: string) => wp.http(CLIENT, authority, { path: p, headers: tenant === undefined ? [] : [['x-tenant', tenant]] });

test('a filter attached to one Service: its requests are checked, the other Service is not', async () => {
  const denied = await get(ORDERS, '/o/1');
  expect([denied.status, denied.body]).toEqual([403, 'tenant "" is not allowed\n']);
  expect(orders.received.some((r) => r.url === '/o/1')).toBe(false);
  expect((await wp.record('/o/1')).details).toBe('tenant_not_allowed');

  const allowed = await get(ORDERS, '/o/2', 'acme');
  expect(allowed.status).toBe(200);
  expect(allowed.headers['x-tenant']).toBe('acme');
  expect(orders.received.find((r) => r.url === '/o/2')?.headers['x-tenant-verified']).toBe('acme');

  const other = await get(BILLING, '/b/1');
  expect(other.status).toBe(200);
  expect(other.headers['x-tenant']).toBeUndefined();
});

test('a filter attached to one route rule: only requests that rule routes are checked', async () => {
  expect(await wp.setMesh(mesh(tenants(EXAMPLE, toAdminRule)))).toBe(true);
  expect((await get(BILLING, '/admin/users')).status).toBe(403);
  expect(billing.received.some((r) => r.url === '/admin/users')).toBe(false);
  expect((await get(BILLING, '/admin/users2', 'acme')).status).toBe(200);
  expect((await get(BILLING, '/public')).status).toBe(200);
  // Detached from the Service it was on before.
  expect((await get(ORDERS, '/o/3')).status).toBe(200);
});

test('config reloads live; an invalid config or a module that cannot load is refused and the last good state keeps running', async () => {
  expect(await wp.setMesh(mesh(tenants(EXAMPLE, toOrders, { tenants: ['globex'] })))).toBe(true);
  expect((await get(ORDERS, '/o/4', 'acme')).status).toBe(403);
  expect((await get(ORDERS, '/o/5', 'globex')).status).toBe(200);

  expect(await wp.setMesh(mesh(tenants(EXAMPLE, toOrders, { tenants: [] })))).toBe(false);
  expect(await wp.setMesh(mesh(tenants('./no-such-filter.ts', toOrders)))).toBe(false);
  expect(await wp.setMesh(mesh(tenants(EXAMPLE, toOrders, { tenants: ['globex'] }), waypointFilter('bad', { targetRefs: toOrders, module: 'no-such-package' })))).toBe(false);
  expect((await get(ORDERS, '/o/6', 'acme')).status).toBe(403);
  expect((await get(ORDERS, '/o/7', 'globex')).status).toBe(200);
});

test('module code reloads on SIGHUP (Waypoint.reload) when the file changed, from a path relative to the mesh file', async () => {
  const file = path.join(path.dirname(wp.meshFile), 'mark.ts');
  const write = (mark: string) =>
    fs.writeFileSync(
      file,
      `import { FilterStatus } from 'node-waypoint/filter-api';
export default { create: () => ({ name: 'mark', onResponseHeaders: (_s: unknown, h: { set(n: string, v: string): void }) => h.set('x-mark', '${mark}') }) };
void FilterStatus;
`,
    );
  write('one');
  expect(await wp.setMesh(mesh(waypointFilter('mark', { targetRefs: toOrders, module: './mark.ts' })))).toBe(true);
  expect((await get(ORDERS, '/o/8')).headers['x-mark']).toBe('one');
  const before = wp.waypoint.mesh.current.version;
  // Nothing changed: the mesh is not compiled again.
  await wp.waypoint.reload();
  expect(wp.waypoint.mesh.current.version).toBe(before);
  write('two');
  await wp.waypoint.reload();
  expect(wp.waypoint.mesh.current.version).toBe(before + 1);
  expect((await get(ORDERS, '/o/9')).headers['x-mark']).toBe('two');
});

test('the example installed as a package in a node_modules next to the mesh file (JavaScript, as published)', async () => {
  const dir = path.join(path.dirname(wp.meshFile), 'node_modules');
  const pkg = path.join(dir, 'tenant-filter');
  fs.mkdirSync(pkg, { recursive: true });
  fs.writeFileSync(path.join(pkg, 'index.js'), stripTypeScriptTypes(fs.readFileSync(EXAMPLE, 'utf8')));
  fs.writeFileSync(path.join(pkg, 'package.json'), JSON.stringify({ name: 'tenant-filter', type: 'module', exports: { '.': './index.js' } }));
  // Its peer dependency, as npm would install it beside it.
  fs.symlinkSync(path.join(REPO, 'node_modules/zod'), path.join(dir, 'zod'));
  expect(await wp.setMesh(mesh(tenants('tenant-filter', toOrders, { tenants: ['initech'], header: 'x-org' })))).toBe(true);
  expect((await wp.http(CLIENT, ORDERS, { path: '/o/10', headers: [['x-org', 'initech']] })).status).toBe(200);
  expect((await wp.http(CLIENT, ORDERS, { path: '/o/11', headers: [['x-tenant', 'initech']] })).status).toBe(403);
});

test('a tunnel opened while the mesh has no WaypointFilter: filters attached later apply to its next requests, and detached ones stop', async () => {
  expect(await wp.setMesh(mesh())).toBe(true);
  const toOrdersTunnel = await wp.connect(CLIENT, ORDERS);
  const toBillingTunnel = await wp.connect(CLIENT, BILLING);
  expect([toOrdersTunnel.status, toBillingTunnel.status]).toEqual([200, 200]);
  try {
    expect((await exchange(toOrdersTunnel.stream, '/o/20')).status).toBe(200);
    expect((await exchange(toBillingTunnel.stream, '/admin/20')).status).toBe(200);
    // The same tunnels, once a filter is attached to the Service and to the route rule.
    expect(await wp.setMesh(mesh(tenants(EXAMPLE, toOrders), waypointFilter('admin-tenants', { targetRefs: toAdminRule, module: EXAMPLE, config: { tenants: ['acme'] } })))).toBe(true);
    expect((await exchange(toOrdersTunnel.stream, '/o/21')).status).toBe(403);
    expect((await exchange(toBillingTunnel.stream, '/admin/21')).status).toBe(403);
    expect((await exchange(toBillingTunnel.stream, '/public/21')).status).toBe(200);
    expect(await wp.setMesh(mesh())).toBe(true);
    expect((await exchange(toOrdersTunnel.stream, '/o/22')).status).toBe(200);
    expect((await exchange(toBillingTunnel.stream, '/admin/22')).status).toBe(200);
  } finally {
    toOrdersTunnel.stream.destroy();
    toBillingTunnel.stream.destroy();
  }
});
