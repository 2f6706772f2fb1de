/**
 * The tunnel decision of the NetworkPolicy mode (src/netpol/enforce.ts) on real compiled snapshots:
 * at CONNECT time a service is reachable when one of its endpoints admits the client (the relay
 * then picks among those), refused with `network_policy_access_denied` and flag `DENY` when none
 * does; an open tunnel is judged on the endpoint it relays to; no endpoint at all is not a policy
 * matter; workload-addressed targets are judged on the workload and the dialed port.
 * Addresses: 127.0.107.x (data only: nothing is dialed).
 */
import { describe, expect, test } from 'vitest';
import { CONNECTION_ADMISSION } from '../../../src/netpol/admission.ts';
import { NETWORK_POLICIES, networkPolicyFor } from '../../../src/netpol/compile.ts';
import { decideTunnel } from '../../../src/netpol/enforce.ts';
import { ConnectionContext, type ConnectInfo } from '../../../src/pipeline/context.ts';
import { compileMesh } from '../../../src/state/compile.ts';
import type { MeshSnapshot, Target } from '../../../src/state/types.ts';

const NET = '127.0.107';
const CLIENT = 'spiffe://cluster.local/ns/client/sa/client';

/** One Kubernetes object per line of `docs` (`apiVersion kind {metadata} {spec}` in flow style). */
const objects = (docs: readonly [string, string, string, string?][]): string =>
  docs.map(([apiVersion, kind, metadata, rest]) => `apiVersion: ${apiVersion}\nkind: ${kind}\nmetadata: ${metadata}\n${rest ?? ''}`).join('\n---\n');

/** Service `app/db` (VIP .100:5432) with `replicas` pods db-1 (.11), db-2 (.12), a client pod (.21), and `policy`. */
function snapshotOf(policy: string, replicas = 2): MeshSnapshot {
  const pods = [1, 2].slice(0, replicas).map((i): [string, string, string, string] => [
    'v1',
    'Pod',
    `{ name: db-${i}, namespace: app, labels: { app: db, replica: "r${i}" } }`,
    `spec: { serviceAccountName: db }\nstatus: { podIP: "${NET}.1${i}" }`,
  ]);
  const text = objects([
    ['gateway.networking.k8s.io/v1', 'Gateway', '{ name: waypoint, namespace: app, labels: { istio.io/waypoint-for: all } }', 'spec: { gatewayClassName: istio-waypoint, listeners: [{ name: mesh, port: 15008, protocol: HBONE }] }'],
    ['v1', 'Namespace', '{ name: app, labels: { istio.io/use-waypoint: waypoint } }'],
    ['v1', 'Service', '{ name: db, namespace: app }', `spec: { clusterIP: "${NET}.100", selector: { app: db }, ports: [{ name: tcp, port: 5432, targetPort: 5432 }] }`],
    ['v1', 'Pod', '{ name: client, namespace: client, labels: { role: client } }', `spec: { serviceAccountName: client }\nstatus: { podIP: "${NET}.21" }`],
    ...pods,
  ]);
  return compileMesh({ file: 'mesh.yaml', text: `${text}\n---\n${policy}`, parts: [NETWORK_POLICIES] });
}

/** Deny-all on the replicas matching `replicas` (e.g. `[r1]`). */
const denyOn = (replicas: string) => `apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: { name: deny, namespace: app }
spec: { podSelector: { matchExpressions: [{ key: replica, operator: In, values: ${replicas} }] } }`;

function tunnel(snap: MeshSnapshot, ip: string, port: number): { conn: ConnectionContext; target: Target } {
  const target = snap.resolveTarget(ip, port)!;
  const info: ConnectInfo = {
    peer: { uri: CLIENT, trustDomain: 'cluster.local', namespace: 'client', serviceAccount: 'client' },
    downstreamAddress: `${NET}.21`,
    downstreamPort: 40000,
    authority: `${ip}:${port}`,
    targetIp: ip,
    targetPort: port,
    forwarded: '',
    baggage: '',
    traceparent: '',
  };
  return { conn: new ConnectionContext(info, snap, target, 'TCP'), target };
}

describe('decideTunnel', () => {
  test('one admitting endpoint is enough at CONNECT time; the admission then refuses the other', () => {
    const snap = snapshotOf(denyOn('[r1]'));
    const { conn, target } = tunnel(snap, `${NET}.100`, 5432);
    expect(decideTunnel(conn, snap, target)).toBeUndefined();
    expect(conn.responseFlags).toBe('-');
    const admit = conn.get(CONNECTION_ADMISSION)!.admit;
    const eps = target.kind === 'service' ? target.service.endpoints.get(5432)! : [];
    expect(eps.map((ep) => [ep.workload.name, admit(ep)])).toEqual([
      ['db-1', false],
      ['db-2', true],
    ]);
  });

  test('no admitting endpoint: denied with DENY', () => {
    const snap = snapshotOf(denyOn('[r1, r2]'));
    const { conn, target } = tunnel(snap, `${NET}.100`, 5432);
    expect(decideTunnel(conn, snap, target)).toBe('network_policy_access_denied');
    expect(conn.responseFlags).toBe('DENY');
  });

  test('an open tunnel is judged on the endpoint it relays to (re-check after a mesh change)', () => {
    const before = snapshotOf(denyOn('[none]'));
    const { conn, target } = tunnel(before, `${NET}.100`, 5432);
    expect(decideTunnel(conn, before, target)).toBeUndefined();
    conn.endpoint = target.kind === 'service' ? target.service.endpoints.get(5432)![0] : undefined; // relaying to db-1
    const after = snapshotOf(denyOn('[r1]'));
    const now = after.resolveTarget(`${NET}.100`, 5432)!;
    expect(decideTunnel(conn, after, now)).toBe('network_policy_access_denied');
    conn.endpoint = now.kind === 'service' ? now.service.endpoints.get(5432)![1] : undefined; // db-2 still admits
    expect(decideTunnel(conn, after, now)).toBeUndefined();
    expect(conn.responseFlags).toBe('-');
  });

  test('no endpoint at all is not a policy matter (the relay answers 503 UH)', () => {
    // Some pod is isolated (the client), so the mode is active, but db has no endpoint.
    const isolateClient = `apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: { name: c, namespace: client }
spec: { podSelector: {} }`;
    const snap = snapshotOf(`${denyOn('[r1, r2]')}\n---\n${isolateClient}`, 0);
    expect(networkPolicyFor(snap).admission({ ip: undefined, pod: undefined })).toBeDefined();
    const { conn, target } = tunnel(snap, `${NET}.100`, 5432);
    expect(decideTunnel(conn, snap, target)).toBeUndefined();
  });

  test('workload-addressed: the workload on the dialed port', () => {
    const portOnly = `apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: { name: p, namespace: app }
spec: { podSelector: { matchLabels: { replica: r1 } }, ingress: [{ ports: [{ port: 5432 }] }] }`;
    const snap = snapshotOf(portOnly);
    const ok = tunnel(snap, `${NET}.11`, 5432);
    expect(ok.target.kind).toBe('workload');
    expect(decideTunnel(ok.conn, snap, ok.target)).toBeUndefined();
    const other = tunnel(snap, `${NET}.11`, 22);
    expect(decideTunnel(other.conn, snap, other.target)).toBe('network_policy_access_denied');
  });
});
