/**
 * A filter reading `stream.path` sees the normalized path, whatever else is in the chain: Envoy's
 * HTTP connection manager normalizes `:path` (per MeshConfig `pathNormalization`, BASE by default)
 * before the first filter runs, so a filter denying `/secret` cannot be bypassed with `/./secret`,
 * `/a/../secret` or `/%73ecret` (istio/istio#27409, CVE-2019-9901). Checked with and without
 * `istio.authz` in the chain, through real HBONE tunnels; the backend and the access-log record
 * see the normalized path too. Addresses: 127.0.185.x, 127.0.186.x.
 */
import { describe, expect, test } from 'vitest';
import { FilterStatus, ResponseFlag, sendLocalReply, type FilterFactory } from '../../../src/pipeline/index.ts';
import { spiffe } from '../../helpers/identity.ts';
import type { Backend } from '../../helpers/recorder.ts';
import { RECORDER } from '../../helpers/recorder.ts';
import { HTTP_PORT, meshYaml, startAll, type AuthzWaypoint } from './harness.ts';

const CLIENT = spiffe('foo', 'client');
const DENY_SECRET = 'test.deny-secret';

/** A third-party filter as filters/README.md describes one: it decides on `stream.path`. */
const denySecret: FilterFactory<unknown> = {
  name: DENY_SECRET,
  parseConfig: () => ({}),
  create: () => ({
    name: DENY_SECRET,
    onRequestHeaders(stream) {
      const q = stream.path.indexOf('?');
      if ((q < 0 ? stream.path : stream.path.slice(0, q)) !== '/secret') return FilterStatus.Continue;
      sendLocalReply(stream, 403, 'denied', ResponseFlag.None, 'test_denied');
      return FilterStatus.StopAndReply;
    },
  }),
};

const mesh = (net: string) =>
  meshYaml({ meshConfig: 'trustDomain: cluster.local\n', apps: [{ name: 'app', vip: `${net}.100`, podIp: `${net}.11`, ports: [HTTP_PORT] }] });

const CHAINS = [
  { net: '127.0.185', label: 'with istio.authz', filters: [{ name: 'istio.authz' }, { name: DENY_SECRET }, { name: RECORDER }, { name: 'envoy.filters.http.router' }] },
  { net: '127.0.186', label: 'without istio.authz', filters: [{ name: DENY_SECRET }, { name: RECORDER }, { name: 'envoy.filters.http.router' }] },
];

const running = new Map<string, { wp: AuthzWaypoint; backend: Backend }>();

startAll(async (start) => {
  for (const c of CHAINS) {
    const backend = await start.http(`${c.net}.11`, 8080);
    const wp = await start.waypoint({ ip: `${c.net}.1`, mesh: mesh(c.net), filters: c.filters, extraFilters: [denySecret] });
    running.set(c.net, { wp, backend });
  }
});

for (const c of CHAINS) {
  describe(c.label, () => {
    for (const target of ['/secret', '/./secret', '/a/../secret', '/%73ecret', '/%2e/secret?x=1']) {
      test(`${target} is denied by the custom filter`, async () => {
        const { wp, backend } = running.get(c.net)!;
        const before = backend.received.length;
        const r = await wp.http(CLIENT, `${c.net}.100:80`, { path: target });
        expect([r.status, r.body]).toEqual([403, 'denied']);
        expect(backend.received.length).toBe(before);
      });
    }

    test('an allowed path goes upstream normalized, and is recorded normalized', async () => {
      const { wp, backend } = running.get(c.net)!;
      const r = await wp.http(CLIENT, `${c.net}.100:80`, { path: '/a/./b/../%70ublic?q=%2e', headers: [['x-marker', 'pub']] });
      expect(r.status).toBe(200);
      expect(backend.received.find((q) => q.headers['x-marker'] === 'pub')?.url).toBe('/a/public?q=%2e');
      expect(await wp.record('/a/public?q=%2e')).toMatchObject({ code: 200, path: '/a/public?q=%2e' });
    });

    test('a malformed path: 400 path_normalization_failed (no flag, as Envoy), before any filter', async () => {
      const { wp } = running.get(c.net)!;
      const r = await wp.http(CLIENT, `${c.net}.100:80`, { path: '/secret%00' });
      expect(r.status).toBe(400);
      expect(await wp.record('/secret%00')).toMatchObject({ code: 400, flags: '-', details: 'path_normalization_failed' });
    });
  });
}
