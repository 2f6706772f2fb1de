/**
 * README "Layers" is the table `.dependency-cruiser.cjs` enforces (`npm run lint:layers`): the same
 * layers, each allowed the same imports, and every folder of src/ is a layer with its index.ts.
 */
import fs from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { expect, test } from 'vitest';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const require = createRequire(import.meta.url);

interface Rule {
  readonly name: string;
  readonly to: { readonly pathNot?: string | readonly string[] };
}

/** layer → the layers whose entries it may import, as the config's `layer-*` rules say. */
function configTable(): Map<string, string[]> {
  const cfg = require(path.join(ROOT, '.dependency-cruiser.cjs')) as { forbidden: readonly Rule[] };
  const table = new Map<string, string[]>();
  for (const r of cfg.forbidden) {
    if (!r.name.startsWith('layer-')) continue;
    const allowed = [r.to.pathNot ?? []].flat().flatMap((p) => /^\^src\/(.+)\/index\\\.ts\$$/.exec(p)?.[1] ?? []);
    table.set(r.name.slice('layer-'.length), allowed.sort());
  }
  return table;
}

/** The README's table: `| \`layer/\` | what | a, b, c |`. */
function readmeTable(): Map<string, string[]> {
  const readme = fs.readFileSync(path.join(ROOT, 'README.md'), 'utf8');
  const section = readme.slice(readme.indexOf('### Layers'), readme.indexOf('### One HTTP request'));
  const table = new Map<string, string[]>();
  for (const m of section.matchAll(/^\| `([a-z-]+)\/` \|[^|]*\| ([^|]*) \|$/gm)) {
    const deps = m[2].trim() === '—' ? [] : m[2].split(',').map((s) => s.trim());
    table.set(m[1], deps.sort());
  }
  return table;
}

test('README "Layers" lists the layers and imports the dependency-cruiser config enforces', () => {
  const config = configTable();
  expect(config.size).toBeGreaterThan(15);
  expect(Object.fromEntries(readmeTable())).toEqual(Object.fromEntries(config));
});

test('every folder of src/ is a layer with one entry, index.ts (workers, demo and cli sit above the table, with app.ts)', () => {
  const folders = fs
    .readdirSync(path.join(ROOT, 'src'), { withFileTypes: true })
    .filter((e) => e.isDirectory())
    .map((e) => e.name);
  const layers = new Set([...configTable().keys(), 'workers', 'demo', 'cli']);
  expect(folders.filter((f) => !layers.has(f))).toEqual([]);
  expect(folders.filter((f) => !fs.existsSync(path.join(ROOT, 'src', f, 'index.ts')))).toEqual([]);
});
