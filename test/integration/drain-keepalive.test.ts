/**
 * Drain with HTTP/1.1 keep-alive inside a tunnel, as Envoy's connection manager drains
 * (envoyproxy/envoy source/common/http/conn_manager_impl.cc: while draining, an HTTP/1 response
 * carries `Connection: close` and the connection closes after it). A real keep-alive client (Node's
 * agent, one socket = one tunnel):
 * - a slow request in flight when the drain starts: its response says `Connection: close`, so the
 *   client does not reuse the tunnel for its next request but opens a new one (refused here: the
 *   session has had its GOAWAY, so a ztunnel would pick another waypoint); nothing is logged cut;
 * - a response already started with keep-alive before the drain: once it ends, the tunnel is
 *   closed both ways, so the client's next request is not taken and left unanswered
 *   (`0 DC downstream_remote_disconnect` before);
 * - a request still in flight at the drain timeout is cut by the waypoint: flag DC with Envoy's
 *   details for a local close, `downstream_local_disconnect`, not the client's
 *   `downstream_remote_disconnect`.
 * Addresses: 127.0.128.x, 127.0.129.x.
 */
import http from 'node:http';
import type { ClientHttp2Session } from 'node:http2';
import type { Duplex } from 'node:stream';
import { afterAll, expect, test } from 'vitest';
import { connect, hboneSession } from '../helpers/hbone-client.ts';
import { spiffe, TestCa } from '../helpers/identity.ts';
import { recorder, type Recorder } from '../helpers/recorder.ts';
import { startTestTopology, type TestTopology } from '../helpers/topology.ts';

interface Rig {
  readonly net: number;
  readonly topo: TestTopology;
  readonly session: ClientHttp2Session;
  readonly rec: Recorder;
}
const closers: (() => Promise<unknown> | void)[] = [];

afterAll(async () => {
  for (const c of closers.reverse()) await c();
});

/**
 * A waypoint at 127.0.<net>.1 (drain delay 300 ms, timeout 2.5 s) with apps answering after
 * `?ms=` milliseconds (`&head=1`: the response head at once, the body then), and an HBONE session to it.
 */
async function start(net: number): Promise<Rig> {
  const rec = recorder();
  const topo = await startTestTopology(net, {
    backends: false,
    tunnel: false,
    extraFilters: [rec.factory],
    bootstrap: { drain: { delayMs: 300, timeoutMs: 2500 }, filters: rec.filters },
  });
  closers.push(() => topo.close());
  for (const at of [`127.0.${net}.11`, `127.0.${net}.12`]) {
    const app = http.createServer((req, res) => {
      const q = new URL(req.url ?? '/', 'http://x').searchParams;
      if (q.get('head')) res.writeHead(200, { 'content-type': 'text/plain' }).flushHeaders();
      setTimeout(() => res.end(`done ${req.url}`), Number(q.get('ms') ?? 0));
    });
    await new Promise<void>((r) => app.listen(8080, at, r));
    closers.push(() => void app.close());
  }
  const client = await (await TestCa.load(topo.caDir)).fresh(spiffe('demo', 'client'));
  const session = await hboneSession(`127.0.${net}.1`, 15008, client, { localAddress: `127.0.${net}.50` });
  session.on('error', () => {});
  closers.push(() => void session.destroy());
  return { net, topo, session, rec };
}

/** A keep-alive agent whose every new connection is a new tunnel on the rig's session. */
function tunnelAgent(rig: Rig): { agent: http.Agent; tunnels: Duplex[]; opened: () => number } {
  const tunnels: Duplex[] = [];
  let opened = 0;
  const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
  // A tunnel is no TCP socket: nothing to set for TCP keep-alive.
  (agent as unknown as { keepSocketAlive: () => boolean }).keepSocketAlive = () => true;
  (agent as unknown as { createConnection: http.Agent['createConnection'] }).createConnection = ((_opts: unknown, cb: (err: Error | null, s?: Duplex) => void) => {
    opened++;
    connect(rig.session, `127.0.${rig.net}.100:80`).then(
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
  closers.push(() => agent.destroy());
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

test('a response in flight when the drain starts says Connection: close; the next request does not reuse its tunnel; the drain timeout cuts as the waypoint', async () => {
  const rig = await start(128);
  const { rec } = rig;
  const a = tunnelAgent(rig);
  const b = tunnelAgent(rig);
  // Warm: the keep-alive tunnel is reused while not draining.
  expect((await get(a.agent, '/warm')).connection).toBe('keep-alive');
  const slow = get(a.agent, '/slow?ms=1000');
  // In flight until the drain timeout.
  const stuck = get(b.agent, '/stuck?ms=10000').catch((err: Error) => err);
  await rec.find('/warm');
  await new Promise((r) => setTimeout(r, 100));
  const stopped = rig.topo.waypoint!.shutdown();
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
});

test('a keep-alive response started before the drain: the tunnel closes both ways after it, and the next request is not taken and dropped', async () => {
  const rig = await start(129);
  const { rec } = rig;
  const a = tunnelAgent(rig);
  const streaming = get(a.agent, '/stream?ms=800&head=1');
  // The response head (keep-alive) is out before the drain starts.
  await new Promise((r) => setTimeout(r, 200));
  const stopped = rig.topo.waypoint!.shutdown();
  const first = await streaming;
  expect(first).toMatchObject({ status: 200, connection: 'keep-alive', body: 'done /stream?ms=800&head=1' });
  // The agent would reuse a tunnel the waypoint only half-closed: the request is refused by the
  // transport (a new tunnel on the GOAWAY'd session), never taken and left unanswered.
  const second = await get(a.agent, '/second').catch((err: Error) => err);
  expect(second).toBeInstanceOf(Error);
  await stopped;
  expect(rec.streams.map((s) => [s.path, s.code, s.flags])).toEqual([['/stream?ms=800&head=1', 200, '-']]);
});
