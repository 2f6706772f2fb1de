/** Envoy's premature-reset rule (src/hbone/premature-resets.ts) and the per-client throttle it triggers. */
import { expect, test } from 'vitest';
import { PeerLimits } from '../../../src/hbone/peer-limits.ts';
import { tooManyPrematureResets } from '../../../src/hbone/premature-resets.ts';

test.each([
  // [closed, premature, total count, close?]
  [0, 0, 500, false],
  [100, 100, 500, false], // not yet certain: 400 more good streams would keep it under half
  [249, 249, 500, false],
  [250, 250, 500, true], // half of the count premature already: closed before it is reached
  [400, 250, 500, true],
  [500, 249, 500, false],
  [500, 250, 500, true],
  [2000, 999, 500, false],
  [2000, 1000, 500, true],
  [100_000, 10_000, 500, false], // a busy session cancelling 10% of its tunnels early
  [1000, 1000, 0, false], // 0 turns the rule off
])('%i closed, %i premature, count %i: close %s', (closed, premature, total, close) => {
  expect(tooManyPrematureResets(closed, premature, total)).toBe(close);
});

test('a throttled client: its next stream is refused, and its reconnections until half its stream budget is back', () => {
  const limits = new PeerLimits({ maxConnectionsPerPeer: 0, peerConnectionRate: 0, peerConnectionBurst: 1, peerStreamRate: 100, peerStreamBurst: 200 });
  expect(limits.opened('10.0.0.1', 0)).toBeUndefined();
  expect(limits.stream('10.0.0.1', 0)).toBe(true);
  expect(limits.throttle('10.0.0.1', 0)).toBe(true);
  expect(limits.stream('10.0.0.1', 1)).toBe(false);
  expect(limits.opened('10.0.0.1', 900)).toBe('peer_stream_rate');
  // 100 tokens per second: half of 200 after a second.
  expect(limits.opened('10.0.0.1', 1001)).toBeUndefined();
  // Another client is untouched.
  expect(limits.stream('10.0.0.2', 1)).toBe(true);
  // Without a stream rate there is nothing to spend.
  expect(new PeerLimits({ maxConnectionsPerPeer: 0, peerConnectionRate: 0, peerConnectionBurst: 1, peerStreamRate: 0, peerStreamBurst: 1 }).throttle('10.0.0.1')).toBe(false);
});
