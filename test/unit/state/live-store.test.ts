/**
 * MeshStore.live: a store over objects handed by a live source (the Kubernetes API). Bursts of
 * changes are compiled once; an invalid object is refused alone (its previous version stays in
 * force, the log names the object and field) while the rest is applied; an update that cannot
 * compile at all keeps the current snapshot.
 */
import { afterEach, describe, expect, test, vi } from 'vitest';

import { AUTHZ } from '../../../src/authz/index.ts';
import { MeshStore } from '../../../src/state/store.ts';
import type { MeshSnapshot } from '../../../src/state/types.ts';
import { ConfigError } from '../../../src/util/errors.ts';
import { sleep } from '../../helpers/servers.ts';
import { log } from '../../../src/util/log.ts';
import { served, type Doc } from '../../helpers/fake-kube.ts';
import { authorizationPolicy, namespace, pod, service, servicePort, toService, usesWaypoint, waypointGateway } from '../../helpers/mesh.ts';

const VIP = '127.0.93.100';
const SLEEP = 'spiffe://cluster.local/ns/demo/sa/sleep';

/** A mutable set of served objects, as an informer cache: unchanged objects keep their identity. */
class Objects {
  readonly #byKey = new Map<string, Doc>();
  #rv = 1;
  constructor(...docs: Doc[]) {
    for (const d of docs) this.put(d);
  }
  put(doc: Doc): void {
    const m = doc.metadata as Doc;
    this.#byKey.set(`${String(doc.kind)}/${String(m.namespace)}/${String(m.name)}`, served(doc, ++this.#rv));
  }
  remove(doc: Doc): void {
    const m = doc.metadata as Doc;
    this.#byKey.delete(`${String(doc.kind)}/${String(m.namespace)}/${String(m.name)}`);
  }
  list = (): readonly object[] => [...this.#byKey.values()];
}

const denyDelete = (name = 'deny-delete') => authorizationPolicy(name, { targetRefs: toService('web'), action: 'DENY', rules: [{ to: [{ operation: { methods: ['DELETE'] } }] }] }, { namespace: 'demo' });
/** The same policy with a field the AuthorizationPolicy schema refuses. */
const broken = (name = 'deny-delete') => authorizationPolicy(name, { targetRefs: toService('web'), action: 'DENY', rules: [{ to: [{ operation: { methods: 'DELETE' } }] }] }, { namespace: 'demo' });

function mesh(): Objects {
  return new Objects(
    waypointGateway('demo'),
    namespace('demo', usesWaypoint()),
    service({ name: 'web', namespace: 'demo', vip: VIP, ports: [servicePort('http', 80, 8080)] }),
    pod({ name: 'web-1', namespace: 'demo', labels: { app: 'web' }, ip: '127.0.93.11' }),
  );
}

const decide = (snap: MeshSnapshot, method: string) => snap.part(AUTHZ).forTarget(snap.resolveTarget(VIP, 80)!).http.evaluate({ principal: SLEEP, method, path: '/' }).decision;

/** Collect log.error / log.info messages. */
function logs(): { errors: string[]; infos: string[] } {
  const errors: string[] = [];
  const infos: string[] = [];
  vi.spyOn(log, 'error').mockImplementation(((o: unknown, msg?: string) => void errors.push(`${String(msg)} ${JSON.stringify(o)}`)) as typeof log.error);
  vi.spyOn(log, 'info').mockImplementation(((_o: unknown, msg?: string) => void infos.push(String(msg))) as typeof log.info);
  return { errors, infos };
}

let store: MeshStore | undefined;
afterEach(() => {
  store?.close();
  store = undefined;
  vi.restoreAllMocks();
});

const open = (objects: Objects, extra: Partial<Parameters<typeof MeshStore.live>[0]> = {}) =>
  MeshStore.live({ objects: objects.list, parts: [AUTHZ], debounceMs: 20, ...extra }).then((s) => (store = s));

describe('MeshStore.live', () => {
  test('a burst of changes is compiled once, after it settles', async () => {
    const objects = mesh();
    const s = await open(objects, { debounceMs: 300 });
    const versions: number[] = [];
    s.subscribe((next) => versions.push(next.version));
    expect(decide(s.current, 'DELETE')).toBe('ALLOW');
    // Changes 10 ms apart, well within the quiet period: one compile after the last.
    objects.put(denyDelete());
    const burst = [s.refresh()];
    for (const name of ['deny-delete-too', 'deny-delete-three']) {
      await sleep(10);
      objects.put(denyDelete(name));
      burst.push(s.refresh());
    }
    await Promise.all(burst);
    await sleep(600);
    expect(versions).toEqual([2]);
    expect(s.current.resources('AuthorizationPolicy').map((r) => r.name)).toEqual(['deny-delete', 'deny-delete-too', 'deny-delete-three']);
    expect(decide(s.current, 'DELETE')).toBe('DENY');
  });

  test('changes that never settle are still compiled, within maxDelayMs', async () => {
    const objects = mesh();
    const s = await open(objects, { debounceMs: 50, maxDelayMs: 100 });
    const versions: number[] = [];
    s.subscribe((next) => versions.push(next.version));
    const stop = Date.now() + 3000;
    while (Date.now() < stop && versions.length === 0) {
      objects.put(denyDelete(`p-${Date.now()}`));
      void s.refresh();
      await sleep(10);
    }
    expect(versions.length).toBeGreaterThan(0);
  });

  test('an invalid update of an object is refused alone: its previous version stays, the other changes apply', async () => {
    const { errors } = logs();
    const objects = mesh();
    objects.put(denyDelete());
    const s = await open(objects);
    expect(decide(s.current, 'DELETE')).toBe('DENY');

    objects.put(broken());
    objects.put(service({ name: 'api', namespace: 'demo', vip: '127.0.93.101', ports: [servicePort('http', 80)] }));
    await s.refresh();
    expect(s.current.version).toBe(2);
    expect(s.current.services.map((x) => x.name).sort()).toEqual(['api', 'web']);
    expect(decide(s.current, 'DELETE')).toBe('DENY');
    const refusal = errors.filter((e) => e.includes('AuthorizationPolicy/demo/deny-delete refused'));
    expect(refusal).toHaveLength(1);
    expect(refusal[0]).toMatch(/keeping its previous version/);
    expect(refusal[0]).toContain('"field":"spec.rules[0].to[0].operation.methods"');

    // Still broken: not compiled (nor logged) again when something else changes.
    objects.put(pod({ name: 'web-2', namespace: 'demo', labels: { app: 'web' }, ip: '127.0.93.12' }));
    await s.refresh();
    expect(s.current.workloads.map((w) => w.name)).toContain('web-2');
    expect(errors.filter((e) => e.includes('refused'))).toHaveLength(1);
    expect(decide(s.current, 'DELETE')).toBe('DENY');

    // Fixed: applied.
    objects.put(authorizationPolicy('deny-delete', { targetRefs: toService('web'), action: 'DENY', rules: [{ to: [{ operation: { methods: ['GET'] } }] }] }, { namespace: 'demo' }));
    await s.refresh();
    expect(decide(s.current, 'DELETE')).toBe('ALLOW');
    expect(decide(s.current, 'GET')).toBe('DENY');
  });

  test('a new invalid object is left out (nothing to keep) and picked up once fixed; the first compile too', async () => {
    const { errors } = logs();
    const objects = mesh();
    objects.put(broken('bad-from-start'));
    const s = await open(objects);
    expect(s.current.resources('AuthorizationPolicy')).toEqual([]);
    expect(errors.some((e) => e.includes('AuthorizationPolicy/demo/bad-from-start refused, leaving it out'))).toBe(true);
    objects.put(denyDelete('bad-from-start'));
    await s.refresh();
    expect(decide(s.current, 'DELETE')).toBe('DENY');
  });

  test('an update no single object explains (the waypoint Gateway deleted) keeps the current snapshot', async () => {
    const { errors } = logs();
    const objects = mesh();
    const s = await open(objects);
    objects.remove(waypointGateway('demo'));
    objects.put(denyDelete());
    await s.refresh();
    expect(s.current.version).toBe(1);
    expect(errors.some((e) => /mesh: update refused, keeping version 1: no Gateway with gatewayClassName istio-waypoint in the Kubernetes API/.test(e))).toBe(true);
    objects.put(waypointGateway('demo'));
    await s.refresh();
    expect(s.current.version).toBe(2);
    expect(decide(s.current, 'DELETE')).toBe('DENY');
  });

  test('accept can refuse an update; the refused objects are not taken as accepted', async () => {
    const { errors } = logs();
    const objects = mesh();
    let refuse = true;
    const s = await open(objects, { accept: () => (refuse ? 'not now' : undefined) });
    objects.put(denyDelete());
    await s.refresh();
    expect(s.current.version).toBe(1);
    expect(errors.some((e) => e.includes('mesh: update refused, keeping version 1: not now'))).toBe(true);
    // The refused policy never took effect: a broken version of it has nothing to fall back to.
    objects.put(broken());
    refuse = false;
    await s.refresh();
    expect(s.current.version).toBe(2);
    expect(decide(s.current, 'DELETE')).toBe('ALLOW');
    objects.put(denyDelete());
    await s.refresh();
    expect(decide(s.current, 'DELETE')).toBe('DENY');
  });

  test('the first compile throws a ConfigError when it cannot start at all; close stops refreshing', async () => {
    const objects = new Objects(namespace('demo'));
    await expect(MeshStore.live({ objects: objects.list })).rejects.toBeInstanceOf(ConfigError);
    const ok = mesh();
    const s = await open(ok);
    s.close();
    ok.put(denyDelete());
    await s.refresh();
    expect(s.current.version).toBe(1);
  });
});
