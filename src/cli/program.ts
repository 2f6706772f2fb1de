/**
 * The `waypoint` command tree: `run` (the waypoint), `generate` (its Kubernetes objects), `ca`
 * (local mesh CA), `tunnel` and `inbound` (the two ztunnel roles), `demo` (everything together on
 * loopback). Every command has `--help`, ending with one example. Usage errors (unknown option,
 * missing mandatory option, bad option value) exit 2, commander's convention for what the shell
 * typed wrong; configuration and start-up errors exit 1 (main.ts).
 */
import { Command, CommanderError } from 'commander';
import { setLogLevel, VERSION } from '../util/index.ts';
import { caCommand } from './ca.ts';
import { demoCommand } from './demo.ts';
import { generateCommand } from './generate.ts';
import { loadtestCommand } from './loadtest.ts';
import { inboundCommand, tunnelCommand } from './roles.ts';
import { checkRunUsage, runCommand } from './run.ts';

/** Exit status of a usage error. */
export const USAGE_EXIT = 2;

/** One example per command, by its path under `waypoint` ('' is the program itself). */
const EXAMPLES: Record<string, string> = {
  '': 'waypoint demo',
  run: 'waypoint run --mesh mesh.yaml --config waypoint.yaml --drain-delay 5s --drain-timeout 20s',
  generate: 'waypoint generate --namespace demo | kubectl apply -f -',
  ca: 'waypoint ca init --dir ./ca',
  'ca init': 'waypoint ca init --dir ./ca --trust-domain cluster.local',
  'ca issue': 'waypoint ca issue --dir ./ca --spiffe spiffe://cluster.local/ns/demo/sa/client --out certs/client',
  tunnel: 'waypoint tunnel --listen 127.0.0.1:15001 --to 127.0.10.1:15008 --authority 127.0.10.100:80 --identity certs/client --ca ca/root-cert.pem',
  inbound: 'waypoint inbound --listen 127.0.10.11:15008 --identity certs/echo --ca ca/root-cert.pem --forward 127.0.0.1',
  demo: 'waypoint demo --listen 127.0.0.1:15001 --access-log /dev/stdout',
  loadtest: 'waypoint loadtest --waypoint 127.0.10.1:15008 --authority 127.0.10.100:80 --identity certs/client --ca ca/root-cert.pem --rate 1000 --duration 30s --json a.json --report a.html',
  'loadtest compare': 'waypoint loadtest compare envoy.json node.json --report compare.html',
};

/** `cmd` and every command under it, with their paths (`ca issue`). */
export function commandTree(cmd: Command, path = ''): { path: string; command: Command }[] {
  return [{ path, command: cmd }, ...cmd.commands.flatMap((c) => commandTree(c, path ? `${path} ${c.name()}` : c.name()))];
}

/** Option combinations commander cannot express, by command: checked before any action (a usage error). */
const USAGE_CHECKS: Readonly<Record<string, (cmd: Command) => void>> = { run: checkRunUsage };

/** The whole CLI, not yet parsed. Usage errors throw {@link CommanderError} (see {@link exitStatus}). */
export function buildProgram(): Command {
  const program = new Command('waypoint')
    .description('node-waypoint: an Istio-ambient waypoint proxy (HBONE in, L7 filter chain, HBONE out)')
    .version(VERSION, '-V, --version', 'print the version and exit')
    .option('--log-level <level>', 'trace, debug, info, warn, error', process.env.WAYPOINT_LOG_LEVEL ?? 'info')
    .hook('preAction', (cmd, action) => {
      USAGE_CHECKS[action.name()]?.(action);
      setLogLevel(cmd.opts().logLevel);
    })
    .showHelpAfterError();
  for (const c of [runCommand(), generateCommand(), caCommand(), tunnelCommand(), inboundCommand(), demoCommand(), loadtestCommand()]) program.addCommand(c);
  for (const { path, command } of commandTree(program)) {
    // Commands added with addCommand inherit no settings: each throws instead of exiting itself.
    command.exitOverride();
    const example = EXAMPLES[path];
    if (example) command.addHelpText('after', `\nExample:\n  $ ${example}\n`);
  }
  return program;
}

/** The exit status for an error out of `parseAsync`: commander's own (help, version: 0) or 2 for a usage error; undefined for anything else. */
export function exitStatus(err: unknown): number | undefined {
  if (!(err instanceof CommanderError)) return undefined;
  return err.exitCode === 0 ? 0 : USAGE_EXIT;
}
