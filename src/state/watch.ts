/**
 * Watch a few files for changes in a way that survives editors and `kubectl`-style tools that
 * replace a file by writing a temporary and renaming it over the original: the containing
 * directory is watched and events are filtered by base name (plus `..data`, the symlink that
 * Kubernetes swaps when a mounted ConfigMap changes).
 */
import { watch, type FSWatcher } from 'node:fs';
import { basename, dirname, resolve } from 'node:path';

import { log } from '../util/index.ts';

/**
 * Call `onChange` (at most once per `debounceMs` quiet period) after any of `files` is created,
 * written, renamed over or deleted. Events for other files in the same directories are ignored.
 * @returns a function that stops watching (idempotent).
 * @throws the `fs.watch` error when a directory cannot be watched.
 */
export function watchFiles(files: readonly string[], onChange: () => void, debounceMs = 100): () => void {
  const byDir = new Map<string, Set<string>>();
  for (const f of files) {
    const abs = resolve(f);
    let names = byDir.get(dirname(abs));
    if (!names) byDir.set(dirname(abs), (names = new Set()));
    names.add(basename(abs));
  }
  let timer: NodeJS.Timeout | undefined;
  const trigger = () => {
    if (timer) clearTimeout(timer);
    timer = setTimeout(() => {
      timer = undefined;
      onChange();
    }, debounceMs);
  };
  const watchers: FSWatcher[] = [];
  for (const [dir, names] of byDir) {
    const w = watch(dir, { persistent: false }, (_event, filename) => {
      // Some platforms omit the name; then any event in the directory counts. Kubernetes updates a
      // mounted ConfigMap by swapping the `..data` symlink the file points through, so that counts too.
      const name = filename?.toString();
      if (name === undefined || names.has(name) || name === '..data') trigger();
    });
    w.on('error', (err) => log.error({ err, dir }, 'mesh: file watcher failed'));
    watchers.push(w);
  }
  let closed = false;
  return () => {
    if (closed) return;
    closed = true;
    if (timer) clearTimeout(timer);
    for (const w of watchers) w.close();
  };
}
