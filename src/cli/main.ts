/**
 * Runs the `waypoint` CLI (program.ts) on `process.argv`. Usage errors exit 2 (commander has
 * printed them); configuration errors print one line `waypoint: <file>:<line>: ...` and exit 1.
 */
import { ConfigError } from '../util/index.ts';
import { buildProgram, exitStatus } from './program.ts';

try {
  await buildProgram().parseAsync(process.argv);
} catch (err) {
  const status = exitStatus(err);
  if (status !== undefined) process.exit(status);
  fail(err);
}

/** Print a user-facing error line and exit 1. */
function fail(err: unknown): never {
  const text = err instanceof ConfigError ? err.toString() : err instanceof Error ? err.message : String(err);
  process.stderr.write(`waypoint: ${text}\n`);
  process.exit(1);
}
