/**
 * The mesh state holder: one current {@link MeshSnapshot}, replaced whole when the mesh file
 * changes. Readers take `store.current` once per tunnel or request; a bad edit never replaces a
 * good snapshot (it is logged, like istiod rejecting invalid config).
 */
import { readFile } from 'node:fs/promises';

import { ConfigError } from '../errors.ts';
import { log } from '../util/log.ts';
import { compileMesh, type CompileInput } from './compile.ts';
import type { MeshSnapshot } from './types.ts';
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
  /** Quiet period before a change is read, in ms (default 100). */
  readonly debounceMs?: number;
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
  #lastInput: string;
  #stopWatching: (() => void) | undefined;
  #reloading: Promise<void> | undefined;
  #reloadAgain = false;
  #closed = false;

  private constructor(snapshot: MeshSnapshot, opts: MeshStoreOptions | undefined, lastInput: string) {
    this.#current = snapshot;
    this.#opts = opts;
    this.#lastInput = lastInput;
  }

  /**
   * Read and compile the mesh file (and MeshConfig file), optionally watching them.
   * @throws ConfigError when the initial state is invalid; the file read error when unreadable.
   */
  static async open(opts: MeshStoreOptions): Promise<MeshStore> {
    const { input, key } = await readInput(opts, 1);
    const store = new MeshStore(compileMesh(input), opts, key);
    log.info(
      { file: opts.meshFile, version: 1, services: store.#current.services.length, workloads: store.#current.workloads.length },
      'mesh: loaded',
    );
    if (opts.watch) {
      const files = [opts.meshFile, ...(opts.meshConfigFile ? [opts.meshConfigFile] : [])];
      store.#stopWatching = watchFiles(files, () => void store.reload(), opts.debounceMs ?? 100);
    }
    return store;
  }

  /**
   * A store over YAML text (tests, the demo's embedded mesh); it never reloads.
   * @throws ConfigError when the text is invalid.
   */
  static fromText(text: string, opts: MeshStoreTextOptions = {}): MeshStore {
    const snapshot = compileMesh({ text, file: opts.file ?? '<inline>', gateway: opts.gateway, clusterId: opts.clusterId, meshConfig: opts.meshConfig });
    return new MeshStore(snapshot, undefined, '');
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
   * Re-read the files now and publish a new snapshot (version + 1) when they changed and compile.
   * On failure logs an error and keeps the current snapshot. Concurrent calls are coalesced.
   * No-op for stores made by {@link fromText}.
   */
  reload(): Promise<void> {
    if (!this.#opts || this.#closed) return Promise.resolve();
    if (this.#reloading) {
      this.#reloadAgain = true;
      return this.#reloading;
    }
    const run = async (): Promise<void> => {
      do {
        this.#reloadAgain = false;
        await this.#reloadOnce(this.#opts!);
      } while (this.#reloadAgain && !this.#closed);
    };
    this.#reloading = run().finally(() => {
      this.#reloading = undefined;
    });
    return this.#reloading;
  }

  async #reloadOnce(opts: MeshStoreOptions): Promise<void> {
    const prev = this.#current;
    let next: MeshSnapshot;
    let key: string;
    try {
      // Once running, the waypoint stays the Gateway it started as: adding another istio-waypoint
      // Gateway to the file must not make the choice ambiguous (and freeze every later update).
      const gateway = opts.withoutWaypoint ? undefined : (opts.gateway ?? `${prev.waypoint.namespace}/${prev.waypoint.name}`);
      const read = await readInput({ ...opts, gateway }, prev.version + 1);
      key = read.key;
      if (key === this.#lastInput) return; // touched but unchanged
      next = compileMesh(read.input);
    } catch (err) {
      // Invalid input (YAML, an invalid resource such as a NetworkPolicy or PeerAuthentication) is
      // refused with the same words as a snapshot `accept` refuses (an invalid AuthorizationPolicy,
      // ...); "failed" is kept for errors that say nothing about the input (an unreadable file).
      const invalid = err instanceof ConfigError;
      const text = invalid ? err.toString() : String(err);
      log.error({ file: opts.meshFile, version: prev.version }, `mesh: reload ${invalid ? 'refused' : 'failed'}, keeping version ${prev.version}: ${text}`);
      return;
    }
    if (this.#closed) return;
    const refusal = opts.accept?.(next, prev);
    if (refusal) {
      log.error({ file: opts.meshFile, version: prev.version }, `mesh: reload refused, keeping version ${prev.version}: ${refusal}`);
      return;
    }
    this.#current = next;
    this.#lastInput = key;
    log.info({ file: opts.meshFile, version: next.version, services: next.services.length, workloads: next.workloads.length }, 'mesh: reloaded');
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
    this.#listeners.clear();
  }
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
