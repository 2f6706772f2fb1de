/**
 * Compiled parts of a mesh snapshot: what each engine makes of it (AuthorizationPolicy evaluators,
 * RequestAuthentication verifiers, route tables, DestinationRule policies, NetworkPolicy rule
 * sets, ext_authz providers, the upstream's cluster table, ...), compiled once per snapshot before
 * it is published.
 *
 * How the layers meet without state importing any engine:
 * - state defines the mechanism (this module, `MeshPart` in types.ts);
 * - each engine defines its part with {@link definePart} and exports it from its index.ts
 *   (`AUTHZ`, `ROUTES`, ...); a part that needs the app's settings or long-lived runtime state
 *   (the JWKS cache, the cluster table) is bound by its owner with `part.with({ compile, publish })`;
 * - the app hands the list of parts it runs with to the store (`MeshStore.open({ parts })`);
 * - the store compiles the snapshot and every part before it swaps (an invalid part refuses the
 *   whole update, naming file, line, object and field), then runs the parts' `publish` hooks,
 *   then tells its subscribers; a part with asynchronous work to do first (`load`: importing the
 *   modules of WaypointFilters) is waited for just before its compile;
 * - readers call `snapshot.part(AUTHZ)`: a lookup, never a compile. A part the snapshot was not
 *   compiled with is a programming error and throws.
 */
import type { Stepwise } from '../util/index.ts';
import type { MeshPart, MeshSnapshot, PartBinding } from './types.ts';

/** How a part is compiled and published (see `MeshPart`). */
export interface PartSpec<T> {
  /** Asynchronous work before `compile` (see `MeshPart.load`). */
  load?(snapshot: MeshSnapshot): Promise<void> | undefined;
  /** Compile the part (omit for a part its owner must bind with `with`). */
  compile?(snapshot: MeshSnapshot): T;
  publish?(value: T, snapshot: MeshSnapshot): void;
  /** The refusal reason's prefix (`invalid authorization policy`). */
  readonly refusal?: string;
}

/** Define a compiled part named `name` (a new key: readers look it up with this object or its bindings). */
export function definePart<T>(name: string, spec: PartSpec<T> = {}): MeshPart<T> {
  return bind<T>({ name }, name, spec.load?.bind(spec), spec.compile?.bind(spec), spec.publish?.bind(spec), spec.refusal);
}

function bind<T>(
  key: object,
  name: string,
  load: ((s: MeshSnapshot) => Promise<void> | undefined) | undefined,
  compile: ((s: MeshSnapshot) => T) | undefined,
  publish: ((v: T, s: MeshSnapshot) => void) | undefined,
  refusal: string | undefined,
): MeshPart<T> {
  const part: MeshPart<T> = {
    name,
    key,
    load,
    compile,
    refusal,
    with: (how: PartBinding<T>) => bind(key, name, how.load?.bind(how) ?? load, how.compile.bind(how), how.publish?.bind(how) ?? publish, refusal),
  };
  if (publish) part.publish = publish;
  return Object.freeze(part);
}

/** A part threw while compiling: the snapshot is refused. `cause` is what it threw. */
export class PartCompileError extends Error {
  readonly part: MeshPart<unknown>;
  constructor(part: MeshPart<unknown>, cause: unknown) {
    super(`${part.refusal ?? `mesh part ${part.name}`}: ${String(cause)}`, { cause });
    this.name = 'PartCompileError';
    this.part = part;
  }

  /** The refusal reason logged for a reload: `<refusal>: <error>` (a ConfigError prints its file and line), or the error alone. */
  get reason(): string {
    return this.part.refusal ? `${this.part.refusal}: ${String(this.cause)}` : String(this.cause);
  }
}

/**
 * Compile `parts` for `snapshot` into `into` (by key), in order, pausing after each.
 * @throws PartCompileError for the first part that throws (its cause is the part's error).
 * @throws Error for a programming error: a part listed twice, or one not bound to a compiler.
 */
export function* compilePartsStepwise(snapshot: MeshSnapshot, parts: readonly MeshPart<unknown>[], into: Map<object, unknown>): Stepwise<void> {
  for (const p of parts) {
    if (into.has(p.key)) throw new Error(`mesh part ${p.name} is listed twice`);
    if (!p.compile) throw new Error(`mesh part ${p.name} has no compiler: bind it with .with({ compile }) before giving it to the store`);
    let value: unknown;
    let pending: Promise<void> | undefined;
    try {
      pending = p.load?.(snapshot);
    } catch (err) {
      throw new PartCompileError(p, err);
    }
    if (pending) {
      // The runner waits for the promise (runInSlices); its outcome is read after resuming.
      const outcome: { failed?: { err: unknown } } = {};
      yield pending.then(undefined, (err: unknown) => {
        outcome.failed = { err };
      });
      if (outcome.failed) throw new PartCompileError(p, outcome.failed.err);
    }
    try {
      value = p.compile(snapshot);
    } catch (err) {
      throw new PartCompileError(p, err);
    }
    into.set(p.key, value);
    yield;
  }
}

/** Run every part's `publish` hook for a snapshot just published; a hook that throws is returned, not thrown, so the others still run. */
export function publishParts(snapshot: MeshSnapshot, parts: readonly MeshPart<unknown>[]): { part: string; err: unknown }[] {
  const failures: { part: string; err: unknown }[] = [];
  for (const p of parts) {
    if (!p.publish) continue;
    try {
      p.publish(snapshot.part(p), snapshot);
    } catch (err) {
      failures.push({ part: p.name, err });
    }
  }
  return failures;
}

/** The error for a part a snapshot was not compiled with. */
export function missingPart(part: MeshPart<unknown>, version: number): Error {
  return new Error(`mesh snapshot version ${version} was not compiled with the ${part.name} part (give it to the store or compileMesh in \`parts\`)`);
}
