/**
 * The waypoint dies in the middle of a run (SIGKILL, or SIGTERM and its drain): the load test
 * keeps going, counts the requests that failed by kind (the CONNECT refused, the tunnel reset),
 * and still writes its summary and JSON result. HTTP/1.1 inside HBONE is the case that matters:
 * undici's client is re-entered from its own error path when the engine sends the next request at
 * once. Addresses: 127.0.182.x and 127.0.183.x (one child waypoint each).
 */
import fs from 'node:fs';
import path from 'node:path';
import { afterAll, expect, test } from 'vitest';
import { LocalCa } from '../../src/identity/index.ts';
import type { LoadtestReport } from '../../src/loadtest/index.ts';
import { spiffe } from '../helpers/identity.ts';
import { sleep } from '../helpers/servers.ts';
import { childWaypoint, cli, type ChildWaypoint } from './helpers.ts';

const waypoints: ChildWaypoint[] = [];
afterAll(async () => {
  for (const wp of waypoints) await wp.close();
});

/** Requests the waypoint has answered (its istio_requests_total), 0 while it is not reachable. */
async function servedRequests(admin: string): Promise<number> {
  try {
    const text = await (await fetch(`${admin}/stats/prometheus`, { signal: AbortSignal.timeout(1_000) })).text();
    return [...text.matchAll(/^istio_requests_total\{[^}]*\} (\d+)/gm)].reduce((n, m) => n + Number(m[1]), 0);
  } catch {
    return 0;
  }
}

async function runWhileKilled(net: number, signal: NodeJS.Signals, protocol: string): Promise<void> {
  const wp = await childWaypoint(net);
  waypoints.push(wp);
  const ca = await LocalCa.load(wp.topo.caDir);
  const leaf = await ca.issue(spiffe('demo', 'client'), 3600_000);
  const prefix = path.join(wp.dir, 'client');
  fs.writeFileSync(`${prefix}-cert.pem`, leaf.certPem);
  fs.writeFileSync(`${prefix}-key.pem`, leaf.keyPem);
  const json = path.join(wp.dir, `${signal}.json`);
  const running = cli(
    ['loadtest', '--no-progress', '--waypoint', `127.0.${net}.1:15008`, '--authority', `127.0.${net}.100:80`, '--identity', prefix, '--ca', path.join(wp.topo.caDir, 'root-cert.pem'),
      '--protocol', protocol, '--rate', '1000', '--duration', '3s', '--connections', '1', '--timeout', '2s', '--json', json],
    60_000,
  );
  // Killed once it has served part of the load (the CLI's start-up time varies with the machine).
  let stop = false;
  const kill = (async () => {
    while (!stop && (await servedRequests(wp.admin)) < 50) await sleep(100);
    if (!stop) wp.proc.kill(signal);
  })();
  const r = await running.finally(() => (stop = true));
  await kill;
  expect(r.stderr).not.toContain('AssertionError');
  expect(r.code, r.stderr).toBe(0);
  expect(r.stdout).toContain('requests');
  const report = JSON.parse(fs.readFileSync(json, 'utf8')) as LoadtestReport;
  const w = report.loadtest.window;
  // Some requests made it before the kill; every one after it failed and was counted by kind.
  expect(w.ok).toBeGreaterThan(0);
  expect(w.errors).toBeGreaterThan(0);
  expect(w.ok + w.errors).toBe(w.scheduled);
  for (const kind of Object.keys(report.loadtest.errors)) expect(kind).toMatch(/^(connect_\w+|reset|timeout|not_sent)$/);
  // Nothing listens any more: the CONNECTs were refused (not the tautological "connect_connect").
  expect(report.loadtest.errors.connect_refused).toBeGreaterThan(0);
  expect(report.loadtest.errors).not.toHaveProperty('connect_connect');
}

test('HTTP/1.1 over HBONE: the waypoint SIGKILLed mid-run; errors counted, the result written', async () => {
  await runWhileKilled(182, 'SIGKILL', 'http1');
});

test('HTTP/1.1 over HBONE: the waypoint SIGTERMed (drains and exits) mid-run; errors counted, the result written', async () => {
  await runWhileKilled(183, 'SIGTERM', 'http1');
});
