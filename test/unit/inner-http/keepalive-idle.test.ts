/** KeepAliveIdle (src/inner-http/streams.ts): the keep-alive idle time of HTTP/1 tunnels added up on the stream idle timer. */
import { Duplex } from 'node:stream';
import { expect, test } from 'vitest';
import { KeepAliveIdle, type IdleClock } from '../../../src/inner-http/streams.ts';

/** A tunnel that records the inactivity timers armed on it. */
function tunnel(): Duplex & { armed: number[] } {
  const d = new Duplex({ read() {}, write(_c, _e, cb) { cb(); } }) as Duplex & { armed: number[]; setTimeout(ms: number): unknown };
  d.armed = [];
  d.setTimeout = (ms: number) => d.armed.push(ms);
  return d;
}
const clock = (): IdleClock => ({ mark: 0, idleFor: 0, armedMs: 0 });

test('counted here only when the keep-alive timeout is not shorter than the stream idle timeout', () => {
  expect(new KeepAliveIdle(300, 3_000).keepAliveMs).toBe(3_000);
  expect(new KeepAliveIdle(300, 300).keepAliveMs).toBe(300);
  expect(new KeepAliveIdle(300, 100).keepAliveMs).toBe(0);
  expect(new KeepAliveIdle(0, 3_000).keepAliveMs).toBe(0);
  expect(new KeepAliveIdle(300, 0).keepAliveMs).toBe(0);
});

test('idle periods add up to the keep-alive time; the last one is re-armed for the rest; a request restores the stream idle timer', () => {
  const k = new KeepAliveIdle(300, 1_000);
  const t = tunnel();
  const c = clock();
  // Fired at 300, 600, 900 ms of idleness: kept, re-armed for 300, 300, then the 100 left.
  expect([k.stillIdle(t, c, 1), k.stillIdle(t, c, 1), k.stillIdle(t, c, 1)]).toEqual([true, true, true]);
  expect(t.armed).toEqual([300, 300, 100]);
  // At 1000 ms: over.
  expect(k.stillIdle(t, c, 1)).toBe(false);
  // A request on a tunnel whose timer was shortened gets the stream idle timer back, once.
  k.requestStarts(t, c);
  k.requestStarts(t, c);
  expect(t.armed).toEqual([300, 300, 100, 300]);
});

test('a request since the last count starts the idle time over; a tunnel without any request is not kept', () => {
  const k = new KeepAliveIdle(300, 1_000);
  const t = tunnel();
  const c = clock();
  expect([k.stillIdle(t, c, 1), k.stillIdle(t, c, 1)]).toEqual([true, true]);
  expect([k.stillIdle(t, c, 2), k.stillIdle(t, c, 2), k.stillIdle(t, c, 2), k.stillIdle(t, c, 2)]).toEqual([true, true, true, false]);
  expect(k.stillIdle(tunnel(), clock(), 0)).toBe(false);
  expect(new KeepAliveIdle(300, 100).stillIdle(tunnel(), clock(), 1)).toBe(false);
});
