/**
 * Token buckets with Envoy's local rate limit semantics (envoyproxy/envoy
 * source/extensions/filters/common/local_ratelimit/local_ratelimit_impl.cc): a bucket starts full
 * and gains `tokensPerFill` (up to `maxTokens`) at the end of each `fillInterval`; a request takes
 * one token or is limited. Fills are computed from the monotonic clock when a bucket is used, not
 * by a timer, so idle buckets cost nothing.
 *
 * Descriptors: the configured descriptors a request's descriptors match are consumed strictest
 * first (fewest tokens per second), and the first one out of tokens limits the request without
 * consuming the others; the default bucket is consumed when no descriptor matched, or always with
 * `alwaysConsumeDefaultTokenBucket` (Envoy's default). A configured entry without a value matches
 * any value, with one bucket per distinct value, at most `maxDynamicDescriptors` of them (the least
 * recently used is dropped), as Envoy's dynamic descriptors.
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
  private readonly dynamic: boolean;
  private readonly fixed: TokenBucket | undefined;
  private readonly byValue = new Map<string, TokenBucket>();
  private readonly max: number;

  constructor(config: DescriptorConfig, max: number, now: number) {
    this.config = config;
    this.dynamic = config.entries.some((e) => e.value === undefined);
    this.fixed = this.dynamic ? undefined : new TokenBucket(config.bucket, now);
    this.max = max;
  }

  /** Tokens gained per second, Envoy's order of consumption (strictest first). */
  get rate(): number {
    return this.config.bucket.tokensPerFill / (this.config.bucket.fillIntervalMs / 1000);
  }

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

/** The outcome of one check: allowed or not, and the bucket the `x-ratelimit-*` headers describe. */
export interface Verdict {
  readonly allowed: boolean;
  readonly bucket: TokenBucket;
}

/** The buckets of one filter instance (one attachment). Not shared across workers. */
export class LocalRateLimiter {
  private readonly base: TokenBucket;
  private readonly descriptors: readonly DescriptorBuckets[];
  private readonly alwaysConsumeDefault: boolean;

  constructor(config: LocalRateLimitConfig, now = performance.now()) {
    this.base = new TokenBucket(config.bucket, now);
    this.descriptors = config.descriptors.map((d) => new DescriptorBuckets(d, config.maxDynamicDescriptors, now)).sort((a, b) => a.rate - b.rate);
    this.alwaysConsumeDefault = config.alwaysConsumeDefaultTokenBucket;
  }

  check(request: readonly Descriptor[], now = performance.now()): Verdict {
    let first: TokenBucket | undefined;
    for (const d of this.descriptors) {
      const hit = request.find((r) => d.matches(r));
      if (!hit) continue;
      const bucket = d.bucketFor(hit, now);
      if (!bucket.take(now)) return { allowed: false, bucket };
      first ??= bucket;
    }
    if (first && !this.alwaysConsumeDefault) return { allowed: true, bucket: first };
    const allowed = this.base.take(now);
    return { allowed, bucket: allowed ? (first ?? this.base) : this.base };
  }
}
