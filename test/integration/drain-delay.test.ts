/**
 * The drain delay, step by step on one waypoint: on shutdown `/healthz/ready` answers 503 at once
 * while `/healthz/live` stays 200 (liveness never follows readiness); during `drain.delayMs` a new
 * HBONE connection and a new tunnel are still served; once the delay is over, an open session gets
 * GOAWAY, its in-flight request finishes, and new connections are refused. Addresses: 127.0.126.x.
 */
import http from 'node:http';
import type { ClientHttp2Session } from 'node:http2';
import { afterAll, beforeAll, expect, test } from 'vitest';
import { connect, hboneSession, parseHttpResponse, readAll, type ClientIdentity } from '../helpers/hbone-client.ts';
import { spiffe, TestCa } from '../helpers/identity.ts';
import { startTestTopology, type TestTopology } from '../helpers/topology.ts';

const NET = 126;
const WP = `127.0.${NET}.1`;
const DELAY_MS = 1500;
let topo: TestTopology;
let client: ClientIdentity;
const apps: http.Server[] = [];

beforeAll(async () => {
  topo = await startTestTopology(NET, {
    backends: false,
    tunnel: false,
    readiness: `${WP}:15021`,
    bootstrap: { drain: { delayMs: DELAY_MS, timeoutMs: 3000 } },
  });
  client = await (await TestCa.load(topo.caDir)).fresh(spiffe('demo', 'client'));
  // Apps answering after ?ms= milliseconds.
  for (const at of [`127.0.${NET}.11`, `127.0.${NET}.12`]) {
    const app = http.createServer((req, res) => {
      const ms = Number(new URL(req.url ?? '/', 'http://x').searchParams.get('ms') ?? 0);
      setTimeout(() => res.end(`done ${req.url}`), ms);
    });
    await new Promise<void>((r) => app.listen(8080, at, r));
    apps.push(app);
  }
});

afterAll(async () => {
  for (const a of apps) a.close();
  await topo?.close();
});

function status(path: string): Promise<number> {
  return new Promise((resolve) => {
    http.get({ host: WP, port: 15021, path, agent: false }, (res) => {
      res.resume();
      resolve(res.statusCode ?? 0);
    }).once('error', () => resolve(0));
  });
}

/** One request in a new tunnel on `session`. */
async function tunnelRequest(session: ClientHttp2Session, path: string): Promise<string> {
  const { status: s, stream } = await connect(session, `127.0.${NET}.100:80`);
  expect(s).toBe(200);
  stream.end(`GET ${path} HTTP/1.1\r\nhost: echo\r\nconnection: close\r\n\r\n`);
  const res = parseHttpResponse(await readAll(stream));
  expect(res.status).toBe(200);
  return res.body.toString();
}

test('shutdown: not ready at once, still serving new connections for the delay, then GOAWAY and in-flight finishes', async () => {
  const old = await hboneSession(WP, 15008, client, { localAddress: `127.0.${NET}.50` });
  old.on('error', () => {});
  expect(await status('/healthz/ready')).toBe(200);
  let goawayAt = 0;
  old.once('goaway', () => (goawayAt = performance.now()));

  const started = performance.now();
  const stopped = topo.waypoint!.shutdown();
  expect(await status('/healthz/ready')).toBe(503);
  expect(await status('/healthz/live')).toBe(200);

  // During the delay: a new connection and new tunnels (on it and on the old session) are served.
  const late = await hboneSession(WP, 15008, client, { localAddress: `127.0.${NET}.50` });
  late.on('error', () => {});
  expect(await tunnelRequest(late, '/late')).toBe('done /late');
  // Started in the delay, answered after it: in flight when the GOAWAY comes.
  const inflight = tunnelRequest(old, '/slow?ms=1500');
  expect(goawayAt, 'no GOAWAY during the delay').toBe(0);

  expect(await inflight).toBe('done /slow?ms=1500');
  expect(goawayAt - started).toBeGreaterThanOrEqual(DELAY_MS - 50);
  await expect(hboneSession(WP, 15008, client, { localAddress: `127.0.${NET}.50` })).rejects.toThrow(/ECONNREFUSED/);
  await stopped;
  late.destroy();
  old.destroy();
});
