/**
 * The owner of the WaypointFilter part: binds {@link EXTENSIONS} to the module loader, the
 * built-in filters a `filter:` may name, and the filter instances kept across snapshots.
 *
 * - `load` (before each compile) imports the modules the snapshot's WaypointFilters name; a
 *   module that cannot be loaded refuses the snapshot, naming the resource and `spec.module`.
 * - `compile` validates each config (the module's `configSchema`, then its `parseConfig`) and gets
 *   one filter per attachment: the instance of the previous snapshot when the resource, its
 *   attachment, module version and config are unchanged (a rate limit's buckets live on), a new one
 *   from the factory's `create` otherwise (config hot reload).
 * - `publish` makes the published snapshot's instances the ones kept; a filter's
 *   `env.mesh.subscribe` listeners are told of new snapshots only while its instance is kept.
 */
import path from 'node:path';
import type { Registry } from 'prom-client';
import { ConfigError, log } from '../util/index.ts';
import { locateField, type MeshPart, type MeshSnapshot } from '../state/index.ts';
import type { Filter, FilterEnv, FilterFactory, FilterModuleFactory, TerminalFilter } from '../pipeline/index.ts';
import { compileExtensions, EXTENSIONS, type CompiledExtensions } from './compile.ts';
import { ModuleLoadError, ModuleLoader, type ConfigSchema, type LoadedModule } from './loader.ts';
import type { Attached } from './run.ts';
import { isWaypointFilter, parseWaypointFilter, type WaypointFilterSpec } from './schema.ts';

/** Options of {@link WaypointExtensions}. */
export interface ExtensionsOptions {
  /** The built-in filters a WaypointFilter's `filter:` may name (`istio.local_ratelimit`, `istio.fault`, ...). */
  readonly filters: readonly FilterFactory<unknown>[];
  /** The waypoint's Prometheus registry, handed to filters as `env.metrics`. */
  readonly metrics: Registry;
  /** Deadline (ms) of a module filter's asynchronous phase; 0 = none. */
  readonly phaseTimeoutMs: number;
  /** Where module paths are resolved for resources read from no file (the API server): the working directory by default. */
  readonly baseDir?: string;
}

/** The mesh as filters see it (`FilterEnv.mesh`). */
type MeshView = FilterEnv['mesh'];

interface Instance {
  readonly attached: Attached;
  readonly listeners: ((next: MeshSnapshot, prev: MeshSnapshot) => void)[];
}

/** WaypointFilter support of one waypoint: give {@link part} to the mesh store, then {@link bind} the store. */
export class WaypointExtensions {
  readonly part: MeshPart<CompiledExtensions>;
  readonly #opts: ExtensionsOptions;
  readonly #loader = new ModuleLoader();
  readonly #modules = new WeakMap<MeshSnapshot, ReadonlyMap<string, LoadedModule>>();
  readonly #instances = new WeakMap<CompiledExtensions, Map<string, Instance>>();
  /** Instances of the published snapshot, by key (see `prepare`). */
  #kept = new Map<string, Instance>();
  #store: MeshView | undefined;
  /** The snapshot being compiled: what `env.mesh.current` is for filters created before the store exists. */
  #compiling: MeshSnapshot | undefined;
  /** Instances of the compile under way. */
  #pending = new Map<string, Instance>();

  constructor(opts: ExtensionsOptions) {
    this.#opts = opts;
    this.part = EXTENSIONS.with({
      load: (s) => this.#load(s),
      compile: (s) => this.#compile(s),
      publish: (value) => this.#publish(value),
    });
  }

  /** The store the part's snapshots come from: filters read `env.mesh.current` from it and are told of new snapshots. */
  bind(store: Required<MeshView>): void {
    this.#store = store;
    store.subscribe!((next, prev) => {
      for (const inst of this.#kept.values()) {
        for (const fn of inst.listeners) {
          try {
            fn(next, prev);
          } catch (err) {
            log.error({ err, filter: inst.attached.ref }, 'extensions: a filter snapshot listener threw');
          }
        }
      }
    });
  }

  /**
   * Whether the code of a module `snapshot`'s WaypointFilters use changed on disk since it was
   * imported (another entry file, or other bytes): what SIGHUP recompiles an unchanged mesh for.
   */
  async codeChanged(snapshot: MeshSnapshot): Promise<boolean> {
    const loaded = this.#modules.get(snapshot);
    if (!loaded) return false;
    const specs = snapshot.resources('WaypointFilter').filter(isWaypointFilter).map(parseWaypointFilter);
    for (const spec of specs) {
      const was = loaded.get(spec.ref);
      if (!was || spec.module === undefined) continue;
      const now = await this.#loader.fingerprint(spec.module, this.#baseDir(spec)).catch(() => undefined);
      if (!now || now.file !== was.file || now.sha256 !== was.sha256) return true;
    }
    return false;
  }

  #load(snapshot: MeshSnapshot): Promise<void> | undefined {
    const specs = snapshot.resources('WaypointFilter').filter(isWaypointFilter).map(parseWaypointFilter).filter((s) => s.module !== undefined);
    if (specs.length === 0) return undefined;
    return Promise.allSettled(specs.map((s) => this.#loader.load(s.module!, this.#baseDir(s), s.sha256))).then((results) => {
      const modules = new Map<string, LoadedModule>();
      results.forEach((r, i) => {
        const spec = specs[i];
        if (r.status === 'rejected') {
          const field = r.reason instanceof ModuleLoadError ? r.reason.field : 'module';
          throw new ConfigError(`cannot load module ${JSON.stringify(spec.module)}: ${(r.reason as Error).message}`, locateField(spec.resource, spec.ref, ['spec', field]), { cause: r.reason });
        }
        modules.set(spec.ref, r.value);
      });
      this.#modules.set(snapshot, modules);
    });
  }

  /** Relative module paths start at the directory of the file the resource came from. */
  #baseDir(spec: WaypointFilterSpec): string {
    const file = spec.resource.locate?.([])?.file;
    return file ? path.dirname(path.resolve(file)) : path.resolve(this.#opts.baseDir ?? '.');
  }

  #compile(snapshot: MeshSnapshot): CompiledExtensions {
    this.#pending = new Map();
    this.#compiling = snapshot;
    try {
      const compiled = compileExtensions(snapshot, { prepare: (spec) => this.#prepare(spec, snapshot) });
      this.#instances.set(compiled, this.#pending);
      return compiled;
    } finally {
      this.#compiling = undefined;
    }
  }

  #publish(compiled: CompiledExtensions): void {
    this.#kept = this.#instances.get(compiled) ?? new Map();
  }

  /** Validate the filter and its config once per resource; instances per attachment. */
  #prepare(spec: WaypointFilterSpec, snapshot: MeshSnapshot): (attachment: string) => Attached {
    const fail = (field: string[], message: string, cause?: unknown): never => {
      throw new ConfigError(message, locateField(spec.resource, spec.ref, ['spec', ...field]), { cause });
    };
    let factory: FilterModuleFactory;
    let schema: ConfigSchema | undefined;
    let version: string;
    let deadlineMs = 0;
    if (spec.filter !== undefined) {
      const builtin = this.#opts.filters.find((f) => f.name === spec.filter);
      if (!builtin) {
        const known = this.#opts.filters.map((f) => f.name);
        return fail(['filter'], `unknown filter ${JSON.stringify(spec.filter)} (a WaypointFilter may attach: ${known.join(', ')})`);
      }
      factory = builtin;
      version = `filter:${spec.filter}`;
    } else {
      const loaded = this.#modules.get(snapshot)?.get(spec.ref);
      // The store always loads before it compiles; only a synchronous compile (MeshStore.fromText) gets here.
      if (!loaded) return fail(['module'], 'modules are loaded only by a store that compiles asynchronously (MeshStore.open)');
      factory = loaded.factory;
      schema = loaded.configSchema;
      version = loaded.url;
      deadlineMs = this.#opts.phaseTimeoutMs;
    }
    let config = spec.config;
    if (schema) {
      const r = schema.safeParse(config);
      if (!r.success) {
        const issue = r.error?.issues[0];
        const at = (issue?.path ?? []).filter((p): p is string | number => typeof p !== 'symbol').map(String);
        fail(['config', ...at], issue?.message ?? 'invalid config');
      }
      config = r.data;
    }
    if (factory.parseConfig) {
      try {
        config = factory.parseConfig(config);
      } catch (err) {
        const inner = err instanceof ConfigError && err.location.field ? err.location.field.split('.') : [];
        fail(['config', ...inner], err instanceof ConfigError ? err.message : `invalid config: ${(err as Error).message}`, err);
      }
    }
    const configKey = JSON.stringify(spec.config) ?? '';
    return (attachment) => {
      const key = `${spec.ref}\u0000${attachment}\u0000${version}\u0000${configKey}`;
      let inst = this.#pending.get(key) ?? this.#kept.get(key);
      if (!inst) inst = this.#create(spec, factory, config, deadlineMs, fail);
      this.#pending.set(key, inst);
      return inst.attached;
    };
  }

  #create(spec: WaypointFilterSpec, factory: FilterModuleFactory, config: unknown, deadlineMs: number, fail: (field: string[], message: string, cause?: unknown) => never): Instance {
    const listeners: Instance['listeners'] = [];
    const extensions = this;
    const env: FilterEnv = {
      mesh: {
        get current() {
          return extensions.#store?.current ?? extensions.#compiling!;
        },
        subscribe(fn) {
          listeners.push(fn);
          return () => {
            const i = listeners.indexOf(fn);
            if (i >= 0) listeners.splice(i, 1);
          };
        },
      },
      log: log.child({ filter: spec.ref }),
      metrics: this.#opts.metrics,
    };
    const field = spec.module !== undefined ? 'module' : 'filter';
    let filter: Filter;
    try {
      filter = factory.create(config, env);
    } catch (err) {
      return fail([field], `the filter's create() threw: ${(err as Error)?.message ?? String(err)}`, err);
    }
    if (!filter || typeof filter !== 'object') return fail([field], `the filter's create() must return a filter object, got ${filter === null ? 'null' : typeof filter}`);
    if (typeof (filter as TerminalFilter).forward === 'function') return fail([field], 'a WaypointFilter cannot be a terminal filter (it has forward(); the router is the only one)');
    return { attached: Object.freeze({ filter, ref: spec.ref, deadlineMs }), listeners };
  }
}
