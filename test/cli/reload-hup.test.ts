/**
 * `kill -HUP` on `waypoint run`: the mesh file is read again; unchanged, it is not reloaded
 * (`mesh: unchanged, keeping version N`), changed, it is (`mesh: reloaded`, version N+1).
 * Addresses: 127.0.221.x.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, expect, test } from 'vitest';
import { topologyMesh } from '../../src/demo/topology.ts';

const BIN = path.resolve(import.meta.dirname, '../../bin/waypoint.js');
let dir: string;
let child: ChildProcess | undefined;

beforeAll(() => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'wp-cli-hup-'));
});
afterAll(async () => {
  if (child && child.exitCode === null) {
    const exited = new Promise((r) => child!.once('exit', r));
    child.kill('SIGTERM');
    await exited;
  }
  fs.rmSync(dir, { recursive: true, force: true });
});

test('SIGHUP with an unchanged mesh file keeps the version; after a change it reloads', { timeout: 30_000 }, async () => {
  const meshFile = path.join(dir, 'mesh.yaml');
  const mesh = topologyMesh({ dir, waypointIp: '127.0.221.1', vip: '127.0.221.100', podIps: ['127.0.221.11'], clientIp: '127.0.221.50', tunnelListen: '', admin: '' });
  fs.writeFileSync(meshFile, mesh);
  child = spawn(process.execPath, [BIN, 'run', '--mesh', meshFile, '--hbone', '127.0.221.1:0', '--admin', '127.0.221.1:0', '--readiness', '', '--drain-delay', '0'], {
    env: { ...process.env, WAYPOINT_STATE_DIR: path.join(dir, 'state'), WAYPOINT_LOG_LEVEL: 'info' },
  });
  let out = '';
  child.stdout!.on('data', (c: Buffer) => (out += c.toString()));
  child.stderr!.on('data', (c: Buffer) => (out += c.toString()));
  const lines = (text: string) => out.split('\n').filter((l) => l.includes(text)).length;
  await expect.poll(() => out, { timeout: 15_000 }).toMatch(/admin: +http:\/\/127\.0\.221\.1:/);

  child.kill('SIGHUP');
  await expect.poll(() => lines('mesh: unchanged, keeping version 1'), { timeout: 10_000 }).toBe(1);
  expect(lines('mesh: reloaded')).toBe(0);

  // A change (the file is watched too: whichever comes first reloads, the other finds it unchanged).
  fs.writeFileSync(meshFile, `${mesh}---\napiVersion: v1\nkind: Service\nmetadata: { name: more, namespace: demo }\nspec: { clusterIP: "127.0.221.101", ports: [{ name: http, port: 80 }] }\n`);
  child.kill('SIGHUP');
  await expect.poll(() => lines('mesh: reloaded'), { timeout: 10_000 }).toBe(1);
  expect(out).toMatch(/"version":2,"services":2,"workloads":2,"msg":"mesh: reloaded"/);

  // The other trigger of that change (watcher or signal) found it unchanged; one more SIGHUP does too.
  await expect.poll(() => lines('mesh: unchanged, keeping version 2'), { timeout: 10_000 }).toBeGreaterThanOrEqual(1);
  const unchanged = lines('mesh: unchanged, keeping version 2');
  child.kill('SIGHUP');
  await expect.poll(() => lines('mesh: unchanged, keeping version 2'), { timeout: 10_000 }).toBeGreaterThan(unchanged);
  expect(lines('mesh: reloaded')).toBe(1);
  expect(child.exitCode).toBeNull();
});
