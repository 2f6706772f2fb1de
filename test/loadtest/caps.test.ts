/**
 * `waypoint loadtest` is bounded by design: it needs an end (a request count or a duration), its
 * rate and concurrency stay under hard caps that only an explicit flag raises, and it refuses a
 * destination off this machine without --allow-remote. Each refusal is a usage error (exit 2)
 * naming the flag and the way out; nothing is sent. Addresses: 127.0.176.x.
 */
import http from 'node:http';
import os from 'node:os';
import { afterAll, beforeAll, expect, test } from 'vitest';
import { DEFAULT_CAPS, LoadtestUsageError, checkLoopback, resolveSettings } from '../../src/loadtest/index.ts';
import { closeServer, listen, track } from '../helpers/servers.ts';
import { cli } from './helpers.ts';

const TARGET = '127.0.176.11:8080';
let server: http.Server;
let sockets: Set<import('node:net').Socket>;
let requests = 0;

beforeAll(async () => {
  server = http.createServer((req, res) => {
    requests++;
    req.resume().on('end', () => res.end('ok'));
  });
  sockets = track(server);
  await listen(server, '127.0.176.11', 8080);
});
afterAll(() => closeServer(server, sockets));

/** Through the CLI: one case per rule (each process start costs about a second of CPU). */
const refusals: [string, string[], RegExp][] = [
  ['no end', ['--target', TARGET, '--rate', '10'], /waypoint: a load test needs an end: give --requests N or --duration D/],
  ['rate over the cap', ['--target', TARGET, '--rate', '20000', '--duration', '1s'], /--rate 20000 is above the cap of 10000 req\/s; pass --max-rate 20000 to raise the cap/],
  ['connections over the cap', ['--target', TARGET, '--connections', '2000', '--duration', '1s'], /--connections 2000 is above the cap of 1000; pass --max-connections 2000 to raise the cap/],
  ['remote target', ['--target', '10.1.2.3:80', '--requests', '10'], /--target 10\.1\.2\.3 is not a loopback address; pass --allow-remote to load a destination off this machine/],
  ['unknown flag', ['--target', TARGET, '--requests', '10', '--frobnicate'], /unknown option '--frobnicate'/],
  // Found before the run, not after it.
  ['--json in a missing directory', ['--target', TARGET, '--requests', '10', '--json', '/nonexistent-wp-dir/r.json'], /^waypoint: --json \/nonexistent-wp-dir\/r\.json: the directory \/nonexistent-wp-dir does not exist\n$/],
  ['--report a directory', ['--target', TARGET, '--requests', '10', '--report', os.tmpdir()], new RegExp(`^waypoint: --report ${os.tmpdir()}: is a directory; give a file name\n$`)],
];

test('every refusal exits 2 with a message naming the flag, and sends nothing', async () => {
  const before = requests;
  const [help, ...results] = await Promise.all([cli(['loadtest', 'compare', '--help']), ...refusals.map(([, args]) => cli(['loadtest', '--no-progress', ...args]))]);
  expect(help.code).toBe(0);
  expect(help.stdout).toMatch(/^Usage: waypoint loadtest compare \[options\] <a\.json> <b\.json>/);
  for (const [i, [name, , message]] of refusals.entries()) {
    expect({ name, code: results[i].code }).toEqual({ name, code: 2 });
    expect(results[i].stderr, name).toMatch(message);
    expect(results[i].stdout, name).toBe('');
  }
  expect(requests).toBe(before);
});

/** The same rules (and the rest of the usage errors) as the settings API applies them; the CLI turns each into exit 2. */
const usage: [string, Parameters<typeof resolveSettings>[0], RegExp][] = [
  ['both ends', { target: TARGET, requests: 10, duration: '1s' }, /give either --requests or --duration, not both/],
  ['rate over a raised cap', { target: TARGET, rate: 20000, maxRate: 15000, duration: '1s' }, /--rate 20000 is above the cap of 15000 req\/s/],
  ['in flight over the cap', { target: TARGET, protocol: 'h2c', connections: 100, streams: 20, duration: '1s' }, /--connections 100 × --streams 20 = 2000 requests in flight, above the cap of 1000; pass --max-connections 2000/],
  ['streams on HTTP/1.1', { target: TARGET, streams: 4, duration: '1s' }, /--streams: HTTP\/1\.1 carries one request at a time per connection/],
  ['authority without waypoint', { authority: '10.0.0.1:80', requests: 1 }, /give --waypoint HOST:15008 with --authority VIP:PORT \(HBONE\), or --target HOST:PORT/],
  ['hostname authority', { waypoint: '127.0.0.1:15008', authority: 'svc.ns:80', requests: 1 }, /--authority "svc\.ns:80": expected IP:PORT/],
  ['bad duration', { target: TARGET, duration: '10' }, /--duration "10": expected a duration such as 10s/],
  ['zero timeout', { target: TARGET, duration: '1s', timeout: '0s' }, /^--timeout 0s: expected at least 1ms$/],
  ['zero interval', { target: TARGET, duration: '1s', interval: '0s' }, /^--interval 0s: expected at least 50ms$/],
  ['zero duration', { target: TARGET, duration: '0s' }, /^--duration 0s: expected at least 1ms$/],
  ['unknown protocol', { target: TARGET, protocol: 'spdy', requests: 1 }, /--protocol spdy: expected one of http1, h2c, grpc/],
];

test('the other usage errors name their flag', () => {
  for (const [name, flags, message] of usage) {
    expect(() => resolveSettings(flags), name).toThrow(LoadtestUsageError);
    expect(() => resolveSettings(flags), name).toThrow(message);
  }
});

test('an explicit --max-rate / --max-connections raises the cap: the same run goes ahead', async () => {
  const before = requests;
  const r = await cli(['loadtest', '--no-progress', '--target', TARGET, '--rate', '20000', '--max-rate', '20000', '--connections', '1200', '--max-connections', '1200', '--requests', '40']);
  expect(r.stderr).toBe('');
  expect(r.code).toBe(0);
  expect(r.stdout).toMatch(/open loop at 20,000 req\/s, 1200 connections × 1 stream/);
  expect(r.stdout).toMatch(/40 requests, 40 ok, 0 errors/);
  // The probe, then the 40 measured requests.
  expect(requests - before).toBe(41);
});

test('the caps and the loopback rule, as the settings API applies them', async () => {
  const base = { target: TARGET, duration: '1s' };
  expect(() => resolveSettings({ ...base, rate: DEFAULT_CAPS.rate + 1 })).toThrow(LoadtestUsageError);
  expect(resolveSettings({ ...base, rate: DEFAULT_CAPS.rate }).rate).toBe(DEFAULT_CAPS.rate);
  expect(resolveSettings({ ...base, connections: 5000, maxConnections: 5000 }).connections).toBe(5000);
  const remote = resolveSettings({ target: '10.1.2.3:80', requests: 1 });
  await expect(checkLoopback(remote, false)).rejects.toThrow(/not a loopback address/);
  await expect(checkLoopback(remote, true)).resolves.toBeUndefined();
  await expect(checkLoopback(resolveSettings({ target: '[::1]:80', requests: 1 }), false)).resolves.toBeUndefined();
  await expect(checkLoopback(resolveSettings({ target: 'localhost:80', requests: 1 }), false)).resolves.toBeUndefined();
});
