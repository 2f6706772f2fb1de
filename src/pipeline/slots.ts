/**
 * Typed keys for data filters share on a context (Envoy's filter state). Define each key once at
 * module load with {@link defineSlot}; reads and writes index a preallocated array, so the data
 * path does no Map lookups or string hashing. Slot names reuse Istio's filter-state keys
 * (`downstream_peer`, `upstream_peer`) so logs line up with Istio's.
 */
export interface Slot<T> {
  readonly name: string;
  readonly index: number;
  readonly lifespan: 'stream' | 'connection';
  /** Phantom field carrying `T`; never set. */
  readonly __type?: T;
}

let streamSlots = 0;
let connectionSlots = 0;
const names = new Set<string>();

/** Declare a slot. Throws when the name is already taken (two filters must not share a key by accident). */
export function defineSlot<T>(name: string, lifespan: 'stream' | 'connection'): Slot<T> {
  const key = `${lifespan}:${name}`;
  if (names.has(key)) throw new Error(`slot ${key} is already defined`);
  names.add(key);
  const index = lifespan === 'stream' ? streamSlots++ : connectionSlots++;
  return Object.freeze({ name, index, lifespan });
}

/** Number of slots declared so far, per lifespan (contexts size their arrays from these). */
export function slotCount(lifespan: 'stream' | 'connection'): number {
  return lifespan === 'stream' ? streamSlots : connectionSlots;
}
