/**
 * The `waypoint` CLI: `run` (the waypoint), `ca` (local mesh CA), `tunnel` and `inbound` (the two
 * ztunnel roles), `demo` (everything together on loopback). Every command has `--help`.
 * Configuration errors print one line `waypoint: <file>:<line>: ...` and exit 1.
 */
import { Command } from 'commander';
import { ConfigError, setLogLevel } from '../util/index.ts';
import { caCommand } from './ca.ts';
import { demoCommand } from './demo.ts';
import { inboundCommand, tunnelCommand } from './roles.ts';
import { runCommand } from './run.ts';

const program = new Command('waypoint')
  .description('node-waypoint: an Istio-ambient waypoint proxy (HBONE in, L7 filter chain, HBONE out)')
  .option('--log-level <level>', 'trace, debug, info, warn, error', process.env.WAYPOINT_LOG_LEVEL ?? 'info')
  .hook('preAction', (cmd) => setLogLevel(cmd.opts().logLevel))
  .showHelpAfterError();

program.addCommand(runCommand());
program.addCommand(caCommand());
program.addCommand(tunnelCommand());
program.addCommand(inboundCommand());
program.addCommand(demoCommand());
program.addCommand((await import('./loadtest.ts')).loadtestCommand());

try {
  await program.parseAsync(process.argv);
} catch (err) {
  fail(err);
}

/** Print a user-facing error line and exit 1. */
export function fail(err: unknown): never {
  const text = err instanceof ConfigError ? err.toString() : err instanceof Error ? err.message : String(err);
  process.stderr.write(`waypoint: ${text}\n`);
  process.exit(1);
}
