/**
 * Endpoint selection for one service port. LEAST_REQUEST is Istio's default for a waypoint: like
 * Envoy's least-request balancer with `choice_count: 2`, it samples two endpoints at random and
 * takes the one with fewer active requests (power of two choices). ROUND_ROBIN cycles per endpoint
 * list (one list per service port per snapshot).
 */
import type { Endpoint } from '../state/types.ts';

export type LoadBalancerPolicy = 'LEAST_REQUEST' | 'ROUND_ROBIN';

export class LoadBalancer {
  readonly policy: LoadBalancerPolicy;
  /** Active requests per endpoint authority (survives snapshot swaps, which rebuild Endpoint objects). */
  private readonly active = new Map<string, number>();
  private readonly cursors = new WeakMap<readonly Endpoint[], number>();

  constructor(policy: LoadBalancerPolicy) {
    this.policy = policy;
  }

  /** Choose an endpoint; undefined when `endpoints` is empty. */
  pick(endpoints: readonly Endpoint[]): Endpoint | undefined {
    const n = endpoints.length;
    if (n <= 1) return endpoints[0];
    if (this.policy === 'ROUND_ROBIN') {
      const i = this.cursors.get(endpoints) ?? 0;
      this.cursors.set(endpoints, (i + 1) % n);
      return endpoints[i % n];
    }
    const a = endpoints[(Math.random() * n) | 0];
    let b = endpoints[(Math.random() * (n - 1)) | 0];
    if (b === a) b = endpoints[n - 1];
    return (this.active.get(a.authority) ?? 0) <= (this.active.get(b.authority) ?? 0) ? a : b;
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
