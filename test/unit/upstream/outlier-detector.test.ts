/** OutlierDetector: Envoy's consecutive 5xx / gateway-failure ejection, max ejection percent, return after base × count, panic. */
import { describe, expect, test } from 'vitest';
import type { Endpoint, Workload } from '../../../src/state/types.ts';
import { OutlierDetector } from '../../../src/upstream/outlier-detector.ts';
import type { OutlierDetectionPolicy } from '../../../src/routing/traffic-policy.ts';

const ep = (address: string): Endpoint => ({ workload: {} as Workload, address, targetPort: 8080, tunnel: 'HBONE', authority: `${address}:8080` });
const A = ep('10.0.0.1');
const B = ep('10.0.0.2');
const C = ep('10.0.0.3');

const policy = (o: Partial<OutlierDetectionPolicy> = {}): OutlierDetectionPolicy => ({
  consecutive5xx: 3,
  consecutiveGatewayFailure: 0,
  intervalMs: 1000,
  baseEjectionTimeMs: 10_000,
  maxEjectionPercent: 100,
  minHealthPercent: 0,
  ...o,
});

function detector(o: Partial<OutlierDetectionPolicy> = {}) {
  const clock = { now: 0 };
  const d = new OutlierDetector(policy(o), () => clock.now);
  return { d, clock };
}

describe('consecutive 5xx', () => {
  test('the third consecutive 5xx ejects; the host is no longer offered', () => {
    const { d } = detector();
    d.reportStatus(A.authority, 500, 3);
    d.reportStatus(A.authority, 503, 3);
    expect(d.isEjected(A.authority)).toBe(false);
    d.reportStatus(A.authority, 500, 3);
    expect(d.isEjected(A.authority)).toBe(true);
    expect(d.filter([A, B, C])).toEqual([B, C]);
    d.close();
  });

  test('a success in between resets the count', () => {
    const { d } = detector();
    d.reportStatus(A.authority, 500, 3);
    d.reportStatus(A.authority, 500, 3);
    d.reportStatus(A.authority, 200, 3);
    d.reportStatus(A.authority, 500, 3);
    d.reportStatus(A.authority, 500, 3);
    expect(d.isEjected(A.authority)).toBe(false);
    d.close();
  });

  test('local failures (connect failure, reset) count as 503s', () => {
    const { d } = detector();
    for (let i = 0; i < 3; i++) d.reportLocalFailure(B.authority, 3);
    expect(d.isEjected(B.authority)).toBe(true);
    d.close();
  });

  test('consecutive5xx 0 disables the detector', () => {
    const { d } = detector({ consecutive5xx: 0 });
    for (let i = 0; i < 20; i++) d.reportStatus(A.authority, 500, 3);
    expect(d.ejectedCount).toBe(0);
  });
});

test('consecutive gateway errors count 502/503/504 only; a 500 breaks the run', () => {
  const { d } = detector({ consecutive5xx: 0, consecutiveGatewayFailure: 2 });
  d.reportStatus(A.authority, 502, 3);
  d.reportStatus(A.authority, 500, 3);
  d.reportStatus(A.authority, 504, 3);
  expect(d.isEjected(A.authority)).toBe(false);
  d.reportStatus(A.authority, 503, 3);
  expect(d.isEjected(A.authority)).toBe(true);
  d.close();
});

describe('max ejection percent', () => {
  test('50% of 3 hosts: one ejected (0% < 50%), then a second too (33% < 50%), never a third', () => {
    const { d } = detector({ maxEjectionPercent: 50 });
    for (const h of [A, B, C]) for (let i = 0; i < 3; i++) d.reportStatus(h.authority, 500, 3);
    expect(d.ejectedCount).toBe(2);
    expect(d.isEjected(C.authority)).toBe(false);
    d.close();
  });

  test('10% (the default) still ejects one host of two, as Envoy (0% ejected < 10%)', () => {
    const { d } = detector({ maxEjectionPercent: 10 });
    for (const h of [A, B]) for (let i = 0; i < 3; i++) d.reportStatus(h.authority, 500, 2);
    expect(d.ejectedCount).toBe(1);
    d.close();
  });
});

describe('return to service', () => {
  test('a sweep after base ejection time returns the host, counters reset', () => {
    const { d, clock } = detector();
    for (let i = 0; i < 3; i++) d.reportStatus(A.authority, 500, 3);
    clock.now = 9_999;
    d.sweep();
    expect(d.isEjected(A.authority)).toBe(true);
    clock.now = 10_000;
    d.sweep();
    expect(d.isEjected(A.authority)).toBe(false);
    // Counters were reset: two more 5xx do not eject again.
    d.reportStatus(A.authority, 500, 3);
    d.reportStatus(A.authority, 500, 3);
    expect(d.isEjected(A.authority)).toBe(false);
    d.close();
  });

  test('a host ejected again soon after returning stays out base × 2; after a quiet base time, base × 1 again', () => {
    const { d, clock } = detector();
    for (let i = 0; i < 3; i++) d.reportStatus(A.authority, 500, 3);
    clock.now = 10_000;
    d.sweep();
    expect(d.isEjected(A.authority)).toBe(false);
    for (let i = 0; i < 3; i++) d.reportStatus(A.authority, 500, 3);
    clock.now = 10_000 + 19_999;
    d.sweep();
    expect(d.isEjected(A.authority)).toBe(true);
    clock.now = 30_000;
    d.sweep();
    expect(d.isEjected(A.authority)).toBe(false);
    // Two sweeps a base time apart while in service: multiplier 2 → 0.
    clock.now = 40_000;
    d.sweep();
    clock.now = 50_000;
    d.sweep();
    for (let i = 0; i < 3; i++) d.reportStatus(A.authority, 500, 3);
    clock.now = 60_000;
    d.sweep();
    expect(d.isEjected(A.authority)).toBe(false);
    d.close();
  });
});

test('panic: fewer healthy hosts than minHealthPercent: all hosts are offered', () => {
  const { d } = detector({ minHealthPercent: 50 });
  for (let i = 0; i < 3; i++) d.reportStatus(A.authority, 500, 3);
  expect(d.filter([A, B, C])).toEqual([B, C]); // 66% healthy >= 50%
  for (let i = 0; i < 3; i++) d.reportStatus(B.authority, 500, 3);
  expect(d.filter([A, B, C])).toEqual([A, B, C]); // 33% < 50%: panic
  d.close();
});

test('every host ejected with minHealthPercent 0: nothing to offer (503 UH)', () => {
  const { d } = detector();
  for (const h of [A, B]) for (let i = 0; i < 3; i++) d.reportStatus(h.authority, 500, 2);
  expect(d.filter([A, B])).toEqual([]);
  d.close();
});

test('retain forgets hosts that left, including their ejections', () => {
  const { d } = detector();
  for (let i = 0; i < 3; i++) d.reportStatus(A.authority, 500, 3);
  d.retain(new Set([B.authority]));
  expect(d.ejectedCount).toBe(0);
  expect(d.isEjected(A.authority)).toBe(false);
  d.close();
});
