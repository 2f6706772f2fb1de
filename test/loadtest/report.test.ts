/**
 * What `waypoint loadtest --json --report` leaves behind: JSON in fortio's shape plus the versioned
 * `loadtest` section, and an HTML report that a real browser (headless chromium) opens with no
 * script error and every chart drawn. The CPU/RSS charts come from `--pid` (here the test process,
 * which serves the requests); `--stats-url` scrapes a Prometheus endpoint before and after.
 * Addresses: 127.0.177.x.
 */
import fs from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, expect, test } from 'vitest';
import { SCHEMA, type LoadtestReport } from '../../src/loadtest/index.ts';
import { closeServer, listen, track } from '../helpers/servers.ts';
import { chartsOf, openInBrowser, skipBrowser } from './browser.ts';
import { cli } from './helpers.ts';

let server: http.Server;
let sockets: Set<import('node:net').Socket>;
let dir: string;
let served = 0;
let run: { code: number | null; stdout: string; stderr: string };

beforeAll(async () => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'wp-loadtest-report-'));
  server = http.createServer((req, res) => {
    if (req.url === '/stats/prometheus') {
      res.end(`# TYPE test_requests_total counter\ntest_requests_total{app="test"} ${served}\n# TYPE test_up gauge\ntest_up 1\n`);
      return;
    }
    served++;
    req.resume().on('end', () => res.end('hello'));
  });
  sockets = track(server);
  await listen(server, '127.0.177.11', 8080);
  run = await cli([
    'loadtest',
    '--no-progress',
    '--target', '127.0.177.11:8080',
    '--rate', '200',
    '--duration', '1500ms',
    '--warmup', '300ms',
    '--interval', '250ms',
    '--pid', String(process.pid),
    '--stats-url', 'http://127.0.177.11:8080/stats/prometheus',
    '--label', 'report <test> & "quotes"',
    '--json', path.join(dir, 'r.json'),
    '--report', path.join(dir, 'r.html'),
  ]);
});
afterAll(async () => {
  await closeServer(server, sockets);
  fs.rmSync(dir, { recursive: true, force: true });
});

test('the run prints its summary and writes both files', () => {
  expect(run.stderr).toBe('');
  expect(run.code).toBe(0);
  expect(run.stdout).toMatch(/open loop at 200 req\/s/);
  expect(run.stdout).toMatch(/measured [\d.]+ s: 300 requests, 300 ok, 0 errors/);
  expect(run.stdout).toMatch(/corrected \(from when due\)/);
  expect(run.stdout).toMatch(new RegExp(`waypoint \\(pid ${process.pid}\\): [\\d.]+ cores`));
});

test("the JSON result is fortio's shape with the versioned loadtest section", () => {
  const r = JSON.parse(fs.readFileSync(path.join(dir, 'r.json'), 'utf8')) as LoadtestReport;
  expect(r.RunType).toBe('HTTP');
  expect(r.RequestedQPS).toBe('200');
  expect(r.RequestedDuration).toBe('1.5s');
  expect(r.URL).toBe('http://127.0.177.11:8080/');
  expect(r.RetCodes).toEqual({ '200': 300 });
  expect(r.NumThreads).toBe(2);
  expect(r.ActualQPS).toBeGreaterThan(100);
  // Durations in seconds; buckets cover every request, the last one at 100%.
  const h = r.DurationHistogram;
  expect(h.Count).toBe(300);
  expect(h.Data.reduce((n, b) => n + b.Count, 0)).toBe(300);
  expect(h.Data.at(-1)?.Percent).toBe(100);
  expect(h.Min).toBeGreaterThan(0);
  expect(h.Max).toBeLessThan(10);
  expect(h.Percentiles.map((p) => p.Percentile)).toEqual([50, 75, 90, 99, 99.9]);
  expect(r.ErrorsDurationHistogram.Count).toBe(0);
  const x = r.loadtest;
  expect(x.schema).toBe(SCHEMA);
  expect(x.latencyUs.corrected.count).toBe(300);
  expect(x.latencyUs.corrected.p99).toBeGreaterThanOrEqual(x.latencyUs.corrected.p50);
  expect(x.timeline.length).toBeGreaterThanOrEqual(5);
  expect(x.waypoint?.source).toBe(`pid ${process.pid}`);
  expect(x.waypoint?.series.length).toBeGreaterThanOrEqual(3);
  // The metrics scraped before and after: the counter moved by what the run sent (warm-up and probe included).
  const moved = x.prometheus[0].diff?.counters.find((c) => c.series === 'test_requests_total{app="test"}');
  expect(moved?.delta).toBeGreaterThanOrEqual(300);
  expect(x.prometheus[0].diff?.gauges).toEqual([]);
});

test.skipIf(skipBrowser)('the HTML report opens in headless chromium: no script error, every chart drawn', async () => {
  const { dom, console } = await openInBrowser(path.join(dir, 'r.html'));
  expect(console).toEqual([]);
  // The report's script ran to its end, and found the embedded result.
  expect(dom).toMatch(/<body[^>]* data-ready="1"/);
  expect(dom).toMatch(new RegExp(`<body[^>]* data-schema="${SCHEMA.replace(/\./g, '\\.')}"`));
  expect(dom).toMatch(/<body[^>]* data-charts="5"/);
  const charts = chartsOf(dom);
  expect([...charts.keys()].sort()).toEqual(['chart-cpu', 'chart-latency-time', 'chart-percentiles', 'chart-rss', 'chart-throughput']);
  for (const [id, markup] of charts) {
    expect(markup, id).toMatch(/<svg[^>]*viewBox/);
    expect(markup, id).toMatch(/<path class="series" d="M[\d.]+,[\d.]+L/);
  }
  // The label is text, not markup.
  expect(dom).toContain('report &lt;test&gt; &amp; "quotes"');
});
