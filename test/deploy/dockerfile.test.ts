/**
 * The image's rules, read from the Dockerfile (no container engine runs here): the base pinned to
 * the exact Node of the `node` devDependency, `npm ci --omit=dev`, only what runs copied (and a
 * .dockerignore allowlist to match), a numeric USER equal to the pod's, the pod's ports exposed, no
 * HEALTHCHECK, and a start command running `waypoint run --cluster` that can never create a local CA.
 */
import fs from 'node:fs';
import path from 'node:path';
import { expect, test } from 'vitest';
import { PORTS, PROXY_UID } from '../../src/deploy/index.ts';
import { ROOT } from './objects.ts';

interface Instruction {
  readonly op: string;
  readonly args: string;
}

/** Dockerfile instructions: comments dropped, continuation lines joined. */
function instructions(text: string): Instruction[] {
  const joined = text
    .split('\n')
    .filter((l) => !/^\s*#/.test(l))
    .join('\n')
    .replace(/\\\n/g, ' ');
  return joined
    .split('\n')
    .map((l) => l.trim())
    .filter(Boolean)
    .map((l) => {
      const [op, ...rest] = l.split(/\s+/);
      return { op: op.toUpperCase(), args: rest.join(' ') };
    });
}

/** An exec-form (JSON array) or shell-form command as words. */
function words(args: string): string[] {
  return args.startsWith('[') ? (JSON.parse(args) as string[]) : args.split(/\s+/);
}

const dockerfile = instructions(fs.readFileSync(path.join(ROOT, 'Dockerfile'), 'utf8'));
const all = (op: string) => dockerfile.filter((i) => i.op === op);
const pkg = JSON.parse(fs.readFileSync(path.join(ROOT, 'package.json'), 'utf8')) as { devDependencies: Record<string, string> };

test('every stage is based on the exact Node version the project pins (the `node` devDependency)', () => {
  const nodeVersion = pkg.devDependencies.node;
  expect(nodeVersion).toMatch(/^24\.\d+\.\d+$/);
  const froms = all('FROM');
  expect(froms.length).toBeGreaterThan(0);
  for (const f of froms) expect(f.args.split(/\s+/)[0]).toMatch(new RegExp(`^node:${nodeVersion.replaceAll('.', '\\.')}-[a-z0-9-]+$`));
});

test('runtime dependencies only: npm ci --omit=dev', () => {
  const npm = all('RUN').filter((r) => /\bnpm\b/.test(r.args));
  expect(npm.length).toBeGreaterThan(0);
  for (const r of npm) {
    expect(r.args).toMatch(/\bnpm ci\b/);
    expect(r.args).toMatch(/--omit=dev\b/);
  }
});

test('only what runs is copied, and .dockerignore lets nothing else into the build context', () => {
  const sources = all('COPY')
    .filter((c) => !c.args.startsWith('--from'))
    .flatMap((c) => c.args.split(/\s+/).slice(0, -1));
  const copied = new Set(sources.map((s) => s.replace(/\/$/, '')));
  expect([...copied].sort()).toEqual(['bin', 'filters', 'package-lock.json', 'package.json', 'src']);
  const ignore = fs
    .readFileSync(path.join(ROOT, '.dockerignore'), 'utf8')
    .split('\n')
    .map((l) => l.trim())
    .filter((l) => l && !l.startsWith('#'));
  expect(ignore[0], '.dockerignore starts by excluding everything').toBe('*');
  const allowed = ignore.filter((l) => l.startsWith('!')).map((l) => l.slice(1).replace(/\/$/, ''));
  expect(allowed.sort()).toEqual([...copied].sort());
  expect(ignore, 'no test files, even inside src/ or filters/').toContain('**/*.test.ts');
});

test('a numeric USER, the UID the Deployment runs as', () => {
  const users = all('USER');
  expect(users).toHaveLength(1);
  const [uid, gid] = users[0].args.split(':');
  expect(uid).toMatch(/^[1-9]\d*$/);
  expect(gid ?? uid).toMatch(/^[1-9]\d*$/);
  expect(Number(uid)).toBe(PROXY_UID);
  // After the last FROM, so the running stage has it.
  expect(dockerfile.lastIndexOf(users[0])).toBeGreaterThan(dockerfile.lastIndexOf(all('FROM').at(-1)!));
});

test("the pod's ports are exposed; no HEALTHCHECK (Kubernetes probes it)", () => {
  const exposed = all('EXPOSE').flatMap((e) => e.args.split(/\s+/).map((p) => Number(p.split('/')[0])));
  expect(exposed.sort()).toEqual(Object.values(PORTS).sort());
  expect(all('HEALTHCHECK')).toEqual([]);
});

test('the start command runs `waypoint run --cluster`, never a mesh file or a local CA', () => {
  const entrypoint = words(all('ENTRYPOINT').at(-1)?.args ?? '[]');
  const cmd = words(all('CMD').at(-1)?.args ?? '[]');
  const start = [...entrypoint, ...cmd];
  expect(start.slice(0, 2)).toEqual(['node', '/app/bin/waypoint.js']);
  expect(start.slice(2, 4)).toEqual(['run', '--cluster']);
  for (const w of start) expect(w).not.toMatch(/^(--mesh|--ca-dir|ca|demo)$/);
  expect(all('ENV').map((e) => e.args).join(' ')).not.toMatch(/WAYPOINT_STATE_DIR/);
});
