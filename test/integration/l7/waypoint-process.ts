/**
 * `waypoint run` as a process of its own on a test topology started with `startWaypoint: false`
 * (for what needs two event loops, or the real CLI's signal handling and exit).
 */
import { spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import type { TestTopology } from '../../helpers/topology.ts';

/** A running `waypoint run`: its output lines (with the time each arrived) and its exit. */
export interface WaypointProcess {
  readonly child: ChildProcess;
  readonly lines: { at: number; text: string }[];
  readonly exited: Promise<{ at: number; code: number | null }>;
}

/**
 * Start `waypoint run` on `127.0.<net>.1:15008` with `bootstrap` merged in and `args` added to its
 * command line; resolves once it logged "waypoint ready".
 */
export async function runWaypointProcess(topo: TestTopology, net: number, bootstrap: Record<string, unknown> = {}, args: readonly string[] = []): Promise<WaypointProcess> {
  const config = path.join(topo.dir, 'waypoint.json');
  const listeners = { hbone: `127.0.${net}.1:15008`, admin: `127.0.${net}.1:0`, readiness: '' };
  // No drain delay unless asked for: nothing here follows the waypoint's readiness.
  const drain = { delayMs: 0, ...(bootstrap.drain as object | undefined) };
  fs.writeFileSync(config, JSON.stringify({ listeners, upstream: { hbonePort: 15008 }, ...bootstrap, drain }));
  const bin = path.resolve(import.meta.dirname, '../../../bin/waypoint.js');
  const child = spawn(process.execPath, [bin, 'run', '--mesh', topo.meshFile, '--ca-dir', topo.caDir, '--config', config, ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
  const lines: { at: number; text: string }[] = [];
  const collect = (chunk: Buffer) => {
    for (const text of chunk.toString().split('\n')) if (text) lines.push({ at: performance.now(), text });
  };
  child.stdout!.on('data', collect);
  child.stderr!.on('data', collect);
  const exited = new Promise<{ at: number; code: number | null }>((r) => child.once('exit', (code) => r({ at: performance.now(), code })));
  const end = Date.now() + 15_000;
  while (!lines.some((l) => l.text.includes('waypoint ready'))) {
    if (Date.now() > end || child.exitCode !== null) {
      child.kill('SIGKILL');
      throw new Error(`waypoint did not start:\n${lines.map((l) => l.text).join('\n')}`);
    }
    await new Promise((r) => setTimeout(r, 20));
  }
  return { child, lines, exited };
}
