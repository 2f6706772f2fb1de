/**
 * The open loop: a fixed rate is held (the schedule does not wait for answers), and coordinated
 * omission is visible: with the waypoint frozen (SIGSTOP) for a second mid-run, the latency
 * measured from when each request was due shows the pause at p99, while the latency from when it
 * was sent (what a closed-loop tool reports) hides it. Timing only bounds: the assertions are
 * ratios with wide margins. Addresses: 127.0.174.x (child waypoint) and 127.0.175.x.
 */
import http from 'node:http';
import { afterAll, beforeAll, expect, test } from 'vitest';
import { processTree, runLoad, summarize, tcpTransport, type LoadPlan, type Transport } from '../../src/loadtest/index.ts';
import { closeServer, listen, track } from '../helpers/servers.ts';
import { childWaypoint, hboneInto, type ChildWaypoint } from './helpers.ts';

let wp: ChildWaypoint;
let server: http.Server;
let sockets: Set<import('node:net').Socket>;
/** Client ports that carried a request (which connections the load was spread over). */
const ports = new Set<number>();

beforeAll(async () => {
  server = http.createServer((req, res) => {
    ports.add(req.socket.remotePort!);
    req.resume().on('end', () => res.end('ok'));
  });
  sockets = track(server);
  await listen(server, '127.0.175.11', 8080);
  wp = await childWaypoint(174);
});
afterAll(async () => {
  await wp?.close();
  await closeServer(server, sockets);
});

function plan(transport: Transport, p: Partial<LoadPlan>): LoadPlan {
  return {
    protocol: 'http1',
    transport,
    connections: 2,
    streams: 1,
    rate: 200,
    requests: null,
    durationMs: 2_000,
    warmupMs: 0,
    spec: { method: 'GET', path: '/', authority: 'x', headers: {}, body: Buffer.alloc(0), grpcMethod: '/a/b' },
    timeoutMs: 5_000,
    intervalMs: 500,
    ...p,
  };
}

test('a fixed rate is held: the schedule sends rate × duration requests over the duration', async () => {
  ports.clear();
  const r = await runLoad(plan(tcpTransport({ host: '127.0.175.11', port: 8080 }, 2_000), { rate: 300, durationMs: 2_000, connections: 4 }));
  // Round-robin: every connection carried requests, not just the one that freed up last.
  expect(ports.size).toBe(4);
  expect(r.scheduled).toBe(600);
  expect(r.sent).toBe(600);
  expect(r.recorder.ok).toBe(600);
  // Achieved rate within a generous tolerance of the target (a busy machine delays answers, but
  // the schedule neither bursts ahead nor waits for them).
  const rps = r.recorder.completed / (r.windowMs / 1000);
  expect(rps).toBeGreaterThan(300 * 0.75);
  expect(rps).toBeLessThan(300 * 1.1);
  // Every full interval carried load: the rate was spread over the window, not sent at once.
  const full = r.recorder.timeline.filter((s) => s.tMs <= 2_000);
  expect(full.length).toBeGreaterThanOrEqual(3);
  for (const s of full) expect(s.completed).toBeGreaterThan(0);
});

test('a request count ends an open-loop run too (exactly that many, at the rate)', async () => {
  const r = await runLoad(plan(tcpTransport({ host: '127.0.175.11', port: 8080 }, 2_000), { rate: 400, durationMs: null, requests: 200, warmupMs: 300 }));
  expect(r.scheduled).toBe(200);
  expect(r.recorder.completed).toBe(200);
  // 200 requests at 400/s take about half a second, not less.
  expect(r.windowMs).toBeGreaterThan(400);
});

test('SIGSTOP of the waypoint for ~1 s: corrected p99 shows the pause, uncorrected p99 does not', async () => {
  const transport = await hboneInto(wp.topo.caDir, '127.0.174.1:15008', '127.0.174.100:80', 174);
  const timers: NodeJS.Timeout[] = [];
  const PAUSE_MS = 1_000;
  let resumed = false;
  const r = await runLoad(plan(transport, { rate: 200, durationMs: 3_000, warmupMs: 300 }), {
    onMeasureStart: () => {
      timers.push(setTimeout(() => signalTree(wp.pid, 'SIGSTOP'), 800));
      timers.push(
        setTimeout(() => {
          signalTree(wp.pid, 'SIGCONT');
          resumed = true;
        }, 800 + PAUSE_MS),
      );
    },
  }).finally(() => {
    for (const t of timers) clearTimeout(t);
    signalTree(wp.pid, 'SIGCONT');
  });
  expect(resumed).toBe(true);
  expect(r.recorder.errorCount).toBe(0);
  const corrected = summarize(r.recorder.corrected);
  const uncorrected = summarize(r.recorder.uncorrected);
  // About a third of the run was due during the pause: p99 from when due is most of the pause.
  expect(corrected.p99).toBeGreaterThan(PAUSE_MS * 1000 * 0.7);
  // From when sent, only the two requests on the wire at the freeze waited: far below 1%.
  expect(uncorrected.p99).toBeLessThan(corrected.p99 / 3);
  // The schedule kept going: the requests due during the pause queued up.
  expect(r.maxQueued).toBeGreaterThan(50);
});

/** Signal the waypoint and its worker processes (`waypoint run` starts one per core by default). */
function signalTree(pid: number, signal: NodeJS.Signals): void {
  for (const p of processTree(pid)) {
    try {
      process.kill(p, signal);
    } catch {
      // Exited meanwhile.
    }
  }
}
