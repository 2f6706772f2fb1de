/**
 * `waypoint run --concurrency 2` (src/workers) as the real CLI process: HBONE connections spread
 * over two workers sharing the listener serve HTTP/1.1 through the L7 chain; one scrape of the
 * primary's admin port sums both workers' `istio_requests_total`; `/config_dump` lists the workers;
 * a worker killed with SIGKILL takes only its own tunnels down and is replaced; SIGTERM drains (a
 * request in flight finishes) and the process exits 0. Addresses: 127.0.56.x.
 */
import type { ClientHttp2Session } from 'node:http2';
import type { Duplex } from 'node:stream';
import { afterAll, beforeAll, expect, test } from 'vitest';
import { connect, exchange, hboneSession, parseHttpResponse, type ClientIdentity } from '../helpers/hbone-client.ts';
import { identityFrom } from '../helpers/identity.ts';
import { samplesOf } from '../helpers/prometheus.ts';
import { eventually, sleep } from '../helpers/servers.ts';
import { startTestTopology, type TestTopology } from '../helpers/topology.ts';
import { runWaypointProcess, type WaypointProcess } from './l7/waypoint-process.ts';

const NET = 56;
const HBONE = { host: `127.0.${NET}.1`, port: 15008 };
const AUTHORITY = `127.0.${NET}.100:80`;
let topo: TestTopology;
let wp: WaypointProcess;
let admin: string;
let id: ClientIdentity;
const sessions: ClientHttp2Session[] = [];

interface Dump {
  readonly workers: { worker: number; pid: number | null; ready: boolean }[];
}

async function dump(): Promise<Dump> {
  const res = await fetch(`${admin}config_dump`);
  expect(res.status).toBe(200);
  return (await res.json()) as Dump;
}

/** One GET through a new CONNECT on `session`: the status, or an error message when the tunnel could not be used. */
async function get(session: ClientHttp2Session, path: string): Promise<number | string> {
  try {
    const c = await connect(session, AUTHORITY);
    if (c.status !== 200) return `CONNECT ${c.status}`;
    const r = await exchange(c.stream, path);
    c.stream.close();
    return r.status;
  } catch (err) {
    return (err as Error).message;
  }
}

async function requestsTotal(): Promise<number> {
  const res = await fetch(`${admin}stats/prometheus`);
  return samplesOf(await res.text(), 'istio_requests_total').reduce((n, s) => n + s.value, 0);
}

beforeAll(async () => {
  topo = await startTestTopology(NET, { startWaypoint: false, tunnel: false });
  wp = await runWaypointProcess(topo, NET, { drain: { timeoutMs: 5000 } }, ['--concurrency', '2']);
  // The banner follows the "waypoint ready" line.
  admin = await eventually(() => /admin: +(http:\/\/[^\s]+\/)/.exec(wp.lines.map((l) => l.text).join('\n'))?.[1], 'the admin address in the banner');
  id = await identityFrom(topo.caDir);
}, 30_000);

afterAll(async () => {
  for (const s of sessions) s.destroy();
  if (wp?.child.exitCode === null) wp.child.kill('SIGKILL');
  await topo?.close();
});

test('two workers share the HBONE listener; one scrape sums their requests; config_dump lists them', { timeout: 30_000 }, async () => {
  const d = await dump();
  expect(d.workers).toHaveLength(2);
  expect(d.workers.every((w) => w.ready && typeof w.pid === 'number' && w.pid !== wp.child.pid)).toBe(true);
  expect(new Set(d.workers.map((w) => w.pid)).size).toBe(2);
  // Six HBONE connections: the primary hands them to the workers in turn.
  for (let i = 0; i < 6; i++) sessions.push(await hboneSession(HBONE.host, HBONE.port, id));
  const statuses = await Promise.all(sessions.map((s, i) => get(s, `/w/${i}`)));
  expect(statuses).toEqual([200, 200, 200, 200, 200, 200]);
  await expect.poll(requestsTotal, { timeout: 5_000 }).toBe(6);
});

test('a worker killed takes only its own tunnels; it is replaced and the rest keep serving', { timeout: 30_000 }, async () => {
  const before = await dump();
  const victim = before.workers[0].pid!;
  process.kill(victim, 'SIGKILL');
  await sleep(300);
  const statuses = await Promise.all(sessions.map((s, i) => get(s, `/after-kill/${i}`)));
  // The connections the killed worker held are gone; the other worker's still serve.
  expect(statuses.filter((s) => s === 200).length).toBeGreaterThanOrEqual(1);
  expect(statuses.filter((s) => s !== 200).length).toBeGreaterThanOrEqual(1);
  await expect
    .poll(async () => (await dump()).workers.filter((w) => w.ready && w.pid !== victim).length, { timeout: 15_000, interval: 200 })
    .toBe(2);
  expect(wp.lines.some((l) => l.text.includes('worker exited; starting another'))).toBe(true);
  // New connections are served (by either worker).
  const fresh = await hboneSession(HBONE.host, HBONE.port, id);
  sessions.push(fresh);
  expect(await get(fresh, '/fresh')).toBe(200);
});

test('SIGTERM drains every worker: a request in flight finishes, then the process exits 0', { timeout: 30_000 }, async () => {
  const session = await hboneSession(HBONE.host, HBONE.port, id);
  sessions.push(session);
  const c = await connect(session, AUTHORITY);
  expect(c.status).toBe(200);
  // A POST whose body is still arriving when the drain starts.
  const body = 'x'.repeat(10);
  const answer = readResponse(c.stream);
  c.stream.write(`POST /drain HTTP/1.1\r\nhost: echo\r\ncontent-length: ${body.length}\r\n\r\n${body.slice(0, 5)}`);
  await sleep(200);
  const readyBefore = await fetch(`${admin}healthz/ready`);
  expect(readyBefore.status).toBe(200);
  wp.child.kill('SIGTERM');
  await sleep(500);
  expect((await fetch(`${admin}healthz/ready`).catch(() => ({ status: 0 }))).status).toBe(503);
  c.stream.write(body.slice(5));
  const r = await answer;
  expect(r.status).toBe(200);
  expect(r.body).toBe(body);
  const exit = await wp.exited;
  expect(exit.code).toBe(0);
  expect(wp.lines.some((l) => l.text.includes('waypoint stopped'))).toBe(true);
});

/** The first HTTP/1.1 response on `s` (Content-Length framed). */
function readResponse(s: Duplex): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    let acc = Buffer.alloc(0);
    s.on('data', (c: Buffer) => {
      acc = Buffer.concat([acc, c]);
      const head = acc.indexOf('\r\n\r\n');
      if (head < 0) return;
      const len = Number(/content-length: (\d+)/i.exec(acc.subarray(0, head).toString())?.[1] ?? 0);
      if (acc.length < head + 4 + len) return;
      const r = parseHttpResponse(acc);
      resolve({ status: r.status, body: r.body.toString() });
    });
    s.once('error', reject);
  });
}
