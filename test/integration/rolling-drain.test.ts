/**
 * A rolling update loses no request. Two `waypoint run` processes serve one service; a client
 * that behaves as ztunnel does toward a waypoint Service (it follows the endpoints' readiness,
 * polled here, spreads each new tunnel over the ready ones and keeps one pooled HBONE session per
 * endpoint, opening a new one after a GOAWAY) sends steady load while one waypoint gets SIGTERM and
 * a new one starts beside it, as a Deployment roll does. On SIGTERM the waypoint turns not-ready at
 * once but still accepts new tunnels for the drain delay, then sends GOAWAY and lets in-flight
 * requests finish: every request succeeds, and the old process exits 0. Addresses: 127.0.125.x.
 */
import http from 'node:http';
import type { ClientHttp2Session } from 'node:http2';
import { afterAll, beforeAll, expect, test } from 'vitest';
import { connect, hboneSession, parseHttpResponse, readAll, type ClientIdentity } from '../helpers/hbone-client.ts';
import { spiffe, TestCa } from '../helpers/identity.ts';
import { startTestTopology, type TestTopology } from '../helpers/topology.ts';
import { runWaypointProcess, type WaypointProcess } from './l7/waypoint-process.ts';

const NET = 125;
const ip = (n: number) => `127.0.${NET}.${n}`;
/** Longer than the client's readiness poll (50 ms) by far, as Istio's 5 s is longer than endpoint propagation. */
const DRAIN = { delayMs: 2000, timeoutMs: 3000 };

let topo: TestTopology;
let client: ClientIdentity;
const processes: WaypointProcess[] = [];

/** `waypoint run` on `<ip>:15008` with its status server on `<ip>:15021`. */
async function startWaypoint(at: string): Promise<WaypointProcess> {
  const wp = await runWaypointProcess(topo, NET, { listeners: { hbone: `${at}:15008`, admin: `${at}:0`, readiness: `${at}:15021` }, drain: DRAIN });
  processes.push(wp);
  return wp;
}

/** One waypoint endpoint as the client sees it. */
interface Endpoint {
  readonly ip: string;
  ready: boolean;
  session: ClientHttp2Session | undefined;
  ok: number;
}

/** The ztunnel stand-in: readiness-following, round-robin over ready endpoints, one pooled session each. */
class Spreader {
  readonly endpoints: Endpoint[] = [];
  readonly failures: string[] = [];
  private next = 0;
  private polling = true;
  private readonly poller: Promise<void>;

  constructor() {
    this.poller = this.poll();
  }

  add(at: string): Endpoint {
    const ep: Endpoint = { ip: at, ready: false, session: undefined, ok: 0 };
    this.endpoints.push(ep);
    return ep;
  }

  private async poll(): Promise<void> {
    while (this.polling) {
      await Promise.all(this.endpoints.map(async (ep) => (ep.ready = await isReady(ep.ip))));
      await new Promise((r) => setTimeout(r, 50));
    }
  }

  /** One request in a new tunnel (CONNECT) to a ready endpoint; failures are recorded, never retried. */
  async request(n: number): Promise<void> {
    const ready = this.endpoints.filter((e) => e.ready);
    if (ready.length === 0) return void this.failures.push(`#${n}: no ready endpoint`);
    const ep = ready[this.next++ % ready.length];
    try {
      const session = await this.sessionTo(ep);
      const { status, stream } = await connect(session, `${ip(100)}:80`);
      if (status !== 200) throw new Error(`CONNECT answered ${status}`);
      stream.end(`GET /req/${n} HTTP/1.1\r\nhost: echo.demo.svc.cluster.local\r\nconnection: close\r\n\r\n`);
      const res = parseHttpResponse(await readAll(stream));
      if (res.status !== 200) throw new Error(`answered ${res.status}`);
      ep.ok++;
    } catch (err) {
      this.failures.push(`#${n} via ${ep.ip}: ${(err as Error).message}`);
    }
  }

  private async sessionTo(ep: Endpoint): Promise<ClientHttp2Session> {
    if (ep.session && !ep.session.closed && !ep.session.destroyed) return ep.session;
    const session = await hboneSession(ep.ip, 15008, client, { localAddress: ip(50) });
    session.on('error', () => {});
    // After a GOAWAY new streams go to a new session (ztunnel's pool does the same).
    session.once('goaway', () => {
      if (ep.session === session) ep.session = undefined;
    });
    session.once('close', () => {
      if (ep.session === session) ep.session = undefined;
    });
    ep.session = session;
    return session;
  }

  async close(): Promise<void> {
    this.polling = false;
    await this.poller;
    for (const ep of this.endpoints) ep.session?.close();
  }
}

function isReady(at: string): Promise<boolean> {
  return new Promise((resolve) => {
    const req = http.get({ host: at, port: 15021, path: '/healthz/ready', timeout: 1000, agent: false }, (res) => {
      res.resume();
      resolve(res.statusCode === 200);
    });
    req.once('error', () => resolve(false));
    req.once('timeout', () => req.destroy());
  });
}

beforeAll(async () => {
  topo = await startTestTopology(NET, { startWaypoint: false, tunnel: false });
  client = await (await TestCa.load(topo.caDir)).fresh(spiffe('demo', 'client'));
});

afterAll(async () => {
  for (const p of processes) p.child.kill('SIGKILL');
  await topo?.close();
});

test('rolling one of two waypoints under steady load: no request fails', async () => {
  const spreader = new Spreader();
  const a = spreader.add(ip(1));
  const aProcess = await startWaypoint(a.ip);
  const b = spreader.add(ip(2));
  await startWaypoint(b.ip);
  await expect.poll(() => a.ready && b.ready, { timeout: 10_000 }).toBe(true);

  // Steady load: a few clients, each sending one request after the other.
  let sent = 0;
  let loading = true;
  const loops = Array.from({ length: 6 }, async () => {
    while (loading) await spreader.request(sent++);
  });
  try {
    await expect.poll(() => a.ok > 20 && b.ok > 20, { timeout: 15_000 }).toBe(true);

    // The roll: the old pod gets SIGTERM while the new one starts and becomes an endpoint.
    aProcess.child.kill('SIGTERM');
    const c = spreader.add(ip(3));
    await startWaypoint(c.ip);
    const { code } = await aProcess.exited;
    expect(code).toBe(0);
    const okAtExit = { b: b.ok, c: c.ok };
    await expect.poll(() => c.ok > okAtExit.c + 20 && b.ok > okAtExit.b + 20, { timeout: 15_000 }).toBe(true);
  } finally {
    loading = false;
    await Promise.all(loops);
    await spreader.close();
  }
  expect(spreader.failures).toEqual([]);
  expect(sent).toBeGreaterThan(100);
  expect(aProcess.lines.some((l) => l.text.includes('"draining"'))).toBe(true);
});
