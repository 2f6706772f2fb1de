/**
 * Ctrl-C (the caller's abort signal) ends a run early without losing what it shows: requests that
 * were due but never sent (every connection stuck on a stalled server) are counted as `not_sent`,
 * as at the normal end of a run. Addresses: 127.0.184.x.
 */
import http from 'node:http';
import { afterAll, beforeAll, expect, test } from 'vitest';
import { runLoad, tcpTransport, type LoadPlan } from '../../src/loadtest/index.ts';
import { closeServer, listen, track } from '../helpers/servers.ts';

const TARGET = { host: '127.0.184.11', port: 8080 };
let server: http.Server;
let sockets: Set<import('node:net').Socket>;
/** While true, requests get no answer (a stalled waypoint). */
let stalled = false;

beforeAll(async () => {
  server = http.createServer((req, res) => {
    if (!stalled) req.resume().on('end', () => res.end('ok'));
  });
  sockets = track(server);
  await listen(server, TARGET.host, TARGET.port);
});
afterAll(async () => {
  await closeServer(server, sockets);
});

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
