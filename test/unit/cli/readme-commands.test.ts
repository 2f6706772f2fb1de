/**
 * The README's command line says what the CLI does: the CLI table lists every option of every
 * command, and every command the README starts in the background writes its PID with `--pid-file`
 * (under `npx`/`npm exec` the PID of `&` is npm's, which does not forward signals).
 */
import fs from 'node:fs';
import path from 'node:path';
import type { Command } from 'commander';
import { expect, test } from 'vitest';
import { buildProgram, commandTree } from '../../../src/cli/program.ts';

const README = fs.readFileSync(path.resolve(import.meta.dirname, '../../../README.md'), 'utf8');
/** `waypoint loadtest` has its own page: the README row summarizes it, the page lists every flag. */
const LOADTEST_DOC = fs.readFileSync(path.resolve(import.meta.dirname, '../../../docs/loadtest.md'), 'utf8');

/** Every command and subcommand, by its name as typed (`ca init`). */
function commands(): Map<string, Command> {
  const out = new Map<string, Command>();
  // A command with subcommands (`ca`) has a row only when it has options of its own (`loadtest`).
  for (const { path, command } of commandTree(buildProgram())) if (path && (command.commands.length === 0 || command.options.length > 1)) out.set(path, command);
  return out;
}

test('the CLI table lists every option of every command', () => {
  const rows = README.split('\n').filter((l) => l.startsWith('| `waypoint '));
  const missing: string[] = [];
  for (const [name, cmd] of commands()) {
    const row = rows.find((r) => r.startsWith(`| \`waypoint ${name} `) || r.startsWith(`| \`waypoint ${name}\``) || r.includes(`\`waypoint ${name} `));
    if (!row) {
      missing.push(`waypoint ${name}: no row`);
      continue;
    }
    // The usage cell: every code span before the description (`run` has one per mode).
    const usage = row.split(' | ')[0];
    const doc = name.startsWith('loadtest') ? LOADTEST_DOC : usage;
    for (const o of cmd.options) if (o.long && o.long !== '--help' && !doc.includes(o.long)) missing.push(`waypoint ${name}: ${o.long}`);
  }
  expect(missing).toEqual([]);
});

test('every waypoint command the README starts in the background writes its PID (--pid-file)', () => {
  const blocks = [...README.matchAll(/```sh\n([\s\S]*?)```/g)].map((m) => m[1].replace(/\\\n\s*/g, ' '));
  const background = blocks.flatMap((b) => b.split('\n')).filter((l) => /^\s*(npx|npm exec( --)?|node_modules\/\.bin\/) ?waypoint (run|tunnel|inbound|demo)\b/.test(l) && /&\s*(#.*)?$/.test(l));
  expect(background.length).toBeGreaterThan(0);
  expect(background.filter((l) => !l.includes('--pid-file'))).toEqual([]);
});
