/**
 * The cluster table (src/upstream/cluster-table.ts): DestinationRule-shaped clusters get their
 * state when a snapshot is published, keep it across reloads (counts, ejections, hash tables),
 * lose it when their rule goes; the data path only looks a target's cluster up, also for a target
 * of the previous snapshot (a request that started before the reload).
 */
import { Registry } from 'prom-client';
import { describe, expect, test } from 'vitest';
import { DESTINATION_RULES, destinationRulesFor } from '../../../src/routing/index.ts';
import { MeshStore } from '../../../src/state/store.ts';
import type { MeshSnapshot, Target } from '../../../src/state/types.ts';
import { LoadBalancer } from '../../../src/upstream/load-balancer.ts';
import { meshText, namespace, pod, service, servicePort, usesWaypoint, waypointGateway } from '../../helpers/mesh.ts';
import { ClusterTable } from '../../../src/upstream/cluster-table.ts';

const BASE = meshText(
  waypointGateway('shop'),
  namespace('shop', usesWaypoint()),
  service({ name: 'reviews', namespace: 'shop', vip: '10.96.0.10', ports: [servicePort('http', 9080)] }),
  service({ name: 'ratings', namespace: 'shop', vip: '10.96.0.11', ports: [servicePort('http', 9080)] }),
  ...[1, 2, 3].map((i) => pod({ name: `reviews-${i}`, namespace: 'shop', labels: { app: 'reviews' }, ip: `10.1.0.${i}`, ports: { http: 9080 } })),
);
const rule = (trafficPolicy: string) => `---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: { name: reviews, namespace: shop }
spec:
  host: reviews
  trafficPolicy: ${trafficPolicy}
`;

/** A table, and a function that compiles and publishes a mesh to it (what a MeshStore does on each reload). */
function newTable(): { table: ClusterTable; publish(text: string): MeshSnapshot } {
  const table = new ClusterTable({ clusters: (s) => destinationRulesFor(s).clusters, metrics: new Registry() });
  return { table, publish: (text) => MeshStore.fromText(text, { parts: [DESTINATION_RULES, table.part] }).current };
}
const endpointsOf = (t: Target) => (t as Extract<Target, { kind: 'service' }>).service.endpoints.get(9080)!;

const reviews = (s: MeshSnapshot): Target => s.resolveTarget('10.96.0.10', 9080)!;
const ratings = (s: MeshSnapshot): Target => s.resolveTarget('10.96.0.11', 9080)!;

describe('ClusterTable', () => {
  test('a shaped cluster has its state once published; others and workload targets have none', () => {
    const { table, publish } = newTable();
    const s = publish(BASE + rule('{ connectionPool: { http: { http2MaxRequests: 7 } } }'));
    const state = table.clusterFor(reviews(s))!;
    expect(state).toMatchObject({ key: 'shop/reviews.shop.svc.cluster.local|9080', name: 'inbound-vip|9080|http|reviews.shop.svc.cluster.local', hostCount: 3 });
    expect(state.policy.connectionPool.maxRequests).toBe(7);
    expect(table.clusterFor(reviews(s))).toBe(state);
    expect(table.clusterFor(ratings(s))).toBeUndefined();
    expect(table.clusterFor({ kind: 'workload', workload: s.workloads[0], port: 9080 })).toBeUndefined();
    expect(table.dump()).toEqual([expect.objectContaining({ key: state.key, source: 'DestinationRule/shop/reviews', hosts: 3 })]);
  });

  test('state carries across snapshots (in-flight counts, hash tables), takes the new limits, and goes with its rule', () => {
    const { table, publish } = newTable();
    const first = publish(BASE + rule('{ loadBalancer: { consistentHash: { useSourceIp: true } }, connectionPool: { http: { http2MaxRequests: 7 } } }'));
    const state = table.clusterFor(reviews(first))!;
    state.activeRequests = 2;
    const endpoints = endpointsOf(reviews(first));
    const lb = new LoadBalancer('LEAST_REQUEST');
    const picked = state.pick(endpoints, lb, 12345n, undefined)!;
    expect(state.pick(endpoints, lb, 12345n, undefined)).toBe(picked);

    const second = publish(BASE + rule('{ loadBalancer: { consistentHash: { useSourceIp: true } }, connectionPool: { http: { http2MaxRequests: 9 } } }'));
    expect(table.clusterFor(reviews(second))).toBe(state);
    expect(state.activeRequests).toBe(2);
    expect(state.policy.connectionPool.maxRequests).toBe(9);
    // A request that started under the first snapshot still finds its cluster.
    expect(table.clusterFor(reviews(first))).toBe(state);
    // Same hosts, same hash settings: the same key picks the same host.
    expect(state.pick(endpointsOf(reviews(second)), lb, 12345n, undefined)!.authority).toBe(picked.authority);

    const third = publish(BASE);
    expect(table.clusterFor(reviews(third))).toBeUndefined();
    expect(table.clusterFor(reviews(first))).toBeUndefined();
    expect(table.dump()).toEqual([]);
  });
});
