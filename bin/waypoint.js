#!/usr/bin/env node
// Entry point of the `waypoint` CLI. Plain JavaScript on purpose: it must run (and refuse
// clearly) on any Node before it loads TypeScript sources, which Node >= 24 runs natively
// by stripping types.
import { existsSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const major = Number(process.versions.node.split('.')[0]);
if (major < 24) {
  // `npm ci` in the clone installs the project's pinned Node 24 next to this file; name it exactly,
  // so a global install or a direct call works whatever `node` is first on PATH.
  const self = fileURLToPath(import.meta.url);
  const root = path.dirname(path.dirname(self));
  const pinned = path.join(root, 'node_modules', '.bin', 'node');
  const args = process.argv.slice(2).map((a) => (/^[\w@%+=:,./-]+$/.test(a) ? a : `'${a.replaceAll("'", "'\\''")}'`));
  const run = [pinned, self, ...args].join(' ');
  process.stderr.write(
    `waypoint: Node ${process.versions.node} is too old; node-waypoint needs Node 24 or newer.\n` +
      (existsSync(pinned)
        ? `Run it with the project's pinned Node 24:\n  ${run}\n`
        : `Install the project's pinned Node 24 first (cd ${root} && npm ci), then run:\n  ${run}\n`),
  );
  process.exit(1);
}
process.removeAllListeners('warning');
process.on('warning', (w) => {
  if (w.name !== 'ExperimentalWarning') process.stderr.write(`${w.name}: ${w.message}\n`);
});
await import('../src/cli/index.ts');
