/**
 * Ring hash and maglev (Envoy's algorithms over xxHash64): stable for the same endpoints (also
 * rebuilt from new objects, as after a mesh reload), spread over all endpoints, and consistent:
 * removing one endpoint moves its keys and few others.
 */
import { describe, expect, test } from 'vitest';
import type { Endpoint, Workload } from '../../../src/state/types.ts';
import { MaglevTable } from '../../../src/upstream/maglev.ts';
import { RingHash } from '../../../src/upstream/ring-hash.ts';
import { uint64ToHex, xxHash64 } from '../../../src/upstream/xxhash.ts';

const ep = (address: string): Endpoint => ({ workload: {} as Workload, address, targetPort: 8080, tunnel: 'HBONE', authority: `${address}:8080` });
const hosts = () => [ep('10.0.0.1'), ep('10.0.0.2'), ep('10.0.0.3'), ep('10.0.0.4')];
const keys = Array.from({ length: 2000 }, (_, i) => xxHash64(`user-${i}`));

test('xxHash64 matches the reference vectors', () => {
  expect(uint64ToHex(xxHash64(''))).toBe('ef46db3751d8e999');
  expect(uint64ToHex(xxHash64('abc'))).toBe('44bc2cf5ad770999');
});

describe.each([
  ['ring hash', (h: Endpoint[]) => new RingHash(h, 1024)],
  ['maglev', (h: Endpoint[]) => new MaglevTable(h, 65537)],
] as const)('%s', (_name, build) => {
  test('the same endpoints (new objects) give the same pick for every key', () => {
    const a = build(hosts());
    const b = build(hosts());
    for (const k of keys) expect(b.pick(k).authority).toBe(a.pick(k).authority);
  });

  test('keys spread over every endpoint (each gets 10%..40% of 2000 keys)', () => {
    const t = build(hosts());
    const count = new Map<string, number>();
    for (const k of keys) count.set(t.pick(k).authority, (count.get(t.pick(k).authority) ?? 0) + 1);
    expect(count.size).toBe(4);
    for (const n of count.values()) {
      expect(n).toBeGreaterThan(200);
      expect(n).toBeLessThan(800);
    }
  });

  test('removing one endpoint moves its keys and few others', () => {
    const all = hosts();
    const before = build(all);
    const after = build(all.filter((h) => h.address !== '10.0.0.3'));
    let moved = 0;
    for (const k of keys) {
      const was = before.pick(k).authority;
      const now = after.pick(k).authority;
      if (was !== '10.0.0.3:8080') {
        if (now !== was) moved++;
      } else expect(now).not.toBe(was);
    }
    // Few others move: maglev's table shifts a little, and Envoy's ring gives each host
    // ceil(1024 / n) entries, so 3 hosts get more entries each than 4 did.
    expect(moved).toBeLessThan(keys.length * 0.12);
  });

  test('a retry offset (attempt) reaches another endpoint', () => {
    const t = build(hosts());
    const k = keys[0];
    const first = t.pick(k).authority;
    let other = false;
    for (let a = 1; a <= 5 && !other; a++) other = t.pick(k, a).authority !== first;
    expect(other).toBe(true);
  });
});

test('ring hash has at least minimumRingSize entries, as Envoy sizes it (ceil(min/n) per host)', () => {
  expect(new RingHash(hosts(), 1024).size).toBe(1024);
  expect(new RingHash(hosts().slice(0, 3), 1024).size).toBe(342 * 3);
  expect(new RingHash(hosts().slice(0, 1), 10).size).toBe(10);
});
