/**
 * The size limit of the project's standards: no file of src/ or filters/ over 450 lines, and the
 * HTTP router (src/router/router.ts) at most 350 — past that a module is split by what it does.
 */
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { expect, test } from 'vitest';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const LIMIT = 450;
const LIMITS: Readonly<Record<string, number>> = { 'src/router/router.ts': 350 };

function sources(dir: string): string[] {
  return fs.readdirSync(path.join(ROOT, dir), { withFileTypes: true }).flatMap((e) => {
    const rel = `${dir}/${e.name}`;
    return e.isDirectory() ? sources(rel) : rel.endsWith('.ts') ? [rel] : [];
  });
}

const lines = (file: string): number => fs.readFileSync(path.join(ROOT, file), 'utf8').replace(/\n$/, '').split('\n').length;

test('no file of src/ or filters/ is over its line limit', () => {
  const files = [...sources('src'), ...sources('filters')];
  expect(files).toContain('src/router/router.ts');
  const over = files.flatMap((f) => {
    const n = lines(f);
    const max = LIMITS[f] ?? LIMIT;
    return n > max ? [`${f}: ${n} lines (limit ${max})`] : [];
  });
  expect(over).toEqual([]);
});
