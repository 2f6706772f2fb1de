/**
 * Soak version of test/integration/transport/disconnect-leak.test.ts (`npm run soak`): many more
 * rounds of clients that stop reading large responses and vanish; the waypoint (a child process
 * with forced GC) must end with no session, socket or tunnel left, its file descriptors and RSS
 * back near the baseline. Addresses: 127.0.230.x, those of the short version: `npm run soak` and
 * `npm test` must not run at the same time.
 */
import { afterAll, beforeAll, expect, test } from 'vitest';
import { checkNoLeak, startRig, type DisconnectRig } from '../integration/transport/disconnect-harness.ts';

let rig: DisconnectRig;

beforeAll(async () => {
  rig = await startRig(230);
});
afterAll(async () => {
  await rig?.close();
});

test('60 rounds of 8 vanishing downloads leave nothing behind, and RSS stops growing', { timeout: 600_000 }, async () => {
  const trace = await checkNoLeak(rig, { rounds: 60, streams: 8 });
  // A leak grows with the rounds; the allocator's high-water mark does not: the second half of
  // the rounds ends (once idle) within a few MB of where the first half was.
  const half = trace[1 + 30];
  const last = trace[trace.length - 1];
  expect((last.rss - half.rss) / 2 ** 20).toBeLessThan(32);
});
