/**
 * WDS → mesh model (src/istiod/mesh.ts): workload and service fields with ztunnel's defaults,
 * endpoints and their target ports, health, which services and workloads this waypoint serves
 * (`GatewayAddress` by hostname and by address: its Service VIP or its pod IP), chained waypoints,
 * fresh objects on every resolve — and the same model the file source builds for the same mesh.
 */
import { create, type MessageInitShape } from '@bufbuild/protobuf';
import { describe, expect, test } from 'vitest';
import { wdsDiscoveredMesh, wdsProto, type WdsMeshOptions, type WdsState } from '../../../src/istiod/index.ts';
import type { DiscoveryContext, Endpoint, Service, Workload, WaypointIdentity } from '../../../src/state/index.ts';
import { deepFreeze } from '../../../src/util/index.ts';
import { ipBytes } from '../../helpers/fake-istiod.ts';
import { compileMesh } from '../../../src/state/compile.ts';
import { meshText, namespace, pod, service, usesWaypoint, waypointGateway } from '../../helpers/mesh.ts';

const { TunnelProtocolValue: TP, AppProtocolValue: AP, WorkloadTypeValue: WT } = wdsProto;
type WorkloadInit = MessageInitShape<typeof wdsProto.WorkloadSchema>;
type ServiceInit = MessageInitShape<typeof wdsProto.ServiceSchema>;
type GatewayInit = MessageInitShape<typeof wdsProto.GatewayAddressSchema>;

const WAYPOINT = (waypointFor: WaypointIdentity['waypointFor'] = 'service'): WaypointIdentity => ({
  namespace: 'apps',
  name: 'waypoint',
  serviceAccount: 'waypoint',
  identity: 'spiffe://cluster.local/ns/apps/sa/waypoint',
  waypointFor,
});
const ctx = (waypointFor?: WaypointIdentity['waypointFor']): DiscoveryContext => ({
  waypoint: WAYPOINT(waypointFor),
  trustDomain: 'cluster.local',
  domainSuffix: 'cluster.local',
  clusterId: 'Kubernetes',
  namespaceLabels: () => ({}),
});

function stateOf(workloads: WorkloadInit[], services: ServiceInit[]): WdsState {
  return {
    version: 1,
    workloads: new Map(workloads.map((w) => [w.uid!, create(wdsProto.WorkloadSchema, w)])),
    services: new Map(services.map((s) => [`${s.namespace}/${s.hostname}`, create(wdsProto.ServiceSchema, s)])),
  };
}
const resolve = (workloads: WorkloadInit[], services: ServiceInit[], c = ctx(), opts: WdsMeshOptions = {}) => wdsDiscoveredMesh({ state: stateOf(workloads, services) }, opts).resolve(c);

const byHostname = (ns: string, name: string): GatewayInit => ({ destination: { case: 'hostname', value: { namespace: ns, hostname: `${name}.${ns}.svc.cluster.local` } }, hboneMtlsPort: 15008 });
const byAddress = (ip: string, network = ''): GatewayInit => ({ destination: { case: 'address', value: { network, address: ipBytes(ip) } }, hboneMtlsPort: 15008 });
const svcKey = (ns: string, name: string) => `${ns}/${name}.${ns}.svc.cluster.local`;
const kubeService = (ns: string, name: string, vip: string, extra: ServiceInit = {}): ServiceInit => ({ name, namespace: ns, hostname: `${name}.${ns}.svc.cluster.local`, addresses: [{ address: ipBytes(vip) }], ports: [{ servicePort: 80, targetPort: 8080, appProtocol: AP.HTTP11 }], ...extra });
const podW = (ns: string, name: string, ip: string, extra: WorkloadInit = {}): WorkloadInit => ({ uid: `Kubernetes//Pod/${ns}/${name}`, name, namespace: ns, addresses: [ipBytes(ip)], tunnelProtocol: TP.HBONE, ...extra });
const endpointsOf = (s: Service | undefined, port: number) => (s?.endpoints.get(port) ?? []).map((e) => `${e.workload.name}@${e.authority}`);
const find = <T extends { name: string }>(list: readonly T[], name: string): T => list.find((x) => x.name === name)!;

describe('workloads', () => {
  test('every field, as ztunnel reads it', () => {
    const { workloads } = resolve(
      [
        podW('apps', 'echo-5d8f-x1', '10.0.0.1', {
          addresses: [ipBytes('10.0.0.1'), ipBytes('fd00::1')],
          trustDomain: 'example.org',
          serviceAccount: 'echo',
          canonicalName: 'echo',
          canonicalRevision: 'v2',
          workloadName: 'echo',
          workloadType: WT.DEPLOYMENT,
          network: 'net-1',
          node: 'node-a',
          clusterId: 'east',
          locality: { region: 'eu', zone: 'eu-1a', subzone: 's' },
        }),
        { uid: 'Kubernetes/networking.istio.io/WorkloadEntry/apps/vm', name: 'vm', namespace: 'apps', addresses: [ipBytes('::ffff:10.0.0.9')], tunnelProtocol: TP.NONE, status: wdsProto.WorkloadStatusValue.UNHEALTHY, workloadType: WT.POD },
        podW('apps', 'legacy', '10.0.0.3', { tunnelProtocol: TP.LEGACY_ISTIO_MTLS, workloadType: WT.CRONJOB }),
      ],
      [],
    );
    expect(find(workloads, 'echo-5d8f-x1')).toEqual({
      uid: 'Kubernetes//Pod/apps/echo-5d8f-x1',
      kind: 'Pod',
      name: 'echo-5d8f-x1',
      namespace: 'apps',
      addresses: ['10.0.0.1', 'fd00::1'],
      serviceAccount: 'echo',
      trustDomain: 'example.org',
      identity: 'spiffe://example.org/ns/apps/sa/echo',
      labels: {},
      annotations: {},
      workloadName: 'echo',
      workloadType: 'deployment',
      canonicalName: 'echo',
      canonicalRevision: 'v2',
      clusterId: 'east',
      network: 'net-1',
      node: 'node-a',
      region: 'eu',
      zone: 'eu-1a',
      tunnelProtocol: 'HBONE',
      healthy: true,
      namedPorts: {},
      servedByThisWaypoint: false,
    } satisfies Workload);
    // Defaults (istio/ztunnel src/state/workload.rs): trust domain, service account, cluster; canonical from the name.
    expect(find(workloads, 'vm')).toMatchObject({
      kind: 'WorkloadEntry',
      addresses: ['10.0.0.9'],
      trustDomain: 'cluster.local',
      serviceAccount: 'default',
      identity: 'spiffe://cluster.local/ns/apps/sa/default',
      clusterId: 'Kubernetes',
      workloadName: 'vm',
      workloadType: 'pod',
      canonicalName: 'vm',
      canonicalRevision: 'latest',
      tunnelProtocol: 'NONE',
      healthy: false,
    });
    expect(find(workloads, 'legacy')).toMatchObject({ tunnelProtocol: 'SIDECAR', workloadType: 'cronjob' });
  });

  test('labels come from the caller when it knows them (WDS sends none)', () => {
    const { workloads } = resolve([podW('apps', 'a', '10.0.0.1')], [], ctx(), { workloadLabels: (ns, name) => (ns === 'apps' && name === 'a' ? { app: 'web', version: 'v3' } : undefined) });
    expect(workloads[0]).toMatchObject({ labels: { app: 'web', version: 'v3' }, canonicalName: 'web', canonicalRevision: 'v3' });
  });
});

describe('services and endpoints', () => {
  test('VIPs, ports, app protocol, target ports (workload first, then service, 0 = none), health', () => {
    const key = svcKey('apps', 'echo');
    const { services } = resolve(
      [
        podW('apps', 'a', '10.0.0.1', { services: { [key]: { ports: [{ servicePort: 80, targetPort: 8081 }, { servicePort: 9000, targetPort: 9999 }] } } }),
        podW('apps', 'b', '10.0.0.2', { addresses: [ipBytes('fd00::2'), ipBytes('10.0.0.2')], services: { [key]: { ports: [] } } }),
        podW('apps', 'sick', '10.0.0.3', { status: wdsProto.WorkloadStatusValue.UNHEALTHY, services: { [key]: { ports: [] } } }),
        podW('apps', 'elsewhere', '10.0.0.4'),
      ],
      [
        kubeService('apps', 'echo', '10.96.0.10', {
          addresses: [{ address: ipBytes('10.96.0.10') }, { address: ipBytes('fd00::a') }, { address: ipBytes('240.240.0.0'), length: 16 }],
          ports: [
            { servicePort: 80, targetPort: 8080, appProtocol: AP.HTTP11 },
            { servicePort: 9000, targetPort: 0, appProtocol: AP.GRPC },
            { servicePort: 3306, targetPort: 3306 },
            { servicePort: 7000, targetPort: 7000, appProtocol: AP.HTTP2 },
          ],
        }),
        kubeService('external', 'api', '10.96.0.11', { hostname: 'api.example.com' }),
      ],
    );
    const echo = find(services, 'echo');
    expect(echo).toMatchObject({ kind: 'Service', hostname: 'echo.apps.svc.cluster.local', addresses: ['10.96.0.10', 'fd00::a', '240.240.0.0/16'] });
    expect(echo.ports).toEqual([
      { name: '', port: 80, targetPort: 8080, appProtocol: 'http', protocol: 'HTTP' },
      { name: '', port: 9000, targetPort: 0, appProtocol: 'grpc', protocol: 'GRPC' },
      { name: '', port: 3306, targetPort: 3306, appProtocol: '', protocol: 'TCP' }, // UNKNOWN on a well-known TCP port
      { name: '', port: 7000, targetPort: 7000, appProtocol: 'http2', protocol: 'HTTP2' },
    ]);
    expect(endpointsOf(echo, 80)).toEqual(['a@10.0.0.1:8081', 'b@10.0.0.2:8080']); // b: the address of the first VIP's family
    expect(endpointsOf(echo, 9000)).toEqual(['a@10.0.0.1:9999']); // target 0 and no own port: no endpoint
    expect(echo.endpoints.get(80)![0]).toMatchObject({ tunnel: 'HBONE', targetPort: 8081, address: '10.0.0.1' });
    expect(echo.endpoints.get(80)![0].workload.name).toBe('a');
    // A ServiceEntry-like service (hostname not <name>.<ns>.svc).
    const api = find(services, 'api');
    expect(api.kind).toBe('ServiceEntry');
    expect(endpointsOf(api, 80)).toEqual([]);
  });

  test('ALLOW_ALL health policy keeps unhealthy endpoints; the default does not', () => {
    const key = svcKey('apps', 'echo');
    const sick = podW('apps', 'sick', '10.0.0.3', { status: wdsProto.WorkloadStatusValue.UNHEALTHY, services: { [key]: { ports: [] } } });
    expect(endpointsOf(resolve([sick], [kubeService('apps', 'echo', '10.96.0.10')]).services[0], 80)).toEqual([]);
    const allowAll = kubeService('apps', 'echo', '10.96.0.10', { loadBalancing: { healthPolicy: wdsProto.LbHealthPolicyValue.ALLOW_ALL } });
    expect(endpointsOf(resolve([sick], [allowAll]).services[0], 80)).toEqual(['sick@10.0.0.3:8080']);
  });
});

describe('which waypoint: GatewayAddress by hostname or by address', () => {
  const own = kubeService('apps', 'waypoint', '10.96.0.2', { ports: [{ servicePort: 15008, targetPort: 15008 }] });
  const served = (waypoint: GatewayInit, c = ctx(), opts: WdsMeshOptions = {}) => find(resolve([], [own, kubeService('apps', 'echo', '10.96.0.10', { waypoint })], c, opts).services, 'echo');

  test('by hostname: the FQDN of this waypoint\'s Service in its namespace', () => {
    expect(served(byHostname('apps', 'waypoint'))).toMatchObject({ servedByThisWaypoint: true, useWaypoint: { namespace: 'apps', name: 'waypoint' }, viaWaypoint: undefined });
    expect(served(byHostname('other', 'waypoint')).servedByThisWaypoint).toBe(false);
    expect(served({ destination: { case: 'hostname', value: { namespace: 'apps', hostname: 'waypoint.apps.svc.other.domain' } } }).servedByThisWaypoint).toBe(false);
  });

  test("by address: this waypoint's Service VIP, or its pod IP; not another network's", () => {
    expect(served(byAddress('10.96.0.2')).servedByThisWaypoint).toBe(true);
    expect(served(byAddress('10.0.0.99'), ctx(), { instanceIps: ['10.0.0.99'] }).servedByThisWaypoint).toBe(true);
    expect(served(byAddress('10.0.0.99')).servedByThisWaypoint).toBe(false);
    expect(served(byAddress('10.96.0.2', 'net-b'), ctx(), { network: 'net-a' }).servedByThisWaypoint).toBe(false);
    expect(served(byAddress('10.96.0.2', 'net-a'), ctx(), { network: 'net-a' }).servedByThisWaypoint).toBe(true);
  });

  test('istio.io/waypoint-for decides whether services or workloads are served', () => {
    const workload = podW('apps', 'a', '10.0.0.1', { waypoint: byHostname('apps', 'waypoint') });
    const svc = kubeService('apps', 'echo', '10.96.0.10', { waypoint: byHostname('apps', 'waypoint') });
    const check = (waypointFor: WaypointIdentity['waypointFor']) => {
      const r = resolve([workload], [svc], ctx(waypointFor));
      return [r.services[0].servedByThisWaypoint, r.workloads[0].servedByThisWaypoint];
    };
    expect(check('service')).toEqual([true, false]);
    expect(check('workload')).toEqual([false, true]);
    expect(check('all')).toEqual([true, true]);
    expect(check('none')).toEqual([false, false]);
    // Named but not served (a workload waypoint): not chained to itself either.
    expect(resolve([workload], [svc], ctx('workload')).services[0].viaWaypoint).toBeUndefined();
  });

  test('a service using another waypoint goes through its instances (by hostname, by VIP, by pod IP)', () => {
    const wpKey = svcKey('other', 'other-wp');
    const instances = [
      podW('other', 'other-wp-0', '10.0.0.20', { serviceAccount: 'other-wp', services: { [wpKey]: { ports: [{ servicePort: 15008, targetPort: 15008 }] } } }),
      podW('other', 'other-wp-1', '10.0.0.21', { serviceAccount: 'other-wp', status: wdsProto.WorkloadStatusValue.UNHEALTHY, services: { [wpKey]: { ports: [] } } }),
    ];
    const wpService = kubeService('other', 'other-wp', '10.96.0.20', { ports: [{ servicePort: 15008, targetPort: 15008 }] });
    const via = (waypoint: GatewayInit) => find(resolve(instances, [wpService, kubeService('apps', 'db', '10.96.0.30', { waypoint })]).services, 'db');
    for (const g of [byHostname('other', 'other-wp'), byAddress('10.96.0.20')]) {
      const db = via(g);
      expect(db.servedByThisWaypoint).toBe(false);
      expect(db.useWaypoint).toEqual({ namespace: 'other', name: 'other-wp' });
      expect(db.viaWaypoint?.endpoints.get(80)?.map((e) => [e.workload.name, e.authority, e.connectAuthority, e.tunnel])).toEqual([['other-wp-0', '10.0.0.20:15008', '10.96.0.30:80', 'HBONE']]);
    }
    const byPod = via(byAddress('10.0.0.21'));
    expect(byPod.useWaypoint).toEqual({ namespace: 'other', name: 'other-wp-1' });
    expect(byPod.viaWaypoint?.endpoints.get(80)).toEqual([]); // that instance is unhealthy: fail, never bypass
    // A waypoint nothing of the mesh answers for: no instance either.
    expect(via(byHostname('gone', 'wp')).viaWaypoint?.endpoints.get(80)).toEqual([]);
  });
});

test('every resolve returns new objects (the compile freezes them) from the state of that moment', () => {
  const source = { state: stateOf([podW('apps', 'a', '10.0.0.1')], [kubeService('apps', 'echo', '10.96.0.10')]) };
  const mesh = wdsDiscoveredMesh(source);
  const first = deepFreeze(mesh.resolve(ctx()));
  source.state = stateOf([podW('apps', 'a', '10.0.0.2')], []);
  const second = mesh.resolve(ctx());
  expect(Object.isFrozen(second.workloads[0])).toBe(false);
  expect(second.workloads[0].addresses).toEqual(['10.0.0.2']);
  expect(first.workloads[0].addresses).toEqual(['10.0.0.1']);
  expect(second.services).toEqual([]);
});

test('the same mesh from the file and from WDS gives the same model (but labels and port names, which WDS lacks)', () => {
  const file = compileMesh({ file: 'parity.yaml', gateway: 'apps/waypoint', text: meshText(
    waypointGateway('apps'),
    waypointGateway('other', { name: 'other-wp' }),
    namespace('apps', usesWaypoint()),
    namespace('other'),
    service({ name: 'echo', namespace: 'apps', vip: '10.96.0.10', ports: [{ name: 'http', port: 80, targetPort: 8080, appProtocol: 'http' }, { name: 'grpc', port: 9090, appProtocol: 'grpc' }] }),
    pod({ name: 'echo-1', namespace: 'apps', labels: { app: 'echo' }, sa: 'echo', ip: '10.0.0.1' }),
    pod({ name: 'echo-2', namespace: 'apps', labels: { app: 'echo' }, sa: 'echo', ip: '10.0.0.2' }),
    service({ name: 'other-wp', namespace: 'other', vip: '10.96.0.20', selector: { 'gateway.networking.k8s.io/gateway-name': 'other-wp' }, ports: [{ name: 'mesh', port: 15008 }] }),
    pod({ name: 'other-wp-0', namespace: 'other', labels: { 'gateway.networking.k8s.io/gateway-name': 'other-wp' }, sa: 'other-wp', ip: '10.0.0.20' }),
    service({ name: 'db', namespace: 'other', vip: '10.96.0.30', labels: usesWaypoint({ waypoint: 'other-wp' }), ports: [{ name: 'http', port: 80, targetPort: 5000, appProtocol: 'http' }] }),
    pod({ name: 'db-1', namespace: 'other', labels: { app: 'db' }, ip: '10.0.0.30' }),
  ) });
  const echoKey = svcKey('apps', 'echo');
  const pw = (ns: string, name: string, ip: string, sa: string, canonical: string, services: WorkloadInit['services']): WorkloadInit =>
    podW(ns, name, ip, { serviceAccount: sa, workloadName: name, workloadType: WT.POD, canonicalName: canonical, canonicalRevision: 'latest', clusterId: 'Kubernetes', services });
  const wds = resolve(
    [
      pw('apps', 'echo-1', '10.0.0.1', 'echo', 'echo', { [echoKey]: { ports: [{ servicePort: 80, targetPort: 8080 }, { servicePort: 9090, targetPort: 9090 }] } }),
      pw('apps', 'echo-2', '10.0.0.2', 'echo', 'echo', { [echoKey]: { ports: [{ servicePort: 80, targetPort: 8080 }, { servicePort: 9090, targetPort: 9090 }] } }),
      pw('other', 'other-wp-0', '10.0.0.20', 'other-wp', 'other-wp-0', { [svcKey('other', 'other-wp')]: { ports: [{ servicePort: 15008, targetPort: 15008 }] } }),
      pw('other', 'db-1', '10.0.0.30', 'default', 'db', { [svcKey('other', 'db')]: { ports: [{ servicePort: 80, targetPort: 5000 }] } }),
    ],
    [
      kubeService('apps', 'echo', '10.96.0.10', { ports: [{ servicePort: 80, targetPort: 8080, appProtocol: AP.HTTP11 }, { servicePort: 9090, targetPort: 9090, appProtocol: AP.GRPC }], waypoint: byHostname('apps', 'waypoint') }),
      kubeService('other', 'other-wp', '10.96.0.20', { ports: [{ servicePort: 15008, targetPort: 15008 }] }),
      kubeService('other', 'db', '10.96.0.30', { ports: [{ servicePort: 80, targetPort: 5000, appProtocol: AP.HTTP11 }], waypoint: byHostname('other', 'other-wp') }),
    ],
  );
  const workload = ({ labels: _l, annotations: _a, namedPorts: _n, ...w }: Workload) => w;
  const eps = (m: ReadonlyMap<number, readonly Endpoint[]>) => [...m.entries()].map(([port, list]) => [port, list.map((e) => ({ ...e, workload: e.workload.uid }))]);
  const svc = (s: Service) => ({
    ...s,
    ports: s.ports.map(({ name: _name, ...p }) => p),
    endpoints: eps(s.endpoints),
    viaWaypoint: s.viaWaypoint && { ...s.viaWaypoint, endpoints: eps(s.viaWaypoint.endpoints) },
  });
  const sortBy = <T extends { name: string }>(list: readonly T[]) => [...list].sort((a, b) => a.name.localeCompare(b.name));
  expect(sortBy(wds.workloads).map(workload)).toEqual(sortBy(file.workloads).map(workload));
  expect(sortBy(wds.services).map(svc)).toEqual(sortBy(file.services).map(svc));
});
