/**
 * A rapid-reset attacker (python3-h2, CVE-2023-44487) that reconnects after each GOAWAY or refusal
 * must not slow other clients down: with the default per-client limits (`limits.peer*`), the
 * median latency of a well-behaved client during the attack stays within a few ms of its median
 * before it. The waypoint runs in a child process, so that the attacker's cost lands on its event
 * loop only. Timing-based, hence here (`npm run soak`) and not in `npm test`. Addresses:
 * 127.0.233.x (those of test/integration/transport/resets.test.ts: do not run both at once).
 */
import { afterAll, beforeAll, expect, test } from 'vitest';
import { hboneSession } from '../helpers/hbone-client.ts';
import { startRig, type DisconnectRig } from '../integration/transport/disconnect-harness.ts';
import { h2peer } from '../integration/transport/h2-peer.ts';
import { openLoop, quantile } from '../integration/transport/open-loop.ts';

const NET = 233;
const VIP = `127.0.${NET}.100:80`;
let rig: DisconnectRig;

beforeAll(async () => {
  // Default keepalive: a short one could close the measuring client's session while the waypoint is busy.
  rig = await startRig(NET, { http2: {} });
});
afterAll(async () => {
  await rig?.close();
});

test('the median latency of another client during a reconnecting rapid-reset attack stays within a few ms', { timeout: 120_000 }, async () => {
  const session = await hboneSession(`127.0.${NET}.1`, rig.port, rig.client, { localAddress: `127.0.${NET}.60` });
  try {
    await openLoop(session, VIP, 1000); // warm-up
    const before = await openLoop(session, VIP, 5000);
    const attack = h2peer(rig.dir, [`127.0.${NET}.1`, rig.port], VIP, 'rapid-reset-loop', 9000) as Promise<{ connections: number; refused: number; sent: number }>;
    await new Promise((r) => setTimeout(r, 1000));
    const during = await openLoop(session, VIP, 6000);
    const attacker = await attack;
    expect(attacker.sent).toBeGreaterThan(10_000); // the attack did happen
    expect(during.failed).toBe(0);
    const p50 = { before: quantile(before.latencies, 0.5), during: quantile(during.latencies, 0.5) };
    expect(p50.during - p50.before, JSON.stringify({ p50, attacker })).toBeLessThan(5);
  } finally {
    session.close();
  }
});
