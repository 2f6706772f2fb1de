/**
 * NetworkPolicy semantics on the original client (kubernetes/api networking/v1/types.go): isolation and
 * default deny, union of policies, policyTypes defaults, every peer form (podSelector alone = the
 * policy's namespace, namespaceSelector alone, both in one peer = AND, separate peers = OR),
 * matchExpressions operators, namespaces by `kubernetes.io/metadata.name` (declared or not), ipBlock
 * with except, ports (TCP only, ranges, named ports of the destination pod). Policies are compiled
 * from a real mesh file (compileMesh) and evaluated with the compiled evaluator the data path uses.
 * Addresses: 127.0.102.x (data only: nothing is dialed).
 */
import { describe, expect, test } from 'vitest';
import { compileNetworkPolicies, NETWORK_POLICIES, networkPolicyFor } from '../../../src/netpol/compile.ts';
import { originalSource, type OriginalSource } from '../../../src/netpol/source.ts';
import type { ConnectInfo } from '../../../src/pipeline/context.ts';
import { compileMesh } from '../../../src/state/compile.ts';
import type { MeshSnapshot, Workload } from '../../../src/state/types.ts';
import { meshText, namespace, pod as podDoc, waypointGateway } from '../../helpers/mesh.ts';

const NET = '127.0.102';

/** Pods: name → [namespace, labels, ip, container ports]. */
const PODS: Record<string, [string, Record<string, string>, string, Record<string, number>?]> = {
  'x/a': ['x', { pod: 'a' }, `${NET}.1`, { 'serve-81-tcp': 81, http: 8080 }],
  'x/b': ['x', { pod: 'b' }, `${NET}.2`, { 'serve-82-tcp': 82 }],
  'x/c': ['x', { pod: 'c' }, `${NET}.3`],
  'y/a': ['y', { pod: 'a' }, `${NET}.4`],
  'y/b': ['y', { pod: 'b' }, `${NET}.5`],
  'z/a': ['z', { pod: 'a' }, `${NET}.6`], // namespace z has no Namespace object
};

function meshOf(policies: string[]): string {
  const pods = Object.entries(PODS).map(([ref, [ns, labels, ip, ports]]) => {
    const name = ref.split('/')[1];
    return podDoc({ name, namespace: ns, labels, sa: `sa-${name}`, ip, ports });
  });
  return meshText(
    waypointGateway('x'),
    namespace('x', { team: 'a' }),
    namespace('y', { team: 'b', env: 'prod' }),
    `apiVersion: networking.istio.io/v1
kind: WorkloadEntry
metadata: { name: vm, namespace: x, labels: { pod: a } }
spec: { address: "${NET}.7", serviceAccount: vm }`,
    ...pods,
    ...policies,
  );
}

function snapshotOf(...policies: string[]): MeshSnapshot {
  return compileMesh({ text: meshOf(policies), file: 'mesh.yaml', parts: [NETWORK_POLICIES] });
}

function pod(snap: MeshSnapshot, ref: string): Workload {
  const [ns, name] = ref.split('/');
  const w = snap.workloads.find((x) => x.namespace === ns && x.name === name);
  if (!w) throw new Error(`no pod ${ref}`);
  return w;
}

const from = (snap: MeshSnapshot, ref: string): OriginalSource => {
  const w = pod(snap, ref);
  return { ip: w.addresses[0], pod: w };
};
const external = (ip: string): OriginalSource => ({ ip, pod: undefined });

/** Decision for TCP to pod `to` on `port` from `src` (a pod ref or a source). */
function allows(snap: MeshSnapshot, src: string | OriginalSource, to: string, port = 80): boolean {
  return networkPolicyFor(snap).allows(typeof src === 'string' ? from(snap, src) : src, pod(snap, to), port);
}

const policy = (name: string, spec: string, ns = 'x') => `apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: { name: ${name}, namespace: ${ns} }
spec:
${spec}`;

describe('isolation, default deny, union, policyTypes', () => {
  test('a pod no policy selects accepts everything; selected with no rules = deny all', () => {
    const none = snapshotOf();
    expect(allows(none, 'y/b', 'x/a')).toBe(true);
    const snap = snapshotOf(policy('deny', '  podSelector: { matchLabels: { pod: a } }'));
    expect(allows(snap, 'x/b', 'x/a')).toBe(false);
    expect(allows(snap, external(`${NET}.200`), 'x/a')).toBe(false);
    expect(allows(snap, 'x/a', 'x/b')).toBe(true); // x/b is not selected
    expect(networkPolicyFor(snap).ingressOf(pod(snap, 'x/a').uid)?.policies).toEqual(['NetworkPolicy/x/deny']);
  });

  test('ingress: [] denies all, ingress: [{}] allows all; podSelector {} selects the whole namespace only', () => {
    const empty = snapshotOf(policy('p', '  podSelector: {}\n  ingress: []'));
    expect(allows(empty, 'x/b', 'x/a')).toBe(false);
    expect(allows(empty, 'x/a', 'y/a')).toBe(true); // other namespace untouched
    const all = snapshotOf(policy('p', '  podSelector: {}\n  ingress: [{}]'));
    expect(allows(all, 'y/b', 'x/a')).toBe(true);
    expect(allows(all, external('192.0.2.1'), 'x/c')).toBe(true);
  });

  test('the union of every selecting policy allows (no deny rules, order irrelevant)', () => {
    const denyAll = policy('deny-all', '  podSelector: {}');
    const allowB = policy('allow-b', '  podSelector: { matchLabels: { pod: a } }\n  ingress: [{ from: [{ podSelector: { matchLabels: { pod: b } } }] }]');
    for (const snap of [snapshotOf(denyAll, allowB), snapshotOf(allowB, denyAll)]) {
      expect(allows(snap, 'x/b', 'x/a')).toBe(true);
      expect(allows(snap, 'x/c', 'x/a')).toBe(false);
      expect(allows(snap, 'x/b', 'x/c')).toBe(false); // only deny-all selects x/c
    }
  });

  test('policyTypes defaults: Ingress always unless listed otherwise; egress-only policies isolate nothing for ingress', () => {
    const egressOnly = snapshotOf(policy('p', '  podSelector: {}\n  policyTypes: [Egress]\n  egress: [{}]'));
    expect(allows(egressOnly, 'y/b', 'x/a')).toBe(true);
    // No policyTypes but an egress section: defaulted to [Ingress, Egress]; no ingress rules ⇒ deny.
    const defaulted = snapshotOf(policy('p', '  podSelector: {}\n  egress: [{}]'));
    expect(allows(defaulted, 'y/b', 'x/a')).toBe(false);
    const both = snapshotOf(policy('p', '  podSelector: {}\n  policyTypes: [Ingress, Egress]\n  ingress: [{ from: [{ podSelector: {} }] }]'));
    expect(allows(both, 'x/b', 'x/a')).toBe(true);
    expect(allows(both, 'y/b', 'x/a')).toBe(false);
  });

  test('only Pods are selected: a WorkloadEntry destination is never isolated, and as a source only ipBlock can match it', () => {
    const snap = snapshotOf(policy('p', '  podSelector: {}\n  ingress: [{ from: [{ podSelector: {} }] }]'));
    const vm = snap.workloads.find((w) => w.kind === 'WorkloadEntry')!;
    expect(networkPolicyFor(snap).allows(from(snap, 'y/b'), vm, 80)).toBe(true);
    expect(networkPolicyFor(snap).allows({ ip: vm.addresses[0], pod: undefined }, pod(snap, 'x/a'), 80)).toBe(false);
  });
});

describe('peers', () => {
  test('podSelector alone = pods of the policy namespace', () => {
    const snap = snapshotOf(policy('p', '  podSelector: { matchLabels: { pod: a } }\n  ingress: [{ from: [{ podSelector: { matchLabels: { pod: b } } }] }]'));
    expect(allows(snap, 'x/b', 'x/a')).toBe(true);
    expect(allows(snap, 'y/b', 'x/a')).toBe(false); // same labels, other namespace
    expect(allows(snap, 'x/c', 'x/a')).toBe(false);
    expect(allows(snap, external(`${NET}.2`), 'x/a')).toBe(false); // x/b's IP without x/b's identity
  });

  test('namespaceSelector alone = every pod of the matching namespaces', () => {
    const snap = snapshotOf(policy('p', '  podSelector: {}\n  ingress: [{ from: [{ namespaceSelector: { matchLabels: { team: b } } }] }]'));
    expect(allows(snap, 'y/a', 'x/a')).toBe(true);
    expect(allows(snap, 'y/b', 'x/a')).toBe(true);
    expect(allows(snap, 'x/b', 'x/a')).toBe(false);
    const any = snapshotOf(policy('p', '  podSelector: {}\n  ingress: [{ from: [{ namespaceSelector: {} }] }]'));
    expect(allows(any, 'z/a', 'x/a')).toBe(true);
    expect(allows(any, external('192.0.2.1'), 'x/a')).toBe(false); // not a pod
  });

  test('both selectors in one peer = AND; in separate peers = OR', () => {
    const and = snapshotOf(
      policy('p', '  podSelector: {}\n  ingress:\n  - from:\n    - namespaceSelector: { matchLabels: { team: b } }\n      podSelector: { matchLabels: { pod: b } }'),
    );
    expect(allows(and, 'y/b', 'x/a')).toBe(true);
    expect(allows(and, 'y/a', 'x/a')).toBe(false);
    expect(allows(and, 'x/b', 'x/a')).toBe(false);
    const or = snapshotOf(
      policy('p', '  podSelector: {}\n  ingress:\n  - from:\n    - namespaceSelector: { matchLabels: { team: b } }\n    - podSelector: { matchLabels: { pod: b } }'),
    );
    expect(allows(or, 'y/a', 'x/a')).toBe(true);
    expect(allows(or, 'x/b', 'x/a')).toBe(true);
    expect(allows(or, 'x/c', 'x/a')).toBe(false);
  });

  test('namespaces by kubernetes.io/metadata.name, declared or not (and the snapshot carries the label)', () => {
    const snap = snapshotOf(
      policy('p', '  podSelector: {}\n  ingress: [{ from: [{ namespaceSelector: { matchLabels: { kubernetes.io/metadata.name: z } } }, { namespaceSelector: { matchLabels: { kubernetes.io/metadata.name: y } } }] }]'),
    );
    expect(snap.namespaces.get('y')?.['kubernetes.io/metadata.name']).toBe('y');
    expect(allows(snap, 'z/a', 'x/a')).toBe(true);
    expect(allows(snap, 'y/a', 'x/a')).toBe(true);
    expect(allows(snap, 'x/b', 'x/a')).toBe(false);
  });

  test('matchExpressions: In, NotIn (also matches a missing key), Exists, DoesNotExist, ANDed with matchLabels', () => {
    const expr = (e: string) =>
      snapshotOf(policy('p', `  podSelector: { matchLabels: { pod: a } }\n  ingress: [{ from: [{ namespaceSelector: { matchExpressions: [${e}] } }] }]`));
    const isIn = expr('{ key: team, operator: In, values: [b, c] }');
    expect([allows(isIn, 'y/a', 'x/a'), allows(isIn, 'x/b', 'x/a'), allows(isIn, 'z/a', 'x/a')]).toEqual([true, false, false]);
    const notIn = expr('{ key: team, operator: NotIn, values: [a] }');
    expect([allows(notIn, 'y/a', 'x/a'), allows(notIn, 'x/b', 'x/a'), allows(notIn, 'z/a', 'x/a')]).toEqual([true, false, true]);
    const exists = expr('{ key: env, operator: Exists }');
    expect([allows(exists, 'y/a', 'x/a'), allows(exists, 'x/b', 'x/a'), allows(exists, 'z/a', 'x/a')]).toEqual([true, false, false]);
    const absent = expr('{ key: env, operator: DoesNotExist }');
    expect([allows(absent, 'y/a', 'x/a'), allows(absent, 'x/b', 'x/a'), allows(absent, 'z/a', 'x/a')]).toEqual([false, true, true]);
    const both = snapshotOf(
      policy('p', '  podSelector: { matchLabels: { pod: a } }\n  ingress: [{ from: [{ podSelector: { matchLabels: { pod: b }, matchExpressions: [{ key: pod, operator: In, values: [c] }] } }] }]'),
    );
    expect(allows(both, 'x/b', 'x/a')).toBe(false);
    expect(allows(both, 'x/c', 'x/a')).toBe(false);
  });

  test('ipBlock: inside cidr and outside every except; another peer may still allow an excepted address', () => {
    const block = `{ ipBlock: { cidr: ${NET}.0/24, except: [${NET}.128/25, ${NET}.2/32] } }`;
    const snap = snapshotOf(policy('p', `  podSelector: { matchLabels: { pod: a } }\n  ingress: [{ from: [${block}] }]`));
    expect(allows(snap, external(`${NET}.100`), 'x/a')).toBe(true);
    expect(allows(snap, external(`${NET}.200`), 'x/a')).toBe(false);
    expect(allows(snap, external('127.0.103.1'), 'x/a')).toBe(false);
    expect(allows(snap, external('::1'), 'x/a')).toBe(false); // other family
    expect(allows(snap, 'x/c', 'x/a')).toBe(true); // a pod source matches by its IP too
    expect(allows(snap, 'x/b', 'x/a')).toBe(false); // x/b's /32 is excepted
    const union = snapshotOf(
      policy('p', `  podSelector: { matchLabels: { pod: a } }\n  ingress: [{ from: [${block}] }]`),
      policy('q', `  podSelector: { matchLabels: { pod: a } }\n  ingress: [{ from: [{ ipBlock: { cidr: ${NET}.2/32 } }] }]`),
    );
    expect(allows(union, 'x/b', 'x/a')).toBe(true);
    expect(allows(union, external(`${NET}.200`), 'x/a')).toBe(false);
  });
});

describe('ports', () => {
  const withPorts = (ports: string) =>
    snapshotOf(policy('p', `  podSelector: { matchLabels: { pod: a } }\n  ingress: [{ from: [{ podSelector: {} }], ports: [${ports}] }]`));

  test('a number (protocol defaults to TCP); UDP and SCTP rules never allow TCP', () => {
    const tcp = withPorts('{ port: 8080 }');
    expect([allows(tcp, 'x/b', 'x/a', 8080), allows(tcp, 'x/b', 'x/a', 8081)]).toEqual([true, false]);
    expect(allows(withPorts('{ port: 8080, protocol: UDP }'), 'x/b', 'x/a', 8080)).toBe(false);
    expect(allows(withPorts('{ port: 8080, protocol: SCTP }'), 'x/b', 'x/a', 8080)).toBe(false);
    expect(allows(withPorts('{ protocol: UDP }'), 'x/b', 'x/a', 8080)).toBe(false);
    expect(allows(withPorts('{ protocol: TCP }'), 'x/b', 'x/a', 1234)).toBe(true); // no port = every TCP port
  });

  test('endPort: an inclusive range', () => {
    const range = withPorts('{ port: 32000, endPort: 32768 }');
    expect([31999, 32000, 32500, 32768, 32769].map((p) => allows(range, 'x/b', 'x/a', p))).toEqual([false, true, true, true, false]);
  });

  test("named ports resolve against the destination pod's container ports", () => {
    const named = withPorts('{ port: serve-81-tcp }, { port: serve-82-tcp }');
    expect(allows(named, 'x/b', 'x/a', 81)).toBe(true);
    expect(allows(named, 'x/b', 'x/a', 80)).toBe(false);
    expect(allows(named, 'x/b', 'x/a', 82)).toBe(false); // serve-82-tcp is x/b's port, not x/a's
  });

  test('rule = (any peer) AND (any port)', () => {
    const snap = snapshotOf(
      policy('p', '  podSelector: { matchLabels: { pod: a } }\n  ingress:\n  - from: [{ podSelector: { matchLabels: { pod: b } } }]\n    ports: [{ port: 81 }]\n  - ports: [{ port: 82 }]'),
    );
    expect(allows(snap, 'x/b', 'x/a', 81)).toBe(true);
    expect(allows(snap, 'x/c', 'x/a', 81)).toBe(false);
    expect(allows(snap, 'x/c', 'x/a', 82)).toBe(true);
    expect(allows(snap, 'x/b', 'x/a', 83)).toBe(false);
  });
});

describe('the original source and the admission', () => {
  const info = (o: Partial<ConnectInfo>): ConnectInfo => ({
    peer: { uri: '', trustDomain: 'cluster.local', namespace: '', serviceAccount: '' },
    downstreamAddress: `${NET}.50`,
    downstreamPort: 40000,
    authority: `${NET}.1:80`,
    targetIp: `${NET}.1`,
    targetPort: 80,
    forwarded: '',
    baggage: '',
    traceparent: '',
    ...o,
  });

  test('forwarded for= wins over the peer address; the pod counts only with its own identity', () => {
    const snap = snapshotOf();
    const b = pod(snap, 'x/b');
    const peer = { uri: b.identity, trustDomain: 'cluster.local', namespace: 'x', serviceAccount: 'sa-b' };
    expect(originalSource(snap, info({ peer, forwarded: `for="${NET}.2:5555"` }))).toEqual({ ip: `${NET}.2`, pod: b });
    expect(originalSource(snap, info({ peer, downstreamAddress: `${NET}.2` }))).toEqual({ ip: `${NET}.2`, pod: b });
    const other = { ...peer, uri: pod(snap, 'x/c').identity };
    expect(originalSource(snap, info({ peer: other, forwarded: `for=${NET}.2` }))).toEqual({ ip: `${NET}.2`, pod: undefined });
    expect(originalSource(snap, info({ peer }))).toEqual({ ip: `${NET}.50`, pod: undefined });
  });

  test('admissions are per source; none when no pod is isolated', () => {
    expect(networkPolicyFor(snapshotOf()).admission(external(`${NET}.9`))).toBeUndefined();
    const snap = snapshotOf(policy('p', '  podSelector: { matchLabels: { pod: a } }\n  ingress: [{ from: [{ podSelector: { matchLabels: { pod: b } } }] }]'));
    const np = networkPolicyFor(snap);
    expect(networkPolicyFor(snap)).toBe(np);
    expect(compileNetworkPolicies(snap)).not.toBe(np); // compiled once, with the snapshot
    const a = np.admission(from(snap, 'x/b'))!;
    const toA = { workload: pod(snap, 'x/a'), address: `${NET}.1`, targetPort: 80, tunnel: 'HBONE' as const, authority: `${NET}.1:80` };
    expect(a.admit(toA)).toBe(true);
    expect(np.admission(from(snap, 'x/c'))!.admit(toA)).toBe(false);
  });
});
