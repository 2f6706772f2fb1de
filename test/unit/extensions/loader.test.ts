/**
 * Loading WaypointFilter modules (src/extensions/loader.ts): package entries found as Node's ES
 * module resolver finds them (exports conditions, subpaths, main), paths relative to the mesh file,
 * `sha256` checked against the file, a module that does not default-export a factory or whose
 * config its `configSchema` refuses, each refusing the start with the resource and field named;
 * a copied module whose folder has no `node_modules` gets zod and the filter API from the waypoint's.
 */
import { spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, test } from 'vitest';
import { Registry } from 'prom-client';
import { extensionsFor, resolveModule, WaypointExtensions } from '../../../src/extensions/index.ts';
import { ROUTES } from '../../../src/routing/index.ts';
import { MeshStore } from '../../../src/state/index.ts';
import { meshText, namespace, service, usesWaypoint, waypointFilter, waypointGateway } from '../../helpers/mesh.ts';

let dir: string;
beforeEach(() => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'wp-loader-'));
});
afterEach(() => fs.rmSync(dir, { recursive: true, force: true }));

function write(rel: string, text: string): string {
  const file = path.join(dir, rel);
  fs.mkdirSync(path.dirname(file), { recursive: true });
  fs.writeFileSync(file, text);
  return file;
}

describe('resolveModule', () => {
  test('a package: exports (import/node/default conditions, subpaths), else main, else index.js; found from a parent directory', () => {
    write('node_modules/a/package.json', JSON.stringify({ exports: { '.': { require: './a.cjs', import: './a.js' }, './sub': { default: './sub.js' } } }));
    write('node_modules/a/a.js', '');
    write('node_modules/a/sub.js', '');
    write('node_modules/@org/b/package.json', JSON.stringify({ main: 'lib/b.js' }));
    write('node_modules/@org/b/lib/b.js', '');
    write('node_modules/c/package.json', JSON.stringify({ exports: './c.ts' }));
    write('node_modules/c/c.ts', '');
    write('node_modules/d/package.json', '{}');
    write('node_modules/d/index.js', '');
    const nested = path.join(dir, 'deep/er');
    fs.mkdirSync(nested, { recursive: true });
    expect(resolveModule('a', nested)).toBe(path.join(dir, 'node_modules/a/a.js'));
    expect(resolveModule('a/sub', dir)).toBe(path.join(dir, 'node_modules/a/sub.js'));
    expect(resolveModule('@org/b', dir)).toBe(path.join(dir, 'node_modules/@org/b/lib/b.js'));
    expect(resolveModule('c', dir)).toBe(path.join(dir, 'node_modules/c/c.ts'));
    expect(resolveModule('d', dir)).toBe(path.join(dir, 'node_modules/d/index.js'));
    expect(() => resolveModule('a/missing', dir)).toThrow(/package a .* does not export \.\/missing/);
    expect(() => resolveModule('nope', dir)).toThrow(/package nope is not installed in a node_modules of .* or a directory above it/);
  });

  test('a path: relative to the directory given (the mesh file\'s), or absolute, or a file: URL', () => {
    const file = write('filters/f.ts', '');
    expect(resolveModule('./filters/f.ts', dir)).toBe(file);
    expect(resolveModule(file, '/')).toBe(file);
    expect(resolveModule(`file://${file}`, '/')).toBe(file);
    expect(() => resolveModule('./filters/g.ts', dir)).toThrow(/no file .*g\.ts \(module paths are relative to the mesh file's directory/);
  });
});

describe('modules named by WaypointFilters', () => {
  const GOOD = `import { FilterStatus } from 'node-waypoint/filter-api';
export const configSchema = { safeParse: (v) => (v && typeof v.n === 'number' ? { success: true, data: { n: v.n * 2 } } : { success: false, error: { issues: [{ path: ['n'], message: 'n must be a number' }] } }) };
export default { name: 'good', create: (config) => ({ name: 'good:' + config.n, onRequestHeaders: () => FilterStatus.Continue }) };
`;
  const mesh = (spec: object) =>
    meshText(
      waypointGateway('foo'),
      namespace('foo', usesWaypoint()),
      service({ name: 'a', namespace: 'foo', vip: '10.96.0.1', ports: [{ name: 'http', port: 80 }] }),
      waypointFilter('m', { targetRefs: [{ kind: 'Service', name: 'a' }], ...spec }),
    );

  async function open(spec: object): Promise<MeshStore> {
    const file = write('mesh.yaml', mesh(spec));
    const ext = new WaypointExtensions({ filters: [], metrics: new Registry(), phaseTimeoutMs: 100 });
    return MeshStore.open({ meshFile: file, parts: [ROUTES, ext.part] });
  }
  const failure = (spec: object) => open(spec).then((s) => (s.close(), 'opened'), (err: unknown) => String(err));

  test('a module from a path next to the mesh file, its configSchema applied, with the given deadline', async () => {
    write('good.ts', GOOD);
    const sha = createHash('sha256').update(GOOD).digest('hex');
    const store = await open({ module: './good.ts', sha256: sha, config: { n: 21 } });
    const [attached] = extensionsFor(store.current).forTarget(store.current.resolveTarget('10.96.0.1', 80)!)[3].all;
    expect([attached.filter.name, attached.deadlineMs]).toEqual(['good:42', 100]);
    store.close();
  });

  test('zod and the filter API resolve from the waypoint\'s install when the module\'s folder has neither (a copied example)', () => {
    const file = write(
      'copied/index.ts',
      `import { z } from 'zod';
import { FilterStatus } from 'node-waypoint/filter-api';
export const configSchema = z.object({ n: z.number() });
export default { name: 'zodded', create: () => ({ name: 'zodded', onRequestHeaders: () => FilterStatus.Continue }) };
`,
    );
    // A process of its own: vitest's module runner would resolve zod from the repository itself.
    const loader = new URL('../../../src/extensions/loader.ts', import.meta.url).href;
    const script = `const { ModuleLoader } = await import(${JSON.stringify(loader)});
const m = await new ModuleLoader().load(${JSON.stringify(file)}, '/');
console.log(JSON.stringify([m.factory.name, m.configSchema.safeParse({ n: 1 }).success, m.configSchema.safeParse({ n: 'x' }).success]));`;
    const r = spawnSync(process.execPath, ['--input-type=module', '-e', script], { encoding: 'utf8', timeout: 20_000, cwd: dir });
    expect(r.stderr).toBe('');
    expect(r.stdout.trim()).toBe('["zodded",true,false]');
  });

  test.each([
    ['a wrong sha256', { module: './good.ts', sha256: 'f'.repeat(64), config: { n: 1 } }, 'spec.sha256', /has SHA-256 [0-9a-f]{64}, not the f{64} the WaypointFilter names/],
    ['a config its schema refuses', { module: './good.ts', config: { n: 'x' } }, 'spec.config.n', /n must be a number/],
    ['no default export', { module: './bare.ts' }, 'spec.module', /must default-export a filter factory .* got nothing/],
    ['a syntax error', { module: './broken.ts' }, 'spec.module', /cannot import .*broken\.ts/],
    ['a create() that throws', { module: './throws.ts' }, 'spec.module', /the filter's create\(\) threw: not today/],
  ])('%s refuses the start naming the resource and field', async (_what, spec, field, message) => {
    write('good.ts', GOOD);
    write('bare.ts', 'export const x = 1;\n');
    write('broken.ts', 'export default {{;\n');
    write('throws.ts', "export default { create() { throw new Error('not today'); } };\n");
    const err = await failure(spec);
    expect(err).toMatch(new RegExp(`mesh\\.yaml:\\d+: document 3: WaypointFilter/foo/m: field ${field.replace(/\./g, '\\.')}: `));
    expect(err).toMatch(message);
  });
});
