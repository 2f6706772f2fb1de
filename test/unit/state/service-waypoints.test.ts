/**
 * Chained waypoints in the mesh state: which services go through another waypoint, where that
 * waypoint is reached, and the endpoints a route's pick then sees (instances on 15008, CONNECT
 * `:authority` the service VIP:port).
 */
import { describe, expect, test, vi } from 'vitest';

import { compileMesh } from '../../../src/state/compile.ts';
import { upstreamEndpoints } from '../../../src/state/service-waypoints.ts';
import type { MeshSnapshot, Service } from '../../../src/state/types.ts';
import { caught } from '../../helpers/config-error.ts';
import { log } from '../../../src/util/log.ts';

const gateway = (ns: string, name: string, labels: Record<string, string> = {}, status = '') => `
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: { name: ${name}, namespace: ${ns}, labels: ${JSON.stringify(labels)} }
spec:
  gatewayClassName: istio-waypoint
  listeners: [{ name: mesh, port: 15008, protocol: HBONE }]
${status}`;

/** A waypoint's Service and instance Pods, as Istio's gateway controller makes them. */
const waypointPods = (ns: string, name: string, vip: string, ips: string[], ready = true) => [
  `apiVersion: v1
kind: Service
metadata: { name: ${name}, namespace: ${ns}, labels: { gateway.istio.io/managed: istio.io-mesh-controller } }
spec:
  clusterIP: ${vip}
  selector: { gateway.networking.k8s.io/gateway-name: ${name} }
  ports: [{ name: mesh, port: 15008 }]`,
  ...ips.map(
    (ip, i) => `apiVersion: v1
kind: Pod
metadata: { name: ${name}-${i}, namespace: ${ns}, labels: { gateway.networking.k8s.io/gateway-name: ${name} } }
spec: { serviceAccountName: ${name} }
status:
  podIP: ${ip}
  conditions: [{ type: Ready, status: "${ready ? 'True' : 'False'}" }]`,
  ),
];

const service = (ns: string, name: string, vip: string, labels: Record<string, string> = {}, ports = '[{ name: http, port: 80, targetPort: 8080 }, { name: grpc, port: 9090 }, { name: dns, port: 53, protocol: UDP }]') => `
apiVersion: v1
kind: Service
metadata: { name: ${name}, namespace: ${ns}, labels: ${JSON.stringify(labels)} }
spec:
  clusterIP: ${vip}
  selector: { app: ${name} }
  ports: ${ports}`;

const pod = (ns: string, app: string, ip: string) => `
apiVersion: v1
kind: Pod
metadata: { name: ${app}-1, namespace: ${ns}, labels: { app: ${app} } }
spec: { serviceAccountName: ${app} }
status: { podIP: ${ip} }`;

const namespace = (name: string, labels: Record<string, string> = {}) => `
apiVersion: v1
kind: Namespace
metadata: { name: ${name}, labels: ${JSON.stringify(labels)} }`;

function compile(docs: string[], gatewayName = 'apps/ours'): MeshSnapshot {
  return compileMesh({ text: docs.join('\n---\n'), file: 'chain.yaml', gateway: gatewayName });
}

const svc = (snap: MeshSnapshot, ns: string, name: string): Service => {
  const s = snap.services.find((x) => x.namespace === ns && x.name === name);
  if (!s) throw new Error(`no service ${ns}/${name}`);
  return s;
};

describe('a service bound to another waypoint', () => {
  const snap = compile([
    namespace('apps', { 'istio.io/use-waypoint': 'ours' }),
    namespace('infra'),
    gateway('apps', 'ours'),
    gateway('infra', 'other'),
    ...waypointPods('infra', 'other', '10.96.9.9', ['10.1.9.1', '10.1.9.2']),
    service('apps', 'front', '10.96.0.1'),
    pod('apps', 'front', '10.1.0.1'),
    service('apps', 'back', '10.96.0.2', { 'istio.io/use-waypoint': 'other', 'istio.io/use-waypoint-namespace': 'infra' }),
    pod('apps', 'back', '10.1.0.2'),
  ]);

  test('goes through that waypoint: one endpoint per instance, HBONE on 15008, CONNECT authority VIP:port', () => {
    const back = svc(snap, 'apps', 'back');
    expect(back.servedByThisWaypoint).toBe(false);
    expect(back.useWaypoint).toEqual({ namespace: 'infra', name: 'other' });
    expect(back.viaWaypoint?.namespace).toBe('infra');
    expect(back.viaWaypoint?.name).toBe('other');
    const eps = upstreamEndpoints(back, 80);
    expect(eps.map((e) => ({ pod: e.workload.name, address: e.address, port: e.targetPort, tunnel: e.tunnel, authority: e.authority, connect: e.connectAuthority, id: e.workload.identity }))).toEqual([
      { pod: 'other-0', address: '10.1.9.1', port: 15008, tunnel: 'HBONE', authority: '10.1.9.1:15008', connect: '10.96.0.2:80', id: 'spiffe://cluster.local/ns/infra/sa/other' },
      { pod: 'other-1', address: '10.1.9.2', port: 15008, tunnel: 'HBONE', authority: '10.1.9.2:15008', connect: '10.96.0.2:80', id: 'spiffe://cluster.local/ns/infra/sa/other' },
    ]);
    // Each port has its own authority; UDP ports are never proxied.
    expect(upstreamEndpoints(back, 9090).map((e) => e.connectAuthority)).toEqual(['10.96.0.2:9090', '10.96.0.2:9090']);
    expect(back.viaWaypoint?.endpoints.has(53)).toBe(false);
    // The service's own endpoints are still its pods.
    expect(back.endpoints.get(80)!.map((e) => e.authority)).toEqual(['10.1.0.2:8080']);
  });

  test('a service this waypoint serves is served directly', () => {
    const front = svc(snap, 'apps', 'front');
    expect(front.servedByThisWaypoint).toBe(true);
    expect(front.viaWaypoint).toBeUndefined();
    expect(upstreamEndpoints(front, 80).map((e) => e.authority)).toEqual(['10.1.0.1:8080']);
  });

  test('a waypoint Service itself has no waypoint', () => {
    expect(svc(snap, 'infra', 'other').viaWaypoint).toBeUndefined();
  });

  test('the other waypoint (same file, other gateway) serves the service and chains back to nothing', () => {
    const theirs = compile([
      namespace('apps', { 'istio.io/use-waypoint': 'ours' }),
      namespace('infra'),
      gateway('apps', 'ours'),
      gateway('infra', 'other'),
      ...waypointPods('infra', 'other', '10.96.9.9', ['10.1.9.1']),
      service('apps', 'back', '10.96.0.2', { 'istio.io/use-waypoint': 'other', 'istio.io/use-waypoint-namespace': 'infra' }),
      pod('apps', 'back', '10.1.0.2'),
    ], 'infra/other');
    const back = svc(theirs, 'apps', 'back');
    expect(back.servedByThisWaypoint).toBe(true);
    expect(back.viaWaypoint).toBeUndefined();
    expect(theirs.resolveTarget('10.96.0.2', 80)?.kind).toBe('service');
  });

  test('the snapshot dump names the waypoint and its instances', () => {
    const dumped = (snap.toJSON() as { services: { name: string; useWaypoint: string | null; throughWaypoint: unknown }[] }).services;
    expect(dumped.find((s) => s.name === 'back')).toMatchObject({ useWaypoint: 'infra/other', throughWaypoint: { gateway: 'infra/other', instances: ['10.1.9.1:15008', '10.1.9.2:15008'] } });
    expect(dumped.find((s) => s.name === 'front')).toMatchObject({ useWaypoint: 'apps/ours', throughWaypoint: null });
  });
});

describe('reached directly', () => {
  const base = [namespace('apps', { 'istio.io/use-waypoint': 'other' }), gateway('apps', 'ours'), gateway('apps', 'other'), ...waypointPods('apps', 'other', '10.96.9.9', ['10.1.9.1'])];

  test('through the namespace label, unless the service says none or names this waypoint', () => {
    const snap = compile([
      ...base,
      service('apps', 'bynamespace', '10.96.0.1'),
      service('apps', 'optout', '10.96.0.2', { 'istio.io/use-waypoint': 'none' }),
      service('apps', 'ours', '10.96.0.3', { 'istio.io/use-waypoint': 'ours' }),
    ]);
    expect(svc(snap, 'apps', 'bynamespace').viaWaypoint?.name).toBe('other');
    expect(svc(snap, 'apps', 'optout').viaWaypoint).toBeUndefined();
    expect(svc(snap, 'apps', 'optout').useWaypoint).toBeUndefined();
    expect(svc(snap, 'apps', 'ours').servedByThisWaypoint).toBe(true);
    expect(svc(snap, 'apps', 'ours').viaWaypoint).toBeUndefined();
  });

  test('a waypoint the mesh does not have, a headless service', () => {
    const snap = compile([
      ...base,
      service('apps', 'ghost', '10.96.0.1', { 'istio.io/use-waypoint': 'missing' }),
      service('apps', 'headless', 'None'),
    ]);
    expect(svc(snap, 'apps', 'ghost').useWaypoint).toEqual({ namespace: 'apps', name: 'missing' });
    expect(svc(snap, 'apps', 'ghost').viaWaypoint).toBeUndefined();
    expect(svc(snap, 'apps', 'headless').viaWaypoint).toBeUndefined();
  });

  test('a waypoint for workloads only (its own label, or its GatewayClass)', () => {
    const forWorkloads = compile([
      namespace('apps'),
      gateway('apps', 'ours'),
      gateway('apps', 'wl', { 'istio.io/waypoint-for': 'workload' }),
      service('apps', 'a', '10.96.0.1', { 'istio.io/use-waypoint': 'wl' }),
    ]);
    expect(svc(forWorkloads, 'apps', 'a').viaWaypoint).toBeUndefined();
    const byClass = [
      `apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: { name: istio-waypoint, labels: { istio.io/waypoint-for: workload } }
spec: { controllerName: istio.io/mesh-controller }`,
      namespace('apps'),
      gateway('apps', 'ours', { 'istio.io/waypoint-for': 'service' }),
      gateway('apps', 'wl'),
      gateway('apps', 'svc', { 'istio.io/waypoint-for': 'all' }),
      ...waypointPods('apps', 'svc', '10.96.9.8', ['10.1.9.8']),
      service('apps', 'a', '10.96.0.1', { 'istio.io/use-waypoint': 'wl' }),
      service('apps', 'b', '10.96.0.2', { 'istio.io/use-waypoint': 'svc' }),
    ];
    const snap = compile(byClass);
    expect(snap.waypoint.waypointFor).toBe('service');
    expect(svc(snap, 'apps', 'a').viaWaypoint).toBeUndefined();
    expect(svc(snap, 'apps', 'b').viaWaypoint?.name).toBe('svc');
    // Our own Gateway without a label takes the class's value too.
    expect(compile(byClass.map((d) => d.replace('"istio.io/waypoint-for":"service"', ''))).waypoint.waypointFor).toBe('workload');
  });

  test('a service naming this waypoint when it serves workloads only', () => {
    const snap = compile([namespace('apps'), gateway('apps', 'ours', { 'istio.io/waypoint-for': 'workload' }), service('apps', 'a', '10.96.0.1', { 'istio.io/use-waypoint': 'ours' })]);
    expect(svc(snap, 'apps', 'a').servedByThisWaypoint).toBe(false);
    expect(svc(snap, 'apps', 'a').viaWaypoint).toBeUndefined();
  });
});

describe('where the other waypoint is reached', () => {
  const docs = (status: string, extra: string[] = []) => [
    namespace('apps'),
    gateway('apps', 'ours'),
    gateway('apps', 'other', {}, status),
    service('apps', 'back', '10.96.0.2', { 'istio.io/use-waypoint': 'other' }),
    ...extra,
  ];

  test('status.addresses: a hostname names the Service, an IP a Service VIP or a workload', () => {
    const byHost = compile(
      docs('status: { addresses: [{ type: Hostname, value: wp.apps.svc.cluster.local }, { type: IPAddress, value: 10.96.9.9 }] }', [
        ...waypointPods('apps', 'wp', '10.96.9.7', ['10.1.9.7']),
        ...waypointPods('apps', 'other', '10.96.9.9', ['10.1.9.9']),
      ]),
    );
    expect(upstreamEndpoints(svc(byHost, 'apps', 'back'), 80).map((e) => e.address)).toEqual(['10.1.9.7']);
    const byVip = compile(docs('status: { addresses: [{ value: 10.96.9.9 }] }', waypointPods('apps', 'x', '10.96.9.9', ['10.1.9.9'])));
    expect(upstreamEndpoints(svc(byVip, 'apps', 'back'), 80).map((e) => e.authority)).toEqual(['10.1.9.9:15008']);
    const byPod = compile(docs('status: { addresses: [{ type: IPAddress, value: 10.1.9.5 }] }', waypointPods('apps', 'x', '10.96.9.9', ['10.1.9.5'])));
    expect(upstreamEndpoints(svc(byPod, 'apps', 'back'), 80).map((e) => [e.authority, e.connectAuthority])).toEqual([['10.1.9.5:15008', '10.96.0.2:80']]);
  });

  test('unreachable (no Service, no port 15008, no ready instance): chained with no endpoint, never direct', () => {
    const noService = compile(docs(''));
    expect(svc(noService, 'apps', 'back').viaWaypoint?.name).toBe('other');
    expect(upstreamEndpoints(svc(noService, 'apps', 'back'), 80)).toEqual([]);
    const notReady = compile(docs('', waypointPods('apps', 'other', '10.96.9.9', ['10.1.9.9'], false)));
    expect(upstreamEndpoints(svc(notReady, 'apps', 'back'), 80)).toEqual([]);
    const noHbonePort = compile(docs('', [service('apps', 'other', '10.96.9.9', {}, '[{ name: http, port: 80 }]')]));
    expect(upstreamEndpoints(svc(noHbonePort, 'apps', 'back'), 80)).toEqual([]);
  });

  test('an IPv6 VIP gets the instance address of its family', () => {
    const snap = compile([
      namespace('apps'),
      gateway('apps', 'ours'),
      gateway('apps', 'other'),
      `apiVersion: v1
kind: Service
metadata: { name: other, namespace: apps }
spec:
  clusterIPs: [10.96.9.9, fd00::9]
  selector: { gateway.networking.k8s.io/gateway-name: other }
  ports: [{ name: mesh, port: 15008 }]`,
      `apiVersion: v1
kind: Pod
metadata: { name: other-0, namespace: apps, labels: { gateway.networking.k8s.io/gateway-name: other } }
spec: { serviceAccountName: other }
status: { podIPs: [{ ip: 10.1.9.1 }, { ip: fd00::1:9 }] }`,
      service('apps', 'back', 'fd00::2', { 'istio.io/use-waypoint': 'other' }),
    ]);
    expect(upstreamEndpoints(svc(snap, 'apps', 'back'), 80).map((e) => [e.authority, e.connectAuthority])).toEqual([['[fd00::1:9]:15008', '[fd00::2]:80']]);
  });

  test('an invalid istio.io/waypoint-for on the named waypoint is refused', () => {
    const err = caught(() => compile([namespace('apps'), gateway('apps', 'ours'), gateway('apps', 'other', { 'istio.io/waypoint-for': 'services' }), service('apps', 'back', '10.96.0.2', { 'istio.io/use-waypoint': 'other' })]));
    expect(err.location.object).toBe('Gateway/apps/other');
    expect(err.location.field).toBe('metadata.labels["istio.io/waypoint-for"]');
    expect(err.message).toBe('istio.io/waypoint-for must be service, workload, all or none, got "services"');
  });
});

describe('a mesh read by a role that is no waypoint (`waypoint inbound`)', () => {
  test('is not chained, and an unreachable waypoint, which it never sends to, is not warned about', () => {
    const warn = vi.spyOn(log, 'warn');
    try {
      const docs = [namespace('infra'), gateway('infra', 'other'), service('apps', 'back', '10.96.0.2', { 'istio.io/use-waypoint': 'other', 'istio.io/use-waypoint-namespace': 'infra' }), pod('apps', 'back', '10.1.0.2')];
      const inbound = compileMesh({ text: docs.join('\n---\n'), file: 'chain.yaml', withoutWaypoint: true });
      expect(svc(inbound, 'apps', 'back').viaWaypoint).toBeUndefined();
      expect(warn.mock.calls.filter((c) => String(c[1]).includes('cannot be reached'))).toEqual([]);
      // The same mesh read by a waypoint warns: requests routed there would fail.
      compileMesh({ text: [...docs, gateway('apps', 'ours')].join('\n---\n'), file: 'chain.yaml', gateway: 'apps/ours' });
      expect(warn.mock.calls.filter((c) => String(c[1]).includes('waypoint infra/other cannot be reached'))).toHaveLength(1);
    } finally {
      warn.mockRestore();
    }
  });
});
