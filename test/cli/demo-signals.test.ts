/**
 * The demo like `waypoint run`: `kill -HUP` re-reads the mesh file (the waypoint's store, then the
 * roles') instead of ending the process, and a load is logged once, by the waypoint's store (the
 * roles' store beside it is quiet). Addresses: 127.0.15.x (the topology of the second test).
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterEach, expect, test, vi } from 'vitest';
import { log } from '../../src/util/log.ts';
import { startTestTopology } from '../helpers/topology.ts';

const started = vi.hoisted(() => ({ reloads: [] as string[] }));
vi.mock(import('../../src/demo/index.ts'), async (load) => {
  const m = await load();
  const store = (name: string) => ({ current: { waypoint: { identity: 'spiffe://cluster.local/ns/demo/sa/waypoint' } }, reload: async () => void started.reloads.push(name) });
  const address = { address: '127.0.15.1', port: 1, family: 'IPv4' };
  // A topology that binds nothing: the demo's own addresses (127.0.10.x) are fixed.
  const startTopology = async () => ({
    waypoint: { mesh: store('waypoint'), addresses: { hbone: address, admin: address } },
    tunnel: { address },
    roleMesh: store('roles'),
    meshFile: '/dev/null',
    caDir: '/dev/null',
    close: async () => {},
  });
  return { ...m, startTopology: startTopology as unknown as typeof m.startTopology };
});

const signals = ['SIGHUP', 'SIGTERM', 'SIGINT'] as const;
const before = new Map(signals.map((s) => [s, process.listeners(s)]));
afterEach(() => {
  for (const s of signals) for (const l of process.listeners(s)) if (!before.get(s)!.includes(l)) process.off(s, l);
  vi.restoreAllMocks();
});

test('SIGHUP makes the demo re-read its mesh file (the waypoint, then the roles) and keep running', async () => {
  const { demoCommand } = await import('../../src/cli/demo.ts');
  vi.spyOn(process.stdout, 'write').mockImplementation(() => true);
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'wp-demo-hup-'));
  try {
    await demoCommand().parseAsync(['--dir', dir, '--listen', '127.0.15.50:0', '--admin', '127.0.15.1:0', '--access-log', ''], { from: 'user' });
    const exit = vi.spyOn(process, 'exit').mockImplementation((() => undefined) as never);
    expect(process.listenerCount('SIGHUP')).toBeGreaterThan(before.get('SIGHUP')!.length);
    process.emit('SIGHUP', 'SIGHUP');
    await vi.waitFor(() => expect(started.reloads).toEqual(['waypoint', 'roles']));
    expect(exit).not.toHaveBeenCalled();
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

test('a topology with its waypoint logs "mesh: loaded" once (the roles\' store is quiet)', async () => {
  const info = vi.spyOn(log, 'info');
  const topo = await startTestTopology(15);
  try {
    expect(info.mock.calls.filter((c) => c[1] === 'mesh: loaded')).toHaveLength(1);
  } finally {
    await topo.close();
  }
});
