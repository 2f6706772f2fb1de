/**
 * Compile the ingress NetworkPolicies of a mesh snapshot once into per-destination-pod rule sets
 * (kubernetes/api `networking/v1/types.go` semantics), so that a decision is one Map lookup plus
 * the few rules of the policies that select that pod:
 * - a Pod is **isolated for ingress** when any policy of its namespace with `Ingress` in its
 *   (defaulted) `policyTypes` selects it through `spec.podSelector`; an isolated pod accepts only
 *   the union of those policies' ingress rules (none ⇒ deny all); a pod no policy selects accepts
 *   everything;
 * - a rule matches when one of its peers matches the source (none listed ⇒ every source) and one
 *   of its ports matches the destination port (none listed ⇒ every port);
 * - peers: `podSelector` alone = pods of the policy's namespace; `namespaceSelector` alone = every
 *   pod of the matching namespaces; both in one peer = pods matching both (AND); `ipBlock` = the
 *   source IP inside `cidr` and outside every `except`;
 * - ports: TCP only (the waypoint carries TCP; a UDP/SCTP rule never allows it), a number, an
 *   inclusive `port..endPort` range, or a container port name resolved on the destination Pod.
 * Namespaces are matched on their labels plus `kubernetes.io/metadata.name: <name>`, which the API
 * server sets on every namespace (also on namespaces the mesh file does not declare).
 * Egress policies are the client's CNI's business and are not evaluated (a waypoint cannot stand in
 * for the source pod's egress enforcement).
 */
import { ConfigError } from '../util/index.ts';
import { definePart, locateField, type Endpoint, type MeshSnapshot, type Workload } from '../state/index.ts';
import type { EndpointAdmission } from './admission.ts';
import { NAMESPACE_NAME_LABEL, parseNetworkPolicy, type IngressRule, type NetworkPolicy, type Peer, type PortRule } from './policy.ts';
import type { Labels } from './selector.ts';
import type { OriginalSource } from './source.ts';

/** The ingress rules that apply to one isolated pod. */
export interface PodIngress {
  /** Refs of the policies isolating the pod, in file order (for logs). */
  readonly policies: readonly string[];
  /** Union of their rules; empty = deny all. */
  readonly rules: readonly CompiledRule[];
}

/** A rule with its peers bound to the policy's namespace. */
export interface CompiledRule {
  readonly peers: readonly ((src: OriginalSource) => boolean)[] | undefined;
  readonly ports: readonly PortRule[] | undefined;
}

/** All compiled NetworkPolicy state of one snapshot. */
export interface CompiledNetworkPolicies {
  readonly version: number;
  /** Every NetworkPolicy of the mesh, validated. */
  readonly policies: readonly NetworkPolicy[];
  /** The isolating rules of a pod (by workload uid); undefined when the pod is not isolated. */
  ingressOf(workloadUid: string): PodIngress | undefined;
  /** True when the pod `workload` accepts TCP from `src` on `port` (non-Pod workloads: always). */
  allows(src: OriginalSource, workload: Workload, port: number): boolean;
  /** The endpoint admission for `src`; undefined when no pod of the mesh is isolated. */
  admission(src: OriginalSource): EndpointAdmission | undefined;
}

const NETWORKING_V1 = 'networking.k8s.io/';

/** Namespace labels as NetworkPolicy sees them: declared labels plus the name label. */
function namespaceLabelsOf(snapshot: MeshSnapshot): (ns: string) => Labels {
  const cache = new Map<string, Labels>();
  for (const [ns, labels] of snapshot.namespaces) cache.set(ns, Object.freeze({ ...labels, [NAMESPACE_NAME_LABEL]: ns }));
  return (ns) => {
    let labels = cache.get(ns);
    if (!labels) cache.set(ns, (labels = Object.freeze({ [NAMESPACE_NAME_LABEL]: ns })));
    return labels;
  };
}

function compilePeer(peer: Peer, policyNamespace: string, nsLabels: (ns: string) => Labels): (src: OriginalSource) => boolean {
  if (peer.kind === 'ipBlock') {
    const { cidr, except } = peer;
    return (src) => src.ip !== undefined && cidr.contains(src.ip) && !except.some((e) => e.contains(src.ip!));
  }
  const { pods, namespaces } = peer;
  if (namespaces === undefined) return (src) => src.pod !== undefined && src.pod.namespace === policyNamespace && pods!(src.pod.labels);
  if (pods === undefined) return (src) => src.pod !== undefined && namespaces(nsLabels(src.pod.namespace));
  return (src) => src.pod !== undefined && namespaces(nsLabels(src.pod.namespace)) && pods(src.pod.labels);
}

function compileRule(rule: IngressRule, policyNamespace: string, nsLabels: (ns: string) => Labels): CompiledRule {
  return Object.freeze({
    peers: rule.from?.map((p) => compilePeer(p, policyNamespace, nsLabels)),
    ports: rule.ports,
  });
}

/** TCP `port` of `dest` against one NetworkPolicyPort. */
function portMatches(rule: PortRule, dest: Workload, port: number): boolean {
  if (rule.protocol !== 'TCP') return false;
  if (rule.port === undefined) return true;
  if (typeof rule.port === 'string') return dest.namedPorts[rule.port] === port;
  return rule.endPort === undefined ? rule.port === port : port >= rule.port && port <= rule.endPort;
}

function ruleAllows(rule: CompiledRule, src: OriginalSource, dest: Workload, port: number): boolean {
  if (rule.ports && !rule.ports.some((p) => portMatches(p, dest, port))) return false;
  return !rule.peers || rule.peers.some((peer) => peer(src));
}

/** Read and validate, as the API server does, every `networking.k8s.io` NetworkPolicy kept in the snapshot. */
function readPolicies(snapshot: MeshSnapshot): NetworkPolicy[] {
  return snapshot
    .resources('NetworkPolicy')
    .filter((r) => r.apiVersion.startsWith(NETWORKING_V1))
    .map((r) => {
      const ref = `NetworkPolicy/${r.namespace}/${r.name}`;
      return parseNetworkPolicy(r.object, r, (path, message) => {
        throw new ConfigError(message, locateField(r, ref, path));
      });
    });
}

/**
 * Compile the NetworkPolicies of `snapshot` (the {@link NETWORK_POLICIES} part's compiler).
 * @throws ConfigError naming the file, line, policy and field of an invalid NetworkPolicy.
 */
export function compileNetworkPolicies(snapshot: MeshSnapshot): CompiledNetworkPolicies {
  const policies = readPolicies(snapshot);
  const nsLabels = namespaceLabelsOf(snapshot);

  const podsByNamespace = new Map<string, Workload[]>();
  for (const w of snapshot.workloads) {
    if (w.kind !== 'Pod') continue; // NetworkPolicies select Pods only
    let list = podsByNamespace.get(w.namespace);
    if (!list) podsByNamespace.set(w.namespace, (list = []));
    list.push(w);
  }

  const byPod = new Map<string, { policies: string[]; rules: CompiledRule[] }>();
  for (const policy of policies) {
    if (!policy.ingressIsolation) continue; // egress-only
    const rules = policy.ingress.map((r) => compileRule(r, policy.namespace, nsLabels));
    for (const pod of podsByNamespace.get(policy.namespace) ?? []) {
      if (!policy.podSelector(pod.labels)) continue;
      let entry = byPod.get(pod.uid);
      if (!entry) byPod.set(pod.uid, (entry = { policies: [], rules: [] }));
      entry.policies.push(policy.ref);
      entry.rules.push(...rules);
    }
  }
  for (const entry of byPod.values()) Object.freeze(entry);

  const allows = (src: OriginalSource, workload: Workload, port: number): boolean => {
    const ingress = byPod.get(workload.uid);
    if (!ingress) return true;
    for (const rule of ingress.rules) if (ruleAllows(rule, src, workload, port)) return true;
    return false;
  };

  const compiled: CompiledNetworkPolicies = Object.freeze({
    version: snapshot.version,
    policies: Object.freeze(policies),
    ingressOf: (uid: string) => byPod.get(uid),
    allows,
    admission: (src: OriginalSource): EndpointAdmission | undefined =>
      byPod.size === 0 ? undefined : Object.freeze({ admit: (ep: Endpoint) => allows(src, ep.workload, ep.targetPort) }),
  });
  return compiled;
}

/**
 * The NetworkPolicies as a compiled part of every mesh snapshot: an invalid NetworkPolicy refuses
 * the whole mesh file, as the API server refuses it.
 */
export const NETWORK_POLICIES = definePart<CompiledNetworkPolicies>('networkPolicies', { compile: compileNetworkPolicies });

/** The compiled NetworkPolicies of `snapshot` (its {@link NETWORK_POLICIES} part): a lookup. */
export function networkPolicyFor(snapshot: MeshSnapshot): CompiledNetworkPolicies {
  return snapshot.part(NETWORK_POLICIES);
}
