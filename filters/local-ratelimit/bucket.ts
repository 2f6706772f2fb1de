/**
 * Token buckets with Envoy's local rate limit semantics (envoyproxy/envoy
 * source/extensions/filters/common/local_ratelimit/local_ratelimit_impl.cc): a bucket starts full
 * and gains `tokensPerFill` (up to `maxTokens`) at the end of each `fillInterval`; a request takes
 * one token or is limited. Fills are computed from the monotonic clock when a bucket is used, not
 * by a timer, so idle buckets cost nothing.
 *
 * Descriptors (envoyproxy/envoy local_ratelimit_impl.cc `requestAllowed`): each of a request's
 * descriptors finds the configured descriptor with exactly its entries, else the first configured
 * one whose entries without a value match any value (a dynamic descriptor: one bucket per distinct
 * value, at most `maxDynamicDescriptors`, the least recently used dropped). The buckets found are
 * consumed slowest-filling first, and the first one out of tokens limits the request without
 * consuming the others; the default bucket is consumed when none was found, or always with
 * `alwaysConsumeDefaultTokenBucket` (Envoy's default).
 */
import type { BucketConfig, DescriptorConfig, LocalRateLimitConfig } from './config.ts';

/** One request descriptor: `[key, value]` entries in order. */
export type Descriptor = readonly (readonly [string, string])[];

export class TokenBucket {
  readonly config: BucketConfig;
  private tokens: number;
  private lastFill: number;

  constructor(config: BucketConfig, now: number) {
    this.config = config;
    this.tokens = config.maxTokens;
    this.lastFill = now;
  }

  private refill(now: number): void {
    const fills = Math.floor((now - this.lastFill) / this.config.fillIntervalMs);
    if (fills <= 0) return;
    this.tokens = Math.min(this.config.maxTokens, this.tokens + fills * this.config.tokensPerFill);
    this.lastFill += fills * this.config.fillIntervalMs;
  }

  /** Take a token; false when there is none. */
  take(now: number): boolean {
    this.refill(now);
    if (this.tokens < 1) return false;
    this.tokens--;
    return true;
  }

  remaining(now: number): number {
    this.refill(now);
    return this.tokens;
  }

  /** Whole seconds until the next fill (Envoy's `x-ratelimit-reset`). */
  resetSeconds(now: number): number {
    this.refill(now);
    return Math.max(0, Math.ceil((this.lastFill + this.config.fillIntervalMs - now) / 1000));
  }
}

/** A configured descriptor and its bucket(s). */
class DescriptorBuckets {
  readonly config: DescriptorConfig;
  private readonly fixed: TokenBucket | undefined;
  private readonly byValue = new Map<string, TokenBucket>();
  private readonly max: number;

  constructor(config: DescriptorConfig, max: number, now: number) {
    this.config = config;
    this.fixed = config.entries.some((e) => e.value === undefined) ? undefined : new TokenBucket(config.bucket, now);
    this.max = max;
  }

  /** Whether `d` has this descriptor's keys and, where it names one, its value. */
  matches(d: Descriptor): boolean {
    const entries = this.config.entries;
    if (d.length !== entries.length) return false;
    for (let i = 0; i < entries.length; i++) {
      if (entries[i].key !== d[i][0]) return false;
      if (entries[i].value !== undefined && entries[i].value !== d[i][1]) return false;
    }
    return true;
  }

  bucketFor(d: Descriptor, now: number): TokenBucket {
    if (this.fixed) return this.fixed;
    const key = d.map((e) => e[1]).join('\u0000');
    let b = this.byValue.get(key);
    if (b) {
      // Most recently used last: Map iteration order is the eviction order.
      this.byValue.delete(key);
    } else {
      b = new TokenBucket(this.config.bucket, now);
      if (this.byValue.size >= this.max) this.byValue.delete(this.byValue.keys().next().value!);
    }
    this.byValue.set(key, b);
    return b;
  }
}

/** Tokens a bucket gains per second: the order buckets are consumed in (slowest first). */
const fillRate = (b: TokenBucket) => b.config.tokensPerFill / b.config.fillIntervalMs;

/** The outcome of one check: allowed or not, and the bucket the `x-ratelimit-*` headers describe. */
export interface Verdict {
  readonly allowed: boolean;
  readonly bucket: TokenBucket;
}

/** The buckets of one filter instance (one attachment). Not shared across workers. */
export class LocalRateLimiter {
  private readonly base: TokenBucket;
  /** Descriptors with every value given, by their entries; the others (dynamic) in config order. */
  private readonly exact = new Map<string, DescriptorBuckets>();
  private readonly dynamic: readonly DescriptorBuckets[];
  private readonly alwaysConsumeDefault: boolean;

  constructor(config: LocalRateLimitConfig, now = performance.now()) {
    this.base = new TokenBucket(config.bucket, now);
    const dynamic: DescriptorBuckets[] = [];
    for (const d of config.descriptors) {
      const buckets = new DescriptorBuckets(d, config.maxDynamicDescriptors, now);
      if (d.entries.some((e) => e.value === undefined)) dynamic.push(buckets);
      else this.exact.set(keyOf(d.entries.map((e) => [e.key, e.value!] as const)), buckets);
    }
    this.dynamic = dynamic;
    this.alwaysConsumeDefault = config.alwaysConsumeDefaultTokenBucket;
  }

  check(request: readonly Descriptor[], now = performance.now()): Verdict {
    const found: TokenBucket[] = [];
    for (const r of request) {
      const d = this.exact.get(keyOf(r)) ?? this.dynamic.find((x) => x.matches(r));
      if (d) found.push(d.bucketFor(r, now));
    }
    if (found.length > 1) found.sort((a, b) => fillRate(a) - fillRate(b));
    for (const bucket of found) if (!bucket.take(now)) return { allowed: false, bucket };
    if (found.length > 0 && !this.alwaysConsumeDefault) return { allowed: true, bucket: found[0] };
    if (!this.base.take(now)) return { allowed: false, bucket: this.base };
    return { allowed: true, bucket: found[0] ?? this.base };
  }
}

function keyOf(d: Descriptor): string {
  return d.map(([k, v]) => `${k}\u0000${v}`).join('\u0001');
}
