/**
 * `istio.local_ratelimit`: Envoy's HTTP local rate limit filter (envoyproxy/envoy
 * source/extensions/filters/http/local_ratelimit/local_ratelimit.cc) for the waypoint, attached per
 * Gateway, Service or route rule by a WaypointFilter (`filter: istio.local_ratelimit`; one set of
 * buckets per attachment) or listed in the bootstrap `filters` (one set for the whole waypoint).
 *
 * Per request: the descriptors are built (config.ts `rateLimits`), the buckets consulted
 * (bucket.ts); a limited request is answered `status` (429) `local_rate_limited`, flag `RL`,
 * details `local_rate_limited`, with `responseHeadersToAdd` (gRPC: grpc-status 14 UNAVAILABLE, as
 * Envoy maps 429); with `enableXRatelimitHeaders: DRAFT_VERSION_03` every response it checked
 * carries `x-ratelimit-limit`, `-remaining` and `-reset` of the bucket that decided.
 *
 * Counters (`/stats/prometheus`), Envoy's `<stat_prefix>.http_local_rate_limit.*` as its
 * Prometheus exporter names them (tag `envoy.local_http_ratelimit_prefix`, envoyproxy/envoy
 * source/common/config/well_known_names.cc): `envoy_http_local_rate_limit_enabled`, `_ok`,
 * `_rate_limited`, `_enforced`, labelled `envoy_local_http_ratelimit_prefix="<statPrefix>"`.
 *
 * Buckets live in the process that serves the request: each worker process (`--concurrency`) has
 * its own, so N workers admit up to N times the configured rate. Envoy shares one bucket among its
 * worker threads (its docs: "the token bucket is shared across all workers").
 */
import { Counter, type Registry } from 'prom-client';
import {
  defineSlot,
  FilterStatus,
  ResponseFlag,
  sendLocalReply,
  type Filter,
  type FilterFactory,
  type HeaderList,
  type PhaseResult,
  type StreamContext,
} from '../../src/pipeline/index.ts';
import { downstreamPeerOf, originalClient } from '../../src/peer/index.ts';
import { LocalRateLimiter, type Descriptor, type Verdict } from './bucket.ts';
import { parseLocalRateLimitConfig, type LocalRateLimitConfig } from './config.ts';

export const LOCAL_RATELIMIT_FILTER_NAME = 'istio.local_ratelimit';
export { parseLocalRateLimitConfig, type LocalRateLimitConfig } from './config.ts';
export { LocalRateLimiter, TokenBucket, type Descriptor } from './bucket.ts';

/** The decision for this request's `x-ratelimit-*` headers, and which filter refused it (for `responseHeadersToAdd`). */
const VERDICT = defineSlot<Verdict>('istio.local_ratelimit', 'stream');
const REFUSED_BY = defineSlot<LocalRateLimitFilter>('istio.local_ratelimit.refused_by', 'stream');

const STATS = ['enabled', 'ok', 'rate_limited', 'enforced'] as const;
type Stat = (typeof STATS)[number];
type Counters = Readonly<Record<Stat, { inc(): void }>>;

/** The four counters of one stat prefix, from the registry's shared families. */
function countersFor(registry: Registry, prefix: string): Counters {
  const out = {} as Record<Stat, { inc(): void }>;
  for (const stat of STATS) {
    const name = `envoy_http_local_rate_limit_${stat}`;
    const family =
      (registry.getSingleMetric(name) as Counter<string> | undefined) ??
      new Counter({ name, help: `Envoy's <stat_prefix>.http_local_rate_limit.${stat}`, labelNames: ['envoy_local_http_ratelimit_prefix'], registers: [registry] });
    out[stat] = family.labels(prefix);
  }
  return Object.freeze(out);
}

class LocalRateLimitFilter implements Filter {
  readonly name = LOCAL_RATELIMIT_FILTER_NAME;
  private readonly config: LocalRateLimitConfig;
  private readonly limiter: LocalRateLimiter;
  private readonly stats: Counters;

  constructor(config: LocalRateLimitConfig, stats: Counters) {
    this.config = config;
    this.limiter = new LocalRateLimiter(config);
    this.stats = stats;
  }

  onRequestHeaders(stream: StreamContext): PhaseResult {
    const c = this.config;
    if (c.enabled < 1 && Math.random() >= c.enabled) return FilterStatus.Continue;
    this.stats.enabled.inc();
    const verdict = this.limiter.check(c.rateLimits.length ? this.descriptors(stream) : []);
    if (c.xRateLimitHeaders) stream.set(VERDICT, verdict);
    if (verdict.allowed) {
      this.stats.ok.inc();
      return FilterStatus.Continue;
    }
    this.stats.rate_limited.inc();
    if (c.enforced < 1 && Math.random() >= c.enforced) {
      for (const [name, value] of c.requestHeadersToAddWhenNotEnforced) stream.requestHeaders.set(name, value);
      return FilterStatus.Continue;
    }
    this.stats.enforced.inc();
    stream.set(REFUSED_BY, this);
    sendLocalReply(stream, c.status, 'local_rate_limited', ResponseFlag.RateLimited, 'local_rate_limited');
    return FilterStatus.StopAndReply;
  }

  onResponseHeaders(stream: StreamContext, headers: HeaderList): void {
    if (stream.get(REFUSED_BY) === this) for (const [name, value] of this.config.responseHeadersToAdd) headers.set(name, value);
    const v = this.config.xRateLimitHeaders ? stream.get(VERDICT) : undefined;
    if (!v) return;
    const now = performance.now();
    headers.set('x-ratelimit-limit', String(v.bucket.config.maxTokens));
    headers.set('x-ratelimit-remaining', String(v.bucket.remaining(now)));
    headers.set('x-ratelimit-reset', String(v.bucket.resetSeconds(now)));
  }

  /**
   * The request's descriptors: one per `rateLimits` entry whose actions all produce a value (a
   * missing header drops the entry, unless `skipIfAbsent` drops only that action), as Envoy's.
   */
  private descriptors(stream: StreamContext): Descriptor[] {
    const out: Descriptor[] = [];
    next: for (const actions of this.config.rateLimits) {
      const d: (readonly [string, string])[] = [];
      for (const a of actions) {
        let value: string | undefined;
        switch (a.kind) {
          case 'header':
            value = stream.requestHeaders.get(a.header);
            if (value === undefined && a.skipIfAbsent) continue;
            break;
          case 'principal':
            value = stream.conn.info.peer.uri;
            break;
          case 'workload': {
            const peer = downstreamPeerOf(stream);
            value = peer?.workload ? `${peer.namespace}/${peer.workload}` : undefined;
            break;
          }
          case 'remote':
            value = originalClient(stream.conn.info);
            break;
          case 'generic':
            value = a.value;
        }
        if (value === undefined) continue next;
        d.push([a.key, value]);
      }
      if (d.length) out.push(d);
    }
    return out;
  }
}

/** `istio.local_ratelimit`'s factory. */
export const localRateLimitFactory: FilterFactory<LocalRateLimitConfig> = {
  name: LOCAL_RATELIMIT_FILTER_NAME,
  parseConfig: parseLocalRateLimitConfig,
  create: (config, env) => new LocalRateLimitFilter(config, countersFor(env.metrics, config.statPrefix)),
};
