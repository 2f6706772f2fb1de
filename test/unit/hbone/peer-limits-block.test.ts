/**
 * PeerLimits across processes (src/workers): the process that holds a client's streams tells when it
 * throttles the client and for how long (until its stream budget is half full again), once per
 * throttling; the process that accepts connections then refuses the client's new ones for that long.
 */
import { expect, test } from 'vitest';
import { PeerLimits } from '../../../src/hbone/peer-limits.ts';

const settings = { maxConnectionsPerPeer: 0, peerConnectionRate: 0, peerConnectionBurst: 1, peerStreamRate: 10, peerStreamBurst: 4 };

test('a client out of its stream budget is reported once, with the time until the budget is half full', () => {
  const told: [string, number][] = [];
  const limits = new PeerLimits(settings, (ip, ms) => told.push([ip, ms]));
  for (let i = 0; i < 4; i++) expect(limits.stream('10.0.0.1', 0)).toBe(true);
  expect(limits.stream('10.0.0.1', 0)).toBe(false);
  expect(limits.stream('10.0.0.1', 0)).toBe(false);
  // 0 tokens, 2 wanted at 10/s: 200 ms.
  expect(told).toEqual([['10.0.0.1', 200]]);
  // A rapid reset spends the budget of another client: reported too.
  expect(limits.throttle('10.0.0.2', 0)).toBe(true);
  expect(told).toEqual([['10.0.0.1', 200], ['10.0.0.2', 200]]);
});

test('block refuses a client\'s new connections until then, others not', () => {
  const limits = new PeerLimits(settings);
  limits.block('10.0.0.1', 200, 1000);
  expect(limits.opened('10.0.0.1', 1100)).toBe('peer_stream_rate');
  expect(limits.opened('10.0.0.2', 1100)).toBeUndefined();
  expect(limits.opened('10.0.0.1', 1200)).toBeUndefined();
});
