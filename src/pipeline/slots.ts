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

/**
 * The slot numbering, one per process: a second copy of this module (a filter package that bundles
 * its own node-waypoint instead of importing the waypoint's filter API) numbers its slots in the
 * same sequence, so no two keys share an index.
 */
const registry = ((globalThis as Record<symbol, unknown>)[Symbol.for('node-waypoint.slots')] ??= {
  stream: 0,
  connection: 0,
  slots: new Map<string, { slot: Slot<unknown>; reusable: boolean }>(),
}) as { stream: number; connection: number; slots: Map<string, { slot: Slot<unknown>; reusable: boolean }> };

/**
 * Declare a slot. Throws when the name is already taken (two filters must not share a key by
 * accident), unless both declarations say `reusable`: a filter module imported again after its code
 * changed (WaypointFilter hot reload) declares its slots again and gets the same ones back.
 */
export function defineSlot<T>(name: string, lifespan: 'stream' | 'connection', opts: { readonly reusable?: boolean } = {}): Slot<T> {
  const key = `${lifespan}:${name}`;
  const reusable = opts.reusable === true;
  const existing = registry.slots.get(key);
  if (existing) {
    if (reusable && existing.reusable) return existing.slot as Slot<T>;
    throw new Error(`slot ${key} is already defined`);
  }
  const slot: Slot<T> = Object.freeze({ name, index: registry[lifespan]++, lifespan });
  registry.slots.set(key, { slot, reusable });
  return slot;
}

/** Number of slots declared so far, per lifespan (contexts size their arrays from these). */
export function slotCount(lifespan: 'stream' | 'connection'): number {
  return registry[lifespan];
}
