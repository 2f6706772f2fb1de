/**
 * Per-client connection limits under `waypoint run --concurrency 2` (src/workers): the primary owns
 * the HBONE listener and counts a client's connections and connection rate once for both workers,
 * so a client gets `limits.maxConnectionsPerPeer` and `peerConnectionBurst` in all, not per worker
 * (its connections are handed to the workers in turn); a closed connection frees its place; the
 * refusals are counted in the one `/stats/prometheus`. The stream rate is each worker's, but a
 * client a worker throttles has its new connections refused whichever worker they would go to.
 * Addresses: 127.0.2.x.
 */
import type { ClientHttp2Session } from 'node:http2';
import { afterAll, beforeAll, expect, test } from 'vitest';
import { connect, exchange, hboneSession, type ClientIdentity } from '../helpers/hbone-client.ts';
import { identityFrom } from '../helpers/identity.ts';
import { samplesOf } from '../helpers/prometheus.ts';
import { sleep } from '../helpers/servers.ts';
import { startTestTopology, type TestTopology } from '../helpers/topology.ts';

const NET = 2;
const WP = `127.0.${NET}.1`;
const AUTHORITY = `127.0.${NET}.100:80`;
const BURST = 3;
/** A client's streams per worker before it is throttled (its new connections then wait (STREAM_BURST / 2) s at 1/s). */
const STREAM_BURST = 6;
let topo: TestTopology;
let id: ClientIdentity;
const open: ClientHttp2Session[] = [];

beforeAll(async () => {
  topo = await startTestTopology(NET, {
    concurrency: 2,
    tunnel: false,
    bootstrap: { limits: { maxConnectionsPerPeer: 2, peerConnectionRate: 1, peerConnectionBurst: BURST, peerStreamRate: 1, peerStreamBurst: STREAM_BURST } },
  });
  id = await identityFrom(topo.caDir);
}, 30_000);

afterAll(async () => {
  for (const s of open) s.destroy();
  await topo?.close();
});

/** A new HBONE connection from `from` that serves a request; 'refused' when it is closed before that. */
async function session(from: string): Promise<ClientHttp2Session | 'refused'> {
  try {
    const s = await hboneSession(WP, topo.waypoint!.addresses.hbone.port, id, { localAddress: from });
    s.on('error', () => {});
    open.push(s);
    const c = await connect(s, AUTHORITY);
    expect(c.status).toBe(200);
    expect((await exchange(c.stream, '/limits')).status).toBe(200);
    return s;
  } catch (err) {
    if (err instanceof Error && /expected/.test(err.message)) throw err;
    return 'refused';
  }
}

async function refusals(): Promise<Record<string, number>> {
  const admin = topo.waypoint!.addresses.admin;
  const text = await (await fetch(`http://${admin.address}:${admin.port}/stats/prometheus`)).text();
  return Object.fromEntries(samplesOf(text, 'waypoint_hbone_connections_refused_total').map((s) => [s.labels.reason, s.value]));
}

test('maxConnectionsPerPeer counts a client once across the workers; a closed connection frees its place', { timeout: 30_000 }, async () => {
  const client = `127.0.${NET}.50`;
  const first = await session(client);
  const second = await session(client);
  expect(first).not.toBe('refused');
  expect(second).not.toBe('refused');
  // Each worker holds one of them: counted per worker, a third would be served.
  expect(await session(client)).toBe('refused');
  // Another client is not limited by this one.
  expect(await session(`127.0.${NET}.51`)).not.toBe('refused');
  expect((await refusals()).peer_connections).toBeGreaterThanOrEqual(1);
  (first as ClientHttp2Session).destroy();
  // The worker tells the primary the connection closed: a new one from the client is served again.
  await expect.poll(async () => (await session(client)) !== 'refused', { timeout: 10_000, interval: 100 }).toBe(true);
});

test('the peer connection rate is one budget across the workers', { timeout: 30_000 }, async () => {
  const client = `127.0.${NET}.52`;
  let served = 0;
  // One connection at a time (under maxConnectionsPerPeer), until one is refused.
  for (let i = 0; i < 4 * BURST; i++) {
    const s = await session(client);
    if (s === 'refused') break;
    served++;
    s.destroy();
    await sleep(20);
  }
  // The burst (plus what 1/s refilled meanwhile); a budget per worker would serve twice the burst.
  expect(served).toBeGreaterThanOrEqual(BURST);
  expect(served).toBeLessThan(2 * BURST);
  expect((await refusals()).peer_connection_rate).toBeGreaterThanOrEqual(1);
});

test('a client one worker throttled (over its stream rate) has its new connections refused by the primary, for every worker', { timeout: 30_000 }, async () => {
  const client = `127.0.${NET}.53`;
  const s = await session(client);
  expect(s).not.toBe('refused');
  const flood = s as ClientHttp2Session;
  const closed = new Promise<void>((r) => flood.once('close', () => r()));
  // More CONNECTs at once than the worker's stream budget: refused, and the session closed.
  for (let i = 0; i < STREAM_BURST + 2 && !flood.closed && !flood.destroyed; i++) {
    flood.request({ ':method': 'CONNECT', ':authority': AUTHORITY }, { endStream: false }).on('error', () => {});
  }
  await closed;
  await sleep(100);
  // Handed to the workers in turn, the next two would reach both: the primary refuses both.
  expect([await session(client), await session(client)]).toEqual(['refused', 'refused']);
  expect((await refusals()).peer_stream_rate).toBeGreaterThanOrEqual(2);
});
