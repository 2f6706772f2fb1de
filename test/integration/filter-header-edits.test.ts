/**
 * The router acts on the request headers as the filters left them (`stream.requestHeaders`), not
 * on what the client sent: a filter removing `Expect: 100-continue` means no 100 is answered and no
 * dedicated 100-continue upstream is taken; `TE: trailers` (the only TE the connection manager
 * keeps, as Envoy's HCM) is in the list filters see, and one a filter removed is not sent upstream.
 * Real HBONE tunnels through the waypoint to an HTTP/1.1 backend. Addresses: 127.0.187.x.
 */
import { expect, test } from 'vitest';
import { FilterStatus, type FilterFactory } from '../../src/pipeline/index.ts';
import { spiffe } from '../helpers/identity.ts';
import { RECORDER, type Backend } from '../helpers/recorder.ts';
import { HTTP_PORT, meshYaml, startAll, type AuthzWaypoint } from './authz/harness.ts';

const NET = '127.0.187';
const CLIENT = spiffe('foo', 'client');
const SVC = `${NET}.100:80`;
const EDITS = 'test.header-edits';

/** TE values the filter saw, by path. */
const teSeen = new Map<string, string | undefined>();

/** Removes `expect` on /no-expect and `te` on /no-te; records the TE it saw. */
const edits: FilterFactory<unknown> = {
  name: EDITS,
  parseConfig: () => ({}),
  create: () => ({
    name: EDITS,
    onRequestHeaders(stream) {
      teSeen.set(stream.path, stream.requestHeaders.get('te'));
      if (stream.path === '/no-expect') stream.requestHeaders.remove('expect');
      if (stream.path === '/no-te') stream.requestHeaders.remove('te');
      return FilterStatus.Continue;
    },
  }),
};

let wp: AuthzWaypoint;
let backend: Backend;

startAll(async (start) => {
  backend = await start.http(`${NET}.11`, 8080);
  wp = await start.waypoint({
    ip: `${NET}.1`,
    mesh: meshYaml({ meshConfig: 'trustDomain: cluster.local\n', apps: [{ name: 'app', vip: `${NET}.100`, podIp: `${NET}.11`, ports: [HTTP_PORT] }] }),
    filters: [{ name: EDITS }, { name: RECORDER }, { name: 'envoy.filters.http.router' }],
    extraFilters: [edits],
  });
});

const received = (path: string) => backend.received.find((q) => q.url === path);

test('Expect removed by a filter: no 100 Continue, the request goes up without it', async () => {
  const r = await wp.http(CLIENT, SVC, { method: 'POST', path: '/no-expect', headers: [['expect', '100-continue'], ['content-length', '5']], body: 'hello' });
  expect(r.status).toBe(200);
  expect(received('/no-expect')?.headers.expect).toBeUndefined();
});

test('Expect kept: relayed as before (control)', async () => {
  const r = await wp.http(CLIENT, SVC, { method: 'POST', path: '/expect', headers: [['expect', '100-continue'], ['content-length', '5']], body: 'hello' });
  expect(r.status).toBe(100);
});

test('TE: trailers is what filters see (other TE tokens dropped); removed by a filter, it is not sent upstream', async () => {
  await wp.http(CLIENT, SVC, { path: '/te', headers: [['te', 'gzip, trailers']] });
  expect(teSeen.get('/te')).toBe('trailers');
  expect(received('/te')?.headers.te).toBe('trailers');
  await wp.http(CLIENT, SVC, { path: '/no-te', headers: [['te', 'trailers']] });
  expect(teSeen.get('/no-te')).toBe('trailers');
  expect(received('/no-te')?.headers.te).toBeUndefined();
  await wp.http(CLIENT, SVC, { path: '/te-gzip', headers: [['te', 'gzip']] });
  expect(teSeen.get('/te-gzip')).toBeUndefined();
});
