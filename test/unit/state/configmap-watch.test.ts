/**
 * A mesh file mounted from a Kubernetes ConfigMap: `mesh.yaml -> ..data/mesh.yaml`, and an update
 * swaps the `..data` symlink to a new timestamped directory. The watcher must see that.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, expect, test } from 'vitest';
import { topologyMesh } from '../../../src/demo/topology.ts';
import { MeshStore } from '../../../src/state/store.ts';

const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'wp-cm-'));
afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

const mesh = (vip: string) => topologyMesh({ dir, waypointIp: '127.0.33.1', vip, podIps: ['127.0.33.11'], clientIp: '127.0.33.50', tunnelListen: '', admin: '' });

function writeVersion(name: string, vip: string): void {
  fs.mkdirSync(path.join(dir, name));
  fs.writeFileSync(path.join(dir, name, 'mesh.yaml'), mesh(vip));
}

test('swapping the ..data symlink of a mounted ConfigMap reloads the mesh', async () => {
  writeVersion('..v1', '127.0.33.100');
  fs.symlinkSync('..v1', path.join(dir, '..data'));
  fs.symlinkSync('..data/mesh.yaml', path.join(dir, 'mesh.yaml'));
  const store = await MeshStore.open({ meshFile: path.join(dir, 'mesh.yaml'), watch: true, debounceMs: 20 });
  try {
    expect(store.current.resolveTarget('127.0.33.100', 80)?.kind).toBe('service');
    const updated = new Promise<void>((resolve) => store.subscribe(() => resolve()));
    // What the kubelet does: new directory, new symlink, atomic rename over ..data.
    writeVersion('..v2', '127.0.33.101');
    fs.symlinkSync('..v2', path.join(dir, '..data_tmp'));
    fs.renameSync(path.join(dir, '..data_tmp'), path.join(dir, '..data'));
    await updated;
    expect(store.current.resolveTarget('127.0.33.101', 80)?.kind).toBe('service');
    expect(store.current.resolveTarget('127.0.33.100', 80)).toBeUndefined();
  } finally {
    store.close();
  }
});
