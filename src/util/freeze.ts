/**
 * Deep freezing for snapshot data: once published, nothing in a `MeshSnapshot` can change.
 */

function refuse(): never {
  throw new TypeError('cannot modify a frozen mesh snapshot');
}

/**
 * Freeze `value` and everything reachable from it (plain objects, arrays, Maps, Sets), in place.
 * `Object.freeze` does not stop `Map#set`, so Maps and Sets also get their mutators replaced by
 * functions that throw a TypeError. Functions are frozen but not walked. Cycles are fine.
 * @returns `value`, for chaining.
 */
export function deepFreeze<T>(value: T): T {
  const seen = new WeakSet<object>();
  const walk = (v: unknown): void => {
    if (typeof v !== 'object' || v === null || seen.has(v)) return;
    seen.add(v);
    if (v instanceof Map) {
      for (const [k, item] of v) {
        walk(k);
        walk(item);
      }
      Object.defineProperties(v, { set: { value: refuse }, delete: { value: refuse }, clear: { value: refuse } });
    } else if (v instanceof Set) {
      for (const item of v) walk(item);
      Object.defineProperties(v, { add: { value: refuse }, delete: { value: refuse }, clear: { value: refuse } });
    } else {
      for (const key of Reflect.ownKeys(v)) walk((v as Record<PropertyKey, unknown>)[key]);
    }
    Object.freeze(v);
  };
  walk(value);
  return value;
}
