/**
 * The cluster manager toward an instance of another waypoint (chained waypoints): the CONNECT goes
 * to the instance with the service's VIP:port as `:authority` and the instance's identity, pools
 * of two services fronted by one instance stay apart, and a mesh update keeps the instance's
 * HBONE connections and pools (it is a live host of the mesh).
 */
import { Duplex } from 'node:stream';
import { describe, expect, test } from 'vitest';
import type { HboneDestination, HboneSessionPool } from '../../../src/hbone/pool.ts';
import { DEFAULT_HTTP2 } from '../../../src/hbone/settings.ts';
import { hasCandidates } from '../../../src/netpol/admission.ts';
import { Registry } from 'prom-client';
import { DESTINATION_RULES, destinationRulesFor } from '../../../src/routing/index.ts';
import { MeshStore } from '../../../src/state/store.ts';
import { ClusterTable } from '../../../src/upstream/cluster-table.ts';
import { compileMesh } from '../../../src/state/compile.ts';
import { upstreamEndpoints } from '../../../src/state/service-waypoints.ts';
import type { Service } from '../../../src/state/types.ts';
import { ClusterManager } from '../../../src/upstream/cluster-manager.ts';
import { serviceClusterName } from '../../../src/state/cluster-name.ts';
import { pickEndpoint } from '../../../src/upstream/pick-endpoint.ts';
import type { SidecarTransport } from '../../../src/upstream/sidecar-transport.ts';

const MESH = `
apiVersion: v1
kind: Namespace
metadata: { name: apps, labels: { istio.io/use-waypoint: other } }
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: { name: ours, namespace: apps }
spec: { gatewayClassName: istio-waypoint }
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: { name: other, namespace: apps }
spec: { gatewayClassName: istio-waypoint }
---
apiVersion: v1
kind: Service
metadata: { name: other, namespace: apps }
spec:
  clusterIP: 10.96.9.9
  selector: { gateway.networking.k8s.io/gateway-name: other }
  ports: [{ name: mesh, port: 15008 }]
---
apiVersion: v1
kind: Pod
metadata: { name: other-0, namespace: apps, labels: { gateway.networking.k8s.io/gateway-name: other } }
spec: { serviceAccountName: other }
status: { podIP: 10.1.9.1 }
---
apiVersion: v1
kind: Service
metadata: { name: a, namespace: apps }
spec: { clusterIP: 10.96.0.1, selector: { app: a }, ports: [{ name: http, port: 80 }] }
---
apiVersion: v1
kind: Service
metadata: { name: b, namespace: apps }
spec: { clusterIP: 10.96.0.2, selector: { app: b }, ports: [{ name: http, port: 80 }] }
---
apiVersion: v1
kind: Pod
metadata: { name: a-1, namespace: apps, labels: { app: a } }
status: { podIP: 10.1.0.1 }
`;

/** An HBONE session pool that records what it was asked and answers with an idle stream. */
function fakeSessions() {
  const connects: { dst: HboneDestination; authority: string }[] = [];
  let stale: ((dst: HboneDestination) => boolean) | undefined;
  const pool = {
    connect: async (dst: HboneDestination, authority: string) => {
      connects.push({ dst, authority });
      return { stream: new Duplex({ read() {}, write(_c, _e, cb) { cb(); } }), headers: { ':status': 200 } };
    },
    drainWhere: (fn: (dst: HboneDestination) => boolean) => {
      stale = fn;
      return 0;
    },
  };
  return { pool: pool as unknown as HboneSessionPool, connects, stale: (dst: HboneDestination) => stale!(dst) };
}

function manager(sessions: HboneSessionPool): ClusterManager {
  return new ClusterManager({
    sessions,
    sidecar: {} as SidecarTransport,
    hbonePort: 15008,
    loadBalancer: 'ROUND_ROBIN',
    connectTimeoutMs: 1000,
    httpKeepAliveMs: 1000,
    maxResponseHeadersBytes: 60 * 1024,
    http2: DEFAULT_HTTP2,
  });
}

const snap = compileMesh({ text: MESH, file: 'chain.yaml', gateway: 'apps/ours' });
const svc = (name: string): Service => snap.services.find((s) => s.name === name)!;
const OTHER = 'spiffe://cluster.local/ns/apps/sa/other';

describe('toward another waypoint instance', () => {
  test('the CONNECT goes to the instance on 15008, :authority the service VIP:port, its identity verified', async () => {
    const { pool, connects } = fakeSessions();
    const cm = manager(pool);
    const ep = pickEndpoint(cm.lb, { kind: 'service', service: svc('a'), port: svc('a').ports[0] }, '')!;
    expect([ep.authority, ep.connectAuthority]).toEqual(['10.1.9.1:15008', '10.96.0.1:80']);
    const tunnel = await cm.openTcp(ep);
    tunnel.destroy();
    expect(connects).toEqual([{ dst: { ip: '10.1.9.1', port: 15008, identity: OTHER }, authority: '10.96.0.1:80' }]);
    await cm.destroy();
  });

  test('one instance fronting two services: one pool per service', async () => {
    const { pool } = fakeSessions();
    const cm = manager(pool);
    const [a] = upstreamEndpoints(svc('a'), 80);
    const [b] = upstreamEndpoints(svc('b'), 80);
    expect(a.authority).toBe(b.authority);
    expect(cm.dispatcherFor(a)).not.toBe(cm.dispatcherFor(b));
    expect(cm.h2For(a)).not.toBe(cm.h2For(b));
    expect(cm.dispatcherFor(a)).toBe(cm.dispatcherFor(upstreamEndpoints(svc('a'), 80)[0]));
    await cm.destroy();
  });

  test('a mesh update keeps the instance a live host (its connections and pools stay)', async () => {
    const { pool, stale } = fakeSessions();
    const cm = manager(pool);
    const [a] = upstreamEndpoints(svc('a'), 80);
    const before = cm.dispatcherFor(a);
    cm.prune(snap);
    expect(stale({ ip: '10.1.9.1', port: 15008, identity: OTHER })).toBe(false);
    expect(stale({ ip: '10.1.0.1', port: 15008, identity: 'spiffe://cluster.local/ns/apps/sa/default' })).toBe(false);
    expect(stale({ ip: '10.1.7.7', port: 15008, identity: OTHER })).toBe(true);
    expect(cm.dispatcherFor(a)).toBe(before);
    await cm.destroy();
  });
});

test('a backend this waypoint does not serve is an outbound cluster (Istio: getWaypointDestinationCluster)', () => {
  const a = svc('a');
  expect(serviceClusterName({ kind: 'service', service: a, port: a.ports[0] }, 'http')).toBe('outbound|80||a.apps.svc.cluster.local');
  const ours = compileMesh({ text: MESH, file: 'chain.yaml', gateway: 'apps/other' }).services.find((s) => s.name === 'a')!;
  expect(serviceClusterName({ kind: 'service', service: ours, port: ours.ports[0] }, 'http')).toBe('inbound-vip|80|http|a.apps.svc.cluster.local');
});

test('NetworkPolicy admission counts the instances as the candidates (a 403 only when it refused them all)', () => {
  // b has no pod of its own: its candidates are the other waypoint's instance.
  expect(hasCandidates({ kind: 'service', service: svc('b'), port: svc('b').ports[0] })).toBe(true);
});

test("a DestinationRule on the backend shapes the cluster of the other waypoint's instances (as Istio's endpoints for a service waypoint)", () => {
  const table = new ClusterTable({ clusters: (x) => destinationRulesFor(x).clusters, metrics: new Registry() });
  const rule = `
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: { name: b, namespace: apps }
spec: { host: b, trafficPolicy: { outlierDetection: { consecutive5xxErrors: 1 } } }`;
  const shaped = MeshStore.fromText(MESH + rule, { gateway: 'apps/ours', parts: [DESTINATION_RULES, table.part] }).current;
  // b has no pod of its own: its one host is the instance.
  const b = shaped.services.find((x) => x.name === 'b')!;
  const state = table.clusterFor({ kind: 'service', service: b, port: b.ports[0] })!;
  expect(state).toMatchObject({ name: 'outbound|80||b.apps.svc.cluster.local', hostCount: 1 });
  table.close();
});
