/**
 * The image runs as a numeric UID with no passwd entry; with HOME unset too, `os.homedir()`
 * throws. CLI defaults (the state and CA directories) are computed while the commands are built,
 * so even `waypoint --version` died there. Needs root to run the child as such a UID.
 */
import { spawnSync } from 'node:child_process';
import path from 'node:path';
import { expect, test } from 'vitest';
import { VERSION } from '../../src/util/index.ts';

const ROOT = path.resolve(import.meta.dirname, '../..');
const NODE = path.join(ROOT, 'node_modules', '.bin', 'node');
const BIN = path.join(ROOT, 'bin', 'waypoint.js');
const isRoot = process.getuid?.() === 0;

test.skipIf(!isRoot)('--version and --help work as a UID without passwd entry and without HOME', () => {
  const env: NodeJS.ProcessEnv = { PATH: process.env.PATH };
  for (const args of [['--version'], ['run', '--help']]) {
    const r = spawnSync(NODE, [BIN, ...args], { env, uid: 48_213, gid: 48_213, encoding: 'utf8', timeout: 30_000 });
    expect(r.stderr, args.join(' ')).not.toMatch(/homedir|ENOENT|Error/);
    expect(r.status, args.join(' ')).toBe(0);
    if (args[0] === '--version') expect(r.stdout).toContain(VERSION);
  }
});
