/**
 * Route settings and retries: the bootstrap's retry policy compiled into flags, a rule's
 * `timeouts`/`retry` over it, the settings of every rule derived when a snapshot is observed
 * (never on a request), the retry conditions, and the jittered, capped back-off whose timer a
 * cancel clears.
 */
import { afterEach, describe, expect, test, vi } from 'vitest';
import { HboneConnectError } from '../../../src/hbone/pool.ts';
import type { StreamContext } from '../../../src/pipeline/context.ts';
import { compileRoute, DEFAULT_ROUTER_OPTIONS, RetryState, RouteSettings, ruleRoute, type CompiledRoute } from '../../../src/router/retry-policy.ts';
import { routesFor, type CompiledRule } from '../../../src/routing/index.ts';
import type { MeshSnapshot } from '../../../src/state/types.ts';
import { UpstreamOverflowError } from '../../../src/upstream/cluster-state.ts';
import { UpstreamResetError } from '../../../src/upstream/h2-upstream.ts';
import { httpRoute, mesh, target } from '../routing/mesh.ts';

const base = compileRoute(DEFAULT_ROUTER_OPTIONS);

afterEach(() => {
  vi.useRealTimers();
  vi.restoreAllMocks();
});

/** Every rule of the routes attached to web:80, producer and consumer tables. */
function rulesOf(snap: MeshSnapshot): CompiledRule[] {
  const attached = routesFor(snap).forTarget(target(snap))!;
  const tables = [attached.producer!, ...attached.consumers.values()];
  return [...new Set(tables.flatMap((t) => t.matches.map((m) => m.rule)))];
}

const ROUTES = [
  httpRoute(
    'prod',
    `  parentRefs: [{ group: "", kind: Service, name: web, port: 80 }]
  rules:
  - matches: [{ path: { type: PathPrefix, value: /slow } }]
    timeouts: { request: 2s, backendRequest: 500ms }
    retry: { codes: [500], attempts: 4, backoff: 100ms }
  - matches: [{ path: { type: PathPrefix, value: /none } }]
    retry: { attempts: 0 }
  - backendRefs: [{ name: web, port: 80 }]`,
  ),
  httpRoute('cons', `  parentRefs: [{ group: "", kind: Service, name: web, namespace: shop }]\n  rules: [{ timeouts: { request: 3s } }]`, 'other'),
].join('---\n');

describe('CompiledRoute', () => {
  test("Istio's default: connect failures, refused streams, unavailable, cancelled and 503, twice", () => {
    expect(base).toMatchObject({ attempts: 2, onConnectFailure: true, onRefusedStream: true, onReset: false, onUnavailable: true, onCancelled: true, on5xx: false, backoffBaseMs: 25, perTryTimeoutMs: 0 });
    expect([...base.retriableStatus]).toEqual([503]);
  });

  test('a rule overrides timeouts and retry; attempts 0 retries nothing; a rule without either is the base', () => {
    const [slow, none, plain] = rulesOf(mesh(ROUTES)).filter((r) => r.route === 'HTTPRoute/shop/prod');
    expect(ruleRoute(base, slow)).toMatchObject({ requestTimeoutMs: 2000, perTryTimeoutMs: 500, attempts: 4, backoffBaseMs: 100, retriableStatus: new Set([500]) });
    expect(ruleRoute(base, none)).toMatchObject({ attempts: 0, onConnectFailure: false, onRefusedStream: false, onUnavailable: false, retriableStatus: new Set() });
    expect(ruleRoute(base, plain)).toBe(base);
  });
});

describe('RouteSettings', () => {
  test('observing a snapshot derives every rule (producer and consumer tables) once; requests only look them up', () => {
    const snap = mesh(ROUTES);
    const settings = new RouteSettings(base);
    settings.observe(snap);
    const rules = rulesOf(snap);
    expect(rules).toHaveLength(4);
    for (const rule of rules) {
      const r = settings.of(rule);
      // The object derived at observe time, not one made for this lookup.
      expect(settings.of(rule)).toBe(r);
      expect(r).toEqual(ruleRoute(base, rule));
    }
    expect(settings.of(rules.find((r) => r.route === 'HTTPRoute/other/cons')!).requestTimeoutMs).toBe(3000);
  });

  test('a rule of a snapshot never observed is derived on the spot and not kept', () => {
    const settings = new RouteSettings(base);
    const slow = rulesOf(mesh(ROUTES))[0];
    const a = settings.of(slow);
    expect(a.attempts).toBe(4);
    expect(settings.of(slow)).not.toBe(a);
  });
});

function fakeStream(attempts: number): StreamContext & { flags: string[] } {
  const flags: string[] = [];
  return { attempts, flags, addFlag: (f: string) => flags.push(f) } as unknown as StreamContext & { flags: string[] };
}

describe('RetryState', () => {
  const replayable = () => true;

  test('errors: connect failures and refused streams are retried by default, overflow never, a body that cannot be resent never', () => {
    const r = new RetryState(base);
    expect(r.retriesError(new HboneConnectError('CONNECT', 'refused'), replayable)).toBe(true);
    expect(r.retriesError(new UpstreamResetError('r', 7, false), replayable)).toBe(true);
    expect(r.retriesError(new UpstreamResetError('r', 2, false), replayable)).toBe(false);
    expect(r.retriesError(new UpstreamOverflowError('c', 'max_requests', 1), replayable)).toBe(false);
    // A connect failure never sent the body: `unsent` is asked.
    expect(r.retriesError(new HboneConnectError('CONNECT', 'refused'), (unsent) => unsent)).toBe(true);
    expect(r.retriesError(new UpstreamResetError('r', 7, false), (unsent) => unsent)).toBe(false);
  });

  test('responses: the retriable codes and gRPC unavailable/cancelled in a trailers-only answer', () => {
    const r = new RetryState(base);
    expect(r.retriesResponse(503, [])).toBe(true);
    expect(r.retriesResponse(500, [])).toBe(false);
    expect(r.retriesResponse(200, ['content-type', 'application/grpc', 'grpc-status', '14'])).toBe(true);
    expect(r.retriesResponse(200, ['grpc-status', '0'])).toBe(false);
  });

  test('budget: exhausted after 1 + attempts; a full maxRetries breaker adds UO', () => {
    const r = new RetryState(base);
    expect(r.exhausted(fakeStream(2))).toBe(false);
    expect(r.exhausted(fakeStream(3))).toBe(true);
    const s = fakeStream(1);
    expect(r.breakerAllows(s, { retryAllowed: () => false } as never)).toBe(false);
    expect(s.flags).toEqual(['UO']);
    expect(r.breakerAllows(s, undefined)).toBe(true);
  });

  test('back-off: a random wait below base × 2^(n-1), capped at 10 × base; the failed host is avoided next', () => {
    vi.useFakeTimers();
    vi.spyOn(Math, 'random').mockReturnValue(0.999);
    const route: CompiledRoute = { ...base, backoffBaseMs: 100 };
    const r = new RetryState(route);
    const ran: number[] = [];
    r.backOff(fakeStream(1), '10.0.0.1:80', (n: number) => ran.push(n), 1);
    vi.advanceTimersByTime(99);
    expect(ran).toEqual([1]);
    expect(r.tried).toEqual(['10.0.0.1:80']);
    // Attempt 10: 100 × 2^9 would be 51 s; the cap is 1 s.
    r.backOff(fakeStream(10), undefined, (n: number) => ran.push(n), 10);
    vi.advanceTimersByTime(998);
    expect(ran).toEqual([1]);
    vi.advanceTimersByTime(2);
    expect(ran).toEqual([1, 10]);
  });

  test('cancel clears a pending back-off: no further attempt starts', () => {
    vi.useFakeTimers();
    const r = new RetryState(base);
    const ran: number[] = [];
    r.backOff(fakeStream(1), undefined, (n: number) => ran.push(n), 1);
    r.cancel();
    vi.advanceTimersByTime(10_000);
    expect(ran).toEqual([]);
    expect(vi.getTimerCount()).toBe(0);
  });
});
