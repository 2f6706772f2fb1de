/**
 * The one way compiled policy state is kept per mesh snapshot: compiled on first use, cached for
 * the snapshot's lifetime (a WeakMap, so it goes with the snapshot), and failing closed. The store
 * refuses snapshots whose policies do not compile, so the fallback only serves hand-built
 * snapshots; it is still what every `...For(snapshot)` accessor returns then, logged once.
 */
import { log } from '../util/log.ts';
import type { MeshSnapshot } from './types.ts';

/**
 * `cache`'s entry for `snapshot`, else `compile(snapshot)` (which may fill the cache itself),
 * else, when that throws, `failClosed(snapshot)` after one error line `failure`. Never throws.
 */
export function compiledOnce<T>(cache: WeakMap<MeshSnapshot, T>, snapshot: MeshSnapshot, compile: (s: MeshSnapshot) => T, failClosed: (s: MeshSnapshot) => T, failure: string): T {
  let compiled = cache.get(snapshot);
  if (compiled !== undefined) return compiled;
  try {
    compiled = compile(snapshot);
  } catch (err) {
    log.error({ err: String(err), version: snapshot.version }, failure);
    compiled = failClosed(snapshot);
  }
  cache.set(snapshot, compiled);
  return compiled;
}

/**
 * A store `accept` hook's answer: undefined when `check()` passes, else `<what>: <error>` (a
 * ConfigError prints its file, line and field), the reason a start or reload is refused.
 */
export function refusalOf(what: string, check: () => unknown): string | undefined {
  try {
    check();
    return undefined;
  } catch (err) {
    return `${what}: ${String(err)}`;
  }
}
