/**
 * Envoy's outlier detection for one cluster (source/common/upstream/outlier_detection_impl.cc
 * `DetectorImpl`, `DetectorHostMonitorImpl`), the consecutive-error detectors Istio configures
 * (success-rate detection is disabled by Istio):
 * - every upstream answer of a host is reported: a 5xx counts toward `consecutive5xx`, a 502/503/504
 *   toward `consecutiveGatewayFailure`, anything else resets both counters; a locally originated
 *   failure (connect failure, reset) counts as a 503 (Envoy maps it so while
 *   `split_external_local_origin_errors` is off, Istio's default);
 * - reaching a threshold (exactly, as Envoy's `==`) ejects the host at once, unless
 *   `ejected / hosts >= maxEjectionPercent` already (so one host of a cluster can always be
 *   ejected when the limit is above 0);
 * - every `interval` a sweep returns hosts whose ejection time, `baseEjectionTime × multiplier`
 *   (capped at 300 s, Envoy's `max_ejection_time`), has passed (their counters reset); the
 *   multiplier grows by one per ejection and shrinks by one per sweep once a returned host has
 *   stayed in for a base ejection time (`checkHostForUneject`, `eject_time_backoff_`);
 * - ejected hosts are not picked, unless fewer than `minHealthPercent` of the hosts are healthy
 *   (Envoy's healthy panic threshold: then all are used).
 * State is per host authority and lives as long as the cluster's runtime state (across mesh
 * snapshots); hosts that left the cluster are forgotten by {@link OutlierDetector.retain}.
 */
import type { Endpoint } from '../state/index.ts';
import type { OutlierDetectionPolicy } from '../routing/index.ts';

/** Why a host was ejected (Envoy's `envoy::data::cluster::v3::OutlierEjectionType`, lower-case as in its stat names). */
export type EjectionReason = 'consecutive_5xx' | 'consecutive_gateway_failure';

/**
 * What the detector tells its cluster (logs and Envoy's `outlier_detection.*` stats). `active`:
 * hosts ejected after the event.
 */
export interface OutlierEvents {
  ejected(host: string, reason: EjectionReason, ejectionMs: number, active: number): void;
  returned(host: string, ejectedForMs: number, active: number): void;
}

/** One ejected host, for `/config_dump`. */
export interface Ejection {
  readonly host: string;
  readonly reason: EjectionReason;
  /** How long this ejection lasts (base ejection time × the host's ejection count, capped). */
  readonly ejectionMs: number;
  /** Wall-clock time (ISO 8601) after which the next sweep returns the host. */
  readonly until: string;
}

/** Envoy's default `max_ejection_time` (ms). */
const MAX_EJECTION_TIME_MS = 300_000;

interface HostState {
  consecutive5xx: number;
  consecutiveGateway: number;
  /** Envoy's `eject_time_backoff_`: how many base ejection times the current/next ejection lasts. */
  multiplier: number;
  /** Monotonic ms of the current ejection; undefined while the host is in. */
  ejectedAt: number | undefined;
  /** Monotonic ms of the last return to service; undefined if never ejected. */
  returnedAt: number | undefined;
  /** Why the current (or last) ejection happened. */
  reason: EjectionReason;
}

export class OutlierDetector {
  private policy: OutlierDetectionPolicy;
  private readonly hosts = new Map<string, HostState>();
  private ejected = 0;
  private timer: NodeJS.Timeout | undefined;
  private readonly now: () => number;
  private readonly events: OutlierEvents | undefined;

  /** `now`: a monotonic clock in ms (tests pass their own). `events`: told of every ejection and return. */
  constructor(policy: OutlierDetectionPolicy, now: () => number = () => performance.now(), events?: OutlierEvents) {
    this.policy = policy;
    this.now = now;
    this.events = events;
  }

  /** The hosts ejected now, with why and until when. */
  ejections(): Ejection[] {
    if (this.ejected === 0) return [];
    const now = this.now();
    const wall = Date.now();
    const out: Ejection[] = [];
    for (const [host, h] of this.hosts) {
      if (h.ejectedAt === undefined) continue;
      const ejectionMs = this.ejectionMs(h);
      out.push({ host, reason: h.reason, ejectionMs, until: new Date(wall + h.ejectedAt + ejectionMs - now).toISOString() });
    }
    return out;
  }

  /** Envoy's ejection time of a host: base × its multiplier, capped at `max(max_ejection_time, base)`. */
  private ejectionMs(h: HostState): number {
    const base = this.policy.baseEjectionTimeMs;
    return Math.min(base * h.multiplier, Math.max(MAX_EJECTION_TIME_MS, base));
  }

  /** Hosts ejected now. */
  get ejectedCount(): number {
    return this.ejected;
  }

  /** Take new settings (a mesh reload); host state is kept. */
  update(policy: OutlierDetectionPolicy): void {
    if (policy.intervalMs !== this.policy.intervalMs && this.timer) {
      this.stopTimer();
      this.policy = policy;
      this.startTimer();
      return;
    }
    this.policy = policy;
  }

  isEjected(authority: string): boolean {
    return this.ejected > 0 && this.hosts.get(authority)?.ejectedAt !== undefined;
  }

  /**
   * The endpoints to balance over: `endpoints` without ejected hosts, or all of them when fewer
   * than `minHealthPercent` percent would remain (panic). Returns `endpoints` itself when nothing is ejected.
   */
  filter(endpoints: readonly Endpoint[]): readonly Endpoint[] {
    if (this.ejected === 0) return endpoints;
    const healthy = endpoints.filter((ep) => this.hosts.get(ep.authority)?.ejectedAt === undefined);
    if (healthy.length === endpoints.length) return endpoints;
    if (healthy.length * 100 < this.policy.minHealthPercent * endpoints.length) return endpoints;
    return healthy;
  }

  /** An upstream response status from `authority`, one of `hostCount` hosts of the cluster. */
  reportStatus(authority: string, status: number, hostCount: number): void {
    const h = this.host(authority);
    if (status < 500) {
      h.consecutive5xx = 0;
      h.consecutiveGateway = 0;
      return;
    }
    const p = this.policy;
    if (status === 502 || status === 503 || status === 504) {
      if (++h.consecutiveGateway === p.consecutiveGatewayFailure && p.consecutiveGatewayFailure > 0) this.eject(authority, h, hostCount, 'consecutive_gateway_failure');
    } else {
      h.consecutiveGateway = 0;
    }
    if (++h.consecutive5xx === p.consecutive5xx && p.consecutive5xx > 0) this.eject(authority, h, hostCount, 'consecutive_5xx');
  }

  /** A locally originated failure toward `authority` (connect failure, reset before the response): a 503. */
  reportLocalFailure(authority: string, hostCount: number): void {
    this.reportStatus(authority, 503, hostCount);
  }

  /** Forget hosts not in `authorities` (they left the cluster). */
  retain(authorities: ReadonlySet<string>): void {
    for (const [a, h] of this.hosts) {
      if (authorities.has(a)) continue;
      if (h.ejectedAt !== undefined) this.ejected--;
      this.hosts.delete(a);
    }
    if (!this.needsTimer()) this.stopTimer();
  }

  /** Stop the sweep timer (the cluster is gone). */
  close(): void {
    this.stopTimer();
  }

  /** One ejection sweep (Envoy's interval timer); public for tests. */
  sweep(): void {
    const now = this.now();
    const base = this.policy.baseEjectionTimeMs;
    for (const [host, h] of this.hosts) {
      if (h.ejectedAt === undefined) {
        // In service for a whole base ejection time since it came back: the multiplier shrinks.
        if (h.multiplier > 0 && h.returnedAt !== undefined && now - h.returnedAt >= base) h.multiplier--;
        continue;
      }
      if (this.ejectionMs(h) <= now - h.ejectedAt) {
        const ejectedFor = now - h.ejectedAt;
        h.ejectedAt = undefined;
        h.returnedAt = now;
        h.consecutive5xx = 0;
        h.consecutiveGateway = 0;
        this.ejected--;
        this.events?.returned(host, Math.round(ejectedFor), this.ejected);
      }
    }
    if (!this.needsTimer()) this.stopTimer();
  }

  private eject(authority: string, h: HostState, hostCount: number, reason: EjectionReason): void {
    if (h.ejectedAt !== undefined) return;
    const hosts = Math.max(hostCount, this.ejected + 1);
    if ((100 * this.ejected) / hosts >= this.policy.maxEjectionPercent) return;
    h.ejectedAt = this.now();
    h.reason = reason;
    if (this.policy.baseEjectionTimeMs * h.multiplier < MAX_EJECTION_TIME_MS) h.multiplier++;
    this.ejected++;
    this.startTimer();
    this.events?.ejected(authority, reason, this.ejectionMs(h), this.ejected);
  }

  private host(authority: string): HostState {
    let h = this.hosts.get(authority);
    if (!h) this.hosts.set(authority, (h = { consecutive5xx: 0, consecutiveGateway: 0, multiplier: 0, ejectedAt: undefined, returnedAt: undefined, reason: 'consecutive_5xx' }));
    return h;
  }

  private needsTimer(): boolean {
    if (this.ejected > 0) return true;
    for (const h of this.hosts.values()) if (h.multiplier > 0) return true;
    return false;
  }

  private startTimer(): void {
    if (this.timer) return;
    this.timer = setInterval(() => this.sweep(), this.policy.intervalMs);
    this.timer.unref();
  }

  private stopTimer(): void {
    if (!this.timer) return;
    clearInterval(this.timer);
    this.timer = undefined;
  }
}
