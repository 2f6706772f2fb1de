/**
 * What a client sees when the upstream cannot serve: every case gets a prompt 503 with Envoy's
 * response flag semantics, never a hang. Also covers live mesh updates (the watched file).
 * Addresses: 127.0.23.x.
 */
import fs from 'node:fs';
import { afterAll, beforeAll, expect, test } from 'vitest';
import { request } from 'undici';
import { startTestTopology, type TestTopology } from '../helpers/topology.ts';

let topo: TestTopology;
let base: string;

beforeAll(async () => {
  // Inbound roles run, but no application listens behind them.
  topo = await startTestTopology(23, { backends: false });
  base = `http://${topo.entry.host}:${topo.entry.port}`;
});
afterAll(async () => {
  await topo?.close();
});

test('application down behind the destination ztunnel: 503 (UF), promptly', async () => {
  const res = await request(`${base}/down`, { headersTimeout: 10_000 });
  expect(res.statusCode).toBe(503);
  expect(await res.body.text()).toMatch(/upstream connect error.*connection failure/);
});

test('no HBONE server at the endpoint: 503 (UF), promptly', async () => {
  await Promise.all(topo.inbounds.map((i) => i.close(50)));
  const res = await request(`${base}/no-inbound`, { headersTimeout: 10_000 });
  expect(res.statusCode).toBe(503);
  expect(await res.body.text()).toMatch(/connection failure/);
});

test('endpoints not Ready after a mesh file change: 503 (UH) without restart', async () => {
  const before = topo.waypoint!.mesh.current.version;
  const text = fs.readFileSync(topo.meshFile, 'utf8').replaceAll('  podIP: "127.0.23.1', '  conditions: [{ type: Ready, status: "False" }]\n  podIP: "127.0.23.1');
  expect(text).toContain('status: "False"');
  const updated = new Promise<void>((resolve) => topo.waypoint!.mesh.subscribe(() => resolve()));
  fs.writeFileSync(topo.meshFile, text);
  await updated;
  expect(topo.waypoint!.mesh.current.version).toBeGreaterThan(before);
  const res = await request(`${base}/uh`, { headersTimeout: 10_000 });
  expect(res.statusCode).toBe(503);
  expect(await res.body.text()).toBe('no healthy upstream');
});

test('an invalid mesh file change is ignored and the last good state stays', async () => {
  const good = topo.waypoint!.mesh.current;
  fs.writeFileSync(topo.meshFile, 'apiVersion: v1\nkind: Service\nmetadata: {name: broken, namespace: demo}\nspec:\n  ports: [{port: 70000}]\n');
  await new Promise((r) => setTimeout(r, 600));
  expect(topo.waypoint!.mesh.current).toBe(good);
});
