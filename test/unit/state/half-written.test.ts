/**
 * A mesh file written in place, not renamed over (`cat > mesh.yaml`, an editor without atomic
 * saves), can be read half-written. The store never applies such a read: a reload a change
 * triggers reads once no file was modified for the settle window (1 s by mtime) and two reads a
 * quiet period apart agree, and an update refused as invalid (truncated YAML) is read again with
 * backoff until it changes, so the completed file is still picked up when no further change event
 * comes. The reads are observed through `node:fs/promises`, so a test can complete the file exactly
 * after the store has read the half of it.
 */
import { appendFile, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, expect, test, vi } from 'vitest';
import { MeshStore } from '../../../src/state/store.ts';
import type { MeshSnapshot } from '../../../src/state/types.ts';
import { log } from '../../../src/util/log.ts';
import { SHOP_WAYPOINT_YAML as GATEWAY } from '../../helpers/mesh.ts';

const reads = vi.hoisted(() => ({ onRead: undefined as ((path: string, text: string) => void) | undefined }));
vi.mock(import('node:fs/promises'), async (load) => {
  const m = await load();
  const readFile = (async (...args: Parameters<typeof m.readFile>) => {
    const content = await m.readFile(...args);
    reads.onRead?.(String(args[0]), String(content));
    return content;
  }) as typeof m.readFile;
  return { ...m, readFile, default: { ...m, readFile } };
});

const service = (name: string, ip: string) => `---
apiVersion: v1
kind: Service
metadata: {name: ${name}, namespace: shop}
spec: {clusterIP: ${ip}, ports: [{name: http, port: 9080}]}
`;
const HALF = GATEWAY + service('reviews', '10.96.0.10');
const FULL = HALF + service('ratings', '10.96.0.11');

/** Resolve when `store` publishes a snapshot that `ok` accepts; reject after `ms`. */
function published(store: MeshStore, ok: (s: MeshSnapshot) => boolean, ms = 5000): Promise<MeshSnapshot> {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`no such snapshot within ${ms} ms`)), ms);
    const off = store.subscribe((next) => {
      if (!ok(next)) return;
      clearTimeout(timer);
      off();
      resolve(next);
    });
  });
}

let dir: string;
let store: MeshStore | undefined;
beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), 'wp-half-'));
});
afterEach(async () => {
  reads.onRead = undefined;
  store?.close();
  store = undefined;
  vi.restoreAllMocks();
  await rm(dir, { recursive: true, force: true });
});

test('a valid prefix of the file (cut at a document) read during a pause of the writer is never applied', async () => {
  const file = join(dir, 'mesh.yaml');
  await writeFile(file, GATEWAY);
  store = await MeshStore.open({ meshFile: file, watch: true, debounceMs: 50 });
  const seen: number[] = [];
  store.subscribe((next) => void seen.push(next.services.length));
  // The writer pauses after the first service; it writes the rest just after the store read the half.
  let completed = false;
  reads.onRead = (path, text) => {
    if (path !== file || text !== HALF || completed) return;
    completed = true;
    writeFileSync(file, FULL);
  };
  const full = published(store, (s) => s.services.length === 2);
  await writeFile(file, HALF);
  await full;
  expect(completed).toBe(true);
  expect(seen).toEqual([2]);
});

test('truncated YAML is refused (the last snapshot stays) and read again after the quiet period: the completed file applies without another change event', async () => {
  const file = join(dir, 'mesh.yaml');
  await writeFile(file, GATEWAY);
  store = await MeshStore.open({ meshFile: file, debounceMs: 50 }); // not watched: no event will come
  const errors: string[] = [];
  vi.spyOn(log, 'error').mockImplementation(((_o: unknown, msg?: string) => void errors.push(String(msg))) as typeof log.error);
  await writeFile(file, `${FULL.slice(0, FULL.length - 30)}`); // cut inside the last document's flow mapping
  await store.reload();
  expect(errors).toHaveLength(1);
  expect(errors[0]).toMatch(/^mesh: reload refused, keeping version 1: .*YAML syntax error/);
  expect(store.current.version).toBe(1);
  const full = published(store, (s) => s.services.length === 2);
  await writeFile(file, FULL);
  expect((await full).version).toBe(2);
});

test('a writer pausing 250 ms mid-write (longer than two reads 100 ms apart) never gets its half applied', async () => {
  const file = join(dir, 'mesh.yaml');
  await writeFile(file, GATEWAY);
  store = await MeshStore.open({ meshFile: file, watch: true });
  const seen: number[] = [];
  store.subscribe((next) => void seen.push(next.services.length));
  const full = published(store, (s) => s.services.length === 2);
  // In place: truncate and write the first part, pause, then write the rest.
  await writeFile(file, HALF);
  await new Promise((r) => setTimeout(r, 250));
  await appendFile(file, FULL.slice(HALF.length));
  await full;
  expect(seen).toEqual([2]);
});

test('a refused update is read again with backoff until it changes: a file completed a second later, without a change event, applies', async () => {
  const file = join(dir, 'mesh.yaml');
  await writeFile(file, GATEWAY);
  store = await MeshStore.open({ meshFile: file, debounceMs: 50 }); // not watched: no event will come
  vi.spyOn(log, 'error').mockImplementation((() => {}) as typeof log.error);
  const info = vi.spyOn(log, 'info');
  let readsOfFile = 0;
  reads.onRead = (path) => void (path === file && readsOfFile++);
  await writeFile(file, FULL.slice(0, FULL.length - 30));
  await store.reload();
  expect(store.current.version).toBe(1);
  // Still invalid a second later: read again at growing intervals (50, 100, 200, 400 ms...), quietly.
  await new Promise((r) => setTimeout(r, 1000));
  expect(readsOfFile).toBeGreaterThanOrEqual(3);
  expect(readsOfFile).toBeLessThanOrEqual(6);
  expect(info.mock.calls.filter((c) => String(c[1]).startsWith('mesh: unchanged'))).toEqual([]);
  const full = published(store, (s) => s.services.length === 2, 10_000);
  await writeFile(file, FULL);
  expect((await full).version).toBe(2);
});
