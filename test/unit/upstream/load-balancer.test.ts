/** LoadBalancer: ROUND_ROBIN cursors per endpoint list; LEAST_REQUEST power of two choices. */
import { afterEach, describe, expect, test, vi } from 'vitest';
import type { Endpoint, Workload } from '../../../src/state/types.ts';
import { LoadBalancer, type LoadBalancerPolicy } from '../../../src/upstream/load-balancer.ts';

const ep = (address: string, port = 8080): Endpoint => ({
  workload: {} as Workload,
  address,
  targetPort: port,
  tunnel: 'HBONE',
  authority: `${address}:${port}`,
});

const A = ep('10.0.0.1');
const B = ep('10.0.0.2');
const C = ep('10.0.0.3');

const picks = (lb: LoadBalancer, list: readonly Endpoint[], n: number): Map<Endpoint | undefined, number> => {
  const m = new Map<Endpoint | undefined, number>();
  for (let i = 0; i < n; i++) {
    const e = lb.pick(list);
    m.set(e, (m.get(e) ?? 0) + 1);
  }
  return m;
};

afterEach(() => {
  vi.restoreAllMocks();
});

describe.each<LoadBalancerPolicy>(['ROUND_ROBIN', 'LEAST_REQUEST'])('%s', (policy) => {
  test('an empty list gives undefined', () => {
    expect(new LoadBalancer(policy).pick([])).toBeUndefined();
  });

  test('a single endpoint is always picked, however busy', () => {
    const lb = new LoadBalancer(policy);
    for (let i = 0; i < 5; i++) lb.start(A);
    expect(picks(lb, [A], 20)).toEqual(new Map([[A, 20]]));
  });

  test('keeps its policy', () => {
    expect(new LoadBalancer(policy).policy).toBe(policy);
  });
});

describe('ROUND_ROBIN', () => {
  test('cycles through the list in order', () => {
    const lb = new LoadBalancer('ROUND_ROBIN');
    const list = [A, B, C];
    expect(Array.from({ length: 7 }, () => lb.pick(list))).toEqual([A, B, C, A, B, C, A]);
  });

  test('keeps one cursor per endpoint list', () => {
    const lb = new LoadBalancer('ROUND_ROBIN');
    const l1 = [A, B, C];
    const l2 = [C, B];
    expect(lb.pick(l1)).toBe(A);
    expect(lb.pick(l1)).toBe(B);
    expect(lb.pick(l2)).toBe(C);
    expect(lb.pick(l1)).toBe(C);
    expect(lb.pick(l2)).toBe(B);
    expect(lb.pick(l2)).toBe(C);
  });

  test('a new list with the same endpoints (a new snapshot) starts from its beginning', () => {
    const lb = new LoadBalancer('ROUND_ROBIN');
    lb.pick([A, B]);
    expect(lb.pick([A, B])).toBe(A);
  });

  test('ignores active request counts', () => {
    const lb = new LoadBalancer('ROUND_ROBIN');
    for (let i = 0; i < 10; i++) lb.start(A);
    expect(picks(lb, [A, B], 10)).toEqual(new Map([[A, 5], [B, 5]]));
  });
});

describe('LEAST_REQUEST', () => {
  test('with two endpoints, after many start() on A it picks B every time', () => {
    const lb = new LoadBalancer('LEAST_REQUEST');
    for (let i = 0; i < 10; i++) lb.start(A);
    const m = picks(lb, [A, B], 500);
    expect(m.get(B)).toBe(500);
  });

  test('with equal load, both endpoints are picked', () => {
    const lb = new LoadBalancer('LEAST_REQUEST');
    const m = picks(lb, [A, B], 500);
    expect(m.get(A)).toBeGreaterThan(150);
    expect(m.get(B)).toBeGreaterThan(150);
  });

  test('the busiest of three endpoints is never picked; the idlest wins whenever sampled', () => {
    const lb = new LoadBalancer('LEAST_REQUEST');
    for (let i = 0; i < 5; i++) lb.start(A);
    for (let i = 0; i < 3; i++) lb.start(B);
    const m = picks(lb, [A, B, C], 3000);
    expect(m.get(A)).toBeUndefined();
    // C is in 2 of the 3 possible pairs: about 2/3 of the picks.
    expect(m.get(C)! / 3000).toBeGreaterThan(0.6);
    expect(m.get(C)! / 3000).toBeLessThan(0.73);
  });

  test('every endpoint of a larger list gets picked under equal load', () => {
    const lb = new LoadBalancer('LEAST_REQUEST');
    const list = Array.from({ length: 5 }, (_, i) => ep(`10.0.1.${i + 1}`));
    const m = picks(lb, list, 2000);
    for (const e of list) expect(m.get(e)).toBeGreaterThan(200);
  });

  describe('start/finish bookkeeping (random sampling pinned: first sample A, second B)', () => {
    // Math.random() = 0 samples A first and B second; a tie goes to the first sample.
    const pinned = () => {
      vi.spyOn(Math, 'random').mockReturnValue(0);
      return new LoadBalancer('LEAST_REQUEST');
    };

    const cases: { name: string; run: (lb: LoadBalancer) => void; expected: Endpoint }[] = [
      { name: 'no requests: the tie goes to the first sample', run: () => undefined, expected: A },
      { name: 'A busy: B', run: (lb) => lb.start(A), expected: B },
      { name: 'A started then finished: A again', run: (lb) => (lb.start(A), lb.finish(A)), expected: A },
      { name: 'A twice, finished once: still B', run: (lb) => (lb.start(A), lb.start(A), lb.finish(A)), expected: B },
      { name: 'A 2 and B 1: B', run: (lb) => (lb.start(A), lb.start(A), lb.start(B)), expected: B },
      { name: 'A 1 and B 2: A', run: (lb) => (lb.start(A), lb.start(B), lb.start(B)), expected: A },
      { name: 'A 1 and B 1: tie, first sample', run: (lb) => (lb.start(A), lb.start(B)), expected: A },
      {
        name: 'finish without start does not go negative',
        run: (lb) => (lb.finish(B), lb.finish(B), lb.start(B)),
        expected: A,
      },
      {
        name: 'counts are kept by authority, so a rebuilt endpoint object shares them',
        run: (lb) => lb.start(ep(A.address, A.targetPort)),
        expected: B,
      },
      {
        name: 'a different port on the same address is a different endpoint',
        run: (lb) => lb.start(ep(A.address, 9090)),
        expected: A,
      },
    ];
    test.each(cases)('$name', ({ run, expected }) => {
      const lb = pinned();
      run(lb);
      expect(lb.pick([A, B])).toBe(expected);
    });
  });

  test('load balancers do not share counts', () => {
    vi.spyOn(Math, 'random').mockReturnValue(0);
    const busy = new LoadBalancer('LEAST_REQUEST');
    busy.start(A);
    expect(new LoadBalancer('LEAST_REQUEST').pick([A, B])).toBe(A);
  });
});

describe('RANDOM and a cluster cursor', () => {
  test('RANDOM spreads over every endpoint and ignores active counts', () => {
    const lb = new LoadBalancer('LEAST_REQUEST');
    for (let i = 0; i < 10; i++) lb.start(A);
    const m = new Map<Endpoint | undefined, number>();
    for (let i = 0; i < 3000; i++) {
      const e = lb.pick([A, B, C], 'RANDOM');
      m.set(e, (m.get(e) ?? 0) + 1);
    }
    for (const e of [A, B, C]) expect(m.get(e)! / 3000).toBeGreaterThan(0.25);
  });

  test('ROUND_ROBIN with a cursor keeps its place across new lists (a new snapshot, an ejection)', () => {
    const lb = new LoadBalancer('LEAST_REQUEST');
    const cursor = { rr: 0 };
    expect(lb.pick([A, B, C], 'ROUND_ROBIN', cursor)).toBe(A);
    expect(lb.pick([A, B, C], 'ROUND_ROBIN', cursor)).toBe(B);
    expect(lb.pick([ep(A.address), ep(B.address), ep(C.address)], 'ROUND_ROBIN', cursor)?.address).toBe(C.address);
    expect(lb.pick([A, C], 'ROUND_ROBIN', cursor)).toBe(C);
  });
});

describe('pickEndpoint with an admission filter (NetworkPolicy mode)', () => {
  test('ROUND_ROBIN keeps rotating over the admitted endpoints (the filtered copy is new each time)', async () => {
    const { pickEndpoint } = await import('../../../src/upstream/pick-endpoint.ts');
    const D = ep('10.0.0.4');
    const list = [A, B, C, D];
    const target = { kind: 'service', service: { endpoints: new Map([[80, list]]) }, port: { port: 80 } } as never;
    const lb = new LoadBalancer('ROUND_ROBIN');
    const admitted = new Set([A, C, D]);
    const seen: Endpoint[] = [];
    for (let i = 0; i < 6; i++) seen.push(pickEndpoint(lb, target, '', undefined, (e) => admitted.has(e))!);
    expect(new Set(seen)).toEqual(admitted);
    for (const e of admitted) expect(seen.filter((s) => s === e)).toHaveLength(2);
  });
});
