/**
 * `waypoint run` as its own process: after SIGTERM with a slow request in flight, the process
 * exits within `drain.timeoutMs` plus the bounded close of the upstream side (1 s), right after it
 * logs "waypoint stopped" — nothing (timers, upstream pools, h2 sessions, the log stream) keeps
 * the event loop alive past the stop (found by a user trial: exit 1.3–2 s after the log line, 7 s
 * after TERM against a 5 s drain). Bounds only catch a hang. Addresses: 127.0.47.x.
 */
import http from 'node:http';
import net from 'node:net';
import path from 'node:path';
import { afterAll, beforeAll, expect, test } from 'vitest';
import { closeServer } from '../helpers/servers.ts';
import { startTestTopology, type TestTopology } from '../helpers/topology.ts';
import { runWaypointProcess } from './l7/waypoint-process.ts';

const NET = 47;
const DRAIN_MS = 1500;
let topo: TestTopology;
const apps: http.Server[] = [];
let inflight = 0;

beforeAll(async () => {
  topo = await startTestTopology(NET, { backends: false, startWaypoint: false });
  for (const ip of [`127.0.${NET}.11`, `127.0.${NET}.12`]) {
    const app = http.createServer((req, res) => {
      inflight++;
      res.once('close', () => inflight--);
      const ms = Number(new URL(req.url ?? '/', 'http://x').searchParams.get('ms') ?? 0);
      setTimeout(() => res.end('done'), ms).unref();
    });
    await new Promise<void>((r) => app.listen(8080, ip, r));
    apps.push(app);
  }
});

afterAll(async () => {
  await Promise.all(apps.map((a) => closeServer(a)));
  await topo?.close();
});

test('SIGTERM with a 20 s request in flight: exit right after "waypoint stopped", within the drain budget', async () => {
  const wp = await runWaypointProcess(topo, NET, { drain: { timeoutMs: DRAIN_MS }, accessLog: { file: path.join(topo.dir, 'access.log') } });
  try {
    // A slow request in flight, and an idle keep-alive upstream connection from an earlier one.
    const fast = await fetchVia('/fast');
    expect(fast).toContain('200');
    const slow = net.connect(topo.entry.port, topo.entry.host);
    slow.on('error', () => {});
    slow.write('GET /slow?ms=20000 HTTP/1.1\r\nhost: echo\r\n\r\n');
    await expect.poll(() => inflight, { timeout: 5000 }).toBe(1);
    const term = performance.now();
    wp.child.kill('SIGTERM');
    const { at, code } = await wp.exited;
    slow.destroy();
    const stopped = wp.lines.find((l) => l.text.includes('"waypoint stopped"'));
    expect(code).toBe(0);
    expect(stopped).toBeDefined();
    // The drain budget, the bounded close of the upstream side (1 s) and process start-up noise.
    expect(at - term).toBeLessThan(DRAIN_MS + 1000 + 700);
    // Nothing kept the event loop alive after the stop.
    expect(at - stopped!.at).toBeLessThan(500);
  } finally {
    wp.child.kill('SIGKILL');
  }
});

function fetchVia(p: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const s = net.connect(topo.entry.port, topo.entry.host);
    let acc = '';
    s.on('data', (c: Buffer) => {
      acc += c.toString();
      if (acc.includes('\r\n\r\n') && acc.endsWith('done')) {
        s.destroy();
        resolve(acc);
      }
    });
    s.once('error', reject);
    s.write(`GET ${p} HTTP/1.1\r\nhost: echo\r\n\r\n`);
  });
}
