#!/usr/bin/env node
// Entry point of the `waypoint` CLI. Plain JavaScript on purpose: it must run (and refuse
// clearly) on any Node before it loads TypeScript sources, which Node >= 24 runs natively
// by stripping types.
const major = Number(process.versions.node.split('.')[0]);
if (major < 24) {
  process.stderr.write(
    `waypoint: Node ${process.versions.node} is too old; node-waypoint needs Node 24 or newer.\n` +
      `Run it through npm so the project's pinned Node 24 is used: npm ci && npx waypoint --help\n`,
  );
  process.exit(1);
}
process.removeAllListeners('warning');
process.on('warning', (w) => {
  if (w.name !== 'ExperimentalWarning') process.stderr.write(`${w.name}: ${w.message}\n`);
});
await import('../src/cli/main.ts');
