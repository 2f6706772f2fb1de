/**
 * Loading the ES modules WaypointFilters name: a file path (relative to the mesh file's directory;
 * TypeScript runs through Node's type stripping) or a package installed in a `node_modules` of
 * that directory or one above it. Nothing is fetched from the network.
 *
 * A module is imported by its entry file's URL plus the file's SHA-256 (`?sha256=<hex>`): the
 * same code is imported once and shared, while changed code (a new hash) is imported afresh on the
 * next snapshot, which SIGHUP forces. Node keeps every imported version (ES modules cannot be
 * unloaded) and caches the files the entry imports by their own URLs, so only the entry file is
 * reloaded; restart the waypoint after changing the others.
 */
import { createHash } from 'node:crypto';
import { existsSync, readFileSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { registerHooks } from 'node:module';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import type { FilterModuleFactory } from '../pipeline/index.ts';


/** A config validator a module may export as `configSchema` (a zod schema, or anything with zod's `safeParse`). */
export interface ConfigSchema {
  safeParse(value: unknown): { success: boolean; data?: unknown; error?: { issues: readonly { path: readonly PropertyKey[]; message: string }[] } };
}

/** One imported module version. */
export interface LoadedModule {
  readonly factory: FilterModuleFactory;
  readonly configSchema: ConfigSchema | undefined;
  /** The URL imported: entry file plus `?sha256=`. */
  readonly url: string;
  readonly file: string;
  readonly sha256: string;
}

/** Why a module could not be loaded, and the WaypointFilter field at fault. */
export class ModuleLoadError extends Error {
  readonly field: 'module' | 'sha256';
  constructor(message: string, field: 'module' | 'sha256' = 'module', options?: { cause?: unknown }) {
    super(message, options);
    this.name = 'ModuleLoadError';
    this.field = field;
  }
}

/** The specifier a filter imports the filter API by; it always resolves to the running waypoint's. */
export const FILTER_API_SPECIFIER = 'node-waypoint/filter-api';

/** Imports filter modules and keeps each version once. */
export class ModuleLoader {
  readonly #imports = new Map<string, Promise<LoadedModule>>();

  /** Where `specifier` resolves from `baseDir` now, and the SHA-256 of that file (what a load would import). */
  fingerprint(specifier: string, baseDir: string): Promise<{ file: string; sha256: string }> {
    return fingerprintOf(specifier, baseDir);
  }

  /**
   * Resolve `specifier` from `baseDir`, check its hash against `sha256` when given, and import it.
   * @throws Error (plain text for the caller's ConfigError; a {@link ModuleLoadError} names the
   *   field) when it cannot be found, read, imported, or does not default-export a filter factory,
   *   or its hash differs.
   */
  async load(specifier: string, baseDir: string, sha256: string | undefined): Promise<LoadedModule> {
    const { file, sha256: hash } = await this.fingerprint(specifier, baseDir);
    if (sha256 && sha256 !== hash) throw new ModuleLoadError(`${file} has SHA-256 ${hash}, not the ${sha256} the WaypointFilter names`, 'sha256');
    const url = `${pathToFileURL(file).href}?sha256=${hash}`;
    let pending = this.#imports.get(url);
    if (!pending) {
      shareFilterApi();
      pending = importModule(url, file, hash);
      this.#imports.set(url, pending);
      // A failed import is tried again on the next snapshot (the file may be fixed without a change of hash: a missing dependency installed).
      pending.catch(() => this.#imports.delete(url));
    }
    return pending;
  }
}

/** The entry file `specifier` resolves to from `baseDir`, and its SHA-256. */
async function fingerprintOf(specifier: string, baseDir: string): Promise<{ file: string; sha256: string }> {
  const file = resolveModule(specifier, baseDir);
  let bytes: Buffer;
  try {
    bytes = await readFile(file);
  } catch (err) {
    throw new Error(`cannot read ${file}: ${(err as Error).message}`, { cause: err });
  }
  return { file, sha256: createHash('sha256').update(bytes).digest('hex') };
}

async function importModule(url: string, file: string, sha256: string): Promise<LoadedModule> {
  let mod: Record<string, unknown>;
  try {
    mod = (await import(url)) as Record<string, unknown>;
  } catch (err) {
    throw new Error(`cannot import ${file}: ${(err as Error).message}`, { cause: err });
  }
  const factory = mod.default as FilterModuleFactory | undefined;
  if (!factory || typeof factory !== 'object' || typeof factory.create !== 'function') {
    throw new Error(`${file} must default-export a filter factory ({ name, parseConfig?, create(config, env) }), got ${describe(mod.default)}`);
  }
  if (factory.parseConfig !== undefined && typeof factory.parseConfig !== 'function') throw new Error(`${file}: the factory's parseConfig must be a function`);
  const schema = mod.configSchema as ConfigSchema | undefined;
  if (schema !== undefined && (typeof schema !== 'object' || schema === null || typeof schema.safeParse !== 'function')) {
    throw new Error(`${file}: configSchema must be a zod schema (an object with safeParse), got ${describe(schema)}`);
  }
  return Object.freeze({ factory, configSchema: schema, url, file, sha256 });
}

function describe(v: unknown): string {
  if (v === undefined) return 'nothing';
  if (v === null) return 'null';
  return typeof v === 'object' ? `an object with ${Object.keys(v).join(', ') || 'no keys'}` : typeof v;
}

/** A file path (`./x.ts`, `../x.js`, `/abs/x.ts`, `file:` URL) or a package name (`my-filter`, `@org/filter/sub`). */
export function resolveModule(specifier: string, baseDir: string): string {
  if (specifier.startsWith('file:')) return fileURLToPath(specifier);
  if (specifier.startsWith('.') || path.isAbsolute(specifier)) {
    const file = path.resolve(baseDir, specifier);
    if (!existsSync(file)) throw new Error(`no file ${file} (module paths are relative to the mesh file's directory, ${baseDir})`);
    return file;
  }
  return resolvePackage(specifier, baseDir);
}

const PACKAGE = /^((?:@[^/@]+\/)?[^/@.][^/@]*)(\/.+)?$/;
/** Export conditions of an `import()` under Node, in the order Node checks them. */
const CONDITIONS = new Set(['import', 'node', 'module-sync', 'default']);

/**
 * An installed package's entry, as Node's ES module resolver finds it (nodejs.org/api/packages.html):
 * the first `node_modules/<name>` from `baseDir` up; its `exports` (`import`, `node`, `default`
 * conditions; no subpath patterns), else `main`, else `index.js`.
 */
function resolvePackage(specifier: string, baseDir: string): string {
  const m = PACKAGE.exec(specifier);
  if (!m) throw new Error(`${JSON.stringify(specifier)} is neither a file path (start it with ./ or /) nor a package name`);
  const [, name, rest] = m;
  const subpath = rest ? `.${rest}` : '.';
  for (let dir = path.resolve(baseDir); ; ) {
    const pkgDir = path.join(dir, 'node_modules', name);
    const manifest = path.join(pkgDir, 'package.json');
    if (existsSync(manifest)) {
      const pkg = JSON.parse(readFileSync(manifest, 'utf8')) as { exports?: unknown; main?: string };
      let target: string | undefined;
      if (pkg.exports !== undefined && pkg.exports !== null) {
        target = exportTarget(pkg.exports, subpath);
        if (!target) throw new Error(`package ${name} (${pkgDir}) does not export ${subpath}`);
      } else target = subpath === '.' ? (pkg.main ?? 'index.js') : subpath;
      const file = path.resolve(pkgDir, target);
      if (!existsSync(file)) throw new Error(`package ${name}: its entry ${file} does not exist`);
      return file;
    }
    const parent = path.dirname(dir);
    if (parent === dir) break;
    dir = parent;
  }
  throw new Error(`package ${name} is not installed in a node_modules of ${baseDir} or a directory above it (no network fetches: install it next to the mesh file)`);
}

function exportTarget(exports: unknown, subpath: string): string | undefined {
  const bySubpath = typeof exports === 'object' && exports !== null && !Array.isArray(exports) && Object.keys(exports).some((k) => k.startsWith('.'));
  if (!bySubpath) return subpath === '.' ? conditional(exports) : undefined;
  return conditional((exports as Record<string, unknown>)[subpath]);
}

function conditional(entry: unknown): string | undefined {
  if (typeof entry === 'string') return entry;
  if (Array.isArray(entry)) {
    for (const e of entry) {
      const t = conditional(e);
      if (t) return t;
    }
    return undefined;
  }
  if (typeof entry === 'object' && entry !== null) {
    for (const [k, v] of Object.entries(entry)) {
      if (!CONDITIONS.has(k)) continue;
      const t = conditional(v);
      if (t) return t;
    }
  }
  return undefined;
}

let shared = false;

/**
 * The packages a filter gets from the running waypoint when its own folder does not have them:
 * zod, the schema library of the filter API's `configSchema` (a copied example runs without an
 * `npm install`; a filter that installs its own zod keeps it).
 */
const FALLBACK_PACKAGES = /^zod(?:\/|$)/;

/**
 * Make `node-waypoint/filter-api` resolve, from any module, to this waypoint's own filter API
 * entry: a filter package needs node-waypoint for its types only, and shares the one instance of
 * the API the waypoint runs (slots, constants), wherever it is installed. {@link FALLBACK_PACKAGES}
 * not found from the importing module resolve from the waypoint's own install.
 */
function shareFilterApi(): void {
  if (shared) return;
  shared = true;
  const api = new URL('../pipeline/index.ts', import.meta.url).href;
  registerHooks({
    resolve: (specifier, context, nextResolve) => {
      if (specifier === FILTER_API_SPECIFIER) return { url: api, shortCircuit: true };
      if (!FALLBACK_PACKAGES.test(specifier)) return nextResolve(specifier, context);
      try {
        return nextResolve(specifier, context);
      } catch (err) {
        if ((err as { code?: string }).code !== 'ERR_MODULE_NOT_FOUND') throw err;
        return nextResolve(specifier, { ...context, parentURL: import.meta.url });
      }
    },
  });
}
