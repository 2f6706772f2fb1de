/**
 * DestinationRules (`networking.istio.io` v1, v1beta1, v1alpha3) for the services this waypoint
 * serves: read from the mesh snapshot, validated as Istio's admission validation does
 * (istio/istio pkg/config/validation/validation.go `ValidateDestinationRule`), and compiled once per
 * snapshot into an immutable traffic policy per (service, port) cluster.
 *
 * Which DestinationRule applies to a service (istio/istio pilot/pkg/model/push_context.go
 * `SetDestinationRules`, `destinationRule`, `MostSpecificHostMatch`), for this waypoint's namespace W:
 * 1. rules in W visible there (exportTo empty, `*`, `.` or W) — or, when W is the root namespace,
 *    the root namespace's private rules;
 * 2. else rules in the service's namespace exported to W (exportTo empty, `*` or naming W);
 * 3. else rules in the root namespace exported to W.
 * Within a step the most specific host wins: an exact hostname, else the longest matching wildcard
 * (`*.ns.svc.cluster.local`, `*`); a short host is relative to the rule's namespace
 * (`reviews` → `reviews.<ns>.svc.cluster.local`). Rules of one namespace for the same host are
 * merged as Istio does: the first (file order stands in for creation time) with a traffic policy
 * gives it, subsets are concatenated. Rules with a `workloadSelector` select sidecars, not
 * waypoints, and are skipped.
 *
 * The policy of a port is the rule's `trafficPolicy`, or its `portLevelSettings` entry for that
 * port (see destination-rule-policy.ts). Subsets are parsed and validated but do not shape
 * traffic: Gateway API routes cannot name a subset, so the waypoint's subset clusters
 * (`inbound-vip|port|http/<subset>|host`) are never the target of a route.
 *
 * Invalid rules are refused like invalid AuthorizationPolicies (the {@link DESTINATION_RULES}
 * part): at start the waypoint does not start, on reload the whole mesh update is refused (the
 * last good state stays), with a {@link ConfigError} naming the rule and field. (In Kubernetes,
 * Istio's admission webhook refuses such a rule; the mesh file plays the API server here.)
 */
import { ConfigError, log } from '../util/index.ts';
import { definePart, locateField, type KeptResource, type MeshSnapshot, type Service, type ServicePort, type Target, formatFieldPath, type FieldPath } from '../state/index.ts';
import { defaultTrafficPolicy, type ClusterTrafficPolicy, type LbAlgorithm } from './traffic-policy.ts';
import { compileConnectionPool, compileLoadBalancer, compileOutlierDetection, policyForPort, validateTrafficPolicy, type Fail } from './destination-rule-policy.ts';
import { DestinationRuleSpecSchema, type SubsetDoc, type TrafficPolicyDoc } from './destination-rule-schema.ts';

/** A validated DestinationRule. */
export interface DestinationRule {
  readonly namespace: string;
  readonly name: string;
  /** `DestinationRule/<ns>/<name>`, for messages. */
  readonly ref: string;
  /** The kept resource it was read from (its `locate` maps fields to file lines). */
  readonly resource: Pick<KeptResource, 'locate'>;
  /** `spec.host` resolved to a FQDN (short names relative to the namespace) or a wildcard. */
  readonly host: string;
  /** `exportTo` with `.` replaced by the rule's namespace; empty = the default (everywhere). */
  readonly exportTo: ReadonlySet<string>;
  readonly hasWorkloadSelector: boolean;
  readonly trafficPolicy: TrafficPolicyDoc | undefined;
  readonly subsets: readonly SubsetDoc[];
}

const GROUP = 'networking.istio.io/';
const DNS_LABEL = /^[a-zA-Z0-9](?:[-a-zA-Z0-9]{0,61}[a-zA-Z0-9])?$/;
const WILDCARD_LABEL = /^(?:\*|(?:\*|\*-)?[a-zA-Z0-9](?:[-a-zA-Z0-9]*[a-zA-Z0-9])?)$/;

/** Istio's `ValidateWildcardDomain`; the error message, or undefined when valid. */
function wildcardDomainProblem(host: string): string | undefined {
  if (host.length === 0) return 'domain name is empty';
  if (host.length > 255) return `domain name ${JSON.stringify(host)} too long (max 255)`;
  const dot = host.indexOf('.');
  const first = dot < 0 ? host : host.slice(0, dot);
  if (first.length > 63 || !WILDCARD_LABEL.test(first)) return `domain name ${JSON.stringify(host)} invalid (label ${JSON.stringify(first)} invalid)`;
  if (dot < 0) return undefined;
  const parts = host.slice(dot + 1).split('.');
  if (/^\d+$/.test(parts[parts.length - 1])) return `domain name ${JSON.stringify(host)} invalid (top level domain ${JSON.stringify(parts[parts.length - 1])} cannot be all-numeric)`;
  for (let i = 0; i < parts.length; i++) {
    if (i === parts.length - 1 && parts[i] === '') return undefined;
    if (!DNS_LABEL.test(parts[i])) return `domain name ${JSON.stringify(host)} invalid (label ${JSON.stringify(parts[i])} invalid)`;
  }
  return undefined;
}

/** Istio's `ResolveShortnameToFQDN`: a host without dots is `<host>.<ns>.svc.<domain>`. */
export function resolveHost(host: string, namespace: string, domain: string): string {
  if (host === '*' || host.includes('.') || host.includes(':')) return host;
  return `${host}.${namespace}.svc.${domain}`;
}

/**
 * Read and validate one DestinationRule.
 * @throws ConfigError naming the rule and the field at fault.
 */
export function parseDestinationRule(r: KeptResource, domain: string): DestinationRule {
  const ref = `DestinationRule/${r.namespace}/${r.name}`;
  const fail: Fail = (path, message) => {
    throw new ConfigError(message, locateField(r, ref, path));
  };
  const parsed = DestinationRuleSpecSchema.safeParse(r.object.spec);
  if (!parsed.success) {
    const issue = parsed.error.issues[0];
    const path: FieldPath = ['spec', ...issue.path.filter((p): p is string | number => typeof p !== 'symbol')];
    // An unknown field is named by its own path (the issue's is the mapping holding it).
    fail(issue.code === 'unrecognized_keys' ? [...path, issue.keys[0]] : path, issue.message);
  }
  const spec = parsed.data!;
  const hostProblem = wildcardDomainProblem(spec.host);
  if (hostProblem) fail(['spec', 'host'], hostProblem);
  validateTrafficPolicy(spec.trafficPolicy, ['spec', 'trafficPolicy'], fail);
  const names = new Set<string>();
  (spec.subsets ?? []).forEach((s, i) => {
    const at: FieldPath = ['spec', 'subsets', i];
    if (!s.name) fail([...at, 'name'], 'name is required');
    if (!DNS_LABEL.test(s.name!)) fail([...at, 'name'], `name ${JSON.stringify(s.name)} must be a valid label`);
    if (names.has(s.name!)) fail([...at, 'name'], `duplicate subset names: ${s.name}`);
    names.add(s.name!);
    validateTrafficPolicy(s.trafficPolicy, [...at, 'trafficPolicy'], fail);
  });
  const exportTo = new Set<string>();
  (spec.exportTo ?? []).forEach((e, i) => {
    const key = e === '.' ? r.namespace : e;
    if (exportTo.has(key)) fail(['spec', 'exportTo', i], key !== e ? `duplicate entries in exportTo: . and current namespace ${r.namespace}` : `duplicate entries in exportTo for entry ${e}`);
    if (key !== '*' && key !== '~' && !DNS_LABEL.test(key)) fail(['spec', 'exportTo', i], `invalid exportTo value ${JSON.stringify(e)}: must be ".", "*" or a namespace name`);
    exportTo.add(key);
  });
  if (exportTo.has('*') && (spec.exportTo ?? []).length > 1) fail(['spec', 'exportTo'], 'cannot have both public (*) and non-public exportTo values for a resource');
  const hasWorkloadSelector = spec.workloadSelector !== undefined && spec.workloadSelector !== null;
  if (hasWorkloadSelector && exportTo.size > 0 && !(exportTo.size === 1 && exportTo.has(r.namespace))) {
    fail(['spec', 'exportTo'], 'destination rule with workload selector cannot have exportTo beyond current namespace');
  }
  return Object.freeze({
    namespace: r.namespace,
    name: r.name,
    ref,
    resource: { locate: r.locate },
    host: resolveHost(spec.host, r.namespace, domain),
    exportTo,
    hasWorkloadSelector,
    trafficPolicy: spec.trafficPolicy ?? undefined,
    subsets: spec.subsets ?? [],
  });
}

/** Rules of one namespace for one host, merged (IS `mergeDestinationRule`). */
interface MergedRule {
  readonly host: string;
  /** The first rule's; it names the policy's source. */
  readonly first: DestinationRule;
  trafficPolicy: TrafficPolicyDoc | undefined;
  /** The rule that gave the traffic policy (for messages). */
  policySource: DestinationRule;
  readonly subsets: SubsetDoc[];
}

/** Merged rules of one namespace (or one visibility class of it), by exact host and by wildcard host. */
class HostIndex {
  private readonly exact = new Map<string, MergedRule>();
  private readonly wildcard = new Map<string, MergedRule>();

  add(rule: DestinationRule): void {
    const map = rule.host.startsWith('*') ? this.wildcard : this.exact;
    const existing = map.get(rule.host);
    if (!existing) {
      map.set(rule.host, { host: rule.host, first: rule, trafficPolicy: rule.trafficPolicy, policySource: rule, subsets: [...rule.subsets] });
      return;
    }
    if (!existing.trafficPolicy && rule.trafficPolicy) {
      existing.trafficPolicy = rule.trafficPolicy;
      existing.policySource = rule;
    }
    for (const s of rule.subsets) if (!existing.subsets.some((x) => x.name === s.name)) existing.subsets.push(s);
  }

  /** Istio's `MostSpecificHostMatch` for a (non-wildcard) service hostname. */
  match(hostname: string): MergedRule | undefined {
    const exact = this.exact.get(hostname);
    if (exact) return exact;
    let best: MergedRule | undefined;
    for (const [h, m] of this.wildcard) {
      if (hostname.endsWith(h.slice(1)) && (!best || h.length > best.host.length)) best = m;
    }
    return best;
  }
}

/** All compiled DestinationRule state of one mesh snapshot. */
export interface CompiledDestinationRules {
  readonly version: number;
  /** Every DestinationRule of the mesh, validated. */
  readonly rules: readonly DestinationRule[];
  /** The policy of every service port a rule applies to, by cluster key (`ns/hostname|port`). */
  readonly policies: ReadonlyMap<string, ClusterTrafficPolicy>;
  /** Every service port a rule applies to, with its policy (in service order): the clusters the upstream keeps state for. */
  readonly clusters: readonly ShapedCluster[];
  /** The policy of the cluster `target` belongs to; the default policy (key '') when none applies. A lookup. */
  forTarget(target: Target): ClusterTrafficPolicy;
}

/** A service port a DestinationRule shapes. */
export interface ShapedCluster {
  readonly target: Extract<Target, { kind: 'service' }>;
  readonly policy: ClusterTrafficPolicy;
}

/** `ns/hostname|port`: the key of a service port's cluster runtime state. */
export function clusterKey(service: Pick<Service, 'namespace' | 'hostname'>, port: number): string {
  return `${service.namespace}/${service.hostname}|${port}`;
}

/** The cluster DNS suffix of the mesh's Kubernetes Services (`cluster.local` when there are none). */
function domainSuffix(snapshot: MeshSnapshot): string {
  for (const s of snapshot.services) {
    if (s.kind !== 'Service') continue;
    const i = s.hostname.indexOf('.svc.');
    if (i > 0) return s.hostname.slice(i + 5);
  }
  return 'cluster.local';
}

/**
 * Validate every DestinationRule of `snapshot` and compile the policy of every service port one
 * applies to. `fallback`: the algorithm when a rule sets no `loadBalancer.simple` (the bootstrap's).
 * @throws ConfigError for the first invalid rule (or policy).
 */
export function compileDestinationRules(snapshot: MeshSnapshot, fallback: LbAlgorithm = 'LEAST_REQUEST'): CompiledDestinationRules {
  const domain = domainSuffix(snapshot);
  const rules = snapshot.resources('DestinationRule').filter((r) => r.apiVersion.startsWith(GROUP)).map((r) => parseDestinationRule(r, domain));
  const root = snapshot.meshConfig.rootNamespace;
  const local = new Map<string, HostIndex>();
  const exported = new Map<string, HostIndex>();
  const rootLocal = new HostIndex();
  const index = (m: Map<string, HostIndex>, ns: string): HostIndex => {
    let i = m.get(ns);
    if (!i) m.set(ns, (i = new HostIndex()));
    return i;
  };
  for (const rule of rules) {
    if (rule.hasWorkloadSelector) {
      log.debug({ rule: rule.ref }, 'destination rule: has a workloadSelector (it selects sidecars), not applied by the waypoint');
      continue;
    }
    const e = rule.exportTo;
    const ns = rule.namespace;
    if (e.size === 0 || e.has('*') || e.has(ns)) index(local, ns).add(rule);
    const privateOnly = e.size === 1 && e.has(ns);
    if (!privateOnly) index(exported, ns).add(rule);
    else if (ns === root) rootLocal.add(rule);
  }
  const client = snapshot.waypoint.namespace;
  const visible = (m: MergedRule | undefined): MergedRule | undefined => {
    if (!m) return undefined;
    const e = m.first.exportTo;
    return e.size === 0 || e.has('*') || e.has(client) ? m : undefined;
  };
  const select = (svc: Service): MergedRule | undefined => {
    if (client !== root) {
      const m = local.get(client)?.match(svc.hostname);
      if (m) return m;
    } else {
      const m = rootLocal.match(svc.hostname);
      if (m) return m;
    }
    return visible(exported.get(svc.namespace)?.match(svc.hostname)) ?? visible(exported.get(root)?.match(svc.hostname));
  };

  const policies = new Map<string, ClusterTrafficPolicy>();
  const clusters: ShapedCluster[] = [];
  const byService = new Map<Service, Map<ServicePort, ClusterTrafficPolicy>>();
  for (const svc of snapshot.services) {
    const rule = select(svc);
    if (!rule) continue;
    const ports = new Map<ServicePort, ClusterTrafficPolicy>();
    for (const port of svc.ports) {
      const key = clusterKey(svc, port.port);
      let policy = policies.get(key);
      if (!policy) policies.set(key, (policy = portPolicy(rule, port.port, key, fallback)));
      ports.set(port, policy);
      clusters.push(Object.freeze({ target: Object.freeze({ kind: 'service' as const, service: svc, port }), policy }));
    }
    byService.set(svc, ports);
  }
  const fallbackPolicy = defaultTrafficPolicy(fallback);
  return Object.freeze({
    version: snapshot.version,
    rules,
    policies,
    clusters: Object.freeze(clusters),
    forTarget(target: Target): ClusterTrafficPolicy {
      if (target.kind !== 'service') return fallbackPolicy;
      // A target of another snapshot (a request still running across a reload) is found by its key.
      return byService.get(target.service)?.get(target.port) ?? policies.get(clusterKey(target.service, target.port.port)) ?? fallbackPolicy;
    },
  });
}

/** The compiled policy of `port` under `rule`. */
function portPolicy(rule: MergedRule, port: number, key: string, fallback: LbAlgorithm): ClusterTrafficPolicy {
  const src = rule.policySource;
  const fail: Fail = (path, message) => {
    throw new ConfigError(message, locateField(src.resource, src.ref, path));
  };
  const { doc, at } = policyForPort(rule.trafficPolicy, port);
  return Object.freeze({
    key,
    source: src.ref,
    loadBalancer: compileLoadBalancer(doc.loadBalancer, fallback, [...at, 'loadBalancer'], fail),
    connectionPool: compileConnectionPool(doc.connectionPool, [...at, 'connectionPool'], fail),
    outlierDetection: compileOutlierDetection(doc.outlierDetection, [...at, 'outlierDetection'], fail),
  });
}

/**
 * The DestinationRules as a compiled part of every mesh snapshot: an invalid rule refuses the whole
 * mesh update (the last good traffic policies stay applied). Its compiler uses LEAST_REQUEST where
 * a rule sets no algorithm; the waypoint binds it to its bootstrap's `upstream.loadBalancer`.
 */
export const DESTINATION_RULES = definePart<CompiledDestinationRules>('destinationRules', {
  compile: (snapshot) => compileDestinationRules(snapshot),
  refusal: 'invalid destination rule',
});

/** The compiled DestinationRules of `snapshot` (its {@link DESTINATION_RULES} part): a lookup. */
export function destinationRulesFor(snapshot: MeshSnapshot): CompiledDestinationRules {
  return snapshot.part(DESTINATION_RULES);
}

/** One cluster's DestinationRule policy as `/config_dump` shows it (limits `unlimited` when unset). */
export interface ClusterPolicyDump {
  /** `ns/hostname|port`. */
  readonly key: string;
  readonly source: string;
  readonly loadBalancer: unknown;
  readonly connectionPool: unknown;
  readonly outlierDetection: unknown;
}

/** `Infinity` (no limit: Istio's 2^32-1 thresholds) as `unlimited`, for JSON. */
function finite<T extends object>(o: T): Record<string, unknown> {
  return Object.fromEntries(Object.entries(o).map(([k, v]) => [k, v === Infinity ? 'unlimited' : v]));
}

/** The DestinationRules of `snapshot` and the policy they give each cluster (`/config_dump`). */
export function dumpDestinationRules(snapshot: MeshSnapshot): { rules: string[]; clusters: ClusterPolicyDump[] } {
  const c = destinationRulesFor(snapshot);
  return {
    rules: c.rules.map((r) => (r.hasWorkloadSelector ? `${r.ref} (workloadSelector: not applied by a waypoint)` : r.ref)),
    clusters: [...c.policies.values()].map((p) => ({
      key: p.key,
      source: p.source,
      loadBalancer: p.loadBalancer.consistentHash ? { consistentHash: p.loadBalancer.consistentHash } : { simple: p.loadBalancer.simple },
      connectionPool: finite(p.connectionPool),
      outlierDetection: p.outlierDetection ?? null,
    })),
  };
}
