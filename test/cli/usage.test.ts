/**
 * The CLI's conventions: `waypoint --version`; usage errors (unknown option or command, missing
 * mandatory option, bad option value) exit 2 as commander's convention has it, while configuration
 * errors exit 1 (cli.test.ts); every command's `--help` ends with exactly one example of that
 * command; `waypoint generate` prints the deploy objects. In process through buildProgram(), and
 * through the real bin for the exit codes.
 */
import { spawnSync } from 'node:child_process';
import path from 'node:path';
import type { Command } from 'commander';
import { describe, expect, test } from 'vitest';
import { buildProgram, commandTree, exitStatus, USAGE_EXIT } from '../../src/cli/program.ts';
import { baseOptions, generateYaml } from '../../src/deploy/index.ts';
import { VERSION } from '../../src/util/index.ts';

const ROOT = path.resolve(import.meta.dirname, '../..');
const NODE = path.join(ROOT, 'node_modules', '.bin', 'node');
const BIN = path.join(ROOT, 'bin', 'waypoint.js');

/** A program whose output is captured instead of written. */
function quietProgram(): { program: Command; out: string[]; err: string[] } {
  const program = buildProgram();
  const out: string[] = [];
  const err: string[] = [];
  for (const { command } of commandTree(program)) command.configureOutput({ writeOut: (s) => out.push(s), writeErr: (s) => err.push(s) });
  return { program, out, err };
}

/** The exit status parsing `args` ends with (undefined when an action would run). */
async function statusOf(args: string[]): Promise<{ status: number | undefined; err: string }> {
  const { program, err } = quietProgram();
  // Never run an action: a usage error must stop before it.
  for (const { command } of commandTree(program)) command.hook('preAction', () => Promise.reject(new Error('action reached')));
  const status = await program.parseAsync(args, { from: 'user' }).then(
    () => undefined,
    (e: unknown) => exitStatus(e) ?? -1,
  );
  return { status, err: err.join('') };
}

describe('usage errors exit 2', () => {
  const cases = [
    { args: ['run', '--mesh', 'm.yaml', '--bogus'], why: /unknown option '--bogus'/ },
    { args: ['frobnicate'], why: /unknown command 'frobnicate'/ },
    { args: ['generate'], why: /required option '-n, --namespace <ns>' not specified/ },
    { args: ['generate', '-n', 'Bad_NS'], why: /argument 'Bad_NS' is invalid\. a namespace is a DNS-1123 label/ },
    { args: ['generate', '-n', 'demo', '--name', 'none'], why: /"none" is reserved/ },
    { args: ['run', '--mesh', 'm.yaml', '--drain-delay', 'soon'], why: /'--drain-delay <time>' argument 'soon' is invalid/ },
    { args: ['run'], why: /one of --mesh <file> \(standalone\) or --cluster \(in a Kubernetes cluster\) is required/ },
    { args: ['run', '--mesh', 'm.yaml', '--cluster'], why: /option '--mesh <file>' cannot be used with option '--cluster'/ },
    { args: ['run', '--cluster', '--ca-dir', 'ca'], why: /option '--ca-dir <dir>' cannot be used with option '--cluster'/ },
    { args: ['run', '--mesh', 'm.yaml', '--token-file', 't'], why: /option '--token-file <file>' cannot be used with option '--mesh <file>'/ },
    { args: ['ca', 'issue', '--out', 'x'], why: /required option '--spiffe <id>'/ },
    { args: [], why: /Usage: waypoint/ },
  ];
  test.each(cases)('waypoint $args', async ({ args, why }) => {
    const r = await statusOf(args);
    expect(r.status).toBe(USAGE_EXIT);
    expect(r.err).toMatch(why);
  });

  test('--help and --version are no errors (exit 0)', async () => {
    expect((await statusOf(['--version'])).status).toBe(0);
    expect((await statusOf(['run', '--help'])).status).toBe(0);
  });

  test('through the bin: exit 2 with the message on stderr; --version prints the package version', () => {
    const bad = spawnSync(NODE, [BIN, 'generate', '--namespace', 'Bad_NS'], { encoding: 'utf8', timeout: 20_000 });
    expect(bad.status).toBe(2);
    expect(bad.stderr).toMatch(/argument 'Bad_NS' is invalid/);
    const version = spawnSync(NODE, [BIN, '--version'], { encoding: 'utf8', timeout: 20_000 });
    expect(version.status).toBe(0);
    expect(version.stdout).toBe(`${VERSION}\n`);
  });
});

test('every command\'s --help ends with one example of that command', () => {
  const { program, out } = quietProgram();
  const tree = commandTree(program);
  expect(tree.map((c) => c.path)).toEqual(expect.arrayContaining(['', 'run', 'generate', 'ca', 'ca init', 'ca issue', 'tunnel', 'inbound', 'demo']));
  for (const { path: p, command } of tree) {
    out.length = 0;
    command.outputHelp();
    const help = out.join('');
    const lines = help.trimEnd().split('\n');
    expect(help.match(/^Example:$/gm), p).toHaveLength(1);
    expect(lines.at(-2), p).toBe('Example:');
    expect(lines.at(-1), p).toMatch(new RegExp(`^  \\$ waypoint${p ? ` ${p}` : ''}(\\s|$)`));
  }
});

test('`waypoint generate -n demo` prints the objects of src/deploy for namespace demo', () => {
  const r = spawnSync(NODE, [BIN, 'generate', '-n', 'demo'], { encoding: 'utf8', timeout: 20_000 });
  expect(r.status).toBe(0);
  expect(r.stdout).toBe(generateYaml({ ...baseOptions(VERSION), namespace: 'demo' }, VERSION));
  expect(r.stdout).toContain('kind: Gateway');
});
