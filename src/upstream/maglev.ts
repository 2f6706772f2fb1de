/**
 * Envoy's Maglev load balancer (source/extensions/load_balancing_policies/maglev/maglev_lb.cc
 * `MaglevTable`), for endpoints of equal weight: each endpoint has a permutation of the table
 * given by `offset = xxHash64(address, 0) % M` and `skip = xxHash64(address, 1) % (M - 1) + 1`;
 * endpoints take turns claiming their next free slot until the table (size M, a prime) is full.
 * A request hash picks `table[hash % M]`. The same endpoints always give the same table.
 */
import { DEFAULT_MAGLEV_TABLE_SIZE } from '../routing/index.ts';
import type { Endpoint } from '../state/index.ts';
import { xxHash64 } from './xxhash.ts';

export class MaglevTable {
  private readonly table: Uint32Array;
  private readonly hosts: readonly Endpoint[];

  /** Build the table over `hosts` (at least one); `tableSize` must be prime (validated with the DestinationRule). */
  constructor(hosts: readonly Endpoint[], tableSize = DEFAULT_MAGLEV_TABLE_SIZE) {
    this.hosts = hosts;
    const m = BigInt(tableSize);
    const n = hosts.length;
    const offset = new Array<number>(n);
    const skip = new Array<number>(n);
    const next = new Array<number>(n).fill(0);
    for (let h = 0; h < n; h++) {
      const key = hosts[h].authority;
      offset[h] = Number(xxHash64(key, 0n) % m);
      skip[h] = Number(xxHash64(key, 1n) % (m - 1n)) + 1;
    }
    const empty = 0xffffffff;
    const table = new Uint32Array(tableSize).fill(empty);
    let filled = 0;
    for (let h = 0; filled < tableSize; h = (h + 1) % n) {
      let c = (offset[h] + skip[h] * next[h]) % tableSize;
      while (table[c] !== empty) {
        next[h]++;
        c = (offset[h] + skip[h] * next[h]) % tableSize;
      }
      table[c] = h;
      next[h]++;
      filled++;
    }
    this.table = table;
  }

  get size(): number {
    return this.table.length;
  }

  /** The endpoint at `table[h % size]`; `attempt` > 0 steps that many slots further (a retry). */
  pick(h: bigint, attempt = 0): Endpoint {
    const i = (Number(h % BigInt(this.table.length)) + attempt) % this.table.length;
    return this.hosts[this.table[i]];
  }
}
