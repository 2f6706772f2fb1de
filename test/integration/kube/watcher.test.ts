/**
 * KubeWatcher against a fake Kubernetes API server (HTTPS with its own CA, a bearer token, list
 * and chunked watch per resource path, resourceVersions, 410 Gone, 403, 404): every watched kind
 * is listed and watched, a dropped watch catches up from its resourceVersion (or the last
 * bookmark), an expired one relists and notices what was deleted meanwhile, a forbidden kind says
 * which RBAC rule is missing, a kind whose CRD is not installed is treated as empty.
 * Addresses: 127.0.94.x.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, test, vi } from 'vitest';

import { KubeWatcher, loadKubeConfig, WATCHED_KINDS } from '../../../src/kube/index.ts';
import { log } from '../../../src/util/log.ts';
import { FakeKube, resourceOf, type Doc } from '../../helpers/fake-kube.ts';
import { authorizationPolicy, meshConfig, namespace, networkPolicy, route, waypointGateway } from '../../helpers/mesh.ts';
import { eventually, within } from '../../helpers/servers.ts';

const HOST = '127.0.94.1';
const BACKOFF = { initialMs: 30, maxMs: 200, absentRetryMs: 150 };

let fake: FakeKube;
let dir: string;
let watcher: KubeWatcher | undefined;

beforeEach(async () => {
  fake = await FakeKube.start(HOST);
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'wp-kube-'));
});
afterEach(async () => {
  await watcher?.stop();
  watcher = undefined;
  await fake.close();
  fs.rmSync(dir, { recursive: true, force: true });
  vi.restoreAllMocks();
});

function start(): KubeWatcher {
  watcher = new KubeWatcher({ kubeConfig: loadKubeConfig(fake.kubeconfig(dir)), backoff: BACKOFF });
  watcher.start();
  return watcher;
}

const names = (w: KubeWatcher, kind?: string) =>
  w
    .objects()
    .filter((o) => kind === undefined || o.kind === kind)
    .map((o) => `${String(o.kind)}/${String(o.metadata?.namespace ?? '')}/${String(o.metadata?.name)}`);

/** One object of every watched kind. */
const ONE_OF_EACH: Doc[] = [
  authorizationPolicy('ap', { action: 'DENY', rules: [{}] }, { namespace: 'demo' }),
  { apiVersion: 'security.istio.io/v1', kind: 'RequestAuthentication', metadata: { name: 'ra', namespace: 'demo' }, spec: {} },
  { apiVersion: 'security.istio.io/v1', kind: 'PeerAuthentication', metadata: { name: 'pa', namespace: 'demo' }, spec: {} },
  { apiVersion: 'telemetry.istio.io/v1', kind: 'Telemetry', metadata: { name: 'tm', namespace: 'demo' }, spec: {} },
  { apiVersion: 'extensions.node-waypoint.dev/v1alpha1', kind: 'WaypointFilter', metadata: { name: 'wf', namespace: 'demo' }, spec: { filter: 'istio.fault' } },
  route('hr', 'demo', { rules: [] }),
  route('gr', 'demo', { rules: [] }, { kind: 'GRPCRoute' }),
  waypointGateway('demo'),
  { apiVersion: 'gateway.networking.k8s.io/v1', kind: 'GatewayClass', metadata: { name: 'istio-waypoint' }, spec: { controllerName: 'istio.io/mesh-controller' } },
  { apiVersion: 'networking.istio.io/v1', kind: 'DestinationRule', metadata: { name: 'dr', namespace: 'demo' }, spec: { host: 'web' } },
  { apiVersion: 'networking.istio.io/v1', kind: 'ServiceEntry', metadata: { name: 'se', namespace: 'demo' }, spec: { hosts: ['x.example'] } },
  { apiVersion: 'networking.istio.io/v1', kind: 'WorkloadEntry', metadata: { name: 'we', namespace: 'demo' }, spec: { address: '127.0.94.50' } },
  networkPolicy('np', 'demo', { podSelector: {} }),
  namespace('demo', { team: 'a' }),
  meshConfig({ trustDomain: 'cluster.local' }),
];

describe('list and watch', () => {
  test('every watched kind is listed, then watched with bookmarks; objects come back whole', async () => {
    expect(new Set(ONE_OF_EACH.map((d) => d.kind))).toEqual(new Set(WATCHED_KINDS.map((k) => k.kind)));
    for (const d of ONE_OF_EACH) fake.apply(d);
    // Another ConfigMap of istio-system, and an `istio` one elsewhere: not the MeshConfig.
    fake.apply({ apiVersion: 'v1', kind: 'ConfigMap', metadata: { name: 'other', namespace: 'istio-system' }, data: {} });
    fake.apply({ apiVersion: 'v1', kind: 'ConfigMap', metadata: { name: 'istio', namespace: 'demo' }, data: {} });
    const w = start();
    await within(w.whenSynced(), 10_000, 'synced');
    expect(w.synced).toBe(true);
    const listed = w.objects();
    expect(listed.map((o) => o.kind)).toEqual(WATCHED_KINDS.map((k) => k.kind));
    expect(names(w, 'ConfigMap')).toEqual(['ConfigMap/istio-system/istio']);
    // Built-in kinds are listed without apiVersion/kind: filled in; managedFields dropped.
    const ns = listed.find((o) => o.kind === 'Namespace')!;
    expect(ns.apiVersion).toBe('v1');
    expect(ns.metadata?.managedFields).toBeUndefined();
    expect(ns.metadata?.labels).toEqual({ team: 'a' });

    for (const k of WATCHED_KINDS) {
      const resource = k.group ? `${k.plural}.${k.group}` : k.plural;
      const watches = await eventually(() => (fake.requestsFor(resource, 'watch').length ? fake.requestsFor(resource, 'watch') : undefined), `a watch of ${resource}`);
      expect(watches[0].query.get('allowWatchBookmarks')).toBe('true');
      expect(Number(watches[0].query.get('resourceVersion'))).toBeGreaterThan(0);
    }
    const cm = fake.requestsFor('configmaps', 'watch')[0];
    expect(cm.path).toBe('/api/v1/namespaces/istio-system/configmaps');
    expect(cm.query.get('fieldSelector')).toBe('metadata.name=istio');
    expect(fake.requestsFor('configmaps', 'list')[0].query.get('fieldSelector')).toBe('metadata.name=istio');

    // Through the watch: one more object of every kind, and an update, and a delete.
    const changes = vi.fn();
    w.on('change', changes);
    for (const d of ONE_OF_EACH.filter((x) => x.kind !== 'ConfigMap' && x.kind !== 'GatewayClass')) {
      fake.apply({ ...d, metadata: { ...(d.metadata as Doc), name: `${String((d.metadata as Doc).name)}-2` } });
    }
    fake.apply(meshConfig({ trustDomain: 'example.org' }));
    fake.remove(ONE_OF_EACH[0]);
    await eventually(() => (names(w, 'Namespace').length === 2 && names(w, 'AuthorizationPolicy').join() === 'AuthorizationPolicy/demo/ap-2' ? true : undefined), 'watched changes');
    for (const k of WATCHED_KINDS.filter((x) => x.kind !== 'ConfigMap' && x.kind !== 'GatewayClass')) expect(names(w, k.kind).length, k.kind).toBe(k.kind === 'AuthorizationPolicy' ? 1 : 2);
    await eventually(() => ((w.objects().find((o) => o.kind === 'ConfigMap')?.data as Doc | undefined)?.mesh === 'trustDomain: example.org\n' ? true : undefined), 'the MeshConfig update');
    expect(changes).toHaveBeenCalled();
    // No relist for any of it.
    expect(fake.requestsFor('authorizationpolicies.security.istio.io', 'list')).toHaveLength(1);
  });

  test('a dropped watch is reopened from the last resourceVersion (or bookmark) and catches up', async () => {
    fake.apply(namespace('demo'));
    const w = start();
    await within(w.whenSynced(), 10_000, 'synced');
    const ap = 'authorizationpolicies.security.istio.io';
    await eventually(() => (fake.openWatches(ap) === 1 ? true : undefined), 'the policy watch');
    fake.apply(authorizationPolicy('seen', { action: 'DENY', rules: [{}] }, { namespace: 'demo' }));
    await eventually(() => (names(w, 'AuthorizationPolicy').length === 1 ? true : undefined), 'the first policy');
    // Other kinds changed meanwhile: the bookmark carries the newest resourceVersion.
    fake.apply(namespace('other'));
    fake.bookmark();
    const bookmarked = String(Number((fake.apply(namespace('third')).metadata as Doc).resourceVersion) - 1);
    await eventually(() => (names(w, 'Namespace').length === 3 ? true : undefined), 'namespaces');

    fake.dropWatches();
    // While the watch is away.
    fake.apply(authorizationPolicy('missed', { action: 'DENY', rules: [{}] }, { namespace: 'demo' }));
    await eventually(() => (names(w, 'AuthorizationPolicy').length === 2 ? true : undefined), 'the policy added while the watch was down', 10_000);
    const watches = fake.requestsFor(ap, 'watch');
    expect(watches.length).toBeGreaterThanOrEqual(2);
    expect(watches.at(-1)!.query.get('resourceVersion')).toBe(bookmarked);
    expect(fake.requestsFor(ap, 'list')).toHaveLength(1);
  });

  test('410 Gone relists, and what was deleted while away is deleted', async () => {
    fake.apply(namespace('demo'));
    const gone = fake.apply(authorizationPolicy('gone', { action: 'DENY', rules: [{}] }, { namespace: 'demo' }));
    fake.apply(authorizationPolicy('stays', { action: 'DENY', rules: [{}] }, { namespace: 'demo' }));
    const w = start();
    await within(w.whenSynced(), 10_000, 'synced');
    const ap = 'authorizationpolicies.security.istio.io';
    await eventually(() => (fake.openWatches(ap) === 1 ? true : undefined), 'the policy watch');
    const infos: string[] = [];
    vi.spyOn(log, 'info').mockImplementation(((_o: unknown, msg?: string) => void infos.push(String(msg))) as typeof log.info);
    const changes = vi.fn();
    w.on('change', changes);

    fake.dropWatches();
    fake.remove(gone);
    fake.compact();
    await eventually(() => (names(w, 'AuthorizationPolicy').join() === 'AuthorizationPolicy/demo/stays' ? true : undefined), 'the deletion noticed', 10_000);
    expect(fake.requestsFor(ap, 'list')).toHaveLength(2);
    expect(infos.some((m) => m.includes(`watch of ${ap} expired (410 Gone`))).toBe(true);
    await eventually(() => (changes.mock.calls.length > 0 ? true : undefined), 'a change signal');
  });
});

describe('failures', () => {
  test('403 on one kind: an error naming the kind and the missing RBAC rule; not synced until allowed', async () => {
    const errors: string[] = [];
    vi.spyOn(log, 'error').mockImplementation(((_o: unknown, msg?: string) => void errors.push(String(msg))) as typeof log.error);
    fake.forbid('authorizationpolicies.security.istio.io', 'list');
    const w = start();
    await eventually(() => (w.status().filter((s) => !s.synced).length === 1 ? true : undefined), 'every other kind synced');
    expect(w.synced).toBe(false);
    const forbidden = errors.filter((m) => m.includes('forbidden (403)'));
    expect(forbidden.length).toBeGreaterThanOrEqual(1);
    expect(forbidden.length).toBeLessThanOrEqual(2); // rate-limited, not one per retry
    expect(forbidden[0]).toContain('kube: list authorizationpolicies.security.istio.io forbidden (403)');
    expect(forbidden[0]).toContain('cannot list resource \\"authorizationpolicies\\" in API group \\"security.istio.io\\" at the cluster scope'.replaceAll('\\', ''));
    expect(forbidden[0]).toContain('{apiGroups: ["security.istio.io"], resources: ["authorizationpolicies"], verbs: ["get", "list", "watch"]}');
    expect(w.status().find((s) => s.kind === 'AuthorizationPolicy')?.error).toMatch(/^list failed: Forbidden/);

    fake.forbid('authorizationpolicies.security.istio.io', 'list', false);
    await within(w.whenSynced(), 10_000, 'synced once allowed');
    expect(w.status().find((s) => s.kind === 'AuthorizationPolicy')?.error).toBeUndefined();
  });

  test('a kind whose CRD is not installed (404) is logged once and treated as empty; installing it later is picked up', async () => {
    const warns: string[] = [];
    vi.spyOn(log, 'warn').mockImplementation(((_o: unknown, msg?: string) => void warns.push(String(msg))) as typeof log.warn);
    const grpc = resourceOf('gateway.networking.k8s.io/v1', 'GRPCRoute');
    fake.hide(grpc);
    const w = start();
    await within(w.whenSynced(), 10_000, 'synced without the CRD');
    expect(w.status().find((s) => s.kind === 'GRPCRoute')).toMatchObject({ synced: true, absent: true, objects: 0 });
    await eventually(() => (fake.requestsFor(grpc, 'list').length >= 3 ? true : undefined), 'lists again later');
    const notServed = warns.filter((m) => m.includes(`does not serve ${grpc}`));
    expect(notServed).toHaveLength(1);
    expect(notServed[0]).toContain('CustomResourceDefinition is not installed');

    fake.hide(grpc, false);
    fake.apply(route('gr', 'demo', { rules: [] }, { kind: 'GRPCRoute' }));
    await eventually(() => (names(w, 'GRPCRoute').length === 1 ? true : undefined), 'the GRPCRoute once served');
    expect(w.status().find((s) => s.kind === 'GRPCRoute')?.absent).toBe(false);
  });

  test('no configuration at all is a clear error, not an attempt at localhost:8080', () => {
    const env = { KUBECONFIG: process.env.KUBECONFIG, HOME: process.env.HOME };
    try {
      delete process.env.KUBECONFIG;
      process.env.HOME = dir;
      expect(() => loadKubeConfig()).toThrow(/no Kubernetes API configuration: not in a pod .*KUBECONFIG unset and no ~\/\.kube\/config/);
    } finally {
      if (env.KUBECONFIG === undefined) delete process.env.KUBECONFIG;
      else process.env.KUBECONFIG = env.KUBECONFIG;
      process.env.HOME = env.HOME;
    }
  });
});
