/**
 * Endpoint selection for one service port by a simple algorithm (Envoy's `lb_policy`):
 * - LEAST_REQUEST, Istio's default for a waypoint: like Envoy's least-request balancer with
 *   `choice_count: 2`, it samples two endpoints at random and takes the one with fewer active
 *   requests (power of two choices);
 * - ROUND_ROBIN cycles: per endpoint list (one list per service port per snapshot), or per
 *   cluster when the caller passes the cluster's cursor (a DestinationRule's cluster keeps its
 *   place across snapshots and ejections);
 * - RANDOM picks uniformly.
 * Consistent hashing (ring hash, maglev) lives in `cluster-state.ts`.
 */
import type { Endpoint } from '../state/index.ts';
import type { LbAlgorithm } from '../routing/index.ts';
import { ConnectEjections } from './connect-ejection.ts';

export type LoadBalancerPolicy = LbAlgorithm;

/** A round-robin position kept by its owner (a cluster's runtime state). */
export interface RoundRobinCursor {
  rr: number;
}

export class LoadBalancer {
  /** The algorithm used when {@link pick} is given none (the bootstrap's `upstream.loadBalancer`). */
  readonly policy: LoadBalancerPolicy;
  /** Active requests per endpoint authority (survives snapshot swaps, which rebuild Endpoint objects). */
  private readonly active = new Map<string, number>();
  private readonly cursors = new WeakMap<readonly Endpoint[], RoundRobinCursor>();
  /** Endpoints whose connects timed out, left out of picks for a while (connect-ejection.ts). */
  readonly ejections: ConnectEjections;

  /** `ejectionMs`: base ejection time of an endpoint whose connect timed out (0: never ejected). */
  constructor(policy: LoadBalancerPolicy, ejectionMs?: number) {
    this.policy = policy;
    this.ejections = new ConnectEjections(ejectionMs);
  }

  /** Choose an endpoint with `algorithm` (default {@link policy}); undefined when `endpoints` is empty. */
  pick(endpoints: readonly Endpoint[], algorithm: LoadBalancerPolicy = this.policy, cursor?: RoundRobinCursor): Endpoint | undefined {
    const n = endpoints.length;
    if (n <= 1) return endpoints[0];
    if (algorithm === 'ROUND_ROBIN') {
      if (cursor) {
        const i = cursor.rr % n;
        cursor.rr = i + 1;
        return endpoints[i];
      }
      const c = this.cursorFor(endpoints);
      const i = c.rr % n;
      c.rr = i + 1;
      return endpoints[i];
    }
    if (algorithm === 'RANDOM') return endpoints[(Math.random() * n) | 0];
    const a = endpoints[(Math.random() * n) | 0];
    let b = endpoints[(Math.random() * (n - 1)) | 0];
    if (b === a) b = endpoints[n - 1];
    return (this.active.get(a.authority) ?? 0) <= (this.active.get(b.authority) ?? 0) ? a : b;
  }

  /**
   * The round-robin position of an endpoint list (one per service port per snapshot). A caller
   * that picks from a filtered copy (retry avoidance, NetworkPolicy admission) passes the cursor
   * of the full list, so the rotation goes on instead of restarting with every new copy.
   */
  cursorFor(endpoints: readonly Endpoint[]): RoundRobinCursor {
    let c = this.cursors.get(endpoints);
    if (!c) this.cursors.set(endpoints, (c = { rr: 0 }));
    return c;
  }

  /** Active requests (or TCP tunnels) to `authority` now. */
  activeRequests(authority: string): number {
    return this.active.get(authority) ?? 0;
  }

  /** A request to `ep` started (pair with {@link finish}). */
  start(ep: Endpoint): void {
    this.active.set(ep.authority, (this.active.get(ep.authority) ?? 0) + 1);
  }

  finish(ep: Endpoint): void {
    const n = (this.active.get(ep.authority) ?? 1) - 1;
    if (n <= 0) this.active.delete(ep.authority);
    else this.active.set(ep.authority, n);
  }
}
