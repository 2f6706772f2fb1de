/**
 * The mesh of a waypoint running in a cluster: a live {@link MeshStore} over the watched objects
 * (and istiod's workloads and services), refreshed on every change of the Kubernetes API.
 */
import { ConfigError, log } from '../util/index.ts';
import { MeshStore, type MeshStoreLiveOptions } from '../state/index.ts';
import type { KubeWatcher } from './watcher.ts';

/** Options of {@link openClusterMesh}: the store's, and the watcher whose objects it compiles. */
export interface ClusterMeshOptions extends Omit<MeshStoreLiveOptions, 'objects' | 'origin'> {
  /** Started by the caller; its objects are compiled once it is synced. */
  readonly watcher: KubeWatcher;
  /** While the mesh cannot compile yet, how often to try again besides on each change, in ms (default 5000). */
  readonly retryMs?: number;
  /** Aborts the wait (shutdown before the mesh could start). */
  readonly signal?: AbortSignal;
}

/** A running cluster mesh. */
export interface ClusterMesh {
  readonly store: MeshStore;
  /** Compile again after the changes settle (istiod pushed; the watcher's changes do it themselves). */
  refresh(): Promise<void>;
  /** Stop following the watcher and close the store (the watcher is the caller's to stop). */
  close(): void;
}

/**
 * Wait until the watcher has listed every kind, compile the first snapshot, and refresh it on
 * every change. While the first compile fails for a reason no single object explains (the
 * waypoint's Gateway is not there yet, ...), log why and try again on the next change (or after
 * `retryMs`): not ready, never a crash loop.
 * @throws the signal's reason when it aborts first; a non-configuration error of the first compile.
 */
export async function openClusterMesh(opts: ClusterMeshOptions): Promise<ClusterMesh> {
  const { watcher, signal } = opts;
  await watcher.whenSynced(signal);
  let store: MeshStore | undefined;
  for (let attempt = 1; !store; attempt++) {
    signal?.throwIfAborted();
    const next = nextChange(watcher, opts.retryMs ?? 5000, signal);
    try {
      store = await MeshStore.live({ ...opts, objects: () => watcher.objects(), origin: 'the Kubernetes API' });
      next.cancel();
    } catch (err) {
      if (!(err instanceof ConfigError)) {
        next.cancel();
        throw err;
      }
      log.error({ attempt }, `mesh: cannot start from the Kubernetes API yet (trying again on the next change): ${String(err)}`);
      await next.wait();
    }
  }
  const live = store;
  const off = watcher.on('change', () => void live.refresh());
  return {
    store: live,
    refresh: () => live.refresh(),
    close() {
      off();
      live.close();
    },
  };
}

/** The next change of the watcher (from now on), `ms` passing, or the signal aborting, whichever comes first. */
function nextChange(watcher: KubeWatcher, ms: number, signal: AbortSignal | undefined): { wait(): Promise<void>; cancel(): void } {
  let changed = false;
  let wake: (() => void) | undefined;
  // Listening from before the compile: a change during it is not missed.
  const off = watcher.on('change', () => {
    changed = true;
    wake?.();
  });
  return {
    cancel: off,
    wait: () =>
      new Promise<void>((resolve) => {
        const finish = () => {
          clearTimeout(timer);
          off();
          signal?.removeEventListener('abort', finish);
          resolve();
        };
        const timer = setTimeout(finish, ms);
        timer.unref();
        wake = finish;
        if (changed || signal?.aborted) return finish();
        signal?.addEventListener('abort', finish, { once: true });
      }),
  };
}
