/**
 * Test filters with the waypoint in worker processes: a filter factory is an object of the test's
 * process, so a worker cannot be given it; a factory that has a counterpart a worker can import
 * (a module exporting `filterFactories`, WorkersOptions.filterModules) says so under
 * {@link WORKER_COUNTERPART}, with the config its `filters` entry gets there (e.g. where to send
 * what it records). The test topology (topology.ts) swaps one for the other.
 */
import type { FilterFactory } from '../../src/pipeline/index.ts';

/** A factory's stand-in in the workers: the module exporting it and its `filters` entry's config. */
export interface WorkerCounterpart {
  readonly module: string;
  readonly config: unknown;
}

export const WORKER_COUNTERPART = Symbol('worker counterpart');

/** `extraFilters` and bootstrap `filters` as the workers get them: `filterModules`, and each factory's entries with its counterpart's config. @throws Error naming a factory without a counterpart. */
export function forWorkers(
  extraFilters: readonly FilterFactory<unknown>[],
  filters: readonly { name: string; config?: unknown }[] | undefined,
): { filterModules: string[]; filters: { name: string; config?: unknown }[] | undefined } {
  const modules = new Set<string>();
  const configs = new Map<string, unknown>();
  for (const f of extraFilters) {
    const c = (f as { [WORKER_COUNTERPART]?: WorkerCounterpart })[WORKER_COUNTERPART];
    if (!c) {
      throw new Error(
        `extraFilters: filter "${f.name}" is an object of this process with no counterpart a worker can import; ` +
          'this test cannot run with the waypoint in workers (leave it out of vitest.workers.config.ts)',
      );
    }
    modules.add(c.module);
    configs.set(f.name, c.config);
  }
  return {
    filterModules: [...modules],
    filters: filters?.map((e) => (configs.has(e.name) && e.config === undefined ? { ...e, config: configs.get(e.name) } : e)),
  };
}
