/**
 * The AuthorizationPolicies ztunnel enforces for a workload, compiled once per mesh snapshot into
 * per-workload evaluators with ztunnel's L4 semantics (istio/ztunnel src/rbac.rs, src/state.rs
 * `assert_rbac`). Used by the `waypoint inbound` role, which plays the destination ztunnel; the
 * waypoint never uses this module (it ignores selector policies: src/authz/compile.ts).
 *
 * Which policies reach ztunnel (istiod `convertAuthorizationPolicy`,
 * pilot/pkg/serviceregistry/ambient/authorization.go):
 * - policies with targetRefs never (they are a waypoint's);
 * - AUDIT and CUSTOM never ("ztunnel does not support the <action> action"), nor dry-run policies
 *   (ambient dry-run needs istiod's `EnableWdsDryRunAuthzPol`, off by default);
 * - ALLOW and DENY, each rule converted by `ztunnelRule` (src/authz/rule.ts).
 *
 * Which apply to a workload (istiod scope selection; ztunnel src/state/policy.rs `PolicyStore`,
 * src/state.rs `assert_rbac`; istiod workloads.go `buildWorkloadPolicies`):
 * - no selector in the root namespace: GLOBAL scope, every workload of the mesh;
 * - no selector elsewhere: NAMESPACE scope, every workload of that namespace;
 * - `selector.matchLabels` (WORKLOAD_SELECTOR scope): workloads whose labels hold them all, in the
 *   policy's namespace, or in any namespace when the policy is in the root namespace.
 *
 * Decision (ztunnel `assert_rbac`): a matching DENY policy denies; else no ALLOW policy allows;
 * else a matching ALLOW policy allows; else deny. An ALLOW policy without rules (or whose rules
 * were all dropped for HTTP attributes) matches nothing but still exists: deny-all.
 */
import { ConfigError, log } from '../util/index.ts';
import { type KeptResource, type MeshSnapshot, type Workload, formatFieldPath, definePart } from '../state/index.ts';
import { ruleId, Evaluator, type CompiledRule, parsePolicy, type AuthorizationPolicy, MATCH_NEVER, ztunnelRule, type AuthzResult } from '../authz/index.ts';

/** ztunnel's `RbacScope`. */
export type ZtunnelScope = 'GLOBAL' | 'NAMESPACE' | 'WORKLOAD_SELECTOR';

/** One policy as ztunnel holds it. */
interface ZtunnelPolicy {
  readonly policy: AuthorizationPolicy;
  readonly scope: ZtunnelScope;
  /** `spec.selector.matchLabels` (WORKLOAD_SELECTOR only; empty selects every workload in scope). */
  readonly selector: Readonly<Record<string, string>>;
  readonly rules: readonly CompiledRule[];
}

/** The ztunnel-side authorization of one mesh snapshot. */
export interface ZtunnelAuthz {
  readonly version: number;
  /**
   * The evaluator for connections to `workload` (undefined: a destination not in the mesh state,
   * which only GLOBAL policies cover). Built at compile time (one per distinct set of applying
   * policies); a lookup.
   */
  forWorkload(workload: Workload | undefined): Evaluator;
  /** Refs (`AuthorizationPolicy/<ns>/<name>`) of the policies sent to ztunnel, for dumps and tests. */
  readonly policies: readonly string[];
}

/**
 * Why a connection was refused, in ztunnel's words (src/proxy.rs `AuthorizationRejectionError`):
 * `explicitly denied by: <ns>/<name>` or `allow policies exist, but none allowed`.
 */
export function rejectionReason(result: AuthzResult): string {
  const m = result.policy === undefined ? null : /^ns\[(.*)\]-policy\[(.*)\]-rule\[\d+\]$/.exec(result.policy);
  return m ? `explicitly denied by: ${m[1]}/${m[2]}` : 'allow policies exist, but none allowed';
}

function matchLabels(resource: KeptResource): Readonly<Record<string, string>> {
  const spec = resource.object.spec as { selector?: { matchLabels?: Record<string, unknown> | null } | null } | undefined;
  const labels = spec?.selector?.matchLabels ?? {};
  return Object.fromEntries(Object.entries(labels).map(([k, v]) => [k, String(v)]));
}

function selects(selector: Readonly<Record<string, string>>, labels: Readonly<Record<string, string>>): boolean {
  for (const key in selector) if (labels[key] !== selector[key]) return false;
  return true;
}

/** Convert one policy for ztunnel, or undefined when istiod does not send it. */
function convert(resource: KeptResource, rootNamespace: string): ZtunnelPolicy | undefined {
  const policy = parsePolicy(resource);
  if (policy.targetRefs.length > 0) return undefined; // a waypoint's
  if (policy.action !== 'ALLOW' && policy.action !== 'DENY') {
    log.debug({ policy: policy.ref }, `authz(ztunnel): ztunnel does not support the ${policy.action} action; policy ignored`);
    return undefined;
  }
  if (policy.dryRun) {
    log.debug({ policy: policy.ref }, 'authz(ztunnel): dry-run policies are not supported by ztunnel; policy ignored');
    return undefined;
  }
  const scope: ZtunnelScope = policy.hasSelector ? 'WORKLOAD_SELECTOR' : policy.namespace === rootNamespace ? 'GLOBAL' : 'NAMESPACE';
  const fail = (path: readonly (string | number)[], message: string): never => {
    throw new ConfigError(message, { object: policy.ref, field: formatFieldPath(path) });
  };
  const ruleScope = { action: policy.action, flavour: 'ztunnel' as const, bundle: [], policyNamespace: policy.namespace };
  const rules: CompiledRule[] = [];
  const l7 = new Set<string>();
  let effective = false;
  policy.rules.forEach((rule, i) => {
    const r = ztunnelRule(rule, ruleScope, ['spec', 'rules', i], fail);
    for (const a of r.l7) l7.add(a);
    if (r.effective) effective = true;
    if (r.matches) rules.push({ id: ruleId(policy, i), matches: r.matches });
  });
  if (l7.size) {
    // istiod's status message for the policy (httpRuleFmt and its boilerplates).
    const what =
      policy.action === 'ALLOW'
        ? 'Within an ALLOW policy, rules matching HTTP attributes are omitted. This will be more restrictive than requested.'
        : effective
          ? 'DENY policy with HTTP attributes is enforced without the HTTP rules. This will be more restrictive than requested.'
          : 'After omitting unsupported HTTP attributes, this DENY policy has no enforceable rules at ztunnel and will have no effect.';
    log.warn({ policy: policy.ref }, `authz(ztunnel): ztunnel does not support HTTP attributes (found: ${[...l7].sort().join(', ')}). ${what}`);
  }
  // No rules at all: ztunnel's `matches` is false for an empty rule list.
  if (policy.rules.length === 0) rules.push({ id: ruleId(policy, 0), matches: MATCH_NEVER });
  return { policy, scope, selector: policy.hasSelector ? matchLabels(resource) : {}, rules };
}

function evaluatorOf(policies: readonly ZtunnelPolicy[]): Evaluator {
  const deny: CompiledRule[] = [];
  const allow: CompiledRule[] = [];
  let hasAllow = false;
  for (const p of policies) {
    if (p.policy.action === 'DENY') deny.push(...p.rules);
    else {
      hasAllow = true;
      allow.push(...p.rules);
    }
  }
  return new Evaluator({
    custom: [],
    audit: [],
    deny,
    allow,
    hasAllow,
    shadowDeny: [],
    shadowAllow: [],
    hasShadowAllow: false,
    hasShadowDeny: false,
    policies: policies.map((p) => p.policy.ref),
  });
}

/**
 * Compile the policies ztunnel would get from `snapshot` (the {@link ZTUNNEL_AUTHZ} part's compiler).
 * @throws ConfigError naming the policy and field of the first invalid AuthorizationPolicy.
 */
export function compileZtunnelAuthz(snapshot: MeshSnapshot): ZtunnelAuthz {
  const root = snapshot.meshConfig.rootNamespace;
  const all: ZtunnelPolicy[] = [];
  for (const r of snapshot.resources('AuthorizationPolicy')) {
    if (!r.apiVersion.startsWith('security.istio.io/')) continue;
    const p = convert(r, root);
    if (p) all.push(p);
  }
  const globalOnly = evaluatorOf(all.filter((p) => p.scope === 'GLOBAL'));
  const applying = (workload: Workload): ZtunnelPolicy[] => {
    const ns = workload.namespace;
    return all.filter(
      (p) =>
        p.scope === 'GLOBAL' ||
        (p.scope === 'NAMESPACE' && p.policy.namespace === ns) ||
        (p.scope === 'WORKLOAD_SELECTOR' && (p.policy.namespace === ns || p.policy.namespace === root) && selects(p.selector, workload.labels)),
    );
  };
  // Every workload's evaluator now, one per distinct set of applying policies.
  const index = new Map(all.map((p, i) => [p, i]));
  const bySet = new Map<string, Evaluator>();
  const perWorkload = new Map<Workload, Evaluator>();
  for (const workload of snapshot.workloads) {
    const applies = applying(workload);
    const set = applies.map((p) => index.get(p)).join(',');
    let e = bySet.get(set);
    if (!e) bySet.set(set, (e = evaluatorOf(applies)));
    perWorkload.set(workload, e);
  }
  return Object.freeze({
    version: snapshot.version,
    policies: Object.freeze(all.map((p) => p.policy.ref)),
    forWorkload(workload: Workload | undefined): Evaluator {
      if (!workload) return globalOnly;
      // A workload of another snapshot (never on the inbound role's path) is judged, not looked up.
      return perWorkload.get(workload) ?? evaluatorOf(applying(workload));
    },
  });
}

/**
 * The AuthorizationPolicies ztunnel enforces, as a compiled part of every mesh snapshot (the
 * `waypoint inbound` role's): an invalid policy refuses the whole mesh update.
 */
export const ZTUNNEL_AUTHZ = definePart<ZtunnelAuthz>('ztunnelAuthz', { compile: compileZtunnelAuthz, refusal: 'invalid authorization policy' });

/** {@link compileZtunnelAuthz} of `snapshot` (its {@link ZTUNNEL_AUTHZ} part): a lookup. */
export function ztunnelAuthzFor(snapshot: MeshSnapshot): ZtunnelAuthz {
  return snapshot.part(ZTUNNEL_AUTHZ);
}
