/**
 * Lifecycle of a running waypoint: its certificate renews at half its lifetime without dropping
 * live tunnels, and SIGTERM-style shutdown lets in-flight requests finish. Addresses: 127.0.29.x.
 */
import http from 'node:http';
import tls from 'node:tls';
import { afterAll, beforeAll, expect, test } from 'vitest';
import { exchange } from '../helpers/hbone-client.ts';
import { spiffe, TestCa } from '../helpers/identity.ts';
import { openEntry, startTestTopology, type TestTopology } from '../helpers/topology.ts';

let topo: TestTopology;
let apps: http.Server[];

async function serverSerial(): Promise<string> {
  const ca = await TestCa.load(topo.caDir);
  const leaf = await ca.fresh(spiffe('demo', 'probe'), 60_000);
  return new Promise((resolve, reject) => {
    const s = tls.connect({ host: '127.0.29.1', port: topo.waypoint!.addresses.hbone.port, cert: leaf.certPem, key: leaf.keyPem, ca: leaf.caPem, ALPNProtocols: ['h2'], checkServerIdentity: () => undefined }, () => {
      resolve(s.getPeerX509Certificate()!.serialNumber);
      s.destroy();
    });
    s.once('error', reject);
  });
}

beforeAll(async () => {
  topo = await startTestTopology(29, { backends: false, bootstrap: { identity: { certTtl: '4s' }, drain: { timeoutMs: 3000 } } });
  // Apps answering after ?delay= ms.
  apps = await Promise.all(
    ['127.0.29.11', '127.0.29.12'].map(
      (ip) =>
        new Promise<http.Server>((resolve) => {
          const s = http.createServer((req, res) => {
            const delay = Number(new URL(req.url ?? '/', 'http://x').searchParams.get('delay') ?? 0);
            setTimeout(() => res.end(`done ${req.url}`), delay);
          });
          s.listen(8080, ip, () => resolve(s));
        }),
    ),
  );
});
afterAll(async () => {
  for (const a of apps ?? []) a.close();
  await topo?.close();
});

test('certificate renewal keeps live tunnels and serves the new certificate to new connections', async () => {
  const socket = await openEntry(topo);
  expect((await exchange(socket, '/before')).status).toBe(200);
  const before = await serverSerial();
  await new Promise((r) => topo.waypoint!.certificate.once('rotated', r));
  // The same client connection (same HBONE tunnel) still works.
  expect(await exchange(socket, '/after')).toEqual({ status: 200, body: 'done /after' });
  socket.destroy();
  expect(await serverSerial()).not.toBe(before);
});

test('shutdown lets an in-flight request finish, then stops accepting', async () => {
  const socket = await openEntry(topo);
  const inflight = exchange(socket, '/slow?delay=500');
  await new Promise((r) => setTimeout(r, 150));
  const stopped = topo.waypoint!.shutdown();
  expect(await inflight).toEqual({ status: 200, body: 'done /slow?delay=500' });
  await stopped;
  socket.destroy();
  await expect(serverSerial()).rejects.toThrow();
});
