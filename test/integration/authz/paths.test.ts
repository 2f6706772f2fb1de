/**
 * Path normalization before authorization, end to end (istio/istio#27409, CVE-2019-9901): DENY `/admin`
 * and `/admin/*`, everything else allowed. Each variant is sent raw over HTTP/1.1 through the
 * waypoint; the test asserts the status and the exact target the backend received, which is the
 * normalized path the policy matched (query kept), under each MeshConfig `pathNormalization` mode.
 *
 * Case: Istio matches paths case-sensitively, so `/ADMIN` is not `/admin` and is let through (as
 * `/ADMIN`); whether the application treats it as its admin page is the application's business,
 * which is why Istio recommends ALLOW lists over DENY lists for paths. Path parameters (`;x=1`)
 * are not special to Envoy's normalization either: `/admin;x=1` is allowed as is.
 * Addresses: 127.0.152.x.
 */
import { describe, expect, test } from 'vitest';
import { spiffe } from '../../helpers/identity.ts';
import type { Backend } from '../../helpers/recorder.ts';
import { HTTP_PORT, meshYaml, servicePolicy, startAll, type AuthzWaypoint } from './harness.ts';

const NET = '127.0.152';
const CLIENT = spiffe('foo', 'client');
const SVC = `${NET}.100:80`;

const mesh = (normalization?: string) =>
  meshYaml({
    meshConfig: `trustDomain: cluster.local\n${normalization ? `pathNormalization: { normalization: ${normalization} }\n` : ''}`,
    apps: [{ name: 'app', vip: `${NET}.100`, podIp: `${NET}.11`, ports: [HTTP_PORT] }],
    docs: [servicePolicy('deny-admin', 'app', 'action: DENY\nrules: [{ to: [{ operation: { paths: ["/admin", "/admin/*"] } }] }]')],
  });

let wp: AuthzWaypoint;
let backend: Backend;

startAll(async (start) => {
  backend = await start.http(`${NET}.11`, 8080);
  wp = await start.waypoint({ ip: `${NET}.1`, mesh: mesh() });
});

/** Send `target` raw; the status, and what the backend received for it (undefined: nothing). */
async function send(target: string, marker: string): Promise<{ status: number; received: string | undefined }> {
  const before = backend.received.length;
  const r = await wp.http(CLIENT, SVC, { path: target, headers: [['x-marker', marker]] });
  const got = backend.received.slice(before).find((q) => q.headers['x-marker'] === marker);
  return { status: r.status, received: got?.url };
}

/** [sent, expected status, what the backend receives (undefined when denied)]. */
type Row = readonly [string, number, string | undefined];

const BASE_ROWS: readonly Row[] = [
  ['/admin', 403, undefined],
  ['/admin/users', 403, undefined],
  ['/admin;x=1', 200, '/admin;x=1'],
  ['/public/../admin', 403, undefined],
  ['/./admin', 403, undefined],
  ['//admin', 200, '//admin'],
  ['/admin%2fsecret', 200, '/admin%2fsecret'],
  ['/%61dmin', 403, undefined],
  ['/%2e%2e/admin', 403, undefined],
  ['/admin/..;/admin', 403, undefined],
  ['/admin%00', 400, undefined],
  ['/admin?x=1', 403, undefined],
  ['/ADMIN', 200, '/ADMIN'],
  ['/public/../docs/./a?q=/admin', 200, '/docs/a?q=/admin'],
  ['/public/%2E%2E/%64ocs', 200, '/docs'],
  ['/a\\b', 200, '/a/b'],
];

describe('BASE (Istio’s default)', () => {
  for (const [sent, status, received] of BASE_ROWS) {
    test(`${sent} → ${status}${received ? `, backend receives ${received}` : ''}`, async () => {
      const r = await send(sent, `base ${sent}`);
      expect(r).toEqual({ status, received });
    });
  }

  test('the access log path and the record are the normalized ones; a malformed path is path_normalization_failed', async () => {
    await send('/public/../x?y=1', 'log');
    // The connection manager normalized `:path` before any filter: the recorder saw only the normalized one.
    const rec = await wp.record('/x?y=1');
    expect([rec.path, rec.forwardPath]).toEqual(['/x?y=1', undefined]);
    await send('/x%00', 'nul');
    const bad = await wp.record('/x%00');
    expect(bad).toMatchObject({ code: 400, flags: '-', details: 'path_normalization_failed' });
  });
});

describe('MERGE_SLASHES and DECODE_AND_MERGE_SLASHES', () => {
  test('MERGE_SLASHES: //admin is /admin', async () => {
    expect(await wp.setMesh(mesh('MERGE_SLASHES'))).toBe(true);
    expect(await send('//admin', 'merge //admin')).toEqual({ status: 403, received: undefined });
    expect(await send('//docs//a', 'merge //docs')).toEqual({ status: 200, received: '/docs/a' });
    expect(await send('/admin%2fsecret', 'merge %2f')).toEqual({ status: 200, received: '/admin%2fsecret' });
  });

  test('DECODE_AND_MERGE_SLASHES: %2F and %5C are decoded first', async () => {
    expect(await wp.setMesh(mesh('DECODE_AND_MERGE_SLASHES'))).toBe(true);
    expect(await send('/admin%2fsecret', 'decode %2f')).toEqual({ status: 403, received: undefined });
    expect(await send('/admin%5Csecret', 'decode %5c')).toEqual({ status: 403, received: undefined });
    expect(await send('/docs%2F%2Fa', 'decode docs')).toEqual({ status: 200, received: '/docs/a' });
  });

  test('NONE: forwarded as received, matched as received', async () => {
    expect(await wp.setMesh(mesh('NONE'))).toBe(true);
    expect(await send('/public/../admin', 'none ..')).toEqual({ status: 200, received: '/public/../admin' });
    expect(await send('/admin?x=1', 'none query')).toEqual({ status: 403, received: undefined });
    expect(await wp.setMesh(mesh())).toBe(true);
  });
});
