/**
 * `istio.local_ratelimit`: its token buckets on a simulated clock (a rate held over time, fills
 * capped at maxTokens, the reset header's seconds), descriptor matching as Envoy's (exact entries
 * first, per-value dynamic buckets with LRU eviction, slowest bucket first, the default bucket),
 * the config's validation, and the filter on real contexts (429, x-ratelimit-* headers, requests
 * let through unenforced).
 */
import { afterEach, describe, expect, test } from 'vitest';
import { LocalRateLimiter, localRateLimitFactory, parseLocalRateLimitConfig, TokenBucket, type Descriptor } from '../../../filters/local-ratelimit/index.ts';
import { ConfigError } from '../../../src/util/index.ts';
import { FilterHarness } from '../../helpers/filter-harness.ts';
import { thrown } from '../../helpers/thrown.ts';

const bucket = (maxTokens: number, tokensPerFill: number, fillInterval: string) => ({ maxTokens, tokensPerFill, fillInterval });
const limiter = (config: object) => new LocalRateLimiter(parseLocalRateLimitConfig(config), 0);
const tenant = (v: string): Descriptor[] => [[['tenant', v]]];

describe('token bucket (simulated clock)', () => {
  test('holds its rate: over 10 s at 10 tokens per second a client asking every 10 ms gets 10 + 100 requests', () => {
    const b = new TokenBucket({ maxTokens: 10, tokensPerFill: 10, fillIntervalMs: 1000 }, 0);
    let allowed = 0;
    for (let t = 0; t < 10_000; t += 10) if (b.take(t)) allowed++;
    // The initial burst, then 9 fills within [0, 10 s) (at 1 s .. 9 s); the 10th lands at 10 s.
    expect(allowed).toBe(10 + 90);
    expect(b.take(10_000)).toBe(true);
  });

  test('a burst takes maxTokens at most; fills add tokensPerFill per whole interval, capped', () => {
    const b = new TokenBucket({ maxTokens: 5, tokensPerFill: 2, fillIntervalMs: 100 }, 0);
    expect(Array.from({ length: 8 }, () => b.take(0)).filter(Boolean)).toHaveLength(5);
    expect(b.take(99)).toBe(false);
    expect(b.remaining(100)).toBe(2);
    expect(b.remaining(250)).toBe(4);
    expect(b.remaining(10_000)).toBe(5);
    expect(b.resetSeconds(10_050)).toBe(1);
  });
});

describe('descriptors', () => {
  const config = {
    tokenBucket: bucket(100, 100, '1h'),
    descriptors: [
      { entries: [{ key: 'tenant', value: 'gold' }], tokenBucket: bucket(6, 6, '1h') },
      { entries: [{ key: 'tenant' }], tokenBucket: bucket(2, 2, '1h') },
    ],
  };

  test('exact entries win over a dynamic descriptor; each other value gets a bucket of its own', () => {
    const l = limiter(config);
    const run = (v: string) => Array.from({ length: 10 }, () => l.check(tenant(v), 0).allowed).filter(Boolean).length;
    expect([run('gold'), run('a'), run('b'), run('a')]).toEqual([6, 2, 2, 0]);
  });

  test('dynamic buckets are bounded: past maxDynamicDescriptors the least recently used value starts afresh', () => {
    const l = limiter({ ...config, maxDynamicDescriptors: 2 });
    expect(l.check(tenant('a'), 0).allowed && l.check(tenant('a'), 0).allowed).toBe(true);
    expect(l.check(tenant('a'), 0).allowed).toBe(false);
    l.check(tenant('b'), 0);
    l.check(tenant('c'), 0); // evicts a
    expect(l.check(tenant('a'), 0).allowed).toBe(true);
  });

  test('the default bucket: consumed when nothing matched, and also after a match by default', () => {
    const small = { ...config, tokenBucket: bucket(3, 3, '1h') };
    const always = limiter(small);
    expect(Array.from({ length: 5 }, () => always.check(tenant('gold'), 0).allowed).filter(Boolean)).toHaveLength(3);
    const notAlways = limiter({ ...small, alwaysConsumeDefaultTokenBucket: false });
    expect(Array.from({ length: 8 }, () => notAlways.check(tenant('gold'), 0).allowed).filter(Boolean)).toHaveLength(6);
    expect(Array.from({ length: 5 }, () => notAlways.check([], 0).allowed).filter(Boolean)).toHaveLength(3);
  });

  test('several matches: the slowest-filling bucket decides first and a refusal consumes no other bucket', () => {
    const l = limiter({
      tokenBucket: bucket(100, 100, '1h'),
      descriptors: [
        { entries: [{ key: 'a', value: '1' }], tokenBucket: bucket(5, 5, '1s') },
        { entries: [{ key: 'b', value: '1' }], tokenBucket: bucket(1, 1, '1h') },
      ],
    });
    const both: Descriptor[] = [[['a', '1']], [['b', '1']]];
    expect(l.check(both, 0)).toMatchObject({ allowed: true });
    const refused = l.check(both, 0);
    expect(refused.allowed).toBe(false);
    expect(refused.bucket.config.maxTokens).toBe(1);
    // The 5-token bucket lost only the first request's token.
    expect(Array.from({ length: 6 }, () => l.check([[['a', '1']]], 0).allowed).filter(Boolean)).toHaveLength(4);
  });
});

describe('config', () => {
  test.each([
    [{}, 'tokenBucket'],
    [{ tokenBucket: bucket(1, 1, '10ms') }, 'tokenBucket.fillInterval'],
    [{ tokenBucket: bucket(0, 1, '1s') }, 'tokenBucket.maxTokens'],
    [{ tokenBucket: bucket(1, 1, 'soon') }, 'tokenBucket.fillInterval'],
    [{ tokenBucket: bucket(1, 1, '1s'), filterEnforced: 120 }, 'filterEnforced'],
    [{ tokenBucket: bucket(1, 1, '1s'), rateLimits: [{ actions: [{ requestHeaders: { headerName: 'x' } }] }] }, 'rateLimits.0.actions.0'],
    [{ tokenBucket: bucket(1, 1, '1s'), descriptors: [{ entries: [{ key: 'k' }], tokenBucket: bucket(1, 1, '1s') }, { entries: [{ key: 'k' }], tokenBucket: bucket(2, 2, '1s') }] }, 'descriptors.1.entries'],
    [{ tokenBucket: bucket(1, 1, '1s'), responseHeadersToAdd: [{ name: 'x', value: 'a\r\nb' }] }, 'responseHeadersToAdd.0.value'],
  ])('%j is refused at %s', (raw, field) => {
    const err = thrown(() => parseLocalRateLimitConfig(raw));
    expect(err).toBeInstanceOf(ConfigError);
    expect((err as ConfigError).location.field).toMatch(new RegExp(`^${field.replace(/\./g, '\\.')}`));
  });

  test('a status below 400 answers 429, as Envoy', () => {
    expect(parseLocalRateLimitConfig({ tokenBucket: bucket(1, 1, '1s'), status: 200 }).status).toBe(429);
  });
});

describe('the filter', () => {
  let h: FilterHarness | undefined;
  afterEach(() => h?.close());

  test('429 local_rate_limited with flag RL, x-ratelimit-* on every response it checked', async () => {
    h = FilterHarness.fromFactory(localRateLimitFactory, { tokenBucket: bucket(1, 1, '1h'), enableXRatelimitHeaders: 'DRAFT_VERSION_03' });
    const first = await h.request(h.connection(), { headers: [['host', 'echo.demo']] });
    expect(first.response.status).toBe(200);
    expect([first.response.headers.get('x-ratelimit-limit'), first.response.headers.get('x-ratelimit-remaining')]).toEqual(['1', '0']);
    const second = await h.request(h.connection(), { headers: [['host', 'echo.demo']] });
    expect([second.response.status, second.response.body, second.stream.responseFlags, second.stream.responseCodeDetails]).toEqual([429, 'local_rate_limited', 'RL', 'local_rate_limited']);
    expect(second.response.headers.get('x-ratelimit-reset')).toBe('3600');
  });

  test('filterEnforced 0: limited requests pass, marked with requestHeadersToAddWhenNotEnforced', async () => {
    h = FilterHarness.fromFactory(localRateLimitFactory, { tokenBucket: bucket(1, 1, '1h'), filterEnforced: 0, requestHeadersToAddWhenNotEnforced: [{ name: 'x-would-limit', value: 'yes' }] });
    await h.request(h.connection(), { headers: [['host', 'echo.demo']] });
    const second = await h.request(h.connection(), { headers: [['host', 'echo.demo']] });
    expect(second.response.status).toBe(200);
    expect(second.stream.requestHeaders.get('x-would-limit')).toBe('yes');
  });

  test('descriptors from the source principal: each client its own bucket', async () => {
    h = FilterHarness.fromFactory(localRateLimitFactory, {
      tokenBucket: bucket(100, 100, '1h'),
      rateLimits: [{ actions: [{ sourcePrincipal: {} }] }],
      descriptors: [{ entries: [{ key: 'source_principal' }], tokenBucket: bucket(1, 1, '1h') }],
    });
    const as = (uri: string) => h!.connection({ info: { peer: { uri, trustDomain: 'cluster.local', namespace: 'demo', serviceAccount: uri.split('/').pop()! } as never } });
    const a = as('spiffe://cluster.local/ns/demo/sa/a');
    const b = as('spiffe://cluster.local/ns/demo/sa/b');
    const statuses = [];
    for (const c of [a, a, b]) statuses.push((await h.request(c, { headers: [['host', 'echo.demo']] })).response.status);
    expect(statuses).toEqual([200, 429, 200]);
  });
});
