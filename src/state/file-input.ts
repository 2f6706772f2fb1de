/**
 * Reading the mesh file (and the MeshConfig file) for the store: once, or settled — only after the
 * files have been quiet for a while and two reads agree, so a file rewritten in place is not read
 * half-way through (store.ts explains the rule).
 */
import { readFile, stat } from 'node:fs/promises';

import type { CompileInput } from './compile.ts';

/** What reading needs of the store's options (`MeshStoreOptions`). */
export interface FileInputOptions {
  readonly meshFile: string;
  readonly meshConfigFile?: string;
  readonly gateway?: string;
  readonly withoutWaypoint?: boolean;
  readonly clusterId?: string;
}

/** Most reads {@link readSettled} makes before it gives up on a file that keeps changing. */
const SETTLE_READS = 10;

/**
 * Read the files until none was modified for `settleMs` (by mtime) and two reads at least
 * `quietMs` apart agree: a writer that rewrites a file in place (truncate, then write) is not read
 * half-way through a pause shorter than `settleMs`. A read the store already knows (`known`: the
 * applied or the refused input) is returned at once, since it would not be applied anyway. Gives up
 * with an Error (a reload "failed", retried at the watcher's next event) when the files keep changing.
 */
export async function readSettled(
  opts: FileInputOptions,
  version: number,
  quietMs: number,
  settleMs: number,
  known: (key: string) => boolean,
): Promise<{ input: CompileInput; key: string }> {
  let read = await readInput(opts, version);
  for (let i = 1; i < SETTLE_READS && !known(read.key); i++) {
    const wait = Math.max(quietMs, settleMs - (await quietFor(opts)));
    await new Promise((r) => setTimeout(r, wait));
    const again = await readInput(opts, version);
    if (again.key === read.key && (await quietFor(opts)) >= settleMs) return read;
    read = again;
  }
  if (known(read.key)) return read;
  throw new Error(`${opts.meshFile} kept changing for ${SETTLE_READS} reads; waiting for the next change`);
}

/**
 * How long (ms) none of the files was modified, by mtime. A file whose mtime is ahead of the clock
 * (a skewed network filesystem) counts as quiet, as a missing one does: then only the reads'
 * agreement settles it.
 */
async function quietFor(opts: FileInputOptions): Promise<number> {
  const files = [opts.meshFile, ...(opts.meshConfigFile ? [opts.meshConfigFile] : [])];
  const times = await Promise.all(files.map((f) => stat(f).then((s) => s.mtimeMs, () => 0)));
  const age = Date.now() - Math.max(...times);
  return age < -1000 ? Infinity : age;
}

export async function readInput(opts: FileInputOptions, version: number): Promise<{ input: CompileInput; key: string }> {
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
