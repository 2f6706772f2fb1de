/**
 * Deep freezing for snapshot data: once published, nothing in a `MeshSnapshot` can change.
 */
import { runNow, type Stepwise } from './slices.ts';

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
  return runNow(deepFreezeStepwise(value));
}

/** Objects frozen between two pauses of {@link deepFreezeStepwise}. */
const OBJECTS_PER_STEP = 2048;

/** {@link deepFreeze}, pausing every few thousand objects (for a mesh compiled in slices). */
export function* deepFreezeStepwise<T>(value: T): Stepwise<T> {
  const seen = new WeakSet<object>();
  const stack: unknown[] = [value];
  let n = 0;
  while (stack.length > 0) {
    const v = stack.pop();
    if (typeof v !== 'object' || v === null || seen.has(v)) continue;
    seen.add(v);
    if (v instanceof Map) {
      for (const [k, item] of v) stack.push(k, item);
      Object.defineProperties(v, { set: { value: refuse }, delete: { value: refuse }, clear: { value: refuse } });
    } else if (v instanceof Set) {
      for (const item of v) stack.push(item);
      Object.defineProperties(v, { add: { value: refuse }, delete: { value: refuse }, clear: { value: refuse } });
    } else {
      for (const key of Reflect.ownKeys(v)) stack.push((v as Record<PropertyKey, unknown>)[key]);
    }
    Object.freeze(v);
    if (++n % OBJECTS_PER_STEP === 0) yield;
  }
  return value;
}
