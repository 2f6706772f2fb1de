/**
 * The endpoint lease shared by HTTP attempts and the TCP proxy: the pick is counted active in the
 * load balancer until released (once), a TCP connection also under the cluster's
 * `tcp.maxConnections`, and a hash is asked for only when the cluster's policy hashes.
 */
import { describe, expect, test } from 'vitest';
import type { Target } from '../../../src/state/types.ts';
import { ClusterState } from '../../../src/upstream/cluster-state.ts';
import { LoadBalancer } from '../../../src/upstream/load-balancer.ts';
import { namespace, pod, service, snapshotOf, usesWaypoint, waypointGateway } from '../../helpers/mesh.ts';
import { leaseEndpoint } from '../../../src/upstream/pick-endpoint.ts';
import { defaultTrafficPolicy, UNLIMITED_POOL, type ClusterTrafficPolicy, type HashKey } from '../../../src/routing/traffic-policy.ts';

const snapshot = snapshotOf(
  waypointGateway('shop'),
  namespace('shop', usesWaypoint()),
  service({ name: 'db', namespace: 'shop', vip: '10.0.0.1', ports: [{ name: 'tcp', port: 5432 }] }),
  pod({ name: 'db-1', namespace: 'shop', labels: { app: 'db' }, ip: '10.1.0.1' }),
);
const target = snapshot.resolveTarget('10.0.0.1', 5432) as Target;

function policy(maxConnections: number, hashKey?: HashKey): ClusterTrafficPolicy {
  const base = defaultTrafficPolicy('LEAST_REQUEST');
  return {
    ...base,
    key: 'shop/db|5432',
    loadBalancer: { simple: 'LEAST_REQUEST', consistentHash: hashKey && { key: hashKey, algorithm: 'RING_HASH', minimumRingSize: 1024, tableSize: 65537 } },
    connectionPool: { ...UNLIMITED_POOL, maxConnections },
  };
}

function clustersWith(cluster: ClusterState | undefined) {
  return { lb: new LoadBalancer('LEAST_REQUEST'), clusterFor: () => cluster };
}

describe('leaseEndpoint', () => {
  test('an HTTP attempt: counted active until released, once', () => {
    const clusters = clustersWith(undefined);
    const lease = leaseEndpoint(clusters, target, '10.0.0.1', {})!;
    expect(lease.ep.authority).toBe('10.1.0.1:5432');
    expect(lease.admitted).toBe(true);
    expect(clusters.lb.activeRequests(lease.ep.authority)).toBe(1);
    const other = leaseEndpoint(clusters, target, '10.0.0.1', {})!;
    expect(clusters.lb.activeRequests(lease.ep.authority)).toBe(2);
    lease.release();
    lease.release();
    expect(clusters.lb.activeRequests(lease.ep.authority)).toBe(1);
    other.release();
    expect(clusters.lb.activeRequests(lease.ep.authority)).toBe(0);
  });

  test('a TCP connection also holds a tcp.maxConnections slot; a full breaker refuses it with nothing counted', () => {
    const cluster = new ClusterState(policy(1));
    const clusters = clustersWith(cluster);
    const first = leaseEndpoint(clusters, target, '10.0.0.1', { connection: true })!;
    expect(first.admitted).toBe(true);
    expect(cluster.activeConnections).toBe(1);
    const second = leaseEndpoint(clusters, target, '10.0.0.1', { connection: true })!;
    expect(second.admitted).toBe(false);
    expect(second.ep).toBe(first.ep);
    expect(clusters.lb.activeRequests(first.ep.authority)).toBe(1);
    second.release();
    expect(cluster.activeConnections).toBe(1);
    first.release();
    first.release();
    expect(cluster.activeConnections).toBe(0);
    expect(clusters.lb.activeRequests(first.ep.authority)).toBe(0);
    // An HTTP attempt to the same cluster is not a TCP connection.
    leaseEndpoint(clusters, target, '10.0.0.1', {})!.release();
    expect(cluster.activeConnections).toBe(0);
  });

  test('the hash is asked for the cluster key only when the cluster hashes', () => {
    const asked: HashKey[] = [];
    const hash = (key: HashKey) => (asked.push(key), 42n);
    leaseEndpoint(clustersWith(undefined), target, '10.0.0.1', { hash })!.release();
    leaseEndpoint(clustersWith(new ClusterState(policy(Infinity))), target, '10.0.0.1', { hash })!.release();
    expect(asked).toEqual([]);
    leaseEndpoint(clustersWith(new ClusterState(policy(Infinity, { kind: 'sourceIp' }))), target, '10.0.0.1', { hash })!.release();
    expect(asked).toEqual([{ kind: 'sourceIp' }]);
  });

  test('no endpoint the admission accepts: undefined, nothing counted', () => {
    const clusters = clustersWith(undefined);
    expect(leaseEndpoint(clusters, target, '10.0.0.1', { admit: () => false })).toBeUndefined();
    expect(clusters.lb.activeRequests('10.1.0.1:5432')).toBe(0);
  });
});
