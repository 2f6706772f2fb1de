/**
 * Read one Kubernetes `networking.k8s.io/v1` NetworkPolicy into a validated, compiled
 * {@link NetworkPolicy}, refusing exactly what the API server refuses (kubernetes
 * `pkg/apis/networking/validation/validation.go` `ValidateNetworkPolicySpec`,
 * `ValidateNetworkPolicyPort`, `ValidateNetworkPolicyPeer`, `ValidateIPBlock`) and applying its
 * defaults (`pkg/apis/networking/v1/defaults.go`: `policyTypes` empty ⇒ `Ingress`, plus `Egress`
 * when `egress` has rules; `protocol` ⇒ TCP). Semantics: kubernetes/api `networking/v1/types.go`
 * field comments and kubernetes.io docs concepts/services-networking/network-policies.
 *
 * In this standalone waypoint the mesh file plays the API server, so an invalid NetworkPolicy makes
 * the whole mesh file invalid (at start-up: an error naming file and line; on reload: the last good
 * state stays), whether or not the NetworkPolicy mode is on.
 */
import { normalizeIpOrCidr, parseCidr, type Cidr } from '../state/index.ts';
import { compileSelector, type Fail, type LabelPredicate } from './selector.ts';

/** Transport protocols of a NetworkPolicyPort. */
export type NetworkProtocol = 'TCP' | 'UDP' | 'SCTP';

/** One `ports[]` entry: a protocol and a port, a port range, a named port, or every port (`port` undefined). */
export interface PortRule {
  readonly protocol: NetworkProtocol;
  /** Number, or a container port name resolved against the destination pod; undefined = all ports. */
  readonly port?: number | string;
  /** Inclusive end of the range `port..endPort` (numeric `port` only). */
  readonly endPort?: number;
}

/** One `from[]` entry. */
export type Peer =
  | {
      readonly kind: 'selector';
      /** Undefined with a namespace selector: every pod of the matching namespaces. */
      readonly pods?: LabelPredicate;
      /** Undefined: the policy's own namespace only. */
      readonly namespaces?: LabelPredicate;
    }
  | { readonly kind: 'ipBlock'; readonly cidr: Cidr; readonly except: readonly Cidr[] };

/** One `ingress[]` rule: (any peer) AND (any port); undefined lists mean "all". */
export interface IngressRule {
  readonly from?: readonly Peer[];
  readonly ports?: readonly PortRule[];
}

/** A validated NetworkPolicy, its selectors compiled. */
export interface NetworkPolicy {
  readonly namespace: string;
  readonly name: string;
  /** `NetworkPolicy/<ns>/<name>`, for messages. */
  readonly ref: string;
  /** `spec.podSelector` (within `namespace`). */
  readonly podSelector: LabelPredicate;
  /** True when `policyTypes` (given or defaulted) includes `Ingress`: the selected pods are isolated for ingress. */
  readonly ingressIsolation: boolean;
  /** `spec.ingress`; empty = no ingress allowed. */
  readonly ingress: readonly IngressRule[];
}

/** Label the API server sets on every Namespace, with its name (KEP-2161); `namespaceSelector`s select by it. */
export const NAMESPACE_NAME_LABEL = 'kubernetes.io/metadata.name';

const PROTOCOLS: readonly NetworkProtocol[] = ['TCP', 'UDP', 'SCTP'];

const isRecord = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);

/** apimachinery `IsValidPortName` (IANA_SVC_NAME): ≤ 15 chars of [a-z0-9-], a letter, no leading/trailing or double hyphen. */
function portNameProblem(name: string): string | undefined {
  if (name.length === 0 || name.length > 15) return 'must be no more than 15 characters';
  if (!/^[-a-z0-9]+$/.test(name)) return "must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)";
  if (!/[a-z]/.test(name)) return 'must contain at least one letter (a-z)';
  if (name.includes('--')) return "must not contain consecutive hyphens";
  if (name.startsWith('-') || name.endsWith('-')) return 'must not begin or end with a hyphen';
  return undefined;
}

const validPort = (n: unknown): n is number => typeof n === 'number' && Number.isInteger(n) && n >= 1 && n <= 65535;

function parsePort(doc: unknown, fail: Fail): PortRule {
  if (!isRecord(doc)) return fail([], 'must be a mapping (protocol, port, endPort)');
  const protocol = doc.protocol ?? 'TCP';
  if (!PROTOCOLS.includes(protocol as NetworkProtocol)) {
    fail(['protocol'], `Unsupported value: ${JSON.stringify(protocol)}: supported values: "TCP", "UDP", "SCTP"`);
  }
  const port = doc.port;
  const endPort = doc.endPort;
  if (port === undefined || port === null) {
    if (endPort !== undefined && endPort !== null) fail(['endPort'], 'may not be specified when `port` is not specified');
    return { protocol: protocol as NetworkProtocol };
  }
  if (typeof port === 'number') {
    if (!validPort(port)) fail(['port'], `must be between 1 and 65535, inclusive, got ${JSON.stringify(port)}`);
    if (endPort === undefined || endPort === null) return { protocol: protocol as NetworkProtocol, port };
    if (!validPort(endPort)) fail(['endPort'], `must be between 1 and 65535, inclusive, got ${JSON.stringify(endPort)}`);
    if ((endPort as number) < port) fail(['endPort'], 'must be greater than or equal to `port`');
    return { protocol: protocol as NetworkProtocol, port, endPort: endPort as number };
  }
  if (typeof port !== 'string') return fail(['port'], `must be a port number or a port name, got ${JSON.stringify(port)}`);
  if (endPort !== undefined && endPort !== null) fail(['endPort'], 'may not be specified when `port` is non-numeric');
  const problem = portNameProblem(port);
  if (problem) fail(['port'], `invalid port name ${JSON.stringify(port)}: ${problem}`);
  return { protocol: protocol as NetworkProtocol, port };
}

function parseCidrField(text: unknown, fail: Fail, path: readonly (string | number)[]): { cidr: Cidr; bits: number } {
  if (typeof text !== 'string' || text === '') return fail(path, 'is required');
  const normalized = text.includes('/') ? normalizeIpOrCidr(text) : undefined;
  // A /32 (/128) normalises to the bare address: keep it a range of one.
  const asCidr = normalized === undefined ? undefined : normalized.includes('/') ? normalized : `${normalized}/${normalized.includes(':') ? 128 : 32}`;
  const cidr = asCidr === undefined ? undefined : parseCidr(asCidr);
  if (!cidr) return fail(path, `must be a valid CIDR (e.g. 10.0.0.0/16 or 2001:db8::/64), got ${JSON.stringify(text)}`);
  return { cidr, bits: Number(asCidr!.slice(asCidr!.indexOf('/') + 1)) };
}

function parseIpBlock(doc: unknown, fail: Fail): Peer {
  if (!isRecord(doc)) return fail([], 'must be a mapping (cidr, except)');
  const { cidr, bits } = parseCidrField(doc.cidr, fail, ['cidr']);
  const exceptDoc = doc.except ?? [];
  if (!Array.isArray(exceptDoc)) return fail(['except'], 'must be a list of CIDRs');
  const except = exceptDoc.map((text: unknown, i) => {
    const e = parseCidrField(text, fail, ['except', i]);
    const network = e.cidr.text.slice(0, e.cidr.text.indexOf('/'));
    if (!cidr.contains(network) || e.bits <= bits) fail(['except', i], `${JSON.stringify(text)} must be a strict subset of \`cidr\` (${JSON.stringify(doc.cidr)})`);
    return e.cidr;
  });
  return { kind: 'ipBlock', cidr, except };
}

function parsePeer(doc: unknown, fail: Fail): Peer {
  if (!isRecord(doc)) return fail([], 'must be a mapping (podSelector, namespaceSelector or ipBlock)');
  const has = (k: string) => doc[k] !== undefined && doc[k] !== null;
  const count = ['podSelector', 'namespaceSelector', 'ipBlock'].filter(has).length;
  if (count === 0) return fail([], 'must specify a peer');
  if (count > 1 && has('ipBlock')) return fail([], 'may not specify both ipBlock and another peer');
  if (has('ipBlock')) return parseIpBlock(doc.ipBlock, (p, m) => fail(['ipBlock', ...p], m));
  return {
    kind: 'selector',
    pods: has('podSelector') ? compileSelector(doc.podSelector, (p, m) => fail(['podSelector', ...p], m)) : undefined,
    namespaces: has('namespaceSelector') ? compileSelector(doc.namespaceSelector, (p, m) => fail(['namespaceSelector', ...p], m)) : undefined,
  };
}

/** Parse `ingress`/`egress` rules (`peersKey` = `from` or `to`); both are validated, only ingress is used. */
function parseRules(doc: unknown, peersKey: 'from' | 'to', fail: Fail): IngressRule[] {
  if (doc === undefined || doc === null) return [];
  if (!Array.isArray(doc)) return fail([], 'must be a list of rules');
  return doc.map((rule: unknown, i) => {
    if (rule === null || rule === undefined) return {};
    if (!isRecord(rule)) return fail([i], `must be a mapping (${peersKey}, ports)`);
    const list = (key: string): unknown[] | undefined => {
      const v = rule[key];
      if (v === undefined || v === null) return undefined;
      if (!Array.isArray(v)) return fail([i, key], 'must be a list');
      return v.length ? v : undefined;
    };
    const ports = list('ports')?.map((p, j) => parsePort(p, (path, m) => fail([i, 'ports', j, ...path], m)));
    const from = list(peersKey)?.map((p, j) => parsePeer(p, (path, m) => fail([i, peersKey, j, ...path], m)));
    return { ...(from ? { from } : {}), ...(ports ? { ports } : {}) };
  });
}

/**
 * Validate and compile a NetworkPolicy object body. `fail(path, message)` must throw (paths are
 * relative to the object, e.g. `['spec', 'ingress', 0, 'ports', 1, 'endPort']`).
 */
export function parseNetworkPolicy(body: Readonly<Record<string, unknown>>, meta: { namespace: string; name: string }, fail: Fail): NetworkPolicy {
  const spec = body.spec ?? {};
  if (!isRecord(spec)) return fail(['spec'], 'must be a mapping');
  const at = (prefix: readonly (string | number)[]): Fail => (p, m) => fail([...prefix, ...p], m);
  const podSelector = compileSelector(spec.podSelector, at(['spec', 'podSelector']));
  const ingress = parseRules(spec.ingress, 'from', at(['spec', 'ingress']));
  const egress = parseRules(spec.egress, 'to', at(['spec', 'egress']));

  let types = spec.policyTypes;
  if (types !== undefined && types !== null && !Array.isArray(types)) return fail(['spec', 'policyTypes'], 'must be a list of Ingress and/or Egress');
  types = (types as unknown[] | null | undefined) ?? [];
  if ((types as unknown[]).length > 2) fail(['spec', 'policyTypes'], 'may not specify more than two policyTypes');
  (types as unknown[]).forEach((t, i) => {
    if (t !== 'Ingress' && t !== 'Egress') fail(['spec', 'policyTypes', i], `Unsupported value: ${JSON.stringify(t)}: supported values: "Ingress", "Egress"`);
  });
  // Defaulting: no policyTypes ⇒ Ingress (and Egress when there are egress rules).
  const ingressIsolation = (types as unknown[]).length === 0 || (types as unknown[]).includes('Ingress');
  void egress; // validated like the API server does; egress is not this waypoint's to enforce

  return Object.freeze({
    namespace: meta.namespace,
    name: meta.name,
    ref: `NetworkPolicy/${meta.namespace}/${meta.name}`,
    podSelector,
    ingressIsolation,
    ingress,
  });
}
