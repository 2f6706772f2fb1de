/**
 * The README's command line says what the CLI does: the CLI table lists every option of every
 * command, and every command the README starts in the background writes its PID with `--pid-file`
 * (under `npx`/`npm exec` the PID of `&` is npm's, which does not forward signals).
 */
import fs from 'node:fs';
import path from 'node:path';
import type { Command } from 'commander';
import { expect, test } from 'vitest';
import { caCommand } from '../../../src/cli/ca.ts';
import { demoCommand } from '../../../src/cli/demo.ts';
import { inboundCommand, tunnelCommand } from '../../../src/cli/roles.ts';
import { runCommand } from '../../../src/cli/run.ts';

const README = fs.readFileSync(path.resolve(import.meta.dirname, '../../../README.md'), 'utf8');

/** Every command and subcommand, by its name as typed (`ca init`). */
function commands(): Map<string, Command> {
  const out = new Map<string, Command>();
  for (const c of [runCommand(), caCommand(), tunnelCommand(), inboundCommand(), demoCommand()]) {
    if (c.commands.length === 0) out.set(c.name(), c);
    for (const sub of c.commands) out.set(`${c.name()} ${sub.name()}`, sub);
  }
  return out;
}

test('the CLI table lists every option of every command', () => {
  const rows = README.split('\n').filter((l) => l.startsWith('| `waypoint '));
  const missing: string[] = [];
  for (const [name, cmd] of commands()) {
    const row = rows.find((r) => r.startsWith(`| \`waypoint ${name} `) || r.startsWith(`| \`waypoint ${name}\``));
    if (!row) {
      missing.push(`waypoint ${name}: no row`);
      continue;
    }
    const usage = row.split('`')[1];
    for (const o of cmd.options) if (o.long && !usage.includes(o.long)) missing.push(`waypoint ${name}: ${o.long}`);
  }
  expect(missing).toEqual([]);
});

test('every waypoint command the README starts in the background writes its PID (--pid-file)', () => {
  const blocks = [...README.matchAll(/```sh\n([\s\S]*?)```/g)].map((m) => m[1].replace(/\\\n\s*/g, ' '));
  const background = blocks.flatMap((b) => b.split('\n')).filter((l) => /^\s*(npx|npm exec( --)?|node_modules\/\.bin\/) ?waypoint (run|tunnel|inbound|demo)\b/.test(l) && /&\s*(#.*)?$/.test(l));
  expect(background.length).toBeGreaterThan(0);
  expect(background.filter((l) => !l.includes('--pid-file'))).toEqual([]);
});
