/**
 * The published filter API types: `tsc` emits the `.d.ts` files of `node-waypoint/filter-api`
 * (tsconfig.filter-api.json, what `npm run build:types` emits with the package's other entry) into
 * a temporary package, and the example filter (examples/tenant-filter) type-checks against it as a
 * filter package outside this repository would, with a deliberately wrong file beside it that must
 * be the only error (so the check cannot pass by checking nothing).
 */
import { execFile } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { afterAll, expect, test } from 'vitest';

const ROOT = fileURLToPath(new URL('../../', import.meta.url));
const TSC = path.join(ROOT, 'node_modules/typescript/bin/tsc');
// Inside the repository, so the consumer finds zod and the API's own dependencies (pino,
// prom-client) in its node_modules as an installed package would.
const work = fs.mkdtempSync(path.join(ROOT, 'tmp-filter-api-'));
afterAll(() => fs.rmSync(work, { recursive: true, force: true }));

const run = (args: string[]) => promisify(execFile)(process.execPath, [TSC, ...args], { cwd: ROOT }).then(
  () => ({ code: 0, out: '' }),
  (err: { code?: number; stdout?: string }) => ({ code: err.code ?? 1, out: String(err.stdout ?? '') }),
);

test('the example filter type-checks against the emitted node-waypoint/filter-api declarations', { timeout: 180_000 }, async () => {
  const pkg = path.join(work, 'consumer/node_modules/node-waypoint');
  const emitted = await run(['-p', 'tsconfig.filter-api.json', '--outDir', path.join(pkg, 'types')]);
  expect(emitted.out).toBe('');
  expect(fs.existsSync(path.join(pkg, 'types/src/pipeline/index.d.ts'))).toBe(true);
  const manifest = JSON.parse(fs.readFileSync(path.join(ROOT, 'package.json'), 'utf8')) as { exports: Record<string, { types: string }> };
  // The package's own `types` path for the entry, under the temporary package.
  const types = manifest.exports['./filter-api'].types.replace('./dist/types/', './types/');
  fs.writeFileSync(path.join(pkg, 'package.json'), JSON.stringify({ name: 'node-waypoint', type: 'module', exports: { './filter-api': { types } } }));

  const consumer = path.join(work, 'consumer');
  fs.copyFileSync(path.join(ROOT, 'examples/tenant-filter/index.ts'), path.join(consumer, 'index.ts'));
  fs.writeFileSync(path.join(consumer, 'wrong.ts'), "import { FilterStatus } from 'node-waypoint/filter-api';\nexport const x: number = FilterStatus.Later;\n");
  fs.writeFileSync(path.join(consumer, 'package.json'), JSON.stringify({ type: 'module' }));
  fs.writeFileSync(
    path.join(consumer, 'tsconfig.json'),
    JSON.stringify({
      compilerOptions: { target: 'es2024', module: 'nodenext', moduleResolution: 'nodenext', strict: true, noEmit: true, types: ['node'], typeRoots: [path.join(ROOT, 'node_modules/@types')] },
      files: ['index.ts', 'wrong.ts'],
    }),
  );
  const checked = await run(['-p', path.join(consumer, 'tsconfig.json')]);
  const errors = checked.out.split('\n').filter((l) => l.includes('error TS'));
  expect(errors).toHaveLength(1);
  expect(errors[0]).toMatch(/wrong\.ts\(2,\d+\): error TS2339: Property 'Later' does not exist/);
});
