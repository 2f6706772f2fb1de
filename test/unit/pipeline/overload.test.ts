/**
 * The overload manager's budget (src/pipeline/overload.ts) on fake accounts: sampling, the two
 * thresholds, which accounts a reset picks, and what closing an account gives back.
 */
import { afterEach, describe, expect, test } from 'vitest';
import { OverloadManager, type BufferAccount, type OverloadSettings } from '../../../src/pipeline/index.ts';

const KiB = 1024;

class Fake implements BufferAccount {
  accounted = 0;
  prevAccount: BufferAccount | undefined = undefined;
  nextAccount: BufferAccount | undefined = undefined;
  held: number;
  resetCount = 0;
  readonly name: string;
  constructor(name: string, held: number) {
    this.name = name;
    this.held = held;
  }
  bufferedBytes(): number {
    return this.held;
  }
  overloadReset(): void {
    this.resetCount++;
    this.held = 0;
  }
}

const SETTINGS: OverloadSettings = { maxBufferedBytes: 1000 * KiB, stopAcceptingRequests: 0.5, resetHighMemoryStreams: 1, minimumAccountToTrackPowerOfTwo: 16, refreshIntervalMs: 60_000 };

let m: OverloadManager;
afterEach(() => m?.stop());

describe('OverloadManager', () => {
  test('sums what the accounts hold at each refresh; closing one takes its share off at once', () => {
    m = new OverloadManager(SETTINGS);
    const a = new Fake('a', 100 * KiB);
    const b = new Fake('b', 50 * KiB);
    m.open(a);
    m.open(b);
    expect(m.bufferedBytes).toBe(0);
    m.refresh();
    expect(m.bufferedBytes).toBe(150 * KiB);
    a.held = 10 * KiB;
    m.refresh();
    expect(m.bufferedBytes).toBe(60 * KiB);
    m.close(a);
    expect(m.bufferedBytes).toBe(50 * KiB);
    m.close(a);
    expect(m.bufferedBytes).toBe(50 * KiB);
    m.close(b);
    expect(m.bufferedBytes).toBe(0);
    expect(m.accountCount).toBe(0);
  });

  test('an account opened twice counts once; closing one never opened changes nothing; the others stay counted', () => {
    m = new OverloadManager(SETTINGS);
    const [a, b, c] = [new Fake('a', 10 * KiB), new Fake('b', 20 * KiB), new Fake('c', 40 * KiB)];
    m.open(a);
    m.open(b);
    m.open(a);
    m.close(c);
    expect(m.accountCount).toBe(2);
    m.open(c);
    m.close(b);
    m.refresh();
    expect(m.bufferedBytes).toBe(50 * KiB);
    m.close(a);
    m.close(c);
    m.refresh();
    expect(m.bufferedBytes).toBe(0);
    expect(m.accountCount).toBe(0);
  });

  test('past the first threshold new requests are refused; below it again they are accepted', () => {
    m = new OverloadManager(SETTINGS);
    const a = new Fake('a', 400 * KiB);
    m.open(a);
    m.refresh();
    expect(m.acceptingRequests).toBe(true);
    a.held = 600 * KiB;
    m.refresh();
    expect(m.acceptingRequests).toBe(false);
    expect(m.resetting).toBe(false);
    expect(a.resetCount).toBe(0);
    a.held = 300 * KiB;
    m.refresh();
    expect(m.acceptingRequests).toBe(true);
  });

  test('past the budget the largest accounts are reset, largest first, until under the first threshold; small ones never', () => {
    m = new OverloadManager(SETTINGS);
    const accounts = [new Fake('big', 400 * KiB), new Fake('mid', 300 * KiB), new Fake('small', 200 * KiB), new Fake('tiny', 32 * KiB), new Fake('tiny2', 32 * KiB), new Fake('tiny3', 60 * KiB)];
    for (const a of accounts) m.open(a);
    m.refresh();
    // 1024 KiB > 1000 KiB: reset big (→ 624), mid (→ 324 ≤ 500): stop there.
    expect(accounts.map((a) => a.resetCount)).toEqual([1, 1, 0, 0, 0, 0]);
    expect(m.resets).toBe(2);
    expect(m.resetting).toBe(true);
    expect(m.bufferedBytes).toBe(324 * KiB);
    expect(m.acceptingRequests).toBe(true);
    expect(m.accountCount).toBe(4);
  });

  test('once past the budget, streams still filling are reset at the next refreshes until under the first threshold', () => {
    m = new OverloadManager(SETTINGS);
    const a = new Fake('a', 800 * KiB);
    const b = new Fake('b', 300 * KiB);
    const c = new Fake('c', 100 * KiB);
    for (const x of [a, b, c]) m.open(x);
    m.refresh();
    expect([a, b, c].map((x) => x.resetCount)).toEqual([1, 0, 0]);
    expect(m.acceptingRequests).toBe(true);
    // b and c fill up: between the thresholds, but the reset action stays on until under the first.
    b.held = 400 * KiB;
    c.held = 200 * KiB;
    m.refresh();
    expect([b, c].map((x) => x.resetCount)).toEqual([1, 0]);
    expect(m.resetting).toBe(true);
    expect(m.acceptingRequests).toBe(true);
    m.refresh();
    expect(m.resetting).toBe(false);
  });

  test('between the thresholds without having passed the budget, nothing is reset', () => {
    m = new OverloadManager(SETTINGS);
    const a = new Fake('a', 900 * KiB);
    m.open(a);
    m.refresh();
    m.refresh();
    expect(a.resetCount).toBe(0);
    expect(m.acceptingRequests).toBe(false);
  });

  test('accounts under 2^minimumAccountToTrackPowerOfTwo are never reset, even over budget', () => {
    m = new OverloadManager({ ...SETTINGS, maxBufferedBytes: 100 * KiB });
    const small = Array.from({ length: 10 }, (_, i) => new Fake(`s${i}`, 32 * KiB));
    for (const a of small) m.open(a);
    m.refresh();
    expect(small.every((a) => a.resetCount === 0)).toBe(true);
    expect(m.acceptingRequests).toBe(false);
  });

  test('at most 50 resets per refresh', () => {
    m = new OverloadManager({ ...SETTINGS, maxBufferedBytes: 64 * KiB });
    const many = Array.from({ length: 80 }, (_, i) => new Fake(`a${i}`, 64 * KiB));
    for (const a of many) m.open(a);
    m.refresh();
    expect(m.resets).toBe(50);
    m.refresh();
    expect(m.resets).toBe(80);
  });

  test('refuses settings whose first threshold is past the second', () => {
    expect(() => new OverloadManager({ ...SETTINGS, stopAcceptingRequests: 0.9, resetHighMemoryStreams: 0.5 })).toThrow(/stopAcceptingRequests/);
  });
});
