/**
 * The mesh state holder: one current {@link MeshSnapshot}, replaced whole when the mesh file
 * changes. Readers take `store.current` once per tunnel or request; a bad edit never replaces a
 * good snapshot (it is logged, like istiod rejecting invalid config).
 *
 * A new snapshot is compiled whole — the mesh and every engine part the store was given (parts.ts)
 * — before it is published; then the parts' `publish` hooks run, then the subscribers. Compiling
 * runs in slices that give the event loop back every few milliseconds (`runInSlices`), so
 * reloading a mesh of thousands of services does not stall the traffic being served; the slices
 * stay on this thread because a snapshot is a graph of closures and shared objects that a worker
 * could not hand back without copying it (the copy alone would block longer than a slice).
 *
 * A file written in place (not renamed over) can be read half-written: a reload a change triggers
 * reads it until two reads a quiet period apart agree; an update refused as invalid is retried once
 * after that period, so a file completed without a further change event is still picked up.
 */
import { readFile } from 'node:fs/promises';

import { ConfigError, log, runInSlices, runNow } from '../util/index.ts';
import { compileMeshStepwise, type CompileInput } from './compile.ts';
import { PartCompileError, publishParts } from './parts.ts';
import type { MeshPart, MeshSnapshot } from './types.ts';
import { watchFiles } from './watch.ts';

/** Options of {@link MeshStore.open}. */
export interface MeshStoreOptions {
  /** Multi-document mesh YAML (Namespaces, Services, Pods, Gateway, policies, ...). */
  readonly meshFile: string;
  /** Optional MeshConfig YAML (or an `istio` ConfigMap); wins over the ConfigMap in `meshFile`. */
  readonly meshConfigFile?: string;
  /** `namespace/name` of the waypoint Gateway, when the file has several. */
  readonly gateway?: string;
  /** Not a waypoint (the inbound role): no waypoint Gateway needed (`CompileInput.withoutWaypoint`). */
  readonly withoutWaypoint?: boolean;
  /** Cluster id of the workloads (default `Kubernetes`). */
  readonly clusterId?: string;
  /** Watch the files and publish a new snapshot on every valid change. */
  readonly watch?: boolean;
  /**
   * Quiet period before a change is read, in ms (default 100); also the time between the two reads
   * that must agree, and the delay of the retry after a refused update.
   */
  readonly debounceMs?: number;
  /** The engines' compiled parts, in order (see parts.ts): compiled into every snapshot before it is published. */
  readonly parts?: readonly MeshPart<unknown>[];
  /**
   * Vet a reloaded snapshot before it is published: return a reason to reject it (it is logged
   * and the last good snapshot stays), or undefined to accept. The waypoint refuses changes of its
   * own identity or trust domain, which its certificate cannot follow.
   */
  readonly accept?: (next: MeshSnapshot, prev: MeshSnapshot) => string | undefined;
}

/** Options of {@link MeshStore.fromText}. */
export interface MeshStoreTextOptions {
  /** Name used in error messages (default `<inline>`). */
  readonly file?: string;
  readonly gateway?: string;
  readonly clusterId?: string;
  readonly meshConfig?: { readonly text: string; readonly file: string };
  /** As {@link MeshStoreOptions.parts}. */
  readonly parts?: readonly MeshPart<unknown>[];
}

/** Called with the new and the previous snapshot after each successful reload. */
export type MeshListener = (next: MeshSnapshot, prev: MeshSnapshot) => void;

/**
 * Holder of the current {@link MeshSnapshot}. Build with {@link MeshStore.open} (files, optional
 * watching) or {@link MeshStore.fromText}; read `current`; `subscribe` for replacements; `close`.
 */
export class MeshStore {
  #current: MeshSnapshot;
  readonly #listeners = new Set<MeshListener>();
  readonly #opts: MeshStoreOptions | undefined;
  readonly #parts: readonly MeshPart<unknown>[];
  #lastInput: string;
  /** Input of the last refused update: read again unchanged, it is not compiled again (only logged as unchanged). */
  #lastRefused: string | undefined;
  #retry: NodeJS.Timeout | undefined;
  #stopWatching: (() => void) | undefined;
  #reloading: Promise<void> | undefined;
  #reloadAgain = false;
  /** The next reload was asked for by a file change (or a retry): read until two reads agree. */
  #settle = false;
  /** The next reload compiles even unchanged files (`reload({ force: true })`). */
  #force = false;
  #closed = false;

  private constructor(snapshot: MeshSnapshot, opts: MeshStoreOptions | undefined, parts: readonly MeshPart<unknown>[], lastInput: string) {
    this.#current = snapshot;
    this.#opts = opts;
    this.#parts = parts;
    this.#lastInput = lastInput;
    this.#publish(snapshot);
  }

  /**
   * Read and compile the mesh file (and MeshConfig file) with its parts, optionally watching them.
   * @throws ConfigError when the initial state is invalid (a part's error names the mesh file when
   *   it names no file); the file read error when unreadable.
   */
  static async open(opts: MeshStoreOptions): Promise<MeshStore> {
    const { input, key } = await readInput(opts, 1);
    let snapshot: MeshSnapshot;
    try {
      snapshot = await runInSlices(compileMeshStepwise({ ...input, parts: opts.parts }));
    } catch (err) {
      throw startError(err, opts.meshFile);
    }
    const store = new MeshStore(snapshot, opts, opts.parts ?? [], key);
    log.info({ file: opts.meshFile, version: 1, services: snapshot.services.length, workloads: snapshot.workloads.length }, 'mesh: loaded');
    if (opts.watch) {
      const files = [opts.meshFile, ...(opts.meshConfigFile ? [opts.meshConfigFile] : [])];
      store.#stopWatching = watchFiles(files, () => void store.#changed(), opts.debounceMs ?? 100);
    }
    return store;
  }

  /**
   * A store over YAML text (tests, the demo's embedded mesh); it never reloads.
   * @throws ConfigError when the text is invalid.
   */
  static fromText(text: string, opts: MeshStoreTextOptions = {}): MeshStore {
    const file = opts.file ?? '<inline>';
    let snapshot: MeshSnapshot;
    try {
      snapshot = runNow(compileMeshStepwise({ text, file, gateway: opts.gateway, clusterId: opts.clusterId, meshConfig: opts.meshConfig, parts: opts.parts }));
    } catch (err) {
      throw startError(err, file);
    }
    return new MeshStore(snapshot, undefined, opts.parts ?? [], '');
  }

  /** The latest valid snapshot. */
  get current(): MeshSnapshot {
    return this.#current;
  }

  /**
   * Be told about every new snapshot. A listener that throws is logged and does not stop the others.
   * @returns unsubscribe.
   */
  subscribe(fn: MeshListener): () => void {
    this.#listeners.add(fn);
    return () => {
      this.#listeners.delete(fn);
    };
  }

  /**
   * Re-read the files now (SIGHUP) and publish a new snapshot (version + 1) when they changed and
   * compile. Unchanged files are logged (`mesh: unchanged, keeping version N`) and nothing is
   * published; on failure logs an error and keeps the current snapshot. Concurrent calls are
   * coalesced. No-op for stores made by {@link fromText}. `force` compiles (and publishes) even
   * unchanged files: parts that read more than the files (WaypointFilter modules, re-imported when
   * their code changed) are brought up to date on SIGHUP.
   */
  reload(opts: { readonly force?: boolean } = {}): Promise<void> {
    if (!this.#opts || this.#closed) return Promise.resolve();
    if (opts.force) this.#force = true;
    if (this.#reloading) {
      this.#reloadAgain = true;
      return this.#reloading;
    }
    const run = async (): Promise<void> => {
      do {
        this.#reloadAgain = false;
        const settle = this.#settle;
        const force = this.#force;
        this.#settle = false;
        this.#force = false;
        await this.#reloadOnce(this.#opts!, settle, force);
      } while (this.#reloadAgain && !this.#closed);
    };
    this.#reloading = run().finally(() => {
      this.#reloading = undefined;
    });
    return this.#reloading;
  }

  /** A watched file changed (or a refused update is retried): reload once it reads the same twice. */
  #changed(): Promise<void> {
    this.#settle = true;
    return this.reload();
  }

  async #reloadOnce(opts: MeshStoreOptions, settle: boolean, force: boolean): Promise<void> {
    const prev = this.#current;
    const quietMs = opts.debounceMs ?? 100;
    let next: MeshSnapshot;
    let key: string | undefined;
    try {
      // Once running, the waypoint stays the Gateway it started as: adding another istio-waypoint
      // Gateway to the file must not make the choice ambiguous (and freeze every later update).
      const gateway = opts.withoutWaypoint ? undefined : (opts.gateway ?? `${prev.waypoint.namespace}/${prev.waypoint.name}`);
      const read = settle ? await readSettled({ ...opts, gateway }, prev.version + 1, quietMs) : await readInput({ ...opts, gateway }, prev.version + 1);
      if (this.#closed) return;
      key = read.key;
      if (key === this.#lastInput && !force) {
        log.info({ file: opts.meshFile, version: prev.version }, `mesh: unchanged, keeping version ${prev.version}`);
        return;
      }
      if (key === this.#lastRefused && !force) {
        log.info({ file: opts.meshFile, version: prev.version }, `mesh: unchanged since the refused update, keeping version ${prev.version}`);
        return;
      }
      next = await runInSlices(compileMeshStepwise({ ...read.input, parts: this.#parts }));
    } catch (err) {
      // Invalid input (YAML, an invalid resource, a policy a part cannot compile) is refused; "failed"
      // is kept for errors that say nothing about the input (an unreadable file).
      const part = err instanceof PartCompileError;
      const invalid = part ? err.cause instanceof ConfigError : err instanceof ConfigError;
      const text = part ? err.reason : String(err);
      log.error({ file: opts.meshFile, version: prev.version }, `mesh: reload ${invalid ? 'refused' : 'failed'}, keeping version ${prev.version}: ${text}`);
      if (invalid && key !== undefined) this.#refused(key, quietMs);
      return;
    }
    if (this.#closed) return;
    const refusal = opts.accept?.(next, prev);
    if (refusal) {
      log.error({ file: opts.meshFile, version: prev.version }, `mesh: reload refused, keeping version ${prev.version}: ${refusal}`);
      this.#lastRefused = key;
      return;
    }
    this.#current = next;
    this.#lastInput = key;
    this.#lastRefused = undefined;
    log.info({ file: opts.meshFile, version: next.version, services: next.services.length, workloads: next.workloads.length }, 'mesh: reloaded');
    this.#publish(next, prev);
  }

  /** After a refused update: remember its input, and read once more after `quietMs` (a file still being written). */
  #refused(key: string, quietMs: number): void {
    if (key === this.#lastRefused) return;
    this.#lastRefused = key;
    if (this.#retry) clearTimeout(this.#retry);
    this.#retry = setTimeout(() => {
      this.#retry = undefined;
      void this.#changed();
    }, quietMs);
    this.#retry.unref();
  }

  /** Bring the parts' runtime state in line with `next`, then tell the subscribers (none for the first snapshot). */
  #publish(next: MeshSnapshot, prev?: MeshSnapshot): void {
    for (const { part, err } of publishParts(next, this.#parts)) log.error({ err, part, version: next.version }, 'mesh: publishing a part threw');
    if (!prev) return;
    for (const fn of [...this.#listeners]) {
      try {
        fn(next, prev);
      } catch (err) {
        log.error({ err }, 'mesh: snapshot listener threw');
      }
    }
  }

  /** Stop watching; `current` stays readable. Idempotent. */
  close(): void {
    this.#closed = true;
    this.#stopWatching?.();
    this.#stopWatching = undefined;
    if (this.#retry) clearTimeout(this.#retry);
    this.#retry = undefined;
    this.#listeners.clear();
  }
}

/** The error `open`/`fromText` throw: a part's own error (naming `file` when it names none). */
function startError(err: unknown, file: string): unknown {
  const cause = err instanceof PartCompileError ? err.cause : err;
  if (cause instanceof ConfigError && !cause.location.file) return new ConfigError(cause.message, { ...cause.location, file }, { cause });
  return cause;
}

/** Most reads {@link readSettled} makes before it gives up on a file that keeps changing. */
const SETTLE_READS = 10;

/**
 * Read the files until two reads `quietMs` apart agree: a writer that rewrites the file in place
 * (truncate, then write) is not read half-way through a pause. Gives up with an Error (a reload
 * "failed", retried at the watcher's next event) when the files keep changing.
 */
async function readSettled(opts: MeshStoreOptions, version: number, quietMs: number): Promise<{ input: CompileInput; key: string }> {
  let read = await readInput(opts, version);
  for (let i = 1; i < SETTLE_READS; i++) {
    await new Promise((r) => setTimeout(r, quietMs));
    const again = await readInput(opts, version);
    if (again.key === read.key) return read;
    read = again;
  }
  throw new Error(`${opts.meshFile} kept changing for ${SETTLE_READS} reads ${quietMs} ms apart; waiting for the next change`);
}

async function readInput(opts: MeshStoreOptions, version: number): Promise<{ input: CompileInput; key: string }> {
  const [text, meshConfigText] = await Promise.all([
    readFile(opts.meshFile, 'utf8'),
    opts.meshConfigFile ? readFile(opts.meshConfigFile, 'utf8') : Promise.resolve(undefined),
  ]);
  const input: CompileInput = {
    text,
    file: opts.meshFile,
    gateway: opts.gateway,
    withoutWaypoint: opts.withoutWaypoint,
    clusterId: opts.clusterId,
    version,
    meshConfig: meshConfigText === undefined ? undefined : { text: meshConfigText, file: opts.meshConfigFile! },
  };
  return { input, key: `${text}\u0000${meshConfigText ?? ''}` };
}
