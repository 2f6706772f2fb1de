/** Slots: typed per-context keys with preallocated indexes. */
import { describe, expect, test } from 'vitest';
import { FilterChain } from '../../../src/pipeline/chain.ts';
import { defineSlot, slotCount } from '../../../src/pipeline/slots.ts';
import { fakeConnection, fakeStream, terminal } from './fakes.ts';

const lifespans = ['stream', 'connection'] as const;

describe('defineSlot', () => {
  test.each(lifespans)('%s slots get distinct consecutive indexes and bump slotCount', (lifespan) => {
    const before = slotCount(lifespan);
    const a = defineSlot<number>(`test.distinct.a`, lifespan);
    const b = defineSlot<number>(`test.distinct.b`, lifespan);
    const c = defineSlot<number>(`test.distinct.c`, lifespan);
    expect([a.index, b.index, c.index]).toEqual([before, before + 1, before + 2]);
    expect(slotCount(lifespan)).toBe(before + 3);
    expect(a).toMatchObject({ name: 'test.distinct.a', lifespan });
    expect(Object.isFrozen(a)).toBe(true);
  });

  test.each(lifespans)('a second %s slot with the same name throws', (lifespan) => {
    defineSlot('test.dup', lifespan);
    const before = slotCount(lifespan);
    expect(() => defineSlot('test.dup', lifespan)).toThrow(`slot ${lifespan}:test.dup is already defined`);
    expect(slotCount(lifespan)).toBe(before);
  });

  test('the same name may be used once per lifespan', () => {
    const s = defineSlot('test.both', 'stream');
    const c = defineSlot('test.both', 'connection');
    expect(s.lifespan).toBe('stream');
    expect(c.lifespan).toBe('connection');
  });

  test('defining a slot of one lifespan does not change the other count', () => {
    const streams = slotCount('stream');
    defineSlot('test.only-connection', 'connection');
    expect(slotCount('stream')).toBe(streams);
  });
});

describe('context get/set by slot', () => {
  const chain = new FilterChain([terminal('router', [], [])]);
  const peer = defineSlot<{ app: string }>('test.ctx.peer', 'stream');
  const count = defineSlot<number>('test.ctx.count', 'stream');
  const connPeer = defineSlot<string>('test.ctx.peer', 'connection');
  const connOther = defineSlot<string>('test.ctx.other', 'connection');

  test('a stream slot reads undefined until set, then the value set', () => {
    const s = fakeStream(chain);
    expect(s.get(peer)).toBeUndefined();
    const v = { app: 'a' };
    s.set(peer, v);
    expect(s.get(peer)).toBe(v);
  });

  test('slots of one stream are independent of each other and of other streams', () => {
    const s1 = fakeStream(chain);
    const s2 = fakeStream(chain);
    s1.set(count, 1);
    s1.set(peer, { app: 'one' });
    s2.set(count, 2);
    expect(s1.get(count)).toBe(1);
    expect(s1.get(peer)).toEqual({ app: 'one' });
    expect(s2.get(count)).toBe(2);
    expect(s2.get(peer)).toBeUndefined();
  });

  test('connection slots are kept per connection, apart from stream slots', () => {
    const c1 = fakeConnection();
    const c2 = fakeConnection();
    c1.set(connPeer, 'spiffe://a');
    c2.set(connOther, 'x');
    expect(c1.get(connPeer)).toBe('spiffe://a');
    expect(c1.get(connOther)).toBeUndefined();
    expect(c2.get(connPeer)).toBeUndefined();
    expect(c2.get(connOther)).toBe('x');
    const s = fakeStream(chain, undefined, undefined, c1);
    expect(s.get(peer)).toBeUndefined();
    expect(s.conn.get(connPeer)).toBe('spiffe://a');
  });

  test('connections get distinct increasing ids', () => {
    const a = fakeConnection();
    const b = fakeConnection();
    expect(b.id).toBeGreaterThan(a.id);
  });
});
