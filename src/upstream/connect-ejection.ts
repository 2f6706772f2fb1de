/**
 * Ejection of endpoints whose connects time out, for every cluster (with or without a
 * DestinationRule): a destination that stopped answering (a frozen process, a dead host whose
 * address still accepts TCP) costs each request that picks it a whole connect timeout. After one
 * such timeout the endpoint is left out of picks while other endpoints remain, for a base time
 * that grows with each new timeout (capped), until a connect to it succeeds again: Envoy's outlier
 * detection of consecutive local-origin failures (envoyproxy/envoy
 * source/common/upstream/outlier_detection_impl.cc, base ejection 30 s, max 300 s, a healthy panic
 * when none would remain), reduced to the one failure that makes requests wait. Envoy runs it only
 * when a DestinationRule asks and after 5 failures; here a timed-out connect, already 10 s of a
 * request's life, is enough, and refused connects (which cost nothing) never eject. The base time
 * is `upstream.connectTimeoutEjectionMs` (0 turns this off).
 */
import type { Endpoint } from '../state/index.ts';

/** Envoy's default `base_ejection_time` and `max_ejection_time` (ms). */
const BASE_EJECTION_MS = 30_000;
const MAX_EJECTION_MS = 300_000;
/** Hosts remembered at most; beyond it the oldest are forgotten. */
const MAX_HOSTS = 4096;

interface Ejected {
  /** Monotonic ms until which the host is left out. */
  until: number;
  /** Timeouts in a row (the ejection lasts base × this, capped). */
  count: number;
}

export class ConnectEjections {
  private readonly hosts = new Map<string, Ejected>();
  private readonly now: () => number;
  private readonly baseMs: number;

  constructor(baseMs = BASE_EJECTION_MS, now: () => number = () => performance.now()) {
    this.baseMs = baseMs;
    this.now = now;
  }

  /** A connect to (or a CONNECT answer from) `authority` timed out: eject it (unless ejection is off: base 0). True when it was not ejected yet. */
  timedOut(authority: string): boolean {
    if (this.baseMs <= 0) return false;
    const fresh = !this.isEjected(authority);
    const prev = this.hosts.get(authority);
    const count = (prev?.count ?? 0) + 1;
    this.hosts.delete(authority);
    if (this.hosts.size >= MAX_HOSTS) this.hosts.delete(this.hosts.keys().next().value!);
    this.hosts.set(authority, { until: this.now() + Math.min(this.baseMs * count, Math.max(MAX_EJECTION_MS, this.baseMs)), count });
    return fresh;
  }

  /** A connect to `authority` succeeded: it is forgotten. */
  connected(authority: string): void {
    if (this.hosts.size > 0) this.hosts.delete(authority);
  }

  /** Whether `authority` is ejected now. */
  isEjected(authority: string): boolean {
    if (this.hosts.size === 0) return false;
    const h = this.hosts.get(authority);
    return h !== undefined && h.until > this.now();
  }

  /** `endpoints` without the ejected ones, or all of them when none would remain (panic); itself when nothing is ejected. */
  filter(endpoints: readonly Endpoint[]): readonly Endpoint[] {
    if (this.hosts.size === 0) return endpoints;
    const now = this.now();
    let out: Endpoint[] | undefined;
    for (let i = 0; i < endpoints.length; i++) {
      const h = this.hosts.get(endpoints[i].authority);
      if (h === undefined || h.until <= now) {
        out?.push(endpoints[i]);
        continue;
      }
      out ??= endpoints.slice(0, i);
    }
    return out === undefined || out.length === 0 ? endpoints : out;
  }
}
