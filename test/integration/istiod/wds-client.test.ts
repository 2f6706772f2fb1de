/**
 * The delta ADS (WDS) client against a fake istiod on 127.0.72.x: the initial request (node,
 * type, wildcard), an ACK with each response's nonce, updates and removals as new immutable
 * states, a NACK naming the bad resources of a response whose good ones still apply (the bad
 * ones keep their previous state and version), and a dropped stream / a stopped istiod: the last
 * state is kept, the client reconnects with `initial_resource_versions` and catches up.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import type { MessageInitShape } from '@bufbuild/protobuf';
import { afterAll, afterEach, beforeAll, expect, test } from 'vitest';
import { TrustRootFiles } from '../../../src/identity/index.ts';
import { IstiodChannel, ipFromBytes, WdsClient, wdsProto, xdsNode, type WdsState } from '../../../src/istiod/index.ts';
import { FakeIstiod, ipBytes, wdsService, wdsWorkload } from '../../helpers/fake-istiod.ts';
import { IstiodPki } from '../../helpers/istiod-pki.ts';

let pki: IstiodPki;
let dir: string;
const cleanup: (() => unknown)[] = [];
beforeAll(async () => {
  pki = await IstiodPki.create();
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'wp-istiod-wds-'));
});
afterEach(async () => {
  for (const c of cleanup.splice(0).reverse()) await c();
});
afterAll(() => {
  pki.close();
  fs.rmSync(dir, { recursive: true, force: true });
});

const NODE = xdsNode({ instanceIp: '127.0.72.9', podName: 'waypoint-7d9f-abcde', podNamespace: 'apps', nodeName: 'node-1', metadata: { CLUSTER_ID: 'Kubernetes' } });

async function setup(host: string) {
  const istiod = await FakeIstiod.start({ pki, host, token: 'wds-token' });
  cleanup.push(() => istiod.stop());
  const tokenFile = path.join(dir, `token-${host}`);
  fs.writeFileSync(tokenFile, 'wds-token');
  const roots = await TrustRootFiles.open([pki.rootCertFile]);
  cleanup.push(() => roots.close());
  const channel = new IstiodChannel({ address: istiod.address, roots, tokenFile, clusterId: 'Kubernetes' });
  cleanup.push(() => channel.close());
  const client = new WdsClient({ channel, node: NODE, backoff: { initialMs: 50, maxMs: 200 } });
  cleanup.push(() => client.close());
  return { istiod, client };
}

const pod = (name: string, ip: string, extra: MessageInitShape<typeof wdsProto.WorkloadSchema> = {}, version?: string) =>
  wdsWorkload({ uid: `Kubernetes//Pod/apps/${name}`, name, namespace: 'apps', addresses: [ipBytes(ip)], tunnelProtocol: wdsProto.TunnelProtocolValue.HBONE, services: { 'apps/echo.apps.svc.cluster.local': { ports: [{ servicePort: 80, targetPort: 8080 }] } }, ...extra }, version);
const echo = wdsService({ name: 'echo', namespace: 'apps', hostname: 'echo.apps.svc.cluster.local', addresses: [{ address: ipBytes('10.96.0.10') }], ports: [{ servicePort: 80, targetPort: 8080 }] });

const ipsOf = (s: WdsState) => Object.fromEntries([...s.workloads].map(([k, w]) => [k, w.addresses.map((a) => ipFromBytes(a))]));

function nextUpdate(client: WdsClient, ms = 10_000): Promise<WdsState> {
  return new Promise((resolve, reject) => {
    const t = setTimeout(() => reject(new Error(`no 'update' within ${ms} ms`)), ms);
    client.once('update', (s) => {
      clearTimeout(t);
      resolve(s);
    });
  });
}

test('initial request, first sync, ACKs with nonces, updates and removals as new states', async () => {
  const { istiod, client } = await setup('127.0.72.1');
  istiod.push({ resources: [pod('a', '10.0.0.1'), pod('b', '10.0.0.2'), echo] });
  const synced = await client.start().whenSynced();
  expect(client.synced).toBe(true);
  expect(synced.version).toBe(1);
  expect(ipsOf(synced)).toEqual({ 'Kubernetes//Pod/apps/a': ['10.0.0.1'], 'Kubernetes//Pod/apps/b': ['10.0.0.2'] });
  expect([...synced.services.keys()]).toEqual(['apps/echo.apps.svc.cluster.local']);

  const s = istiod.streams[0];
  expect(s.authorization).toBe('Bearer wds-token');
  expect(s.initial).toMatchObject({
    typeUrl: 'type.googleapis.com/istio.workload.Address',
    resourceNamesSubscribe: [],
    initialResourceVersions: {},
    node: { id: 'waypoint~127.0.72.9~waypoint-7d9f-abcde.apps~apps.svc.cluster.local', metadata: { NAME: 'waypoint-7d9f-abcde', NAMESPACE: 'apps', INSTANCE_IPS: '127.0.72.9', NODE_NAME: 'node-1', CLUSTER_ID: 'Kubernetes' } },
  });
  await istiod.waitFor(() => s.acks.length === 1, 5_000, 'the first ACK');
  expect(s.acks[0]).toMatchObject({ responseNonce: 'n2', typeUrl: 'type.googleapis.com/istio.workload.Address' });
  expect(s.acks[0].errorDetail).toBeUndefined();

  // An update: a new immutable state; the old one is untouched.
  const updated = nextUpdate(client);
  const nonce = istiod.push({ resources: [pod('a', '10.0.0.11')] });
  const next = await updated;
  expect(next.version).toBe(2);
  expect(ipsOf(next)['Kubernetes//Pod/apps/a']).toEqual(['10.0.0.11']);
  expect(ipsOf(synced)['Kubernetes//Pod/apps/a']).toEqual(['10.0.0.1']);
  await istiod.waitFor(() => s.acks.length === 2, 5_000, 'the second ACK');
  expect(s.acks[1].responseNonce).toBe(nonce);

  // A removal.
  const removed = nextUpdate(client);
  istiod.push({ removed: ['Kubernetes//Pod/apps/b'] });
  expect(Object.keys(ipsOf(await removed))).toEqual(['Kubernetes//Pod/apps/a']);
  expect(client.stats).toMatchObject({ acks: 3, nacks: 0 });
});

test('a NACK names the bad resources; the good ones of the same response apply, the bad keep their previous state', async () => {
  const { istiod, client } = await setup('127.0.72.2');
  istiod.push({ resources: [pod('a', '10.0.0.1', {}, 'a1'), pod('b', '10.0.0.2', {}, 'b1')] });
  await client.start().whenSynced();
  const s = istiod.streams[0];
  const rejected = new Promise<string>((r) => client.once('rejected', r));
  const updated = nextUpdate(client);
  const bad = { ...pod('b', '10.0.0.2', {}, 'b2'), address: { type: { case: 'workload' as const, value: { uid: 'Kubernetes//Pod/apps/b', addresses: [new Uint8Array([10, 0, 0])] } } } };
  const nonce = istiod.push({
    resources: [
      pod('a', '10.0.0.21', {}, 'a2'),
      bad,
      { name: 'garbage', version: 'g1', raw: { value: new Uint8Array([0x0a, 0xff, 0xff]) } },
      { name: 'foreign', version: 'f1', raw: { value: new Uint8Array(), typeUrl: 'type.googleapis.com/istio.security.Authorization' } },
      pod('c', '10.0.0.3', {}, 'c1'),
    ],
  });
  const state = await updated;
  expect(ipsOf(state)).toEqual({ 'Kubernetes//Pod/apps/a': ['10.0.0.21'], 'Kubernetes//Pod/apps/b': ['10.0.0.2'], 'Kubernetes//Pod/apps/c': ['10.0.0.3'] });
  const detail = await rejected;
  await istiod.waitFor(() => s.acks.length === 2, 5_000, 'the NACK');
  const nack = s.acks[1];
  expect(nack.responseNonce).toBe(nonce);
  expect(nack.errorDetail?.code).toBe(13);
  expect(nack.errorDetail?.message).toBe(detail);
  expect(detail).toContain('Kubernetes//Pod/apps/b: an address is 3 bytes (an IP address is 4 or 16)');
  expect(detail).toContain('garbage: cannot be decoded');
  expect(detail).toContain('foreign: resource of type "type.googleapis.com/istio.security.Authorization", expected type.googleapis.com/istio.workload.Address');
  expect(detail).not.toContain('apps/a');
  expect(client.stats.nacks).toBe(1);

  // After a reconnect the refused resources are not claimed at their new version, so istiod resends them.
  istiod.dropStreams();
  await istiod.waitFor(() => istiod.streams.length === 2 && istiod.streams[1].initial !== undefined, 5_000, 'the reconnect');
  expect(istiod.streams[1].initial!.initialResourceVersions).toEqual({ 'Kubernetes//Pod/apps/a': 'a2', 'Kubernetes//Pod/apps/b': 'b1', 'Kubernetes//Pod/apps/c': 'c1' });
});

test('istiod away: the last state is kept, the client reconnects with initial_resource_versions and catches up', async () => {
  const { istiod, client } = await setup('127.0.72.3');
  istiod.push({ resources: [pod('a', '10.0.0.1', {}, 'a1'), pod('b', '10.0.0.2', {}, 'b1'), echo] });
  client.start();
  const synced = await client.whenSynced();
  await istiod.waitFor(() => client.connected, 5_000, 'connected');

  const down = new Promise<boolean>((r) => client.once('connection', r));
  await istiod.stop();
  expect(await down).toBe(false);
  await new Promise((r) => setTimeout(r, 300)); // a few failed reconnects
  expect(client.state).toBe(synced);
  expect(client.synced).toBe(true);

  // While it was away: b went, c came, a changed.
  istiod.resources.delete('Kubernetes//Pod/apps/b');
  const changes = [pod('a', '10.0.0.31', {}, 'a2'), pod('c', '10.0.0.3', {}, 'c1')];
  istiod.push({ resources: changes }); // no stream open: only the fake's state changes
  const caughtUp = nextUpdate(client);
  await istiod.restart();
  const state = await caughtUp;
  expect(ipsOf(state)).toEqual({ 'Kubernetes//Pod/apps/a': ['10.0.0.31'], 'Kubernetes//Pod/apps/c': ['10.0.0.3'] });
  expect(state.services.size).toBe(1);
  const again = istiod.streams[istiod.streams.length - 1];
  expect(again.initial!.initialResourceVersions).toEqual({ 'Kubernetes//Pod/apps/a': 'a1', 'Kubernetes//Pod/apps/b': 'b1', 'apps/echo.apps.svc.cluster.local': expect.any(String) });
  expect(again.initial!.node?.id).toBe(NODE.id);
  await istiod.waitFor(() => again.acks.length === 1, 5_000, 'the ACK after the reconnect');
  expect(client.stats.connects).toBeGreaterThanOrEqual(2);
});

test('a stream istiod refuses (bad token) is retried, never thrown; close stops it', async () => {
  const { istiod, client } = await setup('127.0.72.4');
  istiod.token = 'rotated-elsewhere';
  client.start();
  await istiod.waitFor(() => istiod.streams.length >= 2, 5_000, 'retries');
  expect(client.synced).toBe(false);
  istiod.token = 'wds-token';
  await client.whenSynced();
  const streams = istiod.streams.length;
  client.close();
  await new Promise((r) => setTimeout(r, 300));
  expect(istiod.streams.length).toBe(streams);
});

test('closed before the first sync: whenSynced rejects', async () => {
  const { istiod, client } = await setup('127.0.72.5');
  await istiod.stop();
  client.start();
  const synced = client.whenSynced();
  client.close();
  await expect(synced).rejects.toThrow('WDS client closed before the first sync');
});
