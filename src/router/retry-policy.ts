/**
 * Route settings and retries of the HTTP router: the bootstrap's route behaviour compiled once
 * into flags ({@link CompiledRoute}), each HTTPRoute rule's `timeouts` / `retry` derived from it
 * when a mesh snapshot is first seen ({@link RouteSettings}), and one request's retry state
 * ({@link RetryState}): which failures and answers are retried, the retry budget, and Envoy's
 * jittered exponential back-off between attempts.
 */
import { routesFor, type CompiledRule, type RouteTable } from '../routing/index.ts';
import type { MeshSnapshot } from '../state/index.ts';
import { ResponseFlag, type StreamContext } from '../pipeline/index.ts';
import { UpstreamOverflowError, type ClusterState, isConnectFailure, UpstreamResetError } from '../upstream/index.ts';

/** Route behaviour from the bootstrap `http` section (ms, counts). */
export interface RouterOptions {
  /** Per-request timeout (ms); 0 = none. */
  readonly requestTimeoutMs: number;
  /** Append the tunnel's client address to `x-forwarded-for`. */
  readonly appendForwardedFor: boolean;
  readonly retry: RetryPolicy;
}

/** Envoy's retry policy as Istio sets it on waypoint routes. */
export interface RetryPolicy {
  /** Retries after the first attempt. */
  readonly attempts: number;
  readonly retryOn: readonly string[];
  readonly retriableStatusCodes: readonly number[];
}

/** Istio's default: 2 retries on connect-failure, refused-stream, unavailable, cancelled, 503. */
export const DEFAULT_ROUTER_OPTIONS: RouterOptions = Object.freeze({
  requestTimeoutMs: 0,
  appendForwardedFor: false,
  retry: Object.freeze({
    attempts: 2,
    retryOn: Object.freeze(['connect-failure', 'refused-stream', 'unavailable', 'cancelled', 'retriable-status-codes']),
    retriableStatusCodes: Object.freeze([503]),
  }),
});

/** Retry conditions resolved once into flags (the data path never parses strings). */
export interface CompiledRoute {
  readonly requestTimeoutMs: number;
  readonly appendForwardedFor: boolean;
  readonly attempts: number;
  readonly onConnectFailure: boolean;
  readonly onRefusedStream: boolean;
  readonly onReset: boolean;
  readonly onUnavailable: boolean;
  readonly onCancelled: boolean;
  readonly on5xx: boolean;
  readonly onGatewayError: boolean;
  readonly retriableStatus: ReadonlySet<number>;
  /** Per-attempt timeout (ms, HTTPRoute `timeouts.backendRequest`); 0 = none. */
  readonly perTryTimeoutMs: number;
  /** Retry back-off base interval (ms): Envoy's 25 ms default, or HTTPRoute `retry.backoff`; capped at 10x. */
  readonly backoffBaseMs: number;
}

export function compileRoute(o: RouterOptions): CompiledRoute {
  const on = new Set(o.retry.retryOn);
  return {
    requestTimeoutMs: o.requestTimeoutMs,
    appendForwardedFor: o.appendForwardedFor,
    attempts: o.retry.attempts,
    onConnectFailure: on.has('connect-failure') || on.has('5xx') || on.has('gateway-error') || on.has('reset'),
    onRefusedStream: on.has('refused-stream') || on.has('5xx') || on.has('reset'),
    onReset: on.has('reset') || on.has('5xx'),
    onUnavailable: on.has('unavailable'),
    onCancelled: on.has('cancelled'),
    on5xx: on.has('5xx'),
    onGatewayError: on.has('gateway-error'),
    retriableStatus: new Set(on.has('retriable-status-codes') ? o.retry.retriableStatusCodes : []),
    perTryTimeoutMs: 0,
    backoffBaseMs: 25,
  };
}

/**
 * The route settings of a matched HTTPRoute rule: its `timeouts` and `retry` override the
 * bootstrap's. `retry` with `codes` retries them besides Istio's connect-failure, refused-stream,
 * unavailable and cancelled (istio/istio pilot/pkg/config/kube/gateway/conversion.go
 * `createRetryPolicy`); `attempts` defaults to Istio's 2; `backoff` is Envoy's base interval.
 */
export function ruleRoute(base: CompiledRoute, rule: CompiledRule): CompiledRoute {
  const t = rule.timeouts;
  const r = rule.retry;
  if (!t && !r) return base;
  const out = {
    ...base,
    requestTimeoutMs: t?.requestMs ?? base.requestTimeoutMs,
    perTryTimeoutMs: t?.backendRequestMs ?? 0,
  };
  if (!r) return out;
  if (r.attempts === 0) {
    // `attempts: 0`: Istio programs no retry policy at all (istio/istio
    // pilot/pkg/config/kube/gateway/conversion.go `createRetryPolicy`), so nothing is retried and
    // nothing is flagged `URX`.
    return { ...out, attempts: 0, onConnectFailure: false, onRefusedStream: false, onReset: false, onUnavailable: false, onCancelled: false, on5xx: false, onGatewayError: false, retriableStatus: new Set() };
  }
  const codes = r.codes.length > 0;
  return {
    ...out,
    attempts: r.attempts ?? DEFAULT_ROUTER_OPTIONS.retry.attempts,
    onConnectFailure: codes || base.onConnectFailure,
    onRefusedStream: codes || base.onRefusedStream,
    onUnavailable: codes || base.onUnavailable,
    onCancelled: codes || base.onCancelled,
    retriableStatus: codes ? new Set(r.codes) : base.retriableStatus,
    backoffBaseMs: r.backoffMs ?? base.backoffBaseMs,
  };
}

/**
 * The route settings of every HTTPRoute rule, derived when the router first sees a mesh snapshot
 * ({@link observe}: at construction and on each published snapshot), never on a request.
 */
export class RouteSettings {
  /** The bootstrap's settings: requests no rule matched, and rules without timeouts or retry. */
  readonly base: CompiledRoute;
  private readonly rules = new WeakMap<CompiledRule, CompiledRoute>();
  private readonly seen = new WeakSet<MeshSnapshot>();

  constructor(base: CompiledRoute) {
    this.base = base;
  }

  /**
   * Compile `snapshot`'s routes (so invalid routes are reported when the mesh file is loaded or
   * changed, not at their first request) and derive the settings of each rule they hold.
   */
  observe(snapshot: MeshSnapshot): void {
    if (this.seen.has(snapshot)) return;
    this.seen.add(snapshot);
    const routes = routesFor(snapshot);
    for (const service of snapshot.services) {
      if (!service.servedByThisWaypoint) continue;
      for (const port of service.ports) {
        const attached = routes.forTarget({ kind: 'service', service, port });
        if (!attached) continue;
        if (attached.producer) this.add(attached.producer);
        for (const table of attached.consumers.values()) this.add(table);
      }
    }
  }

  /**
   * The settings of a matched rule. A rule of a snapshot never {@link observe}d (an environment
   * without `mesh.subscribe`) is derived on the spot and not kept.
   */
  of(rule: CompiledRule): CompiledRoute {
    return this.rules.get(rule) ?? ruleRoute(this.base, rule);
  }

  private add(table: RouteTable): void {
    for (const m of table.matches) if (!this.rules.has(m.rule)) this.rules.set(m.rule, ruleRoute(this.base, m.rule));
  }
}

/** Node's largest timer (ms): longer back-offs would fire at once. */
const MAX_TIMER_MS = 2 ** 31 - 1;

/**
 * One request's retries across its attempts: the route's retry conditions and budget, the
 * authorities tried (a retry prefers another host), and the back-off timer before the next
 * attempt (cleared by {@link cancel}: a request that ended starts no further attempt).
 */
export class RetryState {
  readonly route: CompiledRoute;
  /** Authorities tried so far. */
  tried: string[] | undefined;
  private timer: NodeJS.Timeout | undefined;

  constructor(route: CompiledRoute) {
    this.route = route;
    this.tried = undefined;
    this.timer = undefined;
  }

  /**
   * Whether a DestinationRule's `maxRetries` circuit breaker lets one more retry go (the budget
   * is {@link exhausted}'s). When it does not, the answer goes out flagged `UO` (Envoy's retry overflow).
   */
  breakerAllows(s: StreamContext, cluster: ClusterState | undefined): boolean {
    if (cluster?.retryAllowed() === false) {
      s.addFlag(ResponseFlag.UpstreamOverflow);
      return false;
    }
    return true;
  }

  /** Every allowed attempt was made (Envoy's `URX` when the policy wanted another). */
  exhausted(s: StreamContext): boolean {
    return s.attempts > this.route.attempts;
  }

  /**
   * Whether the policy covers this failure (budget aside). `replayable(unsent)`: whether the body
   * can be sent again, `unsent` when the attempt failed before the upstream could take any of it.
   */
  retriesError(err: Error & { code?: string }, replayable: (unsent: boolean) => boolean): boolean {
    // Envoy never retries a circuit breaker's overflow.
    if (err instanceof UpstreamOverflowError) return false;
    const connectFailure = isConnectFailure(err);
    if (!replayable(connectFailure)) return false;
    const r = this.route;
    if (connectFailure) return r.onConnectFailure;
    if (err instanceof UpstreamResetError && !err.responseStarted) {
      if (err.rstCode === 7 /* REFUSED_STREAM */) return r.onRefusedStream;
      return r.onReset;
    }
    return r.onReset && err.code !== 'UND_ERR_ABORTED';
  }

  /** Whether the policy covers this response (budget and body aside). */
  retriesResponse(status: number, raw: readonly string[]): boolean {
    const r = this.route;
    if (r.retriableStatus.has(status) || (r.on5xx && status >= 500) || (r.onGatewayError && (status === 502 || status === 503 || status === 504))) return true;
    if (r.onUnavailable || r.onCancelled) {
      // gRPC trailers-only answers carry grpc-status in the headers (Envoy's retry_on for gRPC).
      for (let i = 0; i < raw.length; i += 2) {
        if (raw[i].length === 11 && raw[i].toLowerCase() === 'grpc-status') {
          const g = raw[i + 1];
          return (r.onUnavailable && g === '14') || (r.onCancelled && g === '1');
        }
      }
    }
    return false;
  }

  /** Envoy retries a per-try timeout under `reset`, `5xx` and `gateway-error`. */
  get retriesTimeout(): boolean {
    const r = this.route;
    return r.onReset || r.on5xx || r.onGatewayError;
  }

  /**
   * Run `next(arg)` after Envoy's jittered exponential back-off: a random wait below `base ×
   * 2^(attempt-1)`, capped at `max_interval` (10 × base, Envoy's default; envoyproxy/envoy
   * source/common/common/backoff_strategy.cc `JitteredExponentialBackOffStrategy`) and at Node's
   * largest timer. `previous`: the authority of the attempt that failed, avoided next when another
   * exists.
   */
  backOff<T>(s: StreamContext, previous: string | undefined, next: (arg: T) => void, arg: T): void {
    if (previous) (this.tried ??= []).push(previous);
    const base = this.route.backoffBaseMs * 2 ** (s.attempts - 1);
    const wait = Math.random() * Math.min(base, this.route.backoffBaseMs * 10, MAX_TIMER_MS);
    if (this.timer) clearTimeout(this.timer);
    this.timer = setTimeout(() => {
      this.timer = undefined;
      next(arg);
    }, wait);
  }

  /** Clear a pending back-off. */
  cancel(): void {
    if (this.timer) {
      clearTimeout(this.timer);
      this.timer = undefined;
    }
  }
}
