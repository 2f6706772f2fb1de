/** Ejection of endpoints whose connects time out (src/upstream/connect-ejection.ts). */
import { expect, test } from 'vitest';
import { ConnectEjections } from '../../../src/upstream/connect-ejection.ts';
import type { Endpoint } from '../../../src/state/index.ts';

const ep = (authority: string) => ({ authority }) as Endpoint;
const A = ep('10.0.0.1:80');
const B = ep('10.0.0.2:80');

test('a timed-out endpoint is left out while others remain, all are used when none would (panic)', () => {
  let now = 0;
  const e = new ConnectEjections(30_000, () => now);
  const both = [A, B];
  expect(e.filter(both)).toBe(both);
  e.timedOut(A.authority);
  expect(e.isEjected(A.authority)).toBe(true);
  expect(e.filter(both)).toEqual([B]);
  expect(e.filter([A])).toEqual([A]);
  e.timedOut(B.authority);
  expect(e.filter(both)).toEqual(both);
  // Back after the base ejection time.
  now = 30_001;
  expect(e.isEjected(A.authority)).toBe(false);
  expect(e.filter(both)).toEqual(both);
});

test('each timeout in a row ejects for longer (capped at 300 s); a successful connect forgets it', () => {
  let now = 0;
  const e = new ConnectEjections(30_000, () => now);
  e.timedOut(A.authority);
  now = 30_001;
  e.timedOut(A.authority);
  now = 30_001 + 59_000;
  expect(e.isEjected(A.authority)).toBe(true);
  now = 30_001 + 60_001;
  expect(e.isEjected(A.authority)).toBe(false);
  for (let i = 0; i < 20; i++) e.timedOut(A.authority);
  now += 300_001;
  expect(e.isEjected(A.authority)).toBe(false);
  e.timedOut(A.authority);
  e.connected(A.authority);
  expect(e.isEjected(A.authority)).toBe(false);
  e.timedOut(A.authority);
  now += 30_001;
  // After a success the count starts over: one base ejection time again.
  expect(e.isEjected(A.authority)).toBe(false);
});
