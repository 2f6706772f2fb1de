import { mkdtemp, readFile, rename, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, test, vi } from 'vitest';

import { ConfigError } from '../../../src/util/errors.ts';
import { MeshStore } from '../../../src/state/store.ts';
import type { MeshSnapshot } from '../../../src/state/types.ts';
import { log } from '../../../src/util/log.ts';
import { SHOP_WAYPOINT_YAML as GATEWAY, reviewsServiceYaml as service } from '../../helpers/mesh.ts';

const FIXTURE = new URL('../../fixtures/mesh/shop.yaml', import.meta.url).pathname;


/** Resolve with the first value `next()` produces, or fail after `ms`. */
function waitFor<T>(what: string, ms: number, arm: (done: (v: T) => void) => void): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`timed out after ${ms} ms waiting for ${what}`)), ms);
    arm((v) => {
      clearTimeout(timer);
      resolve(v);
    });
  });
}

const nextSnapshot = (store: MeshStore, ms = 5000) =>
  waitFor<{ next: MeshSnapshot; prev: MeshSnapshot }>('a new snapshot', ms, (done) => {
    const off = store.subscribe((next, prev) => {
      off();
      done({ next, prev });
    });
  });

let dir: string;
let store: MeshStore | undefined;

beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), 'wp-store-'));
});
afterEach(async () => {
  store?.close();
  store = undefined;
  vi.restoreAllMocks();
  await rm(dir, { recursive: true, force: true });
});

describe('MeshStore', () => {
  test('fromText builds a store that never reloads', async () => {
    const s = MeshStore.fromText(await readFile(FIXTURE, 'utf8'), { file: 'demo.yaml', clusterId: 'c1' });
    expect(s.current.version).toBe(1);
    expect(s.current.workloads[0].clusterId).toBe('c1');
    expect(s.current.workloads[0].uid.startsWith('c1//Pod/')).toBe(true);
    await s.reload();
    expect(s.current.version).toBe(1);
    expect(() => MeshStore.fromText('kind: [', { file: 'demo.yaml' })).toThrow(ConfigError);
  });

  test('watch: rewrite ⇒ new version; invalid ⇒ logged, kept; valid again ⇒ picked up', async () => {
    const file = join(dir, 'mesh.yaml');
    await writeFile(file, GATEWAY + service('10.96.0.10'));
    store = await MeshStore.open({ meshFile: file, watch: true, debounceMs: 30 });
    const first = store.current;
    expect(first.version).toBe(1);
    expect(first.resolveTarget('10.96.0.10', 9080)?.kind).toBe('service');

    // 1. a valid rewrite
    let arrived = nextSnapshot(store);
    await writeFile(file, GATEWAY + service('10.96.0.11'));
    const { next, prev } = await arrived;
    expect(prev).toBe(first);
    expect(next.version).toBe(2);
    expect(store.current).toBe(next);
    expect(next.resolveTarget('10.96.0.11', 9080)?.kind).toBe('service');
    expect(next.resolveTarget('10.96.0.10', 9080)).toBeUndefined();
    expect(first.resolveTarget('10.96.0.10', 9080)?.kind).toBe('service'); // old snapshot untouched

    // 2. an invalid write: error logged with the ConfigError text, snapshot kept
    const errors: string[] = [];
    // (an editor-style write may first be seen half-written; wait for the error about the bad IP)
    const logged = waitFor<void>('log.error about spec.clusterIP', 5000, (done) => {
      vi.spyOn(log, 'error').mockImplementation(((_obj: unknown, msg?: string) => {
        errors.push(String(msg));
        if (String(msg).includes('spec.clusterIP')) done();
      }) as typeof log.error);
    });
    const listener = vi.fn();
    const off = store.subscribe(listener);
    await writeFile(file, GATEWAY + service('10.96.0.999'));
    await logged;
    const last = errors[errors.length - 1];
    expect(last).toContain('mesh: reload refused, keeping version 2');
    expect(last).toContain(`${file}:13: document 2: Service/shop/reviews: field spec.clusterIP: "10.96.0.999" is not a valid IP address`);
    expect(store.current).toBe(next);
    expect(listener).not.toHaveBeenCalled();
    off();

    // 3. valid again
    arrived = nextSnapshot(store);
    await writeFile(file, GATEWAY + service('10.96.0.12'));
    const third = await arrived;
    expect(third.next.version).toBe(3);
    expect(third.prev).toBe(next);
    expect(store.current.resolveTarget('10.96.0.12', 9080)?.kind).toBe('service');
  });

  test('watch: replacing the file by rename is picked up', async () => {
    const file = join(dir, 'mesh.yaml');
    await writeFile(file, GATEWAY + service('10.96.0.10'));
    store = await MeshStore.open({ meshFile: file, watch: true, debounceMs: 30 });
    const arrived = nextSnapshot(store);
    const tmp = join(dir, '.mesh.yaml.swp');
    await writeFile(tmp, GATEWAY + service('10.96.0.20'));
    await rename(tmp, file);
    const { next } = await arrived;
    expect(next.version).toBe(2);
    expect(next.resolveTarget('10.96.0.20', 9080)?.kind).toBe('service');
  });

  test('watch: the MeshConfig file is watched too', async () => {
    const file = join(dir, 'mesh.yaml');
    const meshConfigFile = join(dir, 'meshconfig.yaml');
    await writeFile(file, GATEWAY + service('10.96.0.10'));
    await writeFile(meshConfigFile, 'trustDomain: one.example\n');
    store = await MeshStore.open({ meshFile: file, meshConfigFile, watch: true, debounceMs: 30 });
    expect(store.current.waypoint.identity).toBe('spiffe://one.example/ns/shop/sa/waypoint');
    const arrived = nextSnapshot(store);
    await writeFile(meshConfigFile, 'trustDomain: two.example\n');
    const { next } = await arrived;
    expect(next.meshConfig.trustDomain).toBe('two.example');
    expect(next.waypoint.identity).toBe('spiffe://two.example/ns/shop/sa/waypoint');
  });

  test('other files in the directory and unchanged rewrites do not publish', async () => {
    const file = join(dir, 'mesh.yaml');
    const text = GATEWAY + service('10.96.0.10');
    await writeFile(file, text);
    store = await MeshStore.open({ meshFile: file, watch: true, debounceMs: 30 });
    const listener = vi.fn();
    store.subscribe(listener);
    await writeFile(join(dir, 'unrelated.yaml'), 'kind: [');
    await writeFile(file, text);
    await new Promise((r) => setTimeout(r, 400));
    expect(listener).not.toHaveBeenCalled();
    expect(store.current.version).toBe(1);
  });

  test('close stops watching; unsubscribe stops notifications', async () => {
    const file = join(dir, 'mesh.yaml');
    await writeFile(file, GATEWAY + service('10.96.0.10'));
    store = await MeshStore.open({ meshFile: file, watch: true, debounceMs: 30 });
    const unsubscribed = vi.fn();
    store.subscribe(unsubscribed)();
    const arrived = nextSnapshot(store);
    await writeFile(file, GATEWAY + service('10.96.0.11'));
    await arrived;
    expect(unsubscribed).not.toHaveBeenCalled();

    store.close();
    await writeFile(file, GATEWAY + service('10.96.0.12'));
    await new Promise((r) => setTimeout(r, 400));
    expect(store.current.version).toBe(2);
    expect(store.current.resolveTarget('10.96.0.11', 9080)?.kind).toBe('service');
  });

  test('a throwing listener does not block the others', async () => {
    const file = join(dir, 'mesh.yaml');
    await writeFile(file, GATEWAY + service('10.96.0.10'));
    store = await MeshStore.open({ meshFile: file, watch: true, debounceMs: 30 });
    const errorSpy = vi.spyOn(log, 'error').mockImplementation((() => undefined) as typeof log.error);
    store.subscribe(() => {
      throw new Error('boom');
    });
    const arrived = nextSnapshot(store);
    await writeFile(file, GATEWAY + service('10.96.0.11'));
    expect((await arrived).next.version).toBe(2);
    expect(errorSpy).toHaveBeenCalledWith(expect.objectContaining({ err: expect.any(Error) }), 'mesh: snapshot listener threw');
  });
});
