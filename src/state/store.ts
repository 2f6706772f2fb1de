/**
 * The mesh state holder: one current {@link MeshSnapshot}, replaced whole when the mesh file
 * changes, or when a live source (the Kubernetes API, istiod) says it changed ({@link MeshStore.live}). Readers take `store.current` once per tunnel or request; a bad edit never replaces a
 * good snapshot (it is logged, like istiod rejecting invalid config).
 *
 * A new snapshot is compiled whole — the mesh and every engine part the store was given (parts.ts)
 * — before it is published; then the parts' `publish` hooks run, then the subscribers. Compiling
 * runs in slices that give the event loop back every few milliseconds (`runInSlices`), so
 * reloading a mesh of thousands of services does not stall the traffic being served; the slices
 * stay on this thread because a snapshot is a graph of closures and shared objects that a worker
 * could not hand back without copying it (the copy alone would block longer than a slice).
 *
 * A file written in place (not renamed over) can be read half-written, and a prefix cut at a
 * document boundary still compiles (to a mesh missing its last resources: a DENY policy, say). A
 * reload a change triggers therefore reads the files only once none was modified for a settle
 * window (default 1 s, by their mtime) and two reads agree; an update refused as invalid is read
 * again with backoff until it changes, so a file completed without a further change event is still
 * picked up. Only writing a temporary file and renaming it over the original is safe whatever the
 * writer's pauses (README "Mesh file").
 */
import { ConfigError, log, runInSlices, runNow } from '../util/index.ts';
import { compileMeshStepwise, type CompileInput, type CompileOptions } from './compile.ts';
import { Coalescer, LiveCompiler, refusalText } from './live.ts';
import { PartCompileError, publishParts } from './parts.ts';
import type { DiscoveredMesh, MeshPart, MeshSnapshot } from './types.ts';
import { watchFiles } from './watch.ts';
import { readInput, readSettled } from './file-input.ts';

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
  /**
   * A changed file is read only once none of the files was modified for this long (their mtime),
   * in ms (default 1000): a writer pausing mid-write for less is never read half-way.
   */
  readonly settleMs?: number;
  /**
   * Log loads and reloads at debug level: a second store over the same files (the demo's roles,
   * beside the waypoint's store), whose lines would repeat the first's. Errors are still logged.
   */
  readonly quiet?: boolean;
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

/** Options of {@link MeshStore.live}; `gateway`, `clusterId`, `parts` and `accept` as for {@link MeshStore.open}. */
export interface MeshStoreLiveOptions extends Pick<MeshStoreOptions, 'gateway' | 'clusterId' | 'parts' | 'accept'> {
  /**
   * The mesh objects as they are now, read once per compile: the API server's JSON (Namespaces,
   * the waypoint Gateway and its GatewayClass, policies, routes, the `istio` ConfigMap, ...). An
   * unchanged resource must be the same object from one call to the next (an informer's cache is).
   */
  readonly objects: () => readonly object[];
  /** How messages name the source (default `the Kubernetes API`). */
  readonly origin?: string;
  /** Workloads and services from istiod's WDS, used instead of the objects' Pods, Services, ServiceEntries and WorkloadEntries. */
  readonly discovered?: DiscoveredMesh;
  /** Cluster DNS suffix (default `cluster.local`). */
  readonly domainSuffix?: string;
  /** Quiet period after a {@link MeshStore.refresh} before compiling, in ms (default 100): a burst of changes is compiled once. */
  readonly debounceMs?: number;
  /** Longest a refresh waits while changes keep coming, in ms (default 1000). */
  readonly maxDelayMs?: number;
}

/** A live store's source and schedule. */
interface LiveState {
  readonly opts: MeshStoreLiveOptions;
  readonly origin: string;
  readonly compiler: LiveCompiler;
  readonly coalescer: Coalescer;
}

/** Called with the new and the previous snapshot after each successful reload. */
export type MeshListener = (next: MeshSnapshot, prev: MeshSnapshot) => void;

/**
 * Holder of the current {@link MeshSnapshot}. Build with {@link MeshStore.open} (files, optional
 * watching), {@link MeshStore.live} (objects from the API server, `refresh` on changes) or
 * {@link MeshStore.fromText}; read `current`; `subscribe` for replacements; `close`.
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
  /** Delay of the next retry of a refused update (doubles while the input stays refused), and whether a reload is one. */
  #retryMs = 0;
  #retrying = false;
  /** The next reload compiles even unchanged files (`reload({ force: true })`). */
  #force = false;
  #closed = false;
  #live: LiveState | undefined;

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
    (opts.quiet ? log.debug : log.info).call(log, { file: opts.meshFile, version: 1, services: snapshot.services.length, workloads: snapshot.workloads.length }, 'mesh: loaded');
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

  /**
   * A store over a live source: compiles `opts.objects()` (and `opts.discovered`) now, and again
   * after each {@link refresh}. An invalid object is refused alone (its previous version, if any,
   * stays in force; logged with the object and field); an update that cannot compile at all (no
   * waypoint Gateway, ...) or that `accept` refuses is logged and the current snapshot stays.
   * @throws ConfigError when the first compile fails for a reason no single object explains (a
   *   part's own error, unwrapped); the caller may try again once the source changes.
   */
  static async live(opts: MeshStoreLiveOptions): Promise<MeshStore> {
    const origin = opts.origin ?? 'the Kubernetes API';
    const compiler = new LiveCompiler(opts.objects, origin);
    let result;
    try {
      result = await compiler.compile({ ...liveCompileOptions(opts), version: 1 });
    } catch (err) {
      throw err instanceof PartCompileError ? err.cause : err;
    }
    const store = new MeshStore(result.snapshot, undefined, opts.parts ?? [], '');
    result.commit();
    const coalescer = new Coalescer(() => store.#refreshOnce(), opts.debounceMs ?? 100, opts.maxDelayMs ?? 1000);
    store.#live = { opts, origin, compiler, coalescer };
    log.info({ origin, version: 1, services: result.snapshot.services.length, workloads: result.snapshot.workloads.length }, 'mesh: loaded');
    return store;
  }

  /**
   * The live source changed (an object was added, updated or deleted; istiod pushed): compile and
   * publish after the changes settle (see {@link MeshStoreLiveOptions.debounceMs}).
   * @returns resolves once a compile started after this call has finished (published or refused).
   *   No-op for stores not made by {@link live}.
   */
  refresh(): Promise<void> {
    if (!this.#live || this.#closed) return Promise.resolve();
    return this.#live.coalescer.request();
  }

  async #refreshOnce(): Promise<void> {
    const { opts, origin, compiler } = this.#live!;
    if (this.#closed) return;
    const prev = this.#current;
    // As with the file: the waypoint stays the Gateway it started as.
    const gateway = opts.gateway ?? `${prev.waypoint.namespace}/${prev.waypoint.name}`;
    let result;
    try {
      result = await compiler.compile({ ...liveCompileOptions(opts), gateway, version: prev.version + 1 });
    } catch (err) {
      const invalid = (err instanceof PartCompileError ? err.cause : err) instanceof ConfigError;
      log.error({ origin, version: prev.version }, `mesh: update ${invalid ? 'refused' : 'failed'}, keeping version ${prev.version}: ${refusalText(err)}`);
      return;
    }
    if (this.#closed) return;
    const next = result.snapshot;
    const refusal = opts.accept?.(next, prev);
    if (refusal) {
      log.error({ origin, version: prev.version }, `mesh: update refused, keeping version ${prev.version}: ${refusal}`);
      return;
    }
    result.commit();
    this.#current = next;
    log.info({ origin, version: next.version, services: next.services.length, workloads: next.workloads.length }, 'mesh: updated');
    this.#publish(next, prev);
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
   * coalesced. A live store recompiles ({@link refresh}). No-op for stores made by {@link fromText}.
   * `force` compiles (and publishes) even unchanged files: parts that read more than the files
   * (WaypointFilter modules, re-imported when their code changed) are brought up to date on SIGHUP.
   */
  reload(opts: { readonly force?: boolean } = {}): Promise<void> {
    if (this.#live) return this.refresh();
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
        const retry = this.#retrying;
        const force = this.#force;
        this.#settle = false;
        this.#retrying = false;
        this.#force = false;
        await this.#reloadOnce(this.#opts!, settle, retry, force);
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

  async #reloadOnce(opts: MeshStoreOptions, settle: boolean, retry = false, force = false): Promise<void> {
    const prev = this.#current;
    const quietMs = opts.debounceMs ?? 100;
    const known = (key: string) => key === this.#lastInput || key === this.#lastRefused;
    let next: MeshSnapshot;
    let key: string | undefined;
    try {
      // Once running, the waypoint stays the Gateway it started as: adding another istio-waypoint
      // Gateway to the file must not make the choice ambiguous (and freeze every later update).
      const gateway = opts.withoutWaypoint ? undefined : (opts.gateway ?? `${prev.waypoint.namespace}/${prev.waypoint.name}`);
      const read = settle
        ? await readSettled({ ...opts, gateway }, prev.version + 1, quietMs, opts.settleMs ?? 1000, known)
        : await readInput({ ...opts, gateway }, prev.version + 1);
      if (this.#closed) return;
      key = read.key;
      // A retry that finds nothing new says so at debug level only (it runs again and again).
      const say = retry || opts.quiet ? log.debug.bind(log) : log.info.bind(log);
      if (key === this.#lastInput && !force) {
        say({ file: opts.meshFile, version: prev.version }, `mesh: unchanged, keeping version ${prev.version}`);
        return;
      }
      if (key === this.#lastRefused && !force) {
        say({ file: opts.meshFile, version: prev.version }, `mesh: unchanged since the refused update, keeping version ${prev.version}`);
        this.#refused(key, quietMs);
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
    if (this.#retry) clearTimeout(this.#retry);
    this.#retry = undefined;
    (opts.quiet ? log.debug : log.info).call(log, { file: opts.meshFile, version: next.version, services: next.services.length, workloads: next.workloads.length }, 'mesh: reloaded');
    this.#publish(next, prev);
  }

  /**
   * After a refused update: remember its input, and read again after `quietMs`, then twice as long
   * each time it is still the same (up to {@link MAX_RETRY_MS}): a file still being written is
   * applied once it compiles, even when no further change event comes.
   */
  #refused(key: string, quietMs: number): void {
    if (this.#closed || (key === this.#lastRefused && this.#retry)) return;
    this.#retryMs = key === this.#lastRefused ? Math.min(this.#retryMs * 2, MAX_RETRY_MS) : quietMs;
    this.#lastRefused = key;
    if (this.#retry) clearTimeout(this.#retry);
    this.#retry = setTimeout(() => {
      this.#retry = undefined;
      this.#retrying = true;
      void this.#changed();
    }, this.#retryMs);
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
    this.#live?.coalescer.close();
    if (this.#retry) clearTimeout(this.#retry);
    this.#retry = undefined;
    this.#listeners.clear();
  }
}

/** The compile options a live store passes on. */
function liveCompileOptions(opts: MeshStoreLiveOptions): CompileOptions {
  return { gateway: opts.gateway, clusterId: opts.clusterId, domainSuffix: opts.domainSuffix, parts: opts.parts, discovered: opts.discovered };
}

/** The error `open`/`fromText` throw: a part's own error (naming `file` when it names none). */
function startError(err: unknown, file: string): unknown {
  const cause = err instanceof PartCompileError ? err.cause : err;
  if (cause instanceof ConfigError && !cause.location.file) return new ConfigError(cause.message, { ...cause.location, file }, { cause });
  return cause;
}

/** Longest wait between two retries of a refused update (ms). */
const MAX_RETRY_MS = 30_000;
