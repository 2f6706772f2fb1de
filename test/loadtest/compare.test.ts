/**
 * `waypoint loadtest compare a.json b.json`: every figure of two results as B ÷ A, printed and
 * (with --report) drawn; a file that is not a load-test result is a usage error.
 * Addresses: 127.0.178.x.
 */
import fs from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, expect, test } from 'vitest';
import { compareReports, formatComparison, resolveSettings, runLoadtest, type LoadtestReport } from '../../src/loadtest/index.ts';
import { closeServer, listen, track } from '../helpers/servers.ts';
import { chartsOf, openInBrowser, skipBrowser } from './browser.ts';
import { cli } from './helpers.ts';

let server: http.Server;
let sockets: Set<import('node:net').Socket>;
let dir: string;
let a: LoadtestReport;
let b: LoadtestReport;

beforeAll(async () => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'wp-loadtest-compare-'));
  server = http.createServer((req, res) => req.resume().on('end', () => res.end('ok')));
  sockets = track(server);
  await listen(server, '127.0.178.11', 8080);
  const run = (flags: Parameters<typeof resolveSettings>[0]) => runLoadtest({ settings: resolveSettings({ target: '127.0.178.11:8080', interval: '200ms', ...flags }), version: 'test' });
  a = await run({ rate: 200, requests: 100, label: 'A at 200/s' });
  b = await run({ requests: 300, connections: 4, label: 'B closed loop' });
  fs.writeFileSync(path.join(dir, 'a.json'), JSON.stringify(a));
  fs.writeFileSync(path.join(dir, 'b.json'), JSON.stringify(b));
  fs.writeFileSync(path.join(dir, 'not-a-result.json'), JSON.stringify({ RunType: 'HTTP', ActualQPS: 1 }));
});
afterAll(async () => {
  await closeServer(server, sockets);
  fs.rmSync(dir, { recursive: true, force: true });
});

test('prints every figure as B ÷ A, says which is better, and warns that the loads differ', async () => {
  const r = await cli(['loadtest', 'compare', path.join(dir, 'a.json'), path.join(dir, 'b.json'), '--report', path.join(dir, 'cmp.html')]);
  expect(r.stderr).toBe('');
  expect(r.code).toBe(0);
  expect(r.stdout).toMatch(/^A: A at 200\/s\nB: B closed loop\n/);
  const ratio = Math.round((b.loadtest.throughput.achievedRps / a.loadtest.throughput.achievedRps) * 1000) / 1000;
  const row = r.stdout.split('\n').find((l) => l.startsWith('throughput req/s'));
  expect(row).toContain(`${ratio.toFixed(3)}×`);
  expect(row).toMatch(Math.abs(ratio - 1) <= 0.01 ? /same$/ : ratio > 1 ? /B better$/ : /B worse$/);
  const p99 = r.stdout.split('\n').find((l) => l.startsWith('p99 latency (corrected)'));
  const p99Ratio = Math.round((b.loadtest.latencyUs.corrected.p99 / a.loadtest.latencyUs.corrected.p99) * 1000) / 1000;
  expect(p99).toContain(`${p99Ratio.toFixed(3)}×`);
  expect(r.stdout).toMatch(/Not the same load \(compare with care\):\n {2}rate: 200 req\/s vs closed loop\n/);
  expect(r.stdout).toMatch(new RegExp(`wrote ${path.join(dir, 'cmp.html').replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}`));
});

test('a file that is not a load-test result, or is missing, is a usage error', async () => {
  const [bad, missing] = await Promise.all([
    cli(['loadtest', 'compare', path.join(dir, 'a.json'), path.join(dir, 'not-a-result.json')]),
    cli(['loadtest', 'compare', path.join(dir, 'a.json'), path.join(dir, 'nope.json')]),
  ]);
  expect(bad.code).toBe(2);
  expect(bad.stderr).toMatch(/not-a-result\.json: not a node-waypoint load-test result \(no "loadtest" section/);
  expect(missing.code).toBe(2);
  expect(missing.stderr).toMatch(/nope\.json: no such file/);
});

test.skipIf(skipBrowser)('the comparison page opens in headless chromium with its charts drawn', async () => {
  const file = path.join(dir, 'cmp.html');
  if (!fs.existsSync(file)) await cli(['loadtest', 'compare', path.join(dir, 'a.json'), path.join(dir, 'b.json'), '--report', file]);
  const { dom, console } = await openInBrowser(file);
  expect(console).toEqual([]);
  expect(dom).toMatch(/<body[^>]* data-ready="1"/);
  const charts = chartsOf(dom);
  expect([...charts.keys()].sort()).toEqual(['chart-percentiles', 'chart-ratios', 'chart-throughput']);
  expect(charts.get('chart-ratios')).toMatch(/<path class="bar (better|worse)" d="M[\d.]+,[\d.]+H/);
  for (const id of ['chart-percentiles', 'chart-throughput']) expect(charts.get(id), id).toMatch(/<path class="series" d="M[\d.]+,[\d.]+L/);
});

test('at the same fixed rate throughput is not ranked; differences within 1 % are "same"', () => {
  // The same run, its figures moved a little (the report's types are read-only).
  const b2 = structuredClone(a) as unknown as { loadtest: { throughput: { achievedRps: number }; latencyUs: { corrected: { p50: number; p99: number } } } };
  b2.loadtest.throughput.achievedRps = a.loadtest.throughput.achievedRps * 0.999;
  b2.loadtest.latencyUs.corrected.p99 = a.loadtest.latencyUs.corrected.p99 * 1.005;
  b2.loadtest.latencyUs.corrected.p50 = a.loadtest.latencyUs.corrected.p50 * 2;
  const lines = formatComparison(compareReports(a, b2 as unknown as LoadtestReport)).split('\n');
  const line = (metric: string) => lines.find((l) => l.startsWith(metric)) ?? '';
  expect(line('throughput req/s')).toMatch(/×$/);
  expect(line('p99 latency (corrected)')).toMatch(/ same$/);
  expect(line('p50 latency (corrected)')).toMatch(/ B worse$/);
  expect(lines.join('\n')).not.toContain('Not the same load');
});
