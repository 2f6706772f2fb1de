/**
 * Destinations that stop answering: requests fail over fast (connect timeout and CONNECT-response
 * timeout of the HBONE pool, `upstream.connectTimeoutMs` / `connectResponseTimeoutMs`, both connect
 * failures the router retries on the other endpoint), and the waypoint lets go of connections to
 * them. Pod .12's destination ztunnel is a `waypoint inbound` process (so it can be frozen with
 * SIGSTOP), then a TCP server that accepts and never answers TLS. HTTP/2 keepalive and the
 * ejection of endpoints whose connects time out are off, so that only these mechanisms can act. Addresses: 127.0.234.x.
 */
import { spawn, type ChildProcess, execFileSync } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { afterAll, beforeAll, expect, test } from 'vitest';
import { LocalCa } from '../../../src/identity/ca.ts';
import { exchange } from '../../helpers/hbone-client.ts';
import { openEntry, startTestTopology, type TestTopology } from '../../helpers/topology.ts';

const NET = 234;
const FROZEN = `127.0.${NET}.12`;
let topo: TestTopology;
let inbound: ChildProcess | undefined;

beforeAll(async () => {
  topo = await startTestTopology(NET, {
    // No keep-alive reuse of upstream HTTP connections: each request opens its own CONNECT.
    // No ejection of endpoints whose connects timed out either (test/integration/upstream-frozen.test.ts).
    bootstrap: { upstream: { connectTimeoutMs: 1000, connectResponseTimeoutMs: 1000, httpKeepAliveMs: 1, connectTimeoutEjectionMs: 0 }, http2: { keepaliveIntervalMs: 0 } },
  });
  await topo.inbounds[1].close(0);
});
afterAll(async () => {
  inbound?.kill('SIGCONT');
  inbound?.kill('SIGKILL');
  await topo?.close();
});

/** Start pod .12's destination ztunnel as a `waypoint inbound` process. */
async function startInboundProcess(): Promise<ChildProcess> {
  const ca = await LocalCa.load(topo.caDir);
  const leaf = await ca.issue('spiffe://cluster.local/ns/demo/sa/echo', 3600_000);
  const prefix = path.join(topo.dir, 'echo');
  fs.writeFileSync(`${prefix}-cert.pem`, leaf.certPem);
  fs.writeFileSync(`${prefix}-key.pem`, leaf.keyPem);
  const bin = path.resolve(import.meta.dirname, '../../../bin/waypoint.js');
  const child = spawn(process.execPath, [bin, 'inbound', '--listen', `${FROZEN}:15008`, '--identity', prefix, '--ca', path.join(topo.caDir, 'root-cert.pem')], {
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  await new Promise((r) => child.stdout!.once('data', r));
  return child;
}

/** One request through the tunnel role; its status, which pod answered, and whether it came within 8 s (a hang bound). */
async function request(p: string): Promise<{ status: number | string; pod: string }> {
  const s = await openEntry(topo);
  try {
    const r = await Promise.race([exchange(s, p), new Promise<{ status: string; body: string }>((res) => setTimeout(() => res({ status: 'no answer in 8 s', body: '' }), 8000))]);
    return { status: r.status, pod: /"pod": "([^"]+)"/.exec(r.body)?.[1] ?? '?' };
  } finally {
    s.destroy();
  }
}

/** Established TCP connections from the waypoint to `FROZEN`'s HBONE port. */
function connectionsToFrozen(): number {
  const out = execFileSync('ss', ['-Htn', 'state', 'established', 'dst', FROZEN, 'dport', '=', ':15008']).toString();
  return out.split('\n').filter((l) => l.trim() !== '').length;
}

test('a destination that accepts TCP and never answers TLS: requests succeed on the other endpoint; the waypoint hangs up', { timeout: 60_000 }, async () => {
  const held: net.Socket[] = [];
  const closed: net.Socket[] = [];
  const hole = net.createServer((s) => {
    held.push(s);
    s.on('error', () => {});
    // Read (and drop) the ClientHello, so that the waypoint hanging up is seen.
    s.resume();
    s.once('close', () => closed.push(s));
  });
  await new Promise<void>((r) => hole.listen(15008, FROZEN, r));
  try {
    const results = [];
    for (let i = 0; i < 6; i++) results.push(await request(`/hole${i}`));
    expect(results.every((r) => r.status === 200 && r.pod === 'echo-1')).toBe(true);
    expect(held.length).toBeGreaterThan(0);
    await expect.poll(() => closed.length, { timeout: 5000 }).toBe(held.length);
  } finally {
    for (const s of held) s.destroy();
    hole.close();
  }
});

test('a destination frozen mid-connection: requests still succeed on the other endpoint, and its connection is closed', { timeout: 60_000 }, async () => {
  inbound = await startInboundProcess();
  const warm: string[] = [];
  for (let i = 0; i < 8; i++) warm.push((await request(`/warm${i}`)).pod);
  expect(warm).toContain('echo-2');
  expect(connectionsToFrozen()).toBeGreaterThan(0);

  inbound!.kill('SIGSTOP');
  const after = [];
  for (let i = 0; i < 8; i++) after.push(await request(`/stopped${i}`));
  expect(after.every((r) => r.status === 200 && r.pod === 'echo-1')).toBe(true);
  // The connection that went silent is closed (no answer to a CONNECT, then none to a PING);
  // connections opened to it since were abandoned at the connect timeout.
  await expect.poll(connectionsToFrozen, { timeout: 5000 }).toBe(0);
});
