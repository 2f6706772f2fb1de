/**
 * Soak version of test/integration/overload.test.ts (`npm run soak`): rounds of 400 downloads
 * whose clients never read (the case that held 1.85 GB, 4 MiB each, while a steady client timed
 * out), under a 48 MiB budget, with a well-behaved client sending a request every 100 ms through
 * it all. Each round: the waypoint's buffered bytes stay within the budget (new CONNECTs get 503
 * past its first threshold, the largest streams are reset past it), every probe is answered
 * within 5 s (200, or refused) and the probe is served again once the hogs were reset; after the hogs close, the gauge is 0 and Buffer memory back at the baseline. RSS stops
 * growing over the rounds (the allocator keeps what it freed for the next round; a leak would
 * grow with them). Addresses: 127.0.208.x.
 */
import type { ClientHttp2Session, ClientHttp2Stream } from 'node:http2';
import type net from 'node:net';
import { afterAll, beforeAll, expect, test } from 'vitest';
import { parseHttpResponse, type ClientIdentity } from '../helpers/hbone-client.ts';
import { openEntry, startTestTopology, type TestTopology } from '../helpers/topology.ts';
import { Apps, hog, identity, KiB, liveMemory, metric, MiB, settled, stallingSession, until } from '../integration/overload-rig.ts';

const NET = 208;
const ROUNDS = 20;
/** Four HBONE connections of 100 streams (the waypoint's SETTINGS_MAX_CONCURRENT_STREAMS). */
const SESSIONS = 4;
const PER_SESSION = 100;
const BUDGET = 48 * MiB;

let topo: TestTopology;
const apps = new Apps();
let id: ClientIdentity;
let probe: Probe | undefined;

beforeAll(async () => {
  await apps.start([`127.0.${NET}.11`, `127.0.${NET}.12`]);
  topo = await startTestTopology(NET, { backends: false, bootstrap: { overload: { maxBufferedBytes: BUDGET, refreshIntervalMs: 100 } } });
  id = await identity(topo);
});

afterAll(async () => {
  await probe?.stop();
  await topo?.close();
  apps.close();
});

/** A client sending `GET /probe` every 100 ms on one keep-alive tunnel (a new one when refused); what it got. */
class Probe {
  readonly statuses: number[] = [];
  slowest = 0;
  private running = true;
  private socket: net.Socket | undefined;
  private readonly done: Promise<void>;

  constructor() {
    this.done = this.loop();
  }

  private async loop(): Promise<void> {
    while (this.running) {
      const started = performance.now();
      const status = await this.once();
      this.slowest = Math.max(this.slowest, performance.now() - started);
      this.statuses.push(status);
      await new Promise((r) => setTimeout(r, 100));
    }
  }

  /** One request: its status, 0 for a connection closed or refused (a refused CONNECT), -1 after 5 s without an answer. */
  private async once(): Promise<number> {
    try {
      this.socket ??= await openEntry(topo);
      const s = this.socket;
      s.removeAllListeners('error');
      s.on('error', () => {});
      const answer = new Promise<number>((resolve) => {
        let acc = Buffer.alloc(0);
        const onData = (c: Buffer) => {
          acc = Buffer.concat([acc, c]);
          const end = acc.indexOf('\r\n\r\n');
          if (end < 0) return;
          const len = Number(/content-length: (\d+)/i.exec(acc.subarray(0, end).toString())?.[1] ?? 0);
          if (acc.length < end + 4 + len) return;
          s.off('data', onData);
          resolve(parseHttpResponse(acc).status);
        };
        s.on('data', onData);
        s.once('close', () => resolve(0));
      });
      s.write('GET /probe HTTP/1.1\r\nhost: echo\r\n\r\n');
      const status = await Promise.race([answer, new Promise<number>((r) => setTimeout(() => r(-1), 5000))]);
      if (status !== 200) {
        s.destroy();
        this.socket = undefined;
      }
      return status;
    } catch {
      this.socket?.destroy();
      this.socket = undefined;
      return 0;
    }
  }

  /** Wait for the next 200. */
  async served(ms: number): Promise<void> {
    const from = this.statuses.length;
    await until(() => this.statuses.slice(from).includes(200), ms, 'the probe served');
  }

  async stop(): Promise<void> {
    this.running = false;
    await this.done;
    this.socket?.destroy();
    this.socket = undefined;
  }
}

test(`${ROUNDS} rounds of ${SESSIONS * PER_SESSION} stalled downloads within a ${BUDGET / MiB} MiB budget, a steady client served throughout`, { timeout: 600_000 }, async () => {
  const base = await liveMemory();
  const rss: number[] = [];
  for (let round = 0; round < ROUNDS; round++) {
    const p = new Probe();
    probe = p;
    const sessions: ClientHttp2Session[] = [];
    const hogs: ClientHttp2Stream[] = [];
    let refused = 0;
    // All at once, as a burst of clients arrives: many are admitted before the buffers they will
    // hold are sampled, so together they pass the budget (the refresh then resets the largest).
    for (let s = 0; s < SESSIONS; s++) {
      const session = await stallingSession(topo, NET, id);
      session.on('error', () => {});
      sessions.push(session);
    }
    const opened = await Promise.allSettled(sessions.flatMap((session) => Array.from({ length: PER_SESSION }, () => hog(session, NET, 'GET /endless HTTP/1.1\r\nhost: echo\r\n\r\n'))));
    for (const o of opened) {
      if (o.status === 'fulfilled') hogs.push(o.value);
      else refused++; // 503 past the first threshold
    }
    opened.length = 0;
    const gauge = await settled(topo);
    // Under the budget once the refresh after the last growth has run (resets bring it under the first threshold).
    expect(gauge, `round ${round}: buffered bytes`).toBeLessThanOrEqual(BUDGET);
    await p.served(10_000);
    const grown = await liveMemory();
    const resets = await metric(topo, 'envoy_envoy_overload_actions_reset_high_memory_stream_count');
    console.log(
      `round ${round}: ${hogs.length} hogs admitted, ${refused} refused, ${resets} reset so far; gauge ${(gauge / MiB).toFixed(1)} MiB; ` +
        `Buffer memory +${((grown.arrayBuffers - base.arrayBuffers) / MiB).toFixed(1)} MiB, RSS +${((grown.rss - base.rss) / MiB).toFixed(1)} MiB; ` +
        `probe ${p.statuses.filter((x) => x === 200).length}×200 ${p.statuses.filter((x) => x === 503).length}×503 ${p.statuses.filter((x) => x === 0).length}×refused, slowest ${p.slowest.toFixed(0)} ms`,
    );
    // Everything in the process (clients' and the inbound role's windows too) stays within a small
    // multiple of the budget: 400 streams of 4 MiB windows held 1.85 GB.
    expect(grown.arrayBuffers - base.arrayBuffers, `round ${round}: Buffer memory`).toBeLessThan(BUDGET + SESSIONS * PER_SESSION * 192 * KiB);
    for (const s of sessions) s.destroy();
    // Destroyed client streams keep what they received (64 KiB each, never read): let go of them.
    hogs.length = 0;
    sessions.length = 0;
    await until(async () => (await metric(topo, 'envoy_overload_buffered_bytes')) === 0, 10_000, 'the gauge back at 0');
    await p.stop();
    probe = undefined;
    // Every probe got an answer within 5 s: 200, or a refusal while refusing (503 inside a tunnel;
    // a refused CONNECT, which the tunnel role turns into a closed connection as ztunnel does).
    expect(p.statuses.filter((x) => x === -1), `round ${round}: probes without an answer in 5 s`).toEqual([]);
    // Given back once the closed streams' last callbacks have run.
    let after = await liveMemory();
    for (let i = 0; i < 20 && after.arrayBuffers - base.arrayBuffers >= 2 * MiB; i++) {
      await new Promise((r) => setTimeout(r, 250));
      after = await liveMemory();
    }
    rss.push(after.rss);
    console.log(`round ${round} closed: Buffer memory +${((after.arrayBuffers - base.arrayBuffers) / MiB).toFixed(1)} MiB, RSS +${((after.rss - base.rss) / MiB).toFixed(1)} MiB`);
    expect((after.arrayBuffers - base.arrayBuffers) / MiB, `round ${round}: Buffer memory after close`).toBeLessThan(4);
  }
  console.log(`RSS after each round: ${rss.map((r) => ((r - base.rss) / MiB).toFixed(0)).join(', ')} MiB over the baseline`);
  expect((rss[ROUNDS - 1] - rss[1]) / MiB, 'RSS growth after the second round').toBeLessThan(64);
});
