/**
 * The cluster mesh: a live MeshStore over the objects of a (fake) Kubernetes API and the
 * workloads and services of a discovery source, refreshed by the watch. An AuthorizationPolicy
 * added through the watch starts denying; an invalid update of it is refused naming the object
 * and field while its previous version stays in force; the mesh waits, not ready, for its Gateway.
 * Addresses: 127.0.95.x.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, test, vi } from 'vitest';

import { AUTHZ } from '../../../src/authz/index.ts';
import { KubeWatcher, loadKubeConfig, openClusterMesh, type ClusterMesh } from '../../../src/kube/index.ts';
import { compileMesh } from '../../../src/state/compile.ts';
import type { DiscoveredMesh, MeshSnapshot } from '../../../src/state/types.ts';
import { log } from '../../../src/util/log.ts';
import { FakeKube, type Doc } from '../../helpers/fake-kube.ts';
import { authorizationPolicy, meshText, namespace, pod, service, servicePort, toService, usesWaypoint, waypointGateway } from '../../helpers/mesh.ts';
import { eventually, within } from '../../helpers/servers.ts';

const HOST = '127.0.95.1';
const VIP = '127.0.95.100';
const API_VIP = '127.0.95.101';
const SLEEP = 'spiffe://cluster.local/ns/demo/sa/sleep';

let fake: FakeKube;
let dir: string;
let watcher: KubeWatcher | undefined;
let mesh: ClusterMesh | undefined;

beforeEach(async () => {
  fake = await FakeKube.start(HOST);
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'wp-kube-mesh-'));
});
afterEach(async () => {
  mesh?.close();
  mesh = undefined;
  await watcher?.stop();
  watcher = undefined;
  await fake.close();
  fs.rmSync(dir, { recursive: true, force: true });
  vi.restoreAllMocks();
});

/** Workloads and services as istiod would push them: here, compiled from YAML; `withApi` adds a second service. */
function discovery(): DiscoveredMesh & { withApi: boolean } {
  const build = (withApi: boolean) =>
    compileMesh({
      text: meshText(
        waypointGateway('demo'),
        namespace('demo', usesWaypoint()),
        service({ name: 'web', namespace: 'demo', vip: VIP, ports: [servicePort('http', 80, 8080)] }),
        pod({ name: 'web-1', namespace: 'demo', labels: { app: 'web' }, ip: '127.0.95.11' }),
        ...(withApi ? [service({ name: 'api', namespace: 'demo', vip: API_VIP, ports: [servicePort('http', 80, 8080)], selector: { app: 'web' } })] : []),
      ),
      file: 'istiod.yaml',
    });
  const d = {
    withApi: false,
    resolve: () => {
      const snap = build(d.withApi);
      return { workloads: snap.workloads, services: snap.services };
    },
  };
  return d;
}

function start(): KubeWatcher {
  watcher = new KubeWatcher({ kubeConfig: loadKubeConfig(fake.kubeconfig(dir)), backoff: { initialMs: 30, maxMs: 200, absentRetryMs: 150 } });
  watcher.start();
  return watcher;
}

const decide = (snap: MeshSnapshot, method: string, vip = VIP) =>
  snap.part(AUTHZ).forTarget(snap.resolveTarget(vip, 80)!).http.evaluate({ principal: SLEEP, method, path: '/' }).decision;
const deny = (name: string, methods: unknown): Doc =>
  authorizationPolicy(name, { targetRefs: toService('web'), action: 'DENY', rules: [{ to: [{ operation: { methods } }] }] }, { namespace: 'demo' });

describe('openClusterMesh', () => {
  test('an AuthorizationPolicy added through the watch starts denying; deleted, it stops', async () => {
    fake.apply(waypointGateway('demo'));
    fake.apply(namespace('demo', usesWaypoint()));
    const w = start();
    mesh = await within(openClusterMesh({ watcher: w, discovered: discovery(), parts: [AUTHZ], debounceMs: 20 }), 10_000, 'the cluster mesh');
    const store = mesh.store;
    expect(store.current.waypoint.identity).toBe('spiffe://cluster.local/ns/demo/sa/waypoint');
    expect(decide(store.current, 'DELETE')).toBe('ALLOW');

    const policy = fake.apply(deny('deny-delete', ['DELETE']));
    await eventually(() => (decide(store.current, 'DELETE') === 'DENY' ? true : undefined), 'the policy in force');
    expect(decide(store.current, 'GET')).toBe('ALLOW');
    const version = store.current.version;
    expect(version).toBeGreaterThan(1);

    fake.remove(policy);
    await eventually(() => (decide(store.current, 'DELETE') === 'ALLOW' ? true : undefined), 'the policy gone');
  });

  test('an invalid update is refused naming namespace/name and field; the previous version stays in force', async () => {
    const errors: string[] = [];
    vi.spyOn(log, 'error').mockImplementation(((o: unknown, msg?: string) => void errors.push(`${String(msg)} ${JSON.stringify(o)}`)) as typeof log.error);
    fake.apply(waypointGateway('demo'));
    fake.apply(namespace('demo', usesWaypoint()));
    fake.apply(deny('deny-delete', ['DELETE']));
    const w = start();
    mesh = await within(openClusterMesh({ watcher: w, discovered: discovery(), parts: [AUTHZ], debounceMs: 20 }), 10_000, 'the cluster mesh');
    const store = mesh.store;
    expect(decide(store.current, 'DELETE')).toBe('DENY');

    fake.apply(deny('deny-delete', 'DELETE')); // methods must be a list
    fake.apply(deny('deny-put', ['PUT']));
    await eventually(() => (decide(store.current, 'PUT') === 'DENY' ? true : undefined), 'the valid change applied');
    expect(decide(store.current, 'DELETE')).toBe('DENY');
    const refusal = errors.find((e) => e.includes('AuthorizationPolicy/demo/deny-delete refused'));
    expect(refusal).toBeDefined();
    expect(refusal).toMatch(/keeping its previous version: invalid authorization policy: AuthorizationPolicy\/demo\/deny-delete: field spec\.rules\[0\]\.to\[0\]\.operation\.methods: /);
    expect(refusal).toContain('"field":"spec.rules[0].to[0].operation.methods"');
    expect(refusal).not.toMatch(/:\d+: /); // no file:line
  });

  test('waits, not ready, for its Gateway; follows istiod through refresh()', async () => {
    const errors: string[] = [];
    vi.spyOn(log, 'error').mockImplementation(((_o: unknown, msg?: string) => void errors.push(String(msg))) as typeof log.error);
    fake.apply(namespace('demo', usesWaypoint()));
    const w = start();
    const discovered = discovery();
    const opening = openClusterMesh({ watcher: w, discovered, parts: [AUTHZ], debounceMs: 20, retryMs: 60_000 });
    await eventually(() => (errors.some((m) => m.includes('mesh: cannot start from the Kubernetes API yet')) ? true : undefined), 'the wait logged');
    expect(errors.find((m) => m.includes('cannot start'))).toMatch(/no Gateway with gatewayClassName istio-waypoint in the Kubernetes API/);
    fake.apply(waypointGateway('demo'));
    mesh = await within(opening, 10_000, 'the mesh once the Gateway exists');
    expect(mesh.store.current.resolveTarget(API_VIP, 80)).toBeUndefined();

    discovered.withApi = true;
    await mesh.refresh();
    expect(mesh.store.current.resolveTarget(API_VIP, 80)?.kind).toBe('service');
  });

  test('an abort while waiting rejects', async () => {
    fake.apply(namespace('demo'));
    const w = start();
    const abort = new AbortController();
    const opening = openClusterMesh({ watcher: w, discovered: discovery(), signal: abort.signal });
    await within(w.whenSynced(), 10_000, 'synced');
    abort.abort(new Error('shutting down'));
    await expect(within(opening, 10_000, 'the aborted wait')).rejects.toThrow('shutting down');
  });
});
