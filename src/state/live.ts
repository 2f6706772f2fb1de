/**
 * Compiling a live mesh source (the API server's objects, optionally with workloads and services
 * discovered from istiod): the same compiler as the mesh file, with two things a live source needs.
 *
 * - Bursts are coalesced ({@link Coalescer}): a change waits for a quiet period (and never longer
 *   than a bound, so constant churn still gets compiled), and compiles never overlap.
 * - One invalid object does not freeze the mesh ({@link LiveCompiler}). Objects are applied one by
 *   one by the API server, so the file source's rule (a bad edit refuses the whole update) would
 *   let one bad AuthorizationPolicy anywhere stop every later update, new pods included. Instead,
 *   as istiod skips a resource it cannot convert and as a WDS client NACKs one resource and
 *   applies the others, the refused version of that object is replaced by its last accepted
 *   version (or left out when it has none), logged with the object and field, and the rest is
 *   applied. An error that names no object (no waypoint Gateway, ...) refuses the whole update.
 */
import { ConfigError, log, runInSlices } from '../util/index.ts';
import { compileMeshStepwise, type CompileOptions } from './compile.ts';
import { PartCompileError } from './parts.ts';
import { objectRef } from './source.ts';
import type { MeshSnapshot } from './types.ts';

/**
 * Runs `task` after requests settle: `quietMs` after the last request, at most `maxDelayMs` after
 * the first of a burst; one run at a time (a request during a run schedules another after it).
 */
export class Coalescer {
  readonly #task: () => Promise<void>;
  readonly #quietMs: number;
  readonly #maxDelayMs: number;
  #timer: NodeJS.Timeout | undefined;
  #firstAt: number | undefined;
  #running = false;
  #fireAfterRun = false;
  /** Callers waiting for a run that starts after their request. */
  #waiting: (() => void)[] = [];
  #closed = false;

  constructor(task: () => Promise<void>, quietMs: number, maxDelayMs: number) {
    this.#task = task;
    this.#quietMs = quietMs;
    this.#maxDelayMs = Math.max(quietMs, maxDelayMs);
  }

  /** Ask for a run; resolves once a run started after this request has finished (at once when closed). */
  request(): Promise<void> {
    if (this.#closed) return Promise.resolve();
    const done = new Promise<void>((resolve) => this.#waiting.push(resolve));
    const now = performance.now();
    this.#firstAt ??= now;
    if (this.#timer) clearTimeout(this.#timer);
    this.#timer = setTimeout(() => this.#fire(), Math.max(0, Math.min(this.#quietMs, this.#firstAt + this.#maxDelayMs - now)));
    this.#timer.unref();
    return done;
  }

  #fire(): void {
    this.#timer = undefined;
    this.#firstAt = undefined;
    if (this.#running) {
      this.#fireAfterRun = true;
      return;
    }
    const waiting = this.#waiting;
    this.#waiting = [];
    this.#running = true;
    void this.#task()
      .catch((err: unknown) => log.error({ err }, 'mesh: live update threw'))
      .finally(() => {
        this.#running = false;
        for (const resolve of waiting) resolve();
        if (this.#fireAfterRun && !this.#closed) {
          this.#fireAfterRun = false;
          this.#fire();
        }
      });
  }

  /** Cancel what is scheduled; pending requests resolve. Idempotent. */
  close(): void {
    this.#closed = true;
    if (this.#timer) clearTimeout(this.#timer);
    this.#timer = undefined;
    for (const resolve of this.#waiting.splice(0)) resolve();
  }
}

/** A compiled live snapshot, published only once the store calls `commit`. */
export interface LiveResult {
  readonly snapshot: MeshSnapshot;
  /** The snapshot was published: its objects become the accepted versions. */
  commit(): void;
}

/** Most objects one compile refuses before it gives up (the next update goes on from there). */
const MAX_REFUSALS_PER_COMPILE = 64;

/** The ConfigError behind a compile error (a part's error is wrapped in a PartCompileError). */
function configErrorOf(err: unknown): ConfigError | undefined {
  const cause = err instanceof PartCompileError ? err.cause : err;
  return cause instanceof ConfigError ? cause : undefined;
}

/** Why a compile failed, as logged: a part's refusal prefix and the error (object and field included). */
export function refusalText(err: unknown): string {
  return err instanceof PartCompileError ? err.reason : String(err);
}

/**
 * Compiles the objects of a live source, refusing invalid objects one by one (see the module
 * comment). It remembers, by `Kind/namespace/name`, the version of each object in the last
 * published snapshot and the versions it refused, so a refused version still current is replaced
 * at once on later compiles (compiled once, logged once). Objects are compared by identity: the
 * source must hand the same object for an unchanged resource (an informer's cache does).
 */
export class LiveCompiler {
  readonly #objects: () => readonly object[];
  readonly #origin: string;
  /** Version of each object in the last published snapshot. */
  #accepted = new Map<string, object>();
  /** Refused versions by ref (while current, the accepted version stands in). */
  readonly #refused = new Map<string, object>();

  constructor(objects: () => readonly object[], origin: string) {
    this.#objects = objects;
    this.#origin = origin;
  }

  /**
   * Compile the current objects with `opts` in slices.
   * @throws what the compile throws when an error names no object of the input (or too many were
   *   refused); the current snapshot then stays.
   */
  async compile(opts: CompileOptions & { readonly version: number }): Promise<LiveResult> {
    const current = this.#objects();
    const byRef = new Map<string, object>();
    for (const o of current) {
      const ref = objectRef(o);
      if (ref !== undefined) byRef.set(ref, o);
    }
    for (const [ref, body] of this.#refused) if (byRef.get(ref) !== body) this.#refused.delete(ref);
    let input = current.flatMap((o) => this.#standIn(o));
    for (let refusals = 0; ; refusals++) {
      try {
        const snapshot = await runInSlices(compileMeshStepwise({ ...opts, objects: input, origin: this.#origin }));
        const used = input;
        return { snapshot, commit: () => this.#commit(used) };
      } catch (err) {
        const ref = configErrorOf(err)?.location.object;
        const at = ref === undefined ? -1 : input.findIndex((o) => objectRef(o) === ref);
        if (ref === undefined || at < 0 || refusals >= MAX_REFUSALS_PER_COMPILE) throw err;
        const refused = input[at];
        const isCurrent = refused === byRef.get(ref);
        const previous = isCurrent ? this.#accepted.get(ref) : undefined;
        if (isCurrent) this.#refused.set(ref, refused);
        const keeping = previous ? 'keeping its previous version' : isCurrent ? 'leaving it out (no valid version yet)' : 'leaving out its previous version too';
        const where = configErrorOf(err)!.location;
        log.error({ object: ref, field: where.field, version: opts.version }, `mesh: ${ref} refused, ${keeping}: ${refusalText(err)}`);
        input = [...input.slice(0, at), ...(previous ? [previous] : []), ...input.slice(at + 1)];
      }
    }
  }

  /** `o`, or for a version refused before: its accepted version (or nothing). */
  #standIn(o: object): object[] {
    const ref = objectRef(o);
    if (ref === undefined || this.#refused.get(ref) !== o) return [o];
    const previous = this.#accepted.get(ref);
    log.debug({ object: ref }, 'mesh: object still at its refused version');
    return previous ? [previous] : [];
  }

  #commit(used: readonly object[]): void {
    const accepted = new Map<string, object>();
    for (const o of used) {
      const ref = objectRef(o);
      if (ref !== undefined) accepted.set(ref, o);
    }
    this.#accepted = accepted;
  }
}
