/**
 * `--concurrency`: the flag's parsing, and the default from a cgroup v2 `cpu.max` (the smallest
 * quota on the path to the root, rounded up) read from a fake cgroup tree.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, expect, test } from 'vitest';
import { cgroupCpuQuota, parseConcurrency } from '../../../src/workers/concurrency.ts';

const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'wp-cgroup-'));
afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

function tree(self: string, files: Record<string, string>): { root: string; proc: string } {
  const root = fs.mkdtempSync(path.join(dir, 'root-'));
  for (const [rel, text] of Object.entries(files)) {
    fs.mkdirSync(path.join(root, path.dirname(rel)), { recursive: true });
    fs.writeFileSync(path.join(root, rel), text);
  }
  const proc = path.join(root, 'proc-cgroup');
  fs.writeFileSync(proc, `0::${self}\n`);
  return { root, proc };
}

test('the quota is quota / period of cpu.max, the smallest along the path to the root', () => {
  const t = tree('/kubepods/pod1/c1', { 'kubepods/cpu.max': '400000 100000\n', 'kubepods/pod1/cpu.max': '150000 100000\n', 'kubepods/pod1/c1/cpu.max': 'max 100000\n' });
  expect(cgroupCpuQuota(t.root, t.proc)).toBe(1.5);
});

test('no limit anywhere, no cgroup v2 line, or no file: undefined (the cores are used)', () => {
  const t = tree('/a', { 'a/cpu.max': 'max 100000\n', 'cpu.max': 'max 100000\n' });
  expect(cgroupCpuQuota(t.root, t.proc)).toBeUndefined();
  const v1 = path.join(dir, 'v1');
  fs.writeFileSync(v1, '4:memory:/x\n1:cpu:/\n');
  expect(cgroupCpuQuota(dir, v1)).toBeUndefined();
  expect(cgroupCpuQuota(dir, path.join(dir, 'missing'))).toBeUndefined();
});

test('--concurrency takes a whole number of at least 1', () => {
  expect(parseConcurrency('2')).toBe(2);
  expect(parseConcurrency('1')).toBe(1);
  for (const bad of ['0', '-1', '1.5', 'two', '']) expect(() => parseConcurrency(bad), bad).toThrow(/--concurrency .*at least 1/);
});
