/**
 * A destination that stops answering (a SIGSTOPped process: the kernel still accepts its TCP
 * connections, nothing answers the TLS handshake) fails requests fast instead of making each wait
 * its own connect timeouts:
 * - of two endpoints, the frozen one is ejected after its first connect timeout: the request that
 *   met it is retried on the other (Istio's previous_hosts), and later requests no longer pick it;
 * - as the only endpoint, a request fails after one connect timeout (503 `UF,URX`) rather than
 *   after three (its retries would dial the host that just timed out again), and requests waiting
 *   on the same pending connection fail together.
 * Connect timeouts are 1.5 s here (10 s by default). Addresses: 127.0.14.x.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { afterAll, beforeAll, expect, test } from 'vitest';
import { pod, service } from '../helpers/mesh.ts';
import { recorder } from '../helpers/recorder.ts';
import { addEntry, addToMesh, startTestTopology, type TestTopology } from '../helpers/topology.ts';
import { openEntry } from '../helpers/topology.ts';

const NET = 14;
const FROZEN = `127.0.${NET}.12`;
const LONELY = `127.0.${NET}.13`;
const rec = recorder();
let topo: TestTopology;
let child: ChildProcess;
let lonelyEntry: { host: string; port: number; close(): Promise<void> };

beforeAll(async () => {
  topo = await startTestTopology(NET, {
    podIps: [`127.0.${NET}.11`],
    extraFilters: [rec.factory],
    bootstrap: { filters: rec.filters, upstream: { connectTimeoutMs: 1500, connectResponseTimeoutMs: 1500 } },
  });
  // The frozen destinations' HBONE port: a process that listens, then is stopped.
  const listen = (ip: string) => `require('net').createServer(() => {}).listen(15008, '${ip}', r)`;
  child = spawn(process.execPath, ['-e', `let n = 0; const r = () => ++n === 2 && console.log('ready'); ${listen(FROZEN)}; ${listen(LONELY)}`], { stdio: ['ignore', 'pipe', 'inherit'] });
  await new Promise((r) => child.stdout!.once('data', r));
  child.kill('SIGSTOP');
  const labels = (app: string) => ({ app, version: 'v1' });
  await addToMesh(
    topo,
    pod({ name: 'echo-frozen', namespace: 'demo', ip: FROZEN, sa: 'echo', labels: labels('echo'), ports: { http: 8080 } }),
    service({ name: 'lonely', namespace: 'demo', vip: `127.0.${NET}.101`, selector: { app: 'lonely' }, ports: [{ name: 'http', port: 80, targetPort: 8080 }] }),
    pod({ name: 'lonely', namespace: 'demo', ip: LONELY, sa: 'echo', labels: labels('lonely'), ports: { http: 8080 } }),
  );
  lonelyEntry = await addEntry(topo, `127.0.${NET}.101:80`);
});
afterAll(async () => {
  child?.kill('SIGKILL');
  await lonelyEntry?.close();
  await topo?.close();
});

/** One request through a tunnel entry; resolves with the HTTP status (0: no answer). */
async function get(entry: { host: string; port: number } | undefined, path: string): Promise<number> {
  const net = await import('node:net');
  const s = entry ? net.connect(entry.port, entry.host) : await openEntry(topo);
  const chunks: Buffer[] = [];
  s.on('data', (c: Buffer) => chunks.push(c));
  s.on('error', () => {});
  s.write(`GET ${path} HTTP/1.1\r\nhost: echo\r\nconnection: close\r\n\r\n`);
  await new Promise((r) => s.once('close', r));
  return Number(Buffer.concat(chunks).toString('latin1').split(' ')[1] ?? 0);
}

test('of two endpoints, the frozen one is ejected after its first connect timeout: every request is served, one of them retried', { timeout: 60_000 }, async () => {
  const statuses: number[] = [];
  for (let i = 0; i < 20; i++) statuses.push(await get(undefined, `/two-${i}`));
  expect(statuses).toEqual(Array.from({ length: 20 }, () => 200));
  const records = await Promise.all(statuses.map((_, i) => rec.find(`/two-${i}`)));
  // Only the first request that picked the frozen endpoint waited for it (then went to the other).
  expect(records.filter((r) => r.attempts > 1).length).toBe(1);
  expect(records.every((r) => r.upstreamHost === `127.0.${NET}.11:8080`)).toBe(true);
});

test('as the only endpoint, requests fail after one connect timeout (503 UF,URX), together when they wait on the same connection', { timeout: 60_000 }, async () => {
  const statuses = await Promise.all(Array.from({ length: 5 }, (_, i) => get(lonelyEntry, `/lonely-${i}`)));
  expect(statuses).toEqual([503, 503, 503, 503, 503]);
  for (let i = 0; i < 5; i++) {
    const r = await rec.find(`/lonely-${i}`);
    // One attempt each: the retries would have dialed the host that just timed out again.
    expect(r.attempts).toBe(1);
    expect(r.flags.split(',').sort()).toEqual(['UF', 'URX']);
  }
});
