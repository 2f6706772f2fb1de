/**
 * The `category: networkpolicy` cases of test/data/authz-cases-sample.yaml through the
 * NetworkPolicy engine of the NetworkPolicy mode (src/netpol).
 *
 * Every one of those cases has `enforcer: cni`: upstream, a CNI decides them on packets, and that
 * stays true with this waypoint (it never stands in for the CNI on the outer HBONE packets). What
 * the mode does is apply the same NetworkPolicy semantics to the original client and the inner
 * port, so each packet check (source pod or address, destination pod, destination port, the
 * destination's container port names) is run here as that evaluation and must reach the case's
 * decision. The checks whose meaning is specific to outer packets still pass as evaluations, but
 * are noted: NP-01 (port 15008 of HBONE itself) and NP-09 (the waypoint pod as the source, the very
 * problem this mode exists for). A check needing a textual policy patch (`with_policy_patch`) is
 * listed as not run. Fixture addresses are data here (nothing is dialed) and still remapped to 127.x.
 */
import { describe, expect, test } from 'vitest';
import { stringify } from 'yaml';
import { NETWORK_POLICIES, networkPolicyFor } from '../../../src/netpol/compile.ts';
import { compileMesh } from '../../../src/state/compile.ts';
import type { MeshSnapshot } from '../../../src/state/types.ts';
import { cases, remapTo127, type Case, type Check } from '../../helpers/authz-cases.ts';

interface Packet {
  readonly src?: string;
  readonly src_pod?: string;
  readonly dst?: string;
  readonly dst_pod?: string;
  readonly dst_port: number;
  readonly proto?: string;
}

const NP_CASES = cases.filter((c) => (c as Case & { category?: string }).category === 'networkpolicy');
/** Packet-level meaning the evaluation does not capture (kept visible in the test names). */
const OUTER_PACKET_NOTE: Record<string, string> = {
  'NP-01': 'HBONE port 15008 is the CNI’s matter on the outer packet',
  'NP-09': 'the CNI sees the waypoint pod as the source: what this mode works around',
};

/** Labels of a case's pod names: the Kubernetes e2e convention `pod: <name>` in x/y/z, `app: <name>` elsewhere. */
function labelsOf(ref: string): Record<string, string> {
  if (ref === 'foo/my-app-pod') return { 'app.kubernetes.io/name': 'my-app' };
  const [ns, name] = ref.split('/');
  if (['x', 'y', 'z'].includes(ns)) return { pod: name };
  if (name === 'waypoint') return { 'gateway.networking.k8s.io/gateway-name': 'waypoint' };
  return { app: name };
}

const podRef = (p: Packet, side: 'src' | 'dst'): string | undefined => {
  const ref = side === 'src' ? p.src_pod : (p.dst_pod ?? p.dst);
  if (!ref) return undefined;
  return ref.includes('/') ? ref : `foo/${ref}`;
};

/** The mesh of one check: the case's policies, the source and destination pods, a waypoint Gateway. */
function meshOf(c: Case, check: Check): { snap: MeshSnapshot; src: { ip: string | undefined; podRef: string | undefined }; dst: string; port: number } {
  const p = check.request.packet as Packet;
  const dst = podRef(p, 'dst')!;
  const src = podRef(p, 'src');
  const srcIp = p.src ? remapTo127(p.src) : src ? '127.0.106.21' : undefined;
  const names = (check as Check & { request: { dst_container_port_names?: Record<string, number> } }).request.dst_container_port_names ?? {};
  const pod = (ref: string, ip: string, ports: Record<string, number> = {}) => {
    const [namespace, name] = ref.split('/');
    const containers = Object.keys(ports).length ? [{ name: 'app', ports: Object.entries(ports).map(([n, containerPort]) => ({ name: n, containerPort })) }] : [];
    return { apiVersion: 'v1', kind: 'Pod', metadata: { name, namespace, labels: labelsOf(ref) }, spec: { serviceAccountName: name, containers }, status: { podIP: ip } };
  };
  const objects: object[] = [
    { apiVersion: 'gateway.networking.k8s.io/v1', kind: 'Gateway', metadata: { name: 'waypoint', namespace: 'istio-system' }, spec: { gatewayClassName: 'istio-waypoint', listeners: [{ name: 'mesh', port: 15008, protocol: 'HBONE' }] } },
    pod(dst, '127.0.106.11', names),
    ...(src && src !== dst ? [pod(src, srcIp!)] : []),
    ...c.policies.map(remapTo127),
  ];
  const snap = compileMesh({ text: objects.map((o) => stringify(o)).join('---\n'), file: `${c.id}.yaml`, parts: [NETWORK_POLICIES] });
  return { snap, src: { ip: srcIp, podRef: src }, dst, port: p.dst_port };
}

function decide(c: Case, check: Check): 'allow' | 'deny' {
  const { snap, src, dst, port } = meshOf(c, check);
  const find = (ref: string) => snap.workloads.find((w) => `${w.namespace}/${w.name}` === ref)!;
  const source = { ip: src.ip, pod: src.podRef ? find(src.podRef) : undefined };
  return networkPolicyFor(snap).allows(source, find(dst), port) ? 'allow' : 'deny';
}

describe('authz-cases-sample.yaml, category networkpolicy (enforcer: cni), through the NetworkPolicy engine', () => {
  test('the sample has NetworkPolicy cases with packet checks', () => {
    expect(NP_CASES.length).toBeGreaterThanOrEqual(5);
  });
  for (const c of NP_CASES) {
    describe(`${c.id}: ${c.title}`, () => {
      for (const check of c.checks) {
        const note = OUTER_PACKET_NOTE[c.id] ? ` [outer-packet meaning: ${OUTER_PACKET_NOTE[c.id]}]` : '';
        if ((check as Check & { with_policy_patch?: string }).with_policy_patch) {
          test.skip(`${check.id}: needs a textual policy patch, not run`, () => {});
          continue;
        }
        test(`${check.id}: ${check.expect.decision}${note}`, () => {
          expect(decide(c, check)).toBe(check.expect.decision);
        });
      }
    });
  }
});
