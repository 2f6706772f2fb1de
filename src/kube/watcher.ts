/**
 * The waypoint's view of the Kubernetes API: every kind of {@link WATCHED_KINDS} listed and
 * watched ({@link KindWatch}), their objects as one list for the mesh compile, a `change` signal
 * (coalesced per turn of the event loop), and `synced` once every kind was listed (readiness).
 */
import type { KubeConfig } from '@kubernetes/client-node';

import { log } from '../util/index.ts';
import { loadKubeConfig, type KubeObject } from './client.ts';
import { KindWatch, type KindStatus, type WatchRetry } from './kind-watch.ts';
import { WATCHED_KINDS, type WatchedKind } from './kinds.ts';

/** Options of {@link KubeWatcher}. */
export interface KubeWatcherOptions {
  /** The client configuration (default: `loadKubeConfig()`: KUBECONFIG, else the pod's service account). */
  readonly kubeConfig?: KubeConfig;
  /** The kinds to watch (default {@link WATCHED_KINDS}). */
  readonly kinds?: readonly WatchedKind[];
  /** Retry timing (tests shorten it). */
  readonly backoff?: WatchRetry;
}

type Event = 'change' | 'synced';

/**
 * Lists and watches the kinds; `objects()` is what `MeshStore.live` compiles.
 *
 *   const kube = new KubeWatcher();
 *   kube.on('change', () => void store.refresh());
 *   kube.start();
 *   await kube.whenSynced();
 */
export class KubeWatcher {
  readonly #watches: readonly KindWatch[];
  readonly #listeners: Record<Event, Set<() => void>> = { change: new Set(), synced: new Set() };
  #objects: readonly KubeObject[] | undefined;
  #changeQueued = false;
  #synced = false;
  #started = false;

  /** @throws Error when no client configuration is given and none can be loaded (see loadKubeConfig). */
  constructor(opts: KubeWatcherOptions = {}) {
    const kc = opts.kubeConfig ?? loadKubeConfig();
    const hooks = { changed: () => this.#changed(), synced: () => this.#kindSynced() };
    this.#watches = (opts.kinds ?? WATCHED_KINDS).map((k) => new KindWatch(kc, k, hooks, opts.backoff));
  }

  /** Start listing and watching every kind. */
  start(): void {
    if (this.#started) return;
    this.#started = true;
    log.info({ kinds: this.#watches.map((w) => w.kind.kind) }, 'kube: watching the Kubernetes API');
    for (const w of this.#watches) w.start();
  }

  /** Stop every watch (the objects stay readable). */
  async stop(): Promise<void> {
    this.#started = false;
    await Promise.all(this.#watches.map((w) => w.stop()));
  }

  /** Every kind was listed once (or found not served): the objects are complete. Stays true. */
  get synced(): boolean {
    return this.#synced;
  }

  /** Resolves once {@link synced}; rejects with the signal's reason if it aborts first. */
  whenSynced(signal?: AbortSignal): Promise<void> {
    if (this.#synced) return Promise.resolve();
    return new Promise((resolve, reject) => {
      const done = () => {
        off();
        signal?.removeEventListener('abort', aborted);
        resolve();
      };
      const aborted = () => {
        off();
        reject(signal!.reason);
      };
      const off = this.on('synced', done);
      if (signal?.aborted) return aborted();
      signal?.addEventListener('abort', aborted, { once: true });
    });
  }

  /**
   * Every watched object, kind by kind in table order, each kind sorted by namespace and name (a
   * stable order whatever the order of events). The same array until the next change, and the
   * same object for an unchanged resource.
   */
  objects(): readonly KubeObject[] {
    this.#objects ??= this.#watches.flatMap((w) => [...w.objects()].sort(byNamespaceAndName));
    return this.#objects;
  }

  /** The state of each kind (synced, not served, last error, object count). */
  status(): readonly KindStatus[] {
    return this.#watches.map((w) => w.status());
  }

  /**
   * `change`: objects were added, updated or deleted (once per turn of the event loop);
   * `synced`: every kind is listed (once). A listener that throws is logged.
   * @returns unsubscribe.
   */
  on(event: Event, fn: () => void): () => void {
    this.#listeners[event].add(fn);
    return () => {
      this.#listeners[event].delete(fn);
    };
  }

  #emit(event: Event): void {
    for (const fn of [...this.#listeners[event]]) {
      try {
        fn();
      } catch (err) {
        log.error({ err, event }, 'kube: listener threw');
      }
    }
  }

  #changed(): void {
    this.#objects = undefined;
    if (this.#changeQueued) return;
    this.#changeQueued = true;
    setImmediate(() => {
      this.#changeQueued = false;
      this.#emit('change');
    });
  }

  #kindSynced(): void {
    if (this.#synced || !this.#watches.every((w) => w.synced)) return;
    this.#synced = true;
    const status = this.status();
    const absent = status.filter((s) => s.absent).map((s) => s.kind);
    log.info({ objects: this.objects().length, notServed: absent }, `kube: every watched kind is listed${absent.length ? ` (not served, empty: ${absent.join(', ')})` : ''}`);
    this.#emit('synced');
  }
}

function byNamespaceAndName(a: KubeObject, b: KubeObject): number {
  const ka = `${String(a.metadata?.namespace ?? '')}/${String(a.metadata?.name ?? '')}`;
  const kb = `${String(b.metadata?.namespace ?? '')}/${String(b.metadata?.name ?? '')}`;
  return ka < kb ? -1 : ka > kb ? 1 : 0;
}
