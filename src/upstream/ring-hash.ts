/**
 * Envoy's ring hash load balancer (source/extensions/load_balancing_policies/ring_hash/
 * ring_hash_lb.cc `Ring::Ring`, `chooseHost`), for endpoints of equal weight: each endpoint gets
 * `scale` entries hashed with xxHash64 of `<address>_<i>` (`address` is `ip:port`, `[v6]:port`),
 * where `scale = min(ceil(minRingSize / n) * n, maxRingSize)` spread with Envoy's running sums;
 * the ring is sorted by hash and a request hash picks the first entry at or after it, wrapping to
 * the start. The same endpoints always give the same ring, so a key keeps its endpoint across
 * requests and mesh reloads.
 */
import { MAX_RING_SIZE } from '../routing/index.ts';
import type { Endpoint } from '../state/index.ts';
import { xxHash64 } from './xxhash.ts';

export class RingHash {
  private readonly hashes: BigUint64Array;
  /** Index into `hosts` of each ring entry, in ring order. */
  private readonly owners: Uint32Array;
  private readonly hosts: readonly Endpoint[];

  /** Build the ring over `hosts` (at least one) with `minRingSize` entries at least. */
  constructor(hosts: readonly Endpoint[], minRingSize: number, maxRingSize = MAX_RING_SIZE) {
    this.hosts = hosts;
    const n = hosts.length;
    const weight = 1 / n;
    const scale = Math.min(Math.ceil(weight * minRingSize) / weight, maxRingSize);
    const entries: { hash: bigint; owner: number }[] = [];
    let current = 0;
    let target = 0;
    for (let h = 0; h < n; h++) {
      target += scale * weight;
      const prefix = `${hosts[h].authority}_`;
      for (let i = 0; current < target; i++, current++) entries.push({ hash: xxHash64(prefix + i), owner: h });
    }
    entries.sort((a, b) => (a.hash < b.hash ? -1 : a.hash > b.hash ? 1 : 0));
    this.hashes = BigUint64Array.from(entries, (e) => e.hash);
    this.owners = Uint32Array.from(entries, (e) => e.owner);
  }

  get size(): number {
    return this.hashes.length;
  }

  /** The endpoint owning the first ring entry whose hash is >= `h` (wrapping); `attempt` > 0 steps that many entries further (Envoy's retry offset). */
  pick(h: bigint, attempt = 0): Endpoint {
    const ring = this.hashes;
    let lo = 0;
    let hi = ring.length;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      if (ring[mid] < h) lo = mid + 1;
      else hi = mid;
    }
    const i = (lo + attempt) % ring.length;
    return this.hosts[this.owners[i]];
  }
}
