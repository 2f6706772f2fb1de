/**
 * Compiled parts (src/state/parts.ts): compiled once into every snapshot before the store
 * publishes it, read with `snapshot.part()`, published before subscribers are told; one invalid
 * part refuses the whole snapshot, at start and on reload.
 */
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, test, vi } from 'vitest';
import { AUTHZ, authzFor } from '../../../src/authz/index.ts';
import { ConfigError } from '../../../src/util/errors.ts';
import { ROUTES } from '../../../src/routing/index.ts';
import { compileMesh } from '../../../src/state/compile.ts';
import { definePart } from '../../../src/state/parts.ts';
import { MeshStore } from '../../../src/state/store.ts';
import type { MeshSnapshot } from '../../../src/state/types.ts';
import { log } from '../../../src/util/log.ts';
import { SHOP_WAYPOINT_YAML as GATEWAY, reviewsServiceYaml as service } from '../../helpers/mesh.ts';

/** An AuthorizationPolicy on the waypoint; `principal` `*(x` is a regex Envoy would refuse. */
const policy = (principal: string) => `---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: p, namespace: shop}
spec:
  targetRefs: [{group: gateway.networking.k8s.io, kind: Gateway, name: waypoint}]
  rules: [{from: [{source: {principals: ["${principal}"]}}]}]
`;

/** A part that counts its compiles and publications (and can be told to fail). */
function countingPart(name = 'counting') {
  const seen = { compiled: [] as number[], published: [] as number[], fail: undefined as string | undefined };
  const part = definePart<{ version: number }>(name, {
    compile: (s) => {
      if (seen.fail) throw new ConfigError(seen.fail, { object: 'Test/x' });
      seen.compiled.push(s.version);
      return { version: s.version };
    },
    publish: (v) => void seen.published.push(v.version),
    refusal: 'invalid test part',
  });
  return { part, seen };
}

let dir: string;
let store: MeshStore | undefined;
beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), 'wp-parts-'));
});
afterEach(async () => {
  store?.close();
  store = undefined;
  vi.restoreAllMocks();
  await rm(dir, { recursive: true, force: true });
});

describe('snapshot.part', () => {
  test('a lookup of what was compiled with the snapshot; parts listed earlier are readable; a part not compiled is a programming error', () => {
    const first = countingPart('first');
    const second = definePart<string>('second', { compile: (s: MeshSnapshot) => `after ${s.part(first.part).version}` });
    const snap = compileMesh({ text: GATEWAY, file: 'm.yaml', version: 7, parts: [first.part, second] });
    expect(snap.part(first.part)).toEqual({ version: 7 });
    expect(snap.part(first.part)).toBe(snap.part(first.part));
    expect(snap.part(second)).toBe('after 7');
    expect(first.seen.compiled).toEqual([7]);
    expect(() => snap.part(ROUTES)).toThrow(/version 7 was not compiled with the routes part/);
    // Reading the parts compiles nothing more.
    snap.part(first.part);
    expect(first.seen.compiled).toEqual([7]);
  });

  test('a binding (`with`) is read under the part it binds; a part listed twice or never bound is refused', () => {
    const unbound = definePart<number>('unbound');
    const bound = unbound.with({ compile: () => 42 });
    expect(compileMesh({ text: GATEWAY, file: 'm.yaml', parts: [bound] }).part(unbound)).toBe(42);
    expect(() => compileMesh({ text: GATEWAY, file: 'm.yaml', parts: [unbound] })).toThrow(/has no compiler/);
    expect(() => compileMesh({ text: GATEWAY, file: 'm.yaml', parts: [bound, unbound.with({ compile: () => 1 })] })).toThrow(/listed twice/);
  });
});

describe('the store compiles every part before it publishes', () => {
  test('fromText: compiled and published once', () => {
    const { part, seen } = countingPart();
    const s = MeshStore.fromText(GATEWAY, { parts: [part] });
    expect(s.current.part(part)).toEqual({ version: 1 });
    expect(seen).toMatchObject({ compiled: [1], published: [1] });
  });

  test('open: an invalid part stops the start with a ConfigError naming the file', async () => {
    const file = join(dir, 'mesh.yaml');
    await writeFile(file, GATEWAY + service('10.96.0.10') + policy('*(x'));
    const err = await MeshStore.open({ meshFile: file, parts: [AUTHZ] }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ConfigError);
    expect(String(err)).toMatch(new RegExp(`^${file}:\\d+: document 3: AuthorizationPolicy/shop/p: field spec.rules\\[0\\].from\\[0\\].source.principals\\[0\\]: `));
    // A part's error that names no file gets the mesh file's name.
    const { part, seen } = countingPart();
    seen.fail = 'broken';
    const err2 = await MeshStore.open({ meshFile: file, parts: [part] }).catch((e: unknown) => e);
    expect(String(err2)).toBe(`${file}: Test/x: broken`);
  });

  test('a reload with one invalid part is refused whole: nothing published, subscribers not told, the last good parts stay', async () => {
    const file = join(dir, 'mesh.yaml');
    await writeFile(file, GATEWAY + service('10.96.0.10') + policy('spiffe://cluster.local/ns/shop/sa/a'));
    const counting = countingPart();
    store = await MeshStore.open({ meshFile: file, parts: [counting.part, AUTHZ] });
    const good = store.current;
    const goodAuthz = authzFor(good);
    const listener = vi.fn();
    store.subscribe(listener);
    const errors: string[] = [];
    vi.spyOn(log, 'error').mockImplementation(((_o: unknown, msg?: string) => void errors.push(String(msg))) as typeof log.error);

    // The counting part compiles fine; the AuthorizationPolicy does not: the whole update is refused.
    await writeFile(file, GATEWAY + service('10.96.0.11') + policy('*(x'));
    await store.reload();
    expect(store.current).toBe(good);
    expect(authzFor(store.current)).toBe(goodAuthz);
    expect(store.current.resolveTarget('10.96.0.10', 9080)?.kind).toBe('service');
    expect(listener).not.toHaveBeenCalled();
    expect(counting.seen.published).toEqual([1]);
    expect(errors).toHaveLength(1);
    expect(errors[0]).toMatch(new RegExp(`^mesh: reload refused, keeping version 1: invalid authorization policy: ${file}:\\d+: document 3: AuthorizationPolicy/shop/p: field spec.rules`));

    // A part of our own refusing: its refusal reason.
    counting.seen.fail = 'no good';
    await writeFile(file, GATEWAY + service('10.96.0.12'));
    await store.reload();
    expect(errors[1]).toBe('mesh: reload refused, keeping version 1: invalid test part: Test/x: no good');
    expect(store.current).toBe(good);

    // Valid again: compiled once, published (before the subscribers are told), then told.
    counting.seen.fail = undefined;
    listener.mockImplementation((next: MeshSnapshot) => expect(counting.seen.published).toContain(next.version));
    await writeFile(file, GATEWAY + service('10.96.0.13'));
    await store.reload();
    expect(store.current.version).toBe(2);
    expect(store.current.part(counting.part)).toEqual({ version: 2 });
    expect(listener).toHaveBeenCalledTimes(1);
    expect(counting.seen.published).toEqual([1, 2]);
    expect(counting.seen.compiled.filter((v) => v === 2)).toHaveLength(2); // the refused attempt, then this one
  });

  test('an unchanged file (SIGHUP, a touch) is not compiled again: "mesh: unchanged, keeping version N"', async () => {
    const file = join(dir, 'mesh.yaml');
    const text = GATEWAY + service('10.96.0.10');
    await writeFile(file, text);
    const { part, seen } = countingPart();
    store = await MeshStore.open({ meshFile: file, parts: [part] });
    const infos: string[] = [];
    vi.spyOn(log, 'info').mockImplementation(((_o: unknown, msg?: string) => void infos.push(String(msg))) as typeof log.info);
    const listener = vi.fn();
    store.subscribe(listener);
    await writeFile(file, text);
    await store.reload();
    expect(infos).toEqual(['mesh: unchanged, keeping version 1']);
    expect(store.current.version).toBe(1);
    expect(listener).not.toHaveBeenCalled();
    expect(seen.compiled).toEqual([1]);
  });
});

describe('parts that load asynchronously before they compile', () => {
  /** A part whose `load` resolves (or rejects with `fail`) before its compile reads what it loaded. */
  function loadingPart() {
    const seen = { loaded: [] as number[], fail: undefined as string | undefined };
    const loaded = new WeakMap<MeshSnapshot, string>();
    const part = definePart<string>('loading', {
      load: (s) =>
        new Promise<void>((resolve, reject) =>
          setTimeout(() => {
            if (seen.fail) return reject(new ConfigError(seen.fail, { object: 'Test/load' }));
            seen.loaded.push(s.version);
            loaded.set(s, `loaded for ${s.version}`);
            resolve();
          }, 5),
        ),
      compile: (s) => loaded.get(s) ?? 'compiled without its load',
      refusal: 'invalid loading part',
    });
    return { part, seen };
  }

  test('the store waits for the load, then compiles; a synchronous compile refuses such a part', async () => {
    const file = join(dir, 'mesh.yaml');
    await writeFile(file, GATEWAY);
    const { part, seen } = loadingPart();
    store = await MeshStore.open({ meshFile: file, parts: [part] });
    expect(store.current.part(part)).toBe('loaded for 1');
    expect(seen.loaded).toEqual([1]);
    expect(() => compileMesh({ text: GATEWAY, file: 'm.yaml', parts: [part] })).toThrow(/waits for asynchronous work/);
  });

  test('a load that fails refuses the start and a reload, as a compile error does', async () => {
    const file = join(dir, 'mesh.yaml');
    await writeFile(file, GATEWAY);
    const { part, seen } = loadingPart();
    seen.fail = 'cannot load';
    const err = await MeshStore.open({ meshFile: file, parts: [part] }).catch((e: unknown) => e);
    expect(String(err)).toBe(`${file}: Test/load: cannot load`);
    seen.fail = undefined;
    store = await MeshStore.open({ meshFile: file, parts: [part] });
    const errors: string[] = [];
    vi.spyOn(log, 'error').mockImplementation(((_o: unknown, msg?: string) => void errors.push(String(msg))) as typeof log.error);
    seen.fail = 'still cannot';
    await writeFile(file, GATEWAY + service('10.96.0.10'));
    await store.reload();
    expect(errors).toEqual(['mesh: reload refused, keeping version 1: invalid loading part: Test/load: still cannot']);
    expect(store.current.version).toBe(1);
  });

  test('reload({ force: true }) compiles unchanged files again (SIGHUP: WaypointFilter modules may have changed)', async () => {
    const file = join(dir, 'mesh.yaml');
    await writeFile(file, GATEWAY);
    const { part, seen } = loadingPart();
    store = await MeshStore.open({ meshFile: file, parts: [part] });
    await store.reload();
    expect(store.current.version).toBe(1);
    await store.reload({ force: true });
    expect(store.current.version).toBe(2);
    expect(seen.loaded).toEqual([1, 2]);
  });
});
