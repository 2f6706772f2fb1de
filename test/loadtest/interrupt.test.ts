/**
 * Ctrl-C (the caller's abort signal) ends a run early without losing what it shows: requests that
 * were due but never sent (every connection stuck on a stalled server) are counted as `not_sent`,
 * as at the normal end of a run. The CLI exits 130 after an interrupt, marks the result, and writes
 * nothing when nothing was measured (Ctrl-C in the warm-up); `compare` refuses a result that
 * measured nothing and warns about an interrupted one. Addresses: 127.0.184.211.
 */
import fs from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, expect, test } from 'vitest';
import { resolveSettings, runLoad, runLoadtest, tcpTransport, type LoadPlan, type LoadtestReport } from '../../src/loadtest/index.ts';
import { closeServer, listen, track } from '../helpers/servers.ts';
import { cli } from './helpers.ts';

const TARGET = { host: '127.0.184.211', port: 8080 };
let server: http.Server;
let sockets: Set<import('node:net').Socket>;
/** While true, requests get no answer (a stalled waypoint). */
let stalled = false;
/** Called at each request the server receives. */
let onRequest = () => {};
let dir: string;

beforeAll(async () => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'wp-loadtest-interrupt-'));
  server = http.createServer((req, res) => {
    onRequest();
    if (!stalled) req.resume().on('end', () => res.end('ok'));
  });
  sockets = track(server);
  await listen(server, TARGET.host, TARGET.port);
});
afterAll(async () => {
  await closeServer(server, sockets);
  fs.rmSync(dir, { recursive: true, force: true });
});

/** `waypoint loadtest ARGS` against the target, sent SIGINT once the server has seen `after` requests. */
function interruptedCli(args: readonly string[], after: number): Promise<{ code: number | null; stdout: string; stderr: string }> {
  let seen = 0;
  return cli(['loadtest', '--no-progress', '--target', `${TARGET.host}:${TARGET.port}`, ...args], 30_000, (p) => {
    onRequest = () => {
      if (++seen === after) p.kill('SIGINT');
    };
  }).finally(() => (onRequest = () => {}));
}

const plan = (p: Partial<LoadPlan>): LoadPlan => ({
  protocol: 'http1',
  transport: tcpTransport(TARGET, 2_000),
  connections: 2,
  streams: 1,
  rate: 200,
  requests: null,
  durationMs: 10_000,
  warmupMs: 0,
  spec: { method: 'GET', path: '/', authority: 'x', headers: {}, body: Buffer.alloc(0), grpcMethod: '/a/b' },
  timeoutMs: 1_000,
  intervalMs: 200,
  ...p,
});

test('interrupted during a stall: the requests due but never sent are counted as not_sent', async () => {
  const abort = new AbortController();
  const r = await runLoad(plan({}), {
    onMeasureStart: () => {
      setTimeout(() => (stalled = true), 300);
      setTimeout(() => abort.abort(), 800);
    },
  }, abort.signal).finally(() => (stalled = false));
  expect(r.interrupted).toBe(true);
  const notSent = r.recorder.errors.get('not_sent') ?? 0;
  // ~0.5 s of stall at 200/s: ~100 due, 2 of them on the wire (timeout), the rest never sent.
  expect(notSent).toBeGreaterThan(40);
  expect(r.recorder.completed).toBe(r.scheduled);
});

test('Ctrl-C in the warm-up: exit 130, nothing measured, an earlier --json file kept', async () => {
  const json = path.join(dir, 'kept.json');
  fs.writeFileSync(json, '{"earlier": true}\n');
  const r = await interruptedCli(['--rate', '100', '--warmup', '20s', '--duration', '5s', '--json', json], 5);
  expect(r.code, r.stderr).toBe(130);
  expect(r.stderr).toContain(`waypoint: interrupted during the warm-up: nothing was measured; not written: ${json}`);
  expect(r.stdout).toBe('');
  expect(fs.readFileSync(json, 'utf8')).toBe('{"earlier": true}\n');
});

test('Ctrl-C while measuring: exit 130, the result written and marked interrupted', async () => {
  const json = path.join(dir, 'cut.json');
  const r = await interruptedCli(['--rate', '200', '--duration', '20s', '--json', json], 50);
  expect(r.code, r.stderr).toBe(130);
  expect(r.stdout).toContain('(interrupted)');
  const w = (JSON.parse(fs.readFileSync(json, 'utf8')) as LoadtestReport).loadtest.window;
  expect(w.interrupted).toBe(true);
  expect(w.incomplete).toBe('interrupted: the measured window was cut short');
  expect(w.ok).toBeGreaterThan(0);
});

test('compare refuses a result that measured nothing, and warns about an interrupted one', async () => {
  const run = async (abortAfterMs: number, warmup: string) => {
    const abort = new AbortController();
    setTimeout(() => abort.abort(), abortAfterMs);
    return runLoadtest({ settings: resolveSettings({ target: `${TARGET.host}:${TARGET.port}`, rate: '100', duration: '10s', warmup, interval: '200ms' }), signal: abort.signal, version: 'test' });
  };
  const [empty, cut] = await Promise.all([run(300, '5s'), run(600, '0s')]);
  const full = await runLoadtest({ settings: resolveSettings({ target: `${TARGET.host}:${TARGET.port}`, rate: '100', requests: '50', interval: '200ms' }), version: 'test' });
  for (const [name, r] of [['empty', empty], ['cut', cut], ['full', full]] as const) fs.writeFileSync(path.join(dir, `${name}.json`), JSON.stringify(r));
  expect(empty.loadtest.window.incomplete).toBe('interrupted during the warm-up: nothing was measured');

  const refused = await cli(['loadtest', 'compare', path.join(dir, 'full.json'), path.join(dir, 'empty.json')]);
  expect(refused.code).toBe(2);
  expect(refused.stderr).toBe(`waypoint: ${path.join(dir, 'empty.json')}: interrupted during the warm-up: nothing was measured; there is nothing to compare\n`);
  expect(refused.stdout).toBe('');

  const warned = await cli(['loadtest', 'compare', path.join(dir, 'full.json'), path.join(dir, 'cut.json')]);
  expect(warned.code).toBe(0);
  expect(warned.stderr).toMatch(/^waypoint: warning: B \(.*\) is not a full run: interrupted: the measured window was cut short; its figures cover [\d.]+ s and \d+ requests\n$/);
  expect(warned.stdout).toMatch(/^A: .*\nB: .*\nWARNING: B \(/);
});
