import { copyFile, mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';

import { normalizeIp, parseHostPort } from '../../../src/state/ip.ts';
import { MeshStore } from '../../../src/state/store.ts';
import type { MeshSnapshot, Service, Workload } from '../../../src/state/types.ts';

const FIXTURE = new URL('../../fixtures/mesh/shop.yaml', import.meta.url).pathname;

let dir: string;
let snap: MeshSnapshot;

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'wp-state-'));
  const file = join(dir, 'mesh.yaml');
  await copyFile(FIXTURE, file);
  const store = await MeshStore.open({ meshFile: file });
  snap = store.current;
  store.close();
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

const service = (ns: string, name: string): Service => {
  const s = snap.services.find((x) => x.namespace === ns && x.name === name);
  if (!s) throw new Error(`no service ${ns}/${name}`);
  return s;
};
const workload = (name: string): Workload => {
  const w = snap.workloads.find((x) => x.name === name);
  if (!w) throw new Error(`no workload ${name}`);
  return w;
};

describe('waypoint and mesh config', () => {
  test('waypoint identity comes from the Gateway and the ConfigMap trust domain', () => {
    expect(snap.version).toBe(1);
    expect(snap.waypoint).toEqual({
      namespace: 'shop',
      name: 'waypoint',
      serviceAccount: 'waypoint',
      identity: 'spiffe://example.org/ns/shop/sa/waypoint',
      waypointFor: 'service',
    });
  });

  test('mesh config from the istio ConfigMap', () => {
    expect(snap.meshConfig.trustDomain).toBe('example.org');
    expect(snap.meshConfig.trustDomainAliases).toEqual(['old.example.org']);
    expect(snap.meshConfig.rootNamespace).toBe('istio-system');
    expect(snap.meshConfig.raw.defaultConfig).toEqual({ discoveryAddress: 'istiod.istio-system.svc:15012' });
  });

  test('namespaces keep their labels, plus the kubernetes.io/metadata.name label the API server sets', () => {
    expect(snap.namespaces.get('shop')).toEqual({
      'istio.io/dataplane-mode': 'ambient',
      'istio.io/use-waypoint': 'waypoint',
      'kubernetes.io/metadata.name': 'shop',
    });
    expect(snap.namespaces.get('other')).toEqual({ 'kubernetes.io/metadata.name': 'other' });
  });
});

describe('resolveTarget', () => {
  test('served Service VIP and port', () => {
    const t = snap.resolveTarget('10.96.0.10', 9080);
    expect(t?.kind).toBe('service');
    if (t?.kind !== 'service') return;
    expect(t.service.name).toBe('reviews');
    expect(t.port).toMatchObject({ name: 'http', port: 9080, targetPort: 9080, protocol: 'HTTP' });
  });

  test('port not declared by the service ⇒ undefined', () => {
    expect(snap.resolveTarget('10.96.0.10', 9999)).toBeUndefined();
  });

  test('IPv4-mapped IPv6 authority resolves like the IPv4 VIP', () => {
    const hp = parseHostPort('[::ffff:10.96.0.10]:9090')!;
    const t = snap.resolveTarget(hp.ip, hp.port);
    expect(t?.kind === 'service' && t.port.name).toBe('grpc-api');
  });

  test('IPv6 and IPv4 cluster IPs of a dual-stack Service', () => {
    const v6 = snap.resolveTarget(normalizeIp('FD00:10:96:0::20')!, 8080);
    const v4 = snap.resolveTarget('10.96.0.20', 8080);
    expect(v6?.kind === 'service' && v6.service.name).toBe('ratings');
    expect(v4?.kind === 'service' && v4.service.name).toBe('ratings');
    expect(v6?.kind === 'service' && v6.port.protocol).toBe('HTTP2');
  });

  test('service opted out with use-waypoint: none is not served although its namespace opts in', () => {
    expect(service('shop', 'legacy').servedByThisWaypoint).toBe(false);
    expect(snap.resolveTarget('10.96.0.30', 7000)).toBeUndefined();
  });

  test('cross-namespace attachment with use-waypoint-namespace', () => {
    expect(service('other', 'db').servedByThisWaypoint).toBe(true);
    const t = snap.resolveTarget('10.96.1.5', 5432);
    expect(t?.kind === 'service' && t.port.protocol).toBe('TCP');
  });

  test('service in a namespace without attachment is not served', () => {
    expect(service('other', 'cache').servedByThisWaypoint).toBe(false);
    expect(snap.resolveTarget('10.96.1.6', 6379)).toBeUndefined();
  });

  test('ServiceEntry VIP', () => {
    const t = snap.resolveTarget('240.240.0.1', 80);
    expect(t?.kind === 'service' && t.service.hostname).toBe('payments.example.com');
  });

  test('pod address is not a target for a waypoint-for service waypoint', () => {
    expect(snap.resolveTarget('10.1.0.1', 9080)).toBeUndefined();
  });
});

describe('endpoints', () => {
  test('ready pods only; named targetPort resolves per pod', () => {
    const reviews = service('shop', 'reviews');
    expect(reviews.endpoints.get(9080)!.map((e) => e.authority)).toEqual(['10.1.0.1:9080', '10.1.0.2:9080']);
    // targetPort "grpc": only v1 names a grpc container port (v3 does, but is not ready)
    const grpc = reviews.endpoints.get(9090)!;
    expect(grpc.map((e) => [e.workload.name, e.targetPort, e.authority])).toEqual([
      ['reviews-v1-7d9f8c6b5-abcde', 7070, '10.1.0.1:7070'],
    ]);
    expect(grpc[0].tunnel).toBe('HBONE');
  });

  test('IPv6 endpoint address is bracketed in the authority', () => {
    const eps = service('shop', 'ratings').endpoints.get(8080)!;
    expect(eps.map((e) => [e.address, e.authority])).toEqual([['fd00:1::20', '[fd00:1::20]:8080']]);
  });

  test('pod with dataplane-mode none is reached without HBONE', () => {
    const [ep] = service('shop', 'legacy').endpoints.get(7000)!;
    expect(ep.tunnel).toBe('NONE');
    expect(workload('legacy').tunnelProtocol).toBe('NONE');
  });

  test('ServiceEntry selects the WorkloadEntry; WorkloadEntry ports override by port name', () => {
    const payments = service('shop', 'payments');
    expect(payments.kind).toBe('ServiceEntry');
    expect(payments.endpoints.get(80)!.map((e) => e.authority)).toEqual(['10.2.0.5:18080']);
    expect(payments.endpoints.get(443)!.map((e) => e.authority)).toEqual(['10.2.0.5:443']);
  });

  test('ServiceEntry inline endpoints become workloads and endpoints', () => {
    const ledger = service('shop', 'ledger');
    expect(ledger.endpoints.get(5000)!.map((e) => e.authority)).toEqual(['10.3.0.1:5000', '10.3.0.2:5001']);
    const w = snap.workloadByIp('10.3.0.1')!;
    expect(w.uid).toBe('Kubernetes/networking.istio.io/ServiceEntry/shop/ledger/10.3.0.1');
    expect(w.identity).toBe('spiffe://example.org/ns/shop/sa/ledger');
    expect(w.canonicalName).toBe('ledger');
    expect(snap.workloadByIp('10.3.0.2')!.serviceAccount).toBe('default');
  });

  test('serviceByHost', () => {
    expect(snap.serviceByHost('shop', 'reviews.shop.svc.cluster.local')?.name).toBe('reviews');
    expect(snap.serviceByHost('shop', 'payments.example.com')?.name).toBe('payments');
    expect(snap.serviceByHost('other', 'reviews.shop.svc.cluster.local')).toBeUndefined();
  });
});

describe('workloads', () => {
  test('Deployment pod: uid, identity, canonical name/revision, workload name', () => {
    expect(workload('reviews-v1-7d9f8c6b5-abcde')).toMatchObject({
      uid: 'Kubernetes//Pod/shop/reviews-v1-7d9f8c6b5-abcde',
      kind: 'Pod',
      namespace: 'shop',
      addresses: ['10.1.0.1'],
      serviceAccount: 'bookinfo-reviews',
      trustDomain: 'example.org',
      identity: 'spiffe://example.org/ns/shop/sa/bookinfo-reviews',
      workloadName: 'reviews-v1',
      workloadType: 'deployment',
      canonicalName: 'reviews',
      canonicalRevision: 'v1',
      clusterId: 'Kubernetes',
      network: '',
      node: 'node-a',
      healthy: true,
      namedPorts: { http: 9080, grpc: 7070 },
      servedByThisWaypoint: false,
    });
  });

  test('locality labels and not-ready pods', () => {
    expect(workload('reviews-v2-5b8f9d7c4-fghij')).toMatchObject({ region: 'eu-west1', zone: 'eu-west1-b' });
    const v3 = workload('reviews-v3-6c7d8e9f0-klmno');
    expect(v3.healthy).toBe(false);
    expect(v3.serviceAccount).toBe('default');
    expect(v3.workloadName).toBe('reviews-v3-6c7d8e9f0-klmno');
    expect(v3.workloadType).toBe('pod');
  });

  test('StatefulSet pod with app.kubernetes.io/name, dual-stack addresses normalised', () => {
    expect(workload('ratings-0')).toMatchObject({
      addresses: ['10.1.0.20', 'fd00:1::20'],
      workloadName: 'ratings',
      workloadType: 'pod',
      canonicalName: 'ratings',
      canonicalRevision: 'latest',
    });
    expect(snap.workloadByIp('fd00:1::20')?.name).toBe('ratings-0');
  });

  test('CronJob pod', () => {
    expect(workload('report-28934560-xyz12')).toMatchObject({ workloadName: 'report', workloadType: 'cronjob', canonicalName: 'report' });
  });

  test('WorkloadEntry', () => {
    expect(workload('payments-vm')).toMatchObject({
      uid: 'Kubernetes/networking.istio.io/WorkloadEntry/shop/payments-vm',
      kind: 'WorkloadEntry',
      identity: 'spiffe://example.org/ns/shop/sa/payments',
      network: 'vm-network',
      region: 'us-east',
      zone: 'us-east-1a',
      namedPorts: { http: 18080 },
      workloadType: 'pod',
      canonicalName: 'payments',
    });
  });

  test('workloadByIp covers unhealthy and unserved workloads', () => {
    expect(snap.workloadByIp('10.1.0.3')?.name).toBe('reviews-v3-6c7d8e9f0-klmno');
    expect(snap.workloadByIp('10.9.9.9')).toBeUndefined();
  });
});

describe('kept resources and immutability', () => {
  test('policies and routes are kept, built-in kinds skipped', () => {
    expect(snap.resources('AuthorizationPolicy').map((r) => `${r.namespace}/${r.name}`)).toEqual(['shop/reviews-viewer']);
    expect(snap.resources('HTTPRoute')).toHaveLength(1);
    expect(snap.resources('Gateway').map((r) => r.name)).toEqual(['waypoint']);
    expect(snap.resources('Deployment')).toHaveLength(0);
    expect(snap.resources('ConfigMap')).toHaveLength(0);
    expect(snap.resources('Service')).toHaveLength(0);
  });

  test('everything is frozen', () => {
    expect(() => (snap.services as Service[]).push(snap.services[0])).toThrow(TypeError);
    expect(() => {
      (snap.workloads[0].labels as Record<string, string>).app = 'x';
    }).toThrow(TypeError);
    const eps = service('shop', 'reviews').endpoints as Map<number, never>;
    expect(() => eps.set(1, [] as never)).toThrow(TypeError);
    expect(() => eps.delete(9080)).toThrow(TypeError);
    expect(() => (snap.namespaces as Map<string, never>).clear()).toThrow(TypeError);
    expect(() => {
      (snap.resources('AuthorizationPolicy')[0].object as Record<string, unknown>).spec = {};
    }).toThrow(TypeError);
    expect(service('shop', 'reviews').endpoints.get(9080)).toHaveLength(2);
  });

  test('toJSON is a readable dump', () => {
    const dump = JSON.parse(JSON.stringify(snap)) as {
      version: number;
      waypoint: { identity: string };
      services: { name: string; endpoints: Record<string, { authority: string; workload: string }[]> }[];
      workloads: unknown[];
      resources: Record<string, number>;
      meshConfig: { trustDomain: string };
    };
    expect(dump.version).toBe(1);
    expect(dump.waypoint.identity).toBe('spiffe://example.org/ns/shop/sa/waypoint');
    expect(dump.meshConfig.trustDomain).toBe('example.org');
    const reviews = dump.services.find((s) => s.name === 'reviews')!;
    expect(reviews.endpoints['9090']).toEqual([
      expect.objectContaining({ authority: '10.1.0.1:7070', workload: 'Kubernetes//Pod/shop/reviews-v1-7d9f8c6b5-abcde' }),
    ]);
    expect(dump.workloads).toHaveLength(snap.workloads.length);
    expect(dump.resources).toEqual({ Gateway: 1, AuthorizationPolicy: 1, HTTPRoute: 1 });
  });
});
