/**
 * The test topology with its waypoint in workers (test/helpers/topology.ts; `npm run test:workers`
 * runs the HBONE, L7 and drain tests this way): a primary in the test's process and 2 worker
 * processes sharing the HBONE listener. HBONE connections land on both workers, the recorder
 * hears from both, a mesh edit made with addToMesh is in force in every worker once it returns,
 * and what lives only inside one waypoint process says so when a test reaches for it.
 * Addresses: 127.0.108.x.
 */
import type { ClientHttp2Session } from 'node:http2';
import { afterAll, beforeAll, expect, test } from 'vitest';
import { connect, exchange, hboneSession, type ClientIdentity } from '../helpers/hbone-client.ts';
import { identityFrom } from '../helpers/identity.ts';
import { authorizationPolicy, toGateway } from '../helpers/mesh.ts';
import { RECORDER, recorder } from '../helpers/recorder.ts';
import { addToMesh, startTestTopology, type TestTopology } from '../helpers/topology.ts';

const NET = 108;
const AUTHORITY = `127.0.${NET}.100:80`;
const rec = recorder();
let topo: TestTopology;
let id: ClientIdentity;
const sessions: ClientHttp2Session[] = [];

beforeAll(async () => {
  topo = await startTestTopology(NET, {
    concurrency: 2,
    extraFilters: [rec.factory],
    bootstrap: { filters: [{ name: 'istio.peer_metadata' }, { name: 'istio.authz' }, { name: RECORDER }, { name: 'envoy.filters.http.router' }] },
  });
  id = await identityFrom(topo.caDir);
  // The primary hands new connections to its workers in turn.
  for (let i = 0; i < 6; i++) sessions.push(await hboneSession(`127.0.${NET}.1`, topo.waypoint!.addresses.hbone.port, id));
}, 30_000);

afterAll(async () => {
  for (const s of sessions) s.destroy();
  await topo?.close();
});

/** One GET through a new CONNECT on `session`: its status. */
async function get(session: ClientHttp2Session, path: string): Promise<number> {
  const c = await connect(session, AUTHORITY);
  expect(c.status).toBe(200);
  const r = await exchange(c.stream, path);
  c.stream.close();
  return r.status;
}

test('two worker processes serve the connections; the recorder hears from both', async () => {
  const admin = topo.waypoint!.addresses.admin;
  const dump = (await (await fetch(`http://${admin.address}:${admin.port}/config_dump`)).json()) as { workers: { pid: number; ready: boolean }[] };
  expect(dump.workers.filter((w) => w.ready && w.pid !== process.pid)).toHaveLength(2);
  expect(await Promise.all(sessions.map((s, i) => get(s, `/spread/${i}`)))).toEqual([200, 200, 200, 200, 200, 200]);
  await expect.poll(() => rec.streams.filter((s) => s.path.startsWith('/spread/')).length).toBe(6);
  expect([...rec.workerPids].sort()).toEqual(dump.workers.map((w) => w.pid).sort());
});

test('a mesh edit is in force in every worker once addToMesh returns', async () => {
  expect(await Promise.all(sessions.map((s) => get(s, '/denied')))).toEqual([200, 200, 200, 200, 200, 200]);
  const version = topo.waypoint!.mesh.current.version;
  await addToMesh(topo, authorizationPolicy('deny-path', { targetRefs: toGateway(), action: 'DENY', rules: [{ to: [{ operation: { paths: ['/denied'] } }] }] }, { namespace: 'demo' }));
  expect(topo.waypoint!.mesh.current.version).toBe(version + 1);
  // No polling: every connection, whichever worker holds it, is under the new policy already.
  expect(await Promise.all(sessions.map((s) => get(s, '/denied')))).toEqual([403, 403, 403, 403, 403, 403]);
  expect(await Promise.all(sessions.map((s) => get(s, '/allowed')))).toEqual([200, 200, 200, 200, 200, 200]);
});

test('what lives inside one waypoint process is refused by name', () => {
  expect(() => topo.waypoint!.certificate).toThrow(/topo\.waypoint\.certificate: the waypoint runs in worker processes/);
  expect(() => topo.waypoint!.overload).toThrow(/overload/);
});
