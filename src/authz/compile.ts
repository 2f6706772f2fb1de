/**
 * Compile every AuthorizationPolicy of a mesh snapshot once into immutable per-target evaluators,
 * so that the data path never walks policies that do not apply.
 *
 * - Each policy is parsed and validated (`policy.ts`); policies without targetRefs are not the
 *   waypoint's (ztunnel enforces them) and are skipped with a debug line.
 * - Each attached policy's rules are compiled once per chain flavour (HTTP, TCP) and shared.
 * - One evaluator pair serves every target that only has waypoint-wide policies (Gateway and
 *   GatewayClass references): all workload-addressed traffic, and services without policies of
 *   their own. Each served service with Service/ServiceEntry-attached policies gets its own pair.
 * - `forTarget` is one Map lookup.
 */
import { ConfigError, log } from '../util/index.ts';
import { type KeptResource, type MeshSnapshot, type Service, type Target, locateField, definePart } from '../state/index.ts';
import { attachmentOf, serviceKey } from './attachment.ts';
import { Evaluator, type CompiledCustomRule, type CompiledRule } from './evaluator.ts';
import { normalizeRequestPath, PATH_NORMALIZATIONS, type NormalizedPath, type PathNormalization } from './path-normalize.ts';
import { parsePolicy, warnHttpOnlyDeny, type AuthorizationPolicy } from './policy.ts';
import { extAuthzProviders, type ExtAuthzProvider } from './providers.ts';
import { compileRule, MATCH_NEVER, type Flavour } from './rule.ts';

/** The evaluators of one target: one per filter chain. */
export interface TargetAuthz {
  /** For HTTP requests (ports whose protocol is HTTP, or detected as HTTP). */
  readonly http: Evaluator;
  /** For TCP connections (decided once, at CONNECT time). */
  readonly tcp: Evaluator;
}

/** All compiled authorization state of one mesh snapshot. */
export interface CompiledAuthz {
  /** Version of the snapshot compiled. */
  readonly version: number;
  /** MeshConfig `pathNormalization.normalization` (default `BASE`). */
  readonly pathNormalization: PathNormalization;
  /** Every AuthorizationPolicy of the mesh, validated (also those this waypoint does not enforce). */
  readonly policies: readonly AuthorizationPolicy[];
  /** ext_authz providers declared in MeshConfig, by name. */
  readonly providers: ReadonlyMap<string, ExtAuthzProvider>;
  /** The evaluators for a resolved CONNECT target. One Map lookup. */
  forTarget(target: Target): TargetAuthz;
  /**
   * Normalize a request's `:path` per the mesh's mode: match `.path`, forward `.forward`.
   * Undefined: answer 400 (`path_normalization_failed`).
   */
  normalizePath(requestTarget: string): NormalizedPath | undefined;
}

/**
 * Envoy policy id of rule `index` of a policy (istio/istio
 * pilot/pkg/security/authz/builder/builder.go `policyName`).
 */
export function ruleId(policy: Pick<AuthorizationPolicy, 'namespace' | 'name'>, index: number): string {
  return `ns[${policy.namespace}]-policy[${policy.name}]-rule[${index}]`;
}

/** Suffix Istio gives the deny rule generated for a CUSTOM rule whose provider is unusable. */
const BAD_CUSTOM_SUFFIX = '-deny-due-to-bad-CUSTOM-action';
const EXT_AUTHZ_PREFIX = 'istio-ext-authz-';

interface CompiledPolicy {
  readonly policy: AuthorizationPolicy;
  readonly http: readonly CompiledRule[];
  readonly tcp: readonly CompiledRule[];
}

function compilePolicyRules(policy: AuthorizationPolicy, flavour: Flavour, bundle: readonly string[], source?: KeptResource): CompiledRule[] {
  if (policy.rules.length === 0) return [{ id: ruleId(policy, 0), matches: MATCH_NEVER }]; // allow-nothing
  const fail = (path: readonly (string | number)[], message: string): never => {
    throw new ConfigError(message, locateField(source ?? {}, policy.ref, path));
  };
  const scope = { action: policy.action, flavour, bundle, policyNamespace: policy.namespace };
  const out: CompiledRule[] = [];
  policy.rules.forEach((rule, i) => {
    const matches = compileRule(rule, scope, ['spec', 'rules', i], fail);
    if (matches) out.push({ id: ruleId(policy, i), matches });
    else log.debug({ policy: policy.ref, rule: i }, 'authz: ALLOW rule uses HTTP-only attributes, dropped on the TCP chain');
  });
  return out;
}

function readPathNormalization(snapshot: MeshSnapshot): PathNormalization {
  const setting = snapshot.meshConfig.raw.pathNormalization;
  const value = typeof setting === 'object' && setting !== null ? (setting as Record<string, unknown>).normalization : undefined;
  if (value === undefined || value === null || value === 'DEFAULT') return 'BASE';
  if (!PATH_NORMALIZATIONS.includes(value as PathNormalization)) {
    throw new ConfigError(`must be one of DEFAULT, ${PATH_NORMALIZATIONS.join(', ')}, got ${JSON.stringify(value)}`, {
      object: 'MeshConfig',
      field: 'pathNormalization.normalization',
    });
  }
  return value as PathNormalization;
}

/**
 * Why the CUSTOM rules of a target cannot be honoured (builder.go `buildHTTP`/`buildTCP`,
 * `getExtAuthz`): one provider per target, declared and usable. Undefined when they can.
 */
function customProblem(policies: readonly CompiledPolicy[], providers: ReadonlyMap<string, ExtAuthzProvider>): string | undefined {
  const names = [...new Set(policies.filter((p) => p.policy.action === 'CUSTOM').map((p) => p.policy.provider!))];
  if (names.length === 0) return undefined;
  if (names.length > 1) return `multiple CUSTOM authorization providers for one target are not supported, found ${names.join(', ')}`;
  const provider = providers.get(names[0]);
  if (!provider) return `extension provider ${names[0]} not found in MeshConfig extensionProviders`;
  return provider.error;
}

/** Build one chain's evaluator from the policies that apply to a target. */
function buildEvaluator(
  policies: readonly CompiledPolicy[],
  flavour: Flavour,
  providers: ReadonlyMap<string, ExtAuthzProvider>,
  problem: string | undefined,
): Evaluator {
  const custom: CompiledCustomRule[] = [];
  const audit: CompiledRule[] = [];
  const deny: CompiledRule[] = [];
  const allow: CompiledRule[] = [];
  const shadowDeny: CompiledRule[] = [];
  const shadowAllow: CompiledRule[] = [];
  let hasAllow = false;
  let hasShadowAllow = false;
  let hasShadowDeny = false;
  for (const { policy, ...rules } of policies) {
    const compiled = rules[flavour];
    switch (policy.action) {
      case 'CUSTOM':
        for (const r of compiled) custom.push({ ...r, provider: policy.provider! });
        break;
      case 'AUDIT':
        audit.push(...compiled);
        break;
      case 'DENY':
        if (policy.dryRun) {
          hasShadowDeny = true;
          shadowDeny.push(...compiled);
        } else deny.push(...compiled);
        break;
      case 'ALLOW':
        if (policy.dryRun) {
          hasShadowAllow = true;
          shadowAllow.push(...compiled);
        } else {
          hasAllow = true;
          allow.push(...compiled);
        }
        break;
    }
  }
  // An unusable provider turns the CUSTOM rules into deny rules (`getBadCustomDenyRules`); on TCP
  // the CUSTOM rules of an HTTP provider are ignored.
  let customRules: CompiledCustomRule[] = custom;
  if (custom.length && problem) {
    customRules = custom.map((r) => ({ ...r, denyId: `${EXT_AUTHZ_PREFIX}${r.id}${BAD_CUSTOM_SUFFIX}` }));
  } else if (custom.length && flavour === 'tcp' && providers.get(custom[0].provider)?.kind === 'http') {
    customRules = [];
  }
  return new Evaluator({
    custom: customRules,
    audit,
    deny,
    allow,
    hasAllow,
    shadowDeny,
    shadowAllow,
    hasShadowAllow,
    hasShadowDeny,
    policies: policies.map((p) => p.policy.ref),
  });
}

function pair(policies: readonly CompiledPolicy[], providers: ReadonlyMap<string, ExtAuthzProvider>): TargetAuthz {
  const problem = customProblem(policies, providers);
  if (problem) log.warn({ policies: policies.filter((p) => p.policy.action === 'CUSTOM').map((p) => p.policy.ref) }, `authz: ${problem}; the matching CUSTOM rules deny`);
  return Object.freeze({ http: buildEvaluator(policies, 'http', providers, problem), tcp: buildEvaluator(policies, 'tcp', providers, problem) });
}

/**
 * Compile the AuthorizationPolicies of `snapshot` for the waypoint it describes (the {@link AUTHZ}
 * part's compiler).
 * @throws ConfigError naming the policy and field of the first invalid policy, or MeshConfig's
 *   `pathNormalization.normalization` when it is not a known mode.
 */
export function compileAuthz(snapshot: MeshSnapshot): CompiledAuthz {
  const { meshConfig, waypoint } = snapshot;
  const bundle = [meshConfig.trustDomain, ...meshConfig.trustDomainAliases];
  const pathNormalization = readPathNormalization(snapshot);
  const providers = extAuthzProviders(snapshot);
  // Each policy remembers its resource, so that errors point at the file and line (resource-location.ts).
  const sources = new Map<AuthorizationPolicy, KeptResource>();
  const policies = snapshot
    .resources('AuthorizationPolicy')
    .filter((r: KeptResource) => r.apiVersion.startsWith('security.istio.io/'))
    .map((r) => {
      const p = parsePolicy(r);
      sources.set(p, r);
      return p;
    });

  const served = new Map<string, Service>();
  for (const service of snapshot.services) if (service.servedByThisWaypoint) served.set(serviceKey(service), service);

  const waypointWide: CompiledPolicy[] = [];
  const byService = new Map<string, CompiledPolicy[]>();
  for (const policy of policies) {
    if (policy.targetRefs.length === 0) {
      log.debug({ policy: policy.ref }, 'authz: ignoring policy without targetRefs (selector and namespace-wide policies are enforced by ztunnel, not the waypoint)');
      continue;
    }
    const at = attachmentOf(policy, waypoint, meshConfig.rootNamespace);
    const services = at.services.filter((key) => served.has(key));
    if (!at.waypoint && services.length === 0) continue; // another waypoint's, or a service not served here
    warnHttpOnlyDeny(policy);
    const source = sources.get(policy);
    const compiled: CompiledPolicy = { policy, http: compilePolicyRules(policy, 'http', bundle, source), tcp: compilePolicyRules(policy, 'tcp', bundle, source) };
    if (at.waypoint) waypointWide.push(compiled);
    for (const key of services) {
      let list = byService.get(key);
      if (!list) byService.set(key, (list = []));
      if (!list.includes(compiled)) list.push(compiled);
    }
  }

  const shared = pair(waypointWide, providers);
  const perService = new Map<Service, TargetAuthz>();
  for (const [key, own] of byService) {
    perService.set(served.get(key)!, pair([...waypointWide, ...own.filter((p) => !waypointWide.includes(p))], providers));
  }

  const compiled: CompiledAuthz = Object.freeze({
    version: snapshot.version,
    pathNormalization,
    policies: Object.freeze(policies),
    providers,
    forTarget: (target: Target): TargetAuthz => (target.kind === 'service' ? (perService.get(target.service) ?? shared) : shared),
    normalizePath: (requestTarget: string) => normalizeRequestPath(requestTarget, pathNormalization),
  });
  return compiled;
}

/**
 * The waypoint's AuthorizationPolicies as a compiled part of every mesh snapshot: an invalid policy
 * (or `pathNormalization` mode) refuses the whole mesh update, and the last good policies stay
 * enforced, rather than denying all traffic under them.
 */
export const AUTHZ = definePart<CompiledAuthz>('authz', { compile: compileAuthz, refusal: 'invalid authorization policy' });

/** The compiled authorization of `snapshot` (its {@link AUTHZ} part): a lookup. */
export function authzFor(snapshot: MeshSnapshot): CompiledAuthz {
  return snapshot.part(AUTHZ);
}

/**
 * The HTTP connection manager's path normalization step (Envoy's `normalize_path`,
 * `merge_slashes`, `path_with_escaped_slashes_action`, which Istio sets on every HCM from MeshConfig
 * `pathNormalization`): the request target normalized per the current snapshot's mode (query
 * kept), or undefined for a malformed one (400 `path_normalization_failed`). Run before any filter,
 * so every filter, the upstream request and the access log see the one normalized path.
 */
export function requestPathNormalizer(mesh: { readonly current: MeshSnapshot }): (target: string) => string | undefined {
  return (target) => authzFor(mesh.current).normalizePath(target)?.forward;
}
