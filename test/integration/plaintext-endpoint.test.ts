/**
 * Endpoints outside the mesh (`istio.io/dataplane-mode: none` on the Pod) are reached with plain
 * TCP on `podIP:targetPort` instead of HBONE on `podIP:15008`. Addresses: 127.0.31.x.
 */
import fs from 'node:fs';
import { afterAll, beforeAll, expect, test } from 'vitest';
import { request } from 'undici';
import { startTestTopology, type TestTopology } from '../helpers/topology.ts';

let topo: TestTopology;

beforeAll(async () => {
  topo = await startTestTopology(31);
});
afterAll(async () => {
  await topo?.close();
});

test('a Pod labelled istio.io/dataplane-mode: none is dialed directly', async () => {
  const base = `http://${topo.entry.host}:${topo.entry.port}`;
  // No HBONE server in front of the pods any more: only plain TCP can reach them.
  await Promise.all(topo.inbounds.map((i) => i.close(50)));
  expect((await request(`${base}/hbone-gone`)).statusCode).toBe(503);

  const text = fs.readFileSync(topo.meshFile, 'utf8').replaceAll('labels: { app: echo, version: v1 }', 'labels: { app: echo, version: v1, istio.io/dataplane-mode: none }');
  const updated = new Promise<void>((resolve) => topo.waypoint!.mesh.subscribe(() => resolve()));
  fs.writeFileSync(topo.meshFile, text);
  await updated;
  const eps = [...topo.waypoint!.mesh.current.services[0].endpoints.values()][0];
  expect(eps.map((e) => e.tunnel)).toEqual(['NONE', 'NONE']);

  const res = await request(`${base}/plaintext`);
  expect(res.statusCode).toBe(200);
  expect(((await res.body.json()) as { url: string }).url).toBe('/plaintext');
});
