/**
 * Drain with HTTP/1.1 keep-alive inside a tunnel, as Envoy's connection manager drains
 * (envoyproxy/envoy source/common/http/conn_manager_impl.cc: while draining, an HTTP/1 response
 * carries `Connection: close` and the connection closes after it). A real keep-alive client (Node's
 * agent, one socket = one tunnel) has a slow request in flight when the drain starts: its response
 * says `Connection: close`, so the client does not reuse the tunnel for its next request but opens
 * a new one (refused here: the session has had its GOAWAY, so a ztunnel would pick another
 * waypoint) and nothing is logged as cut. A request still in
 * flight at the drain timeout is cut by the waypoint: flag DC with Envoy's details for a local
 * close, `downstream_local_disconnect`, not the client's `downstream_remote_disconnect`.
 * Addresses: 127.0.128.x.
 */
import http from 'node:http';
import type { ClientHttp2Session } from 'node:http2';
import type { Duplex } from 'node:stream';
import { afterAll, beforeAll, expect, test } from 'vitest';
import { connect, hboneSession, type ClientIdentity } from '../helpers/hbone-client.ts';
import { spiffe, TestCa } from '../helpers/identity.ts';
import { recorder } from '../helpers/recorder.ts';
import { startTestTopology, type TestTopology } from '../helpers/topology.ts';

const NET = 128;
const WP = `127.0.${NET}.1`;
let topo: TestTopology;
let client: ClientIdentity;
let session: ClientHttp2Session;
const rec = recorder();
const apps: http.Server[] = [];

beforeAll(async () => {
  topo = await startTestTopology(NET, {
    backends: false,
    tunnel: false,
    extraFilters: [rec.factory],
    bootstrap: { drain: { delayMs: 300, timeoutMs: 2500 }, filters: rec.filters },
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
  session = await hboneSession(WP, 15008, client, { localAddress: `127.0.${NET}.50` });
  session.on('error', () => {});
});

afterAll(async () => {
  session?.destroy();
  for (const a of apps) a.close();
  await topo?.close();
});

/** A keep-alive agent whose every new connection is a new tunnel on `session`. */
function tunnelAgent(): { agent: http.Agent; tunnels: Duplex[]; opened: () => number } {
  const tunnels: Duplex[] = [];
  let opened = 0;
  const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
  // A tunnel is no TCP socket: nothing to set for TCP keep-alive.
  (agent as unknown as { keepSocketAlive: () => boolean }).keepSocketAlive = () => true;
  (agent as unknown as { createConnection: http.Agent['createConnection'] }).createConnection = ((_opts: unknown, cb: (err: Error | null, s?: Duplex) => void) => {
    opened++;
    connect(session, `127.0.${NET}.100:80`).then(
      ({ status, stream }) => {
        if (status !== 200) return cb(new Error(`CONNECT answered ${status}`));
        tunnels.push(stream);
        // The agent refs/unrefs the sockets it pools; a tunnel has no handle of its own.
        cb(null, Object.assign(stream, { ref: () => stream, unref: () => stream }));
      },
      (err: Error) => cb(err),
    );
    return undefined;
  }) as unknown as http.Agent['createConnection'];
  return { agent, tunnels, opened: () => opened };
}

function get(agent: http.Agent, path: string): Promise<{ status: number; connection: string | undefined; body: string }> {
  return new Promise((resolve, reject) => {
    const req = http.get({ host: 'echo', path, agent }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (c: string) => (body += c));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, connection: res.headers.connection, body }));
      res.on('error', reject);
    });
    req.on('error', reject);
  });
}

test('a response in flight when the drain starts says Connection: close; the next request does not reuse its tunnel', async () => {
  const a = tunnelAgent();
  const b = tunnelAgent();
  // Warm: the keep-alive tunnel is reused while not draining.
  expect((await get(a.agent, '/warm')).connection).toBe('keep-alive');
  const slow = get(a.agent, '/slow?ms=1000');
  // In flight until the drain timeout.
  const stuck = get(b.agent, '/stuck?ms=10000').catch((err: Error) => err);
  await rec.find('/warm');
  await new Promise((r) => setTimeout(r, 100));
  const stopped = topo.waypoint!.shutdown();
  const first = await slow;
  expect(first.body).toBe('done /slow?ms=1000');
  expect(first.connection).toBe('close');
  // The client's next request, during the drain: not on the closed tunnel but on a new one.
  const second = await get(a.agent, '/second').catch((err: Error) => err);
  expect(a.opened()).toBe(2);
  expect(a.tunnels.length).toBe(1);
  expect(second).toBeInstanceOf(Error);
  for (const p of ['/warm', '/slow?ms=1000']) expect(await rec.find(p)).toMatchObject({ code: 200, flags: '-' });
  // A request still in flight at the drain timeout is cut by the waypoint.
  const record = await rec.find('/stuck?ms=10000', 6000);
  expect(record).toMatchObject({ code: 0, flags: 'DC', details: 'downstream_local_disconnect' });
  expect(await stuck).toBeInstanceOf(Error);
  await stopped;
  expect(rec.streams.map((s) => s.path).sort()).toEqual(['/slow?ms=1000', '/stuck?ms=10000', '/warm']);
  a.agent.destroy();
  b.agent.destroy();
});
