/**
 * Soak version of test/integration/transport/disconnect-leak.test.ts (`npm run soak`): many more
 * rounds of clients that stop reading large responses and vanish; the waypoint (a child process
 * with forced GC) must end with no session, stream, socket, tunnel or request left, its file
 * descriptors, heap and buffers back near the baseline, and RSS no longer growing (see
 * checkNoLeak). Prints the figures. Addresses: 127.0.230.x, those of the short version: `npm run
 * soak` and `npm test` must not run at the same time.
 */
import { afterAll, beforeAll, expect, test } from 'vitest';
import { checkNoLeak, pinned, RSS_SLACK, startRig, type DisconnectRig, type Measure } from '../integration/transport/disconnect-harness.ts';

let rig: DisconnectRig;

beforeAll(async () => {
  rig = await startRig(230);
});
afterAll(async () => {
  await rig?.close();
});

test('60 rounds of 8 vanishing downloads leave nothing behind, and RSS stops growing', { timeout: 600_000 }, async () => {
  const { base, mid, after, trace } = await checkNoLeak(rig, { rounds: 60, streams: 8 });
  // What the stalled clients raised RSS by, kept for good, would exceed checkNoLeak's bound many
  // times over (so that bound can tell a leak of it).
  expect(pinned(base, trace, 'rss')).toBeGreaterThan(8 * RSS_SLACK);
  const mib = (n: number) => Math.round(n / 2 ** 20);
  const row = (m: Measure) =>
    `rss ${mib(m.rss)} (anonymous ${mib(m.anon)}: malloc heap ${mib(m.brkHeap)}, rest ${mib(m.anon - m.brkHeap)}) heapTotal ${mib(m.heapTotal)} heapUsed ${mib(m.heapUsed)} external ${mib(m.external)} arrayBuffers ${mib(m.arrayBuffers)} MiB, fds ${m.fds}, alive ${JSON.stringify(m.alive)}`;
  console.log(
    [
      `base:  ${row(base)}`,
      `mid:   ${row(mid)}`,
      `after: ${row(after)}`,
      `RSS - base per round (MiB): ${trace.map((m) => mib(m.rss - base.rss)).join(' ')}`,
      `external - base per round (MiB): ${trace.map((m) => mib(m.external - base.external)).join(' ')}`,
    ].join('\n'),
  );
});
