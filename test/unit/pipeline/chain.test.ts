/**
 * FilterChain: phase order, sync/async execution, StopAndReply, per-phase filter lists, error
 * isolation in the response/completion phases, and chain validation.
 */
import { afterEach, beforeEach, describe, expect, test, vi } from 'vitest';
import { FilterChain } from '../../../src/pipeline/chain.ts';
import { FilterStatus, type Filter } from '../../../src/pipeline/filter.ts';
import { HeaderList } from '../../../src/pipeline/headers.ts';
import { log } from '../../../src/util/log.ts';
import { ALL_PHASES, fakeConnection, fakeStream, recorder, runPhase, terminal, type Behaviour, type PhaseName } from './fakes.ts';

let logError: ReturnType<typeof vi.spyOn>;
beforeEach(() => {
  logError = vi.spyOn(log, 'error').mockImplementation(() => undefined);
});
afterEach(() => {
  vi.restoreAllMocks();
});

const only = (calls: string[], phase: string) => calls.filter((c) => c.endsWith(`.${phase}`)).map((c) => c.split('.')[0]);

describe('phase order', () => {
  const cases: { phase: PhaseName; order: string[] }[] = [
    { phase: 'onConnection', order: ['a', 'b', 'c', 'router'] },
    { phase: 'onRequestHeaders', order: ['a', 'b', 'c', 'router'] },
    { phase: 'onUpstreamRequest', order: ['a', 'b', 'c', 'router'] },
    { phase: 'onResponseHeaders', order: ['router', 'c', 'b', 'a'] },
    { phase: 'onStreamComplete', order: ['router', 'c', 'b', 'a'] },
    { phase: 'onConnectionComplete', order: ['router', 'c', 'b', 'a'] },
  ];
  test.each(cases)('$phase runs filters in order $order', async ({ phase, order }) => {
    const calls: string[] = [];
    const chain = new FilterChain([recorder('a', calls), recorder('b', calls), recorder('c', calls), terminal('router', calls)]);
    await runPhase(chain, phase, fakeStream(chain), new HeaderList());
    expect(calls).toEqual(order.map((n) => `${n}.${phase}`));
  });

  test('response-header filters receive the stream and the mutable header list', () => {
    const seen: unknown[] = [];
    const f: Filter = {
      name: 'h',
      onResponseHeaders(stream, headers) {
        seen.push(stream, headers);
        headers.append('x-added', '1');
      },
    };
    const chain = new FilterChain([f, terminal('router', [], [])]);
    const stream = fakeStream(chain);
    const headers = new HeaderList(['a', 'b']);
    chain.runResponseHeaders(stream, headers);
    expect(seen[0]).toBe(stream);
    expect(seen[1]).toBe(headers);
    expect(headers.raw).toEqual(['a', 'b', 'x-added', '1']);
  });

  test('upstream-request filters receive the outgoing header list', () => {
    const f: Filter = { name: 'u', onUpstreamRequest: (_s, h) => h.set('x-up', 'yes') };
    const chain = new FilterChain([f, terminal('router', [], [])]);
    const headers = new HeaderList();
    chain.runUpstreamRequest(fakeStream(chain), headers);
    expect(headers.get('x-up')).toBe('yes');
  });
});

describe('request phases (onConnection, onRequestHeaders)', () => {
  const requestPhases: PhaseName[] = ['onConnection', 'onRequestHeaders'];

  test.each(requestPhases)('%s returns Continue as a number, synchronously, when every filter is sync', (phase) => {
    const calls: string[] = [];
    const chain = new FilterChain([recorder('a', calls), recorder('b', calls), terminal('router', calls)]);
    const r = runPhase(chain, phase, fakeStream(chain), new HeaderList());
    expect(r).toBe(FilterStatus.Continue);
    expect(typeof r).toBe('number');
    expect(only(calls, phase)).toEqual(['a', 'b', 'router']);
  });

  test.each(requestPhases)('%s: an async filter in the middle defers the later filters, which then run in order', async (phase) => {
    const calls: string[] = [];
    const chain = new FilterChain([
      recorder('a', calls),
      recorder('b', calls, ALL_PHASES, { [phase]: 'async-continue' }),
      recorder('c', calls),
      recorder('d', calls),
      terminal('router', calls),
    ]);
    const r = runPhase(chain, phase, fakeStream(chain), new HeaderList());
    expect(r).toBeInstanceOf(Promise);
    expect(only(calls, phase)).toEqual(['a', 'b']);
    await expect(r).resolves.toBe(FilterStatus.Continue);
    expect(only(calls, phase)).toEqual(['a', 'b', 'c', 'd', 'router']);
  });

  test.each(requestPhases)('%s: two async filters run strictly one after the other', async (phase) => {
    const calls: string[] = [];
    const chain = new FilterChain([
      recorder('a', calls, ALL_PHASES, { [phase]: 'async-continue' }),
      recorder('b', calls),
      recorder('c', calls, ALL_PHASES, { [phase]: 'async-continue' }),
      recorder('d', calls),
      terminal('router', calls),
    ]);
    const r = runPhase(chain, phase, fakeStream(chain), new HeaderList());
    expect(only(calls, phase)).toEqual(['a']);
    await expect(r).resolves.toBe(FilterStatus.Continue);
    expect(only(calls, phase)).toEqual(['a', 'b', 'c', 'd', 'router']);
  });

  const stops: { phase: PhaseName; behaviour: Behaviour; async: boolean }[] = requestPhases.flatMap((phase) => [
    { phase, behaviour: 'stop' as const, async: false },
    { phase, behaviour: 'async-stop' as const, async: true },
  ]);
  test.each(stops)('$phase: StopAndReply ($behaviour) stops the later filters', async ({ phase, behaviour, async }) => {
    const calls: string[] = [];
    const chain = new FilterChain([
      recorder('a', calls),
      recorder('b', calls, ALL_PHASES, { [phase]: behaviour }),
      recorder('c', calls),
      terminal('router', calls),
    ]);
    const r = runPhase(chain, phase, fakeStream(chain), new HeaderList());
    if (async) expect(r).toBeInstanceOf(Promise);
    else expect(r).toBe(FilterStatus.StopAndReply);
    expect(await r).toBe(FilterStatus.StopAndReply);
    await new Promise((r) => setTimeout(r, 20));
    expect(only(calls, phase)).toEqual(['a', 'b']);
  });

  test.each(requestPhases)('%s: a synchronous throw propagates to the caller and stops the later filters', (phase) => {
    const calls: string[] = [];
    const chain = new FilterChain([recorder('a', calls, ALL_PHASES, { [phase]: 'throw' }), recorder('b', calls), terminal('router', calls)]);
    expect(() => runPhase(chain, phase, fakeStream(chain), new HeaderList())).toThrow(/a .* failed/);
    expect(only(calls, phase)).toEqual(['a']);
  });

  test.each(requestPhases)('%s: a rejected promise rejects the phase and stops the later filters', async (phase) => {
    const calls: string[] = [];
    const chain = new FilterChain([recorder('a', calls, ALL_PHASES, { [phase]: 'reject' }), recorder('b', calls), terminal('router', calls)]);
    await expect(runPhase(chain, phase, fakeStream(chain), new HeaderList())).rejects.toThrow(/a .* rejected/);
    expect(only(calls, phase)).toEqual(['a']);
  });

  test('onConnection filters see the connection context and can reject it', () => {
    const deny: Filter = {
      name: 'deny',
      onConnection(conn) {
        conn.reject(403, 'rbac_access_denied');
        return FilterStatus.StopAndReply;
      },
    };
    const chain = new FilterChain([deny, terminal('router', [], [])]);
    const conn = fakeConnection();
    expect(chain.runConnection(conn)).toBe(FilterStatus.StopAndReply);
    expect(conn.rejectStatus).toBe(403);
    expect(conn.rejectDetails).toBe('rbac_access_denied');
  });
});

describe('filters implementing only some phases', () => {
  test.each(ALL_PHASES)('a filter implementing only %s is called for it and skipped for every other phase', async (implemented) => {
    const calls: string[] = [];
    const chain = new FilterChain([recorder('a', calls), recorder('partial', calls, [implemented]), terminal('router', calls, [])]);
    for (const phase of ALL_PHASES) {
      const stream = fakeStream(chain);
      await runPhase(chain, phase, stream, new HeaderList());
    }
    expect(calls.filter((c) => c.startsWith('partial.'))).toEqual([`partial.${implemented}`]);
    // The full filter still ran for every phase.
    expect(calls.filter((c) => c.startsWith('a.'))).toEqual(ALL_PHASES.map((p) => `a.${p}`));
  });

  test('a chain of only a phase-less router runs every phase as a no-op', async () => {
    const chain = new FilterChain([terminal('router', [], [])]);
    expect(chain.runConnection(fakeConnection())).toBe(FilterStatus.Continue);
    expect(chain.runRequestHeaders(fakeStream(chain))).toBe(FilterStatus.Continue);
  });
});

describe('filters that can be dormant (Filter.dormant)', () => {
  const streamPhases: PhaseName[] = ['onRequestHeaders', 'onUpstreamRequest', 'onResponseHeaders', 'onStreamComplete'];
  const setup = () => {
    const calls: string[] = [];
    let asleep = true;
    const slot = (name: string): Filter => Object.assign(recorder(name, calls), { dormant: () => asleep });
    const chain = new FilterChain([recorder('a', calls), slot('s1'), slot('s2'), terminal('router', calls)]);
    return { calls, chain, wake: (v: boolean) => (asleep = !v) };
  };

  test.each(streamPhases)('%s: a stream started while they are dormant runs without them; one started after they woke runs them', async (phase) => {
    const { calls, chain, wake } = setup();
    const lean = chain.forStream();
    expect(lean).not.toBe(chain);
    expect(lean.terminal).toBe(chain.terminal);
    await runPhase(lean, phase, fakeStream(lean), new HeaderList());
    expect(only(calls, phase)).toEqual(phase === 'onRequestHeaders' || phase === 'onUpstreamRequest' ? ['a', 'router'] : ['router', 'a']);
    calls.length = 0;
    wake(true);
    const full = chain.forStream();
    expect(full).toBe(chain);
    await runPhase(full, phase, fakeStream(full), new HeaderList());
    expect(only(calls, phase)).toEqual(phase === 'onRequestHeaders' || phase === 'onUpstreamRequest' ? ['a', 's1', 's2', 'router'] : ['router', 's2', 's1', 'a']);
  });

  test('one of them awake is enough for the whole chain', () => {
    const calls: string[] = [];
    const chain = new FilterChain([Object.assign(recorder('s1', calls), { dormant: () => true }), Object.assign(recorder('s2', calls), { dormant: () => false }), terminal('router', calls)]);
    expect(chain.forStream()).toBe(chain);
  });

  test('a chain without such filters is its own stream chain', () => {
    const chain = new FilterChain([recorder('a', []), terminal('router', [])]);
    expect(chain.forStream()).toBe(chain);
  });
});

describe('completeStream', () => {
  test('runs onStreamComplete exactly once even when called twice, and marks the stream completed', () => {
    const calls: string[] = [];
    const chain = new FilterChain([recorder('a', calls), recorder('b', calls), terminal('router', calls)]);
    const stream = fakeStream(chain);
    expect(stream.completed).toBe(false);
    chain.completeStream(stream);
    chain.completeStream(stream);
    expect(calls).toEqual(['router.onStreamComplete', 'b.onStreamComplete', 'a.onStreamComplete']);
    expect(stream.completed).toBe(true);
  });

  test('each stream completes independently', () => {
    const calls: string[] = [];
    const chain = new FilterChain([recorder('a', calls, ['onStreamComplete']), terminal('router', calls, [])]);
    chain.completeStream(fakeStream(chain));
    chain.completeStream(fakeStream(chain));
    expect(calls).toEqual(['a.onStreamComplete', 'a.onStreamComplete']);
  });
});

describe('a throwing filter in a response or completion phase does not stop the others', () => {
  const phases: PhaseName[] = ['onResponseHeaders', 'onStreamComplete', 'onConnectionComplete'];
  test.each(phases)('%s: the other filters still run, nothing is thrown, the failure is logged with the filter name', (phase) => {
    const calls: string[] = [];
    const chain = new FilterChain([recorder('a', calls), recorder('b', calls, ALL_PHASES, { [phase]: 'throw' }), recorder('c', calls), terminal('router', calls)]);
    expect(() => runPhase(chain, phase, fakeStream(chain), new HeaderList())).not.toThrow();
    expect(only(calls, phase)).toEqual(['router', 'c', 'b', 'a']);
    expect(logError).toHaveBeenCalledTimes(1);
    expect(logError.mock.calls[0][0]).toMatchObject({ filter: 'b' });
  });
});

describe('constructor validation', () => {
  const calls: string[] = [];
  const a = recorder('a', calls);
  const b = recorder('b', calls);
  const r1 = terminal('r1', calls);
  const r2 = terminal('r2', calls);
  const cases: { name: string; filters: Filter[]; error: RegExp }[] = [
    { name: 'an empty chain', filters: [], error: /last filter .* must be a terminal filter/ },
    { name: 'a chain whose last filter has no forward', filters: [a, b], error: /last filter .* must be a terminal filter/ },
    { name: 'a terminal filter followed by a non-terminal one', filters: [r1, a], error: /last filter .* must be a terminal filter/ },
    { name: 'a terminal filter before the last one', filters: [a, r1, r2], error: /terminal filter r1 must be last/ },
    { name: 'two terminal filters', filters: [r1, r2], error: /terminal filter r1 must be last/ },
  ];
  test.each(cases)('rejects $name', ({ filters, error }) => {
    expect(() => new FilterChain(filters)).toThrow(error);
  });

  test('accepts non-terminal filters followed by one terminal filter, which becomes chain.terminal', () => {
    const chain = new FilterChain([a, b, r1]);
    expect(chain.terminal).toBe(r1);
    expect(chain.filters).toEqual([a, b, r1]);
    expect(Object.isFrozen(chain.filters)).toBe(true);
  });

  test('the chain keeps its own copy: changing the source list afterwards changes nothing', () => {
    const calls: string[] = [];
    const list: Filter[] = [recorder('a', calls), terminal('router', calls)];
    const chain = new FilterChain(list);
    list.unshift(recorder('late', calls));
    chain.runRequestHeaders(fakeStream(chain));
    expect(calls).toEqual(['a.onRequestHeaders', 'router.onRequestHeaders']);
    expect(chain.filters).toHaveLength(2);
  });
});
