/**
 * One upstream attempt's states: Idle → Connecting → Sent → ResponseStarted | Draining → Done,
 * or Cancelled, after which its late callbacks are ignored (an abort's error) or abort it again;
 * its endpoint lease is released exactly once and its per-try timer cleared when it ends.
 */
import { afterEach, describe, expect, test, vi } from 'vitest';
import { AttemptState, UpstreamRequest, type AttemptOwner } from '../../../src/router/upstream-request.ts';
import type { Endpoint, Target, Workload } from '../../../src/state/types.ts';
import type { UpstreamLease } from '../../../src/upstream/pick-endpoint.ts';

const ep: Endpoint = { workload: {} as Workload, address: '10.1.0.1', targetPort: 8080, tunnel: 'HBONE', authority: '10.1.0.1:8080' };

function setup(retries = false) {
  const events: string[] = [];
  const lease = { ep, release: vi.fn() } as unknown as UpstreamLease & { release: ReturnType<typeof vi.fn> };
  const owner: AttemptOwner = {
    stream: {} as never,
    clusters: { dispatch: () => events.push('dispatch'), connectOutcome: () => {} } as never,
    responseEdits: undefined,
    responseFrames: null,
    retriesResponse: () => retries,
    onAttemptComplete: () => void events.push('complete'),
    onAttemptDrained: () => void events.push('drained'),
    onAttemptError: (_a, err) => void events.push(`error ${err.message}`),
    onPerTryTimeout: () => void events.push('per-try timeout'),
  };
  const a = new UpstreamRequest(owner, lease);
  const abort = vi.fn();
  return { a, lease, events, abort };
}

afterEach(() => {
  vi.useRealTimers();
});

describe('UpstreamRequest', () => {
  test('a retried response is drained, then reported; the lease is released once', () => {
    const { a, lease, events, abort } = setup(true);
    expect(a.state).toBe(AttemptState.Idle);
    a.start({} as Target, { method: 'GET', path: '/', authority: 'x', headers: [], body: null }, false, false, 0);
    expect(a.state).toBe(AttemptState.Connecting);
    a.onConnect(abort);
    expect(a.state).toBe(AttemptState.Sent);
    expect(a.onHeaders(503, [], () => {}, '')).toBe(true);
    expect(a.state).toBe(AttemptState.Draining);
    expect(a.onData(Buffer.from('dropped'))).toBe(true);
    a.onComplete(null);
    expect(a.state).toBe(AttemptState.Done);
    expect(events).toEqual(['dispatch', 'drained']);
    a.onError(new Error('late'));
    expect(events).toEqual(['dispatch', 'drained']);
    expect(lease.release).toHaveBeenCalledTimes(1);
  });

  test('cancelled: aborted once, its error ignored, later data aborted again; released once', () => {
    const { a, lease, events, abort } = setup();
    a.start({} as Target, { method: 'GET', path: '/', authority: 'x', headers: [], body: null }, false, false, 0);
    a.onConnect(abort);
    a.cancel(new Error('per try timeout'));
    expect(a.state).toBe(AttemptState.Cancelled);
    expect(abort).toHaveBeenCalledTimes(1);
    a.onError(new Error('aborted'));
    a.cancel(new Error('again'));
    expect(a.onData(Buffer.from('x'))).toBe(false);
    expect(abort).toHaveBeenCalledTimes(2);
    expect(events).toEqual(['dispatch']);
    expect(lease.release).toHaveBeenCalledTimes(1);
  });

  test('cancelled before the connection came: the connection is aborted as it arrives', () => {
    const { a, abort } = setup();
    a.start({} as Target, { method: 'GET', path: '/', authority: 'x', headers: [], body: null }, false, false, 0);
    a.cancel(new Error('downstream disconnected'));
    a.onConnect(abort);
    expect(abort).toHaveBeenCalledTimes(1);
    expect(a.state).toBe(AttemptState.Cancelled);
  });

  test('the per-try timer reports while live and is cleared when the attempt ends', () => {
    vi.useFakeTimers();
    const first = setup();
    first.a.start({} as Target, { method: 'GET', path: '/', authority: 'x', headers: [], body: null }, false, false, 100);
    vi.advanceTimersByTime(100);
    expect(first.events).toEqual(['dispatch', 'per-try timeout']);
    const second = setup();
    second.a.start({} as Target, { method: 'GET', path: '/', authority: 'x', headers: [], body: null }, false, false, 100);
    second.a.onError(new Error('refused'));
    expect(vi.getTimerCount()).toBe(0);
    expect(second.events).toEqual(['dispatch', 'error refused']);
  });
});
