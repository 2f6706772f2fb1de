/**
 * The drain of `waypoint run --concurrency 2` (src/workers) under a stream of new connections:
 * clients keep opening HBONE connections (mTLS, CONNECT, one HTTP/1.1 request) before, during and
 * after the listener closes at the end of `drain.delayMs`. Every attempt must end promptly, served
 * (200) or refused/closed (connection refused, reset, GOAWAY); none may be left waiting. With
 * node:cluster's round-robin, a connection handed to a worker as it closed its listener went back
 * to the primary's round-robin handle after that handle was closed and stayed open, unserved, until
 * the primary exited (lib/internal/cluster/round_robin_handle.js: `distribute` after `remove`); and
 * one handed to a worker killed before it answered stayed open in the primary the same way. So
 * also: a worker killed (SIGKILL) under the same stream of connections.
 * The bound per attempt only catches such a hang. Addresses: 127.0.1.x.
 */
import { afterAll, beforeAll, expect, test } from 'vitest';
import { connect, exchange, hboneSession, type ClientIdentity } from '../helpers/hbone-client.ts';
import { identityFrom } from '../helpers/identity.ts';
import { sleep } from '../helpers/servers.ts';
import { startTestTopology, type TestTopology } from '../helpers/topology.ts';

const NET = 1;
const WP = `127.0.${NET}.1`;
const AUTHORITY = `127.0.${NET}.100:80`;
/** Far longer than a served or refused attempt takes on a loaded machine: an attempt still open then was left hanging. */
const HANG_MS = 8_000;
/** New connections opened together, every BURST_EVERY_MS. */
const BURST = 10;
const BURST_EVERY_MS = 20;
let topo: TestTopology;
let id: ClientIdentity;

beforeAll(async () => {
  topo = await startTestTopology(NET, { concurrency: 2, tunnel: false, bootstrap: { drain: { delayMs: 400, timeoutMs: 2_000 } } });
  id = await identityFrom(topo.caDir);
}, 30_000);

afterAll(async () => {
  await topo?.close();
});

type Outcome = 'connected' | 'refused' | 'hung';

/** One HBONE connection (TCP, mTLS, HTTP/2 SETTINGS): how it ended, or 'hung' when it had not within HANG_MS. */
async function attempt(port: number): Promise<Outcome> {
  let timer: NodeJS.Timeout | undefined;
  const hung = new Promise<'hung'>((r) => (timer = setTimeout(() => r('hung'), HANG_MS)));
  const tried = hboneSession(WP, port, id, { localAddress: `127.0.${NET}.50` }).then(
    (session) => {
      session.on('error', () => {});
      return session;
    },
    () => 'refused' as const,
  );
  const outcome = await Promise.race([tried, hung]);
  clearTimeout(timer);
  if (typeof outcome === 'string') {
    // A session that connects after the bound was counted as hung; close it then.
    if (outcome === 'hung') void tried.then((s) => typeof s !== 'string' && s.destroy());
    return outcome;
  }
  outcome.destroy();
  return 'connected';
}

/** Open bursts of connections until `until` settles (and a little after); their outcomes. */
async function bursts(port: number, until: Promise<unknown>): Promise<Outcome[]> {
  const attempts: Promise<Outcome>[] = [];
  let done = false;
  const over = until.then(() => sleep(200)).then(() => (done = true));
  while (!done) {
    for (let i = 0; i < BURST; i++) attempts.push(attempt(port));
    await sleep(BURST_EVERY_MS);
  }
  await over;
  return Promise.all(attempts);
}

async function workerPids(): Promise<number[]> {
  const admin = topo.waypoint!.addresses.admin;
  const dump = (await (await fetch(`http://${admin.address}:${admin.port}/config_dump`)).json()) as { workers: { pid: number | null; ready: boolean }[] };
  return dump.workers.filter((w) => w.ready && w.pid !== null).map((w) => w.pid!);
}

const count = (outcomes: Outcome[], o: Outcome) => outcomes.filter((x) => x === o).length;

test('a worker killed while connections are handed to it: each is served by the other or closed; none is left waiting', { timeout: 60_000 }, async () => {
  const port = topo.waypoint!.addresses.hbone.port;
  const [victim] = await workerPids();
  const killed = sleep(150).then(() => process.kill(victim, 'SIGKILL'));
  const outcomes = await bursts(port, killed.then(() => sleep(300)));
  expect(count(outcomes, 'hung'), `of ${outcomes.length} connections, left waiting`).toBe(0);
  expect(count(outcomes, 'connected')).toBeGreaterThan(0);
  // Replaced (after the restart back-off), for the drain below.
  await expect.poll(async () => (await workerPids()).filter((p) => p !== victim).length, { timeout: 15_000, interval: 200 }).toBe(2);
});

test('connections opened while the workers drain are all served or refused; none is left waiting', { timeout: 60_000 }, async () => {
  const port = topo.waypoint!.addresses.hbone.port;
  // Served before the drain.
  const session = await hboneSession(WP, port, id, { localAddress: `127.0.${NET}.50` });
  const c = await connect(session, AUTHORITY);
  expect(c.status).toBe(200);
  expect((await exchange(c.stream, '/before')).status).toBe(200);
  session.destroy();

  // Bursts of new connections from the start of the drain until after the listener closed (at drain.delayMs).
  const outcomes = await bursts(port, topo.waypoint!.shutdown());
  expect(count(outcomes, 'hung'), `of ${outcomes.length} connections, left waiting`).toBe(0);
  // Both sides of the listener's close were exercised.
  expect(count(outcomes, 'connected')).toBeGreaterThan(0);
  expect(count(outcomes, 'refused')).toBeGreaterThan(0);
});
