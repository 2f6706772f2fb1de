/**
 * The jittered exponential backoff: each delay is drawn from the upper half of a cap that doubles
 * from the initial delay up to the maximum, and resets after a success.
 */
import { expect, test } from 'vitest';
import { Backoff } from '../../../src/util/index.ts';

test('delays double up to the cap, each in [cap/2, cap], jittered; reset starts over', () => {
  const b = new Backoff({ initialMs: 100, maxMs: 1000 });
  const caps = [100, 200, 400, 800, 1000, 1000];
  const seen = new Set<number>();
  for (let round = 0; round < 50; round++) {
    b.reset();
    for (const cap of caps) {
      const d = b.next();
      expect(d).toBeGreaterThanOrEqual(cap / 2);
      expect(d).toBeLessThanOrEqual(cap);
      seen.add(d);
    }
  }
  expect(b.attempts).toBe(caps.length);
  expect(seen.size).toBeGreaterThan(caps.length); // not the same delays every time
  expect(() => new Backoff({ initialMs: 0 })).toThrow('backoff initialMs must be positive, got 0');
});
