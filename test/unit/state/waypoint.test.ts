import { describe, expect, test } from 'vitest';

import { ConfigError } from '../../../src/util/errors.ts';
import { compileMesh } from '../../../src/state/compile.ts';
import { caught } from '../../helpers/config-error.ts';

const gateway = (ns: string, name: string, labels: Record<string, string> = {}) => `
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata:
  name: ${name}
  namespace: ${ns}
  labels: ${JSON.stringify(labels)}
spec:
  gatewayClassName: istio-waypoint
  listeners:
  - {name: mesh, port: 15008, protocol: HBONE}
`;

const pod = (name: string, ip: string, labels: Record<string, string>, ns = 'apps') => `
apiVersion: v1
kind: Pod
metadata:
  name: ${name}
  namespace: ${ns}
  labels: ${JSON.stringify(labels)}
status:
  podIP: ${ip}
`;


describe('waypoint-for workload', () => {
  const text = [
    `apiVersion: v1
kind: Namespace
metadata:
  name: apps
  labels: {istio.io/use-waypoint: wl}`,
    gateway('apps', 'wl', { 'istio.io/waypoint-for': 'workload' }),
    pod('a', '10.0.0.1', { app: 'a' }),
    pod('b', '10.0.0.2', { app: 'b', 'istio.io/use-waypoint': 'none' }),
    pod('c', '10.0.0.3', { app: 'c', 'istio.io/use-waypoint': 'wl', 'istio.io/use-waypoint-namespace': 'apps' }, 'elsewhere'),
    pod('d', '10.0.0.4', { app: 'd', 'istio.io/use-waypoint': 'other-waypoint' }),
    `apiVersion: v1
kind: Service
metadata: {name: a, namespace: apps}
spec:
  clusterIP: 10.96.0.1
  selector: {app: a}
  ports: [{name: http, port: 80}]`,
  ].join('\n---\n');
  const snap = compileMesh({ text, file: 'wl.yaml' });

  test('identity and mode', () => {
    expect(snap.waypoint.waypointFor).toBe('workload');
    expect(snap.waypoint.identity).toBe('spiffe://cluster.local/ns/apps/sa/wl');
  });

  test('a pod attached through its namespace is a workload target on any port', () => {
    const t = snap.resolveTarget('10.0.0.1', 8080);
    expect(t?.kind).toBe('workload');
    if (t?.kind !== 'workload') return;
    expect(t.workload.name).toBe('a');
    expect(t.port).toBe(8080);
  });

  test('opt-out, cross-namespace label and other waypoints', () => {
    expect(snap.resolveTarget('10.0.0.2', 80)).toBeUndefined();
    expect(snap.resolveTarget('10.0.0.3', 80)?.kind).toBe('workload');
    expect(snap.resolveTarget('10.0.0.4', 80)).toBeUndefined();
    expect(snap.workloadByIp('10.0.0.4')?.servedByThisWaypoint).toBe(false);
  });

  test('the Service VIP is not served by a workload waypoint', () => {
    expect(snap.services[0].servedByThisWaypoint).toBe(false);
    expect(snap.resolveTarget('10.96.0.1', 80)).toBeUndefined();
  });
});

test('waypoint-for all serves services and workloads', () => {
  const text = [
    gateway('apps', 'wp', { 'istio.io/waypoint-for': 'all' }),
    pod('a', '10.0.0.1', { app: 'a', 'istio.io/use-waypoint': 'wp' }),
    `apiVersion: v1
kind: Service
metadata: {name: a, namespace: apps, labels: {istio.io/use-waypoint: wp}}
spec: {clusterIP: 10.96.0.1, selector: {app: a}, ports: [{port: 80}]}`,
  ].join('\n---\n');
  const snap = compileMesh({ text, file: 'all.yaml' });
  expect(snap.resolveTarget('10.96.0.1', 80)?.kind).toBe('service');
  expect(snap.resolveTarget('10.0.0.1', 80)?.kind).toBe('workload');
});

test('UDP service ports are not matchable (Istio skips them in the waypoint)', () => {
  const text = [
    gateway('apps', 'wp'),
    `apiVersion: v1
kind: Service
metadata: {name: dns, namespace: apps, labels: {istio.io/use-waypoint: wp}}
spec:
  clusterIP: 10.96.0.53
  ports:
  - {name: dns, port: 53, protocol: UDP}
  - {name: dns-tcp, port: 54, protocol: TCP}`,
  ].join('\n---\n');
  const snap = compileMesh({ text, file: 'udp.yaml' });
  expect(snap.services[0].ports.map((p) => p.protocol)).toEqual(['UDP', 'UNKNOWN']);
  expect(snap.resolveTarget('10.96.0.53', 53)).toBeUndefined();
  expect(snap.resolveTarget('10.96.0.53', 54)?.kind).toBe('service');
});

test('ServiceEntry CIDR addresses match any address inside the range', () => {
  const text = [
    gateway('apps', 'wp'),
    `apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: range, namespace: apps, labels: {istio.io/use-waypoint: wp}}
spec:
  hosts: [range.internal]
  addresses: [10.50.0.9/24]
  ports: [{number: 443, name: tls, protocol: TLS}]`,
  ].join('\n---\n');
  const snap = compileMesh({ text, file: 'cidr.yaml' });
  expect(snap.services[0].addresses).toEqual(['10.50.0.0/24']);
  expect(snap.resolveTarget('10.50.0.200', 443)?.kind).toBe('service');
  expect(snap.resolveTarget('10.50.1.1', 443)).toBeUndefined();
  expect(snap.resolveTarget('10.50.0.200', 80)).toBeUndefined();
});

describe('Gateway selection', () => {
  const two = [gateway('a', 'wp1'), gateway('b', 'wp2')].join('---\n');

  test('none ⇒ error showing the Gateway to add', () => {
    const err = caught(() => compileMesh({ text: pod('a', '10.0.0.1', {}), file: 'empty.yaml' }));
    expect(err.location.file).toBe('empty.yaml');
    expect(err.message).toContain('no Gateway with gatewayClassName istio-waypoint in empty.yaml');
    expect(err.message).toContain('kind: Gateway');
    expect(err.message).toContain('  name: waypoint\n  namespace: default');
    expect(err.message).toContain('gatewayClassName: istio-waypoint');
    expect(err.message).toMatch(/- name: mesh\n {4}port: 15008\n {4}protocol: HBONE/);
  });

  test('a Gateway of another class does not count', () => {
    const text = gateway('a', 'ingress').replace('istio-waypoint', 'istio');
    expect(caught(() => compileMesh({ text, file: 'x.yaml' })).message).toContain('no Gateway with gatewayClassName');
  });

  test('an Istio networking Gateway does not count', () => {
    const text = gateway('a', 'wp').replace('gateway.networking.k8s.io/v1', 'networking.istio.io/v1');
    expect(caught(() => compileMesh({ text, file: 'x.yaml' })).message).toContain('no Gateway with gatewayClassName');
  });

  test('several and no option ⇒ error listing them', () => {
    const err = caught(() => compileMesh({ text: two, file: 'two.yaml' }));
    expect(err.message).toContain('a/wp1, b/wp2');
    expect(err.message).toContain('--gateway a/wp1');
  });

  test('the option picks one', () => {
    expect(compileMesh({ text: two, file: 'two.yaml', gateway: 'b/wp2' }).waypoint.identity).toBe('spiffe://cluster.local/ns/b/sa/wp2');
  });

  test('the option naming a missing Gateway ⇒ error listing the others', () => {
    const err = caught(() => compileMesh({ text: two, file: 'two.yaml', gateway: 'c/wp3' }));
    expect(err.message).toContain('no Gateway c/wp3');
    expect(err.message).toContain('a/wp1, b/wp2');
  });

  test('a malformed option', () => {
    expect(caught(() => compileMesh({ text: two, file: 'two.yaml', gateway: 'wp1' })).message).toContain('namespace/name');
  });

  test('explicit option with no Gateway at all shows the snippet for that name', () => {
    const err = caught(() => compileMesh({ text: '', file: 'e.yaml', gateway: 'team/edge' }));
    expect(err.message).toContain('  name: edge\n  namespace: team');
  });

  test('trust domain of the explicit mesh config', () => {
    const snap = compileMesh({
      text: gateway('a', 'wp1'),
      file: 'one.yaml',
      meshConfig: { text: 'trustDomain: corp.example\n', file: 'mesh.yaml' },
      clusterId: 'east',
    });
    expect(snap.waypoint.identity).toBe('spiffe://corp.example/ns/a/sa/wp1');
  });
});
