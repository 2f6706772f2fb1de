/**
 * The decision for one target and one filter chain (HTTP or TCP): precompiled rule arrays walked in
 * Istio's waypoint order (istio/istio pilot/pkg/security/authz/builder/builder.go filter order
 * and pilot/pkg/networking/core/listener_waypoint.go `buildWaypointHTTPFilters`):
 *
 *   CUSTOM → AUDIT → DENY → ALLOW
 *
 * - "If any CUSTOM policy matches: ask the ext-authz provider; if it denies → DENY": reported as
 *   `custom` for the filter to act on; a CUSTOM rule whose provider is unusable denies at once.
 * - "mark_audit = any AUDIT policy matches" (never changes the decision).
 * - "If any enforced DENY policy matches → DENY."
 * - "If there is no enforced ALLOW policy → ALLOW." (an ALLOW policy whose rules were all dropped
 *   for TCP, or that has none, still counts as existing)
 * - "If any enforced ALLOW policy matches → ALLOW." "Otherwise → DENY."
 * - Dry-run policies are evaluated into `shadow` only and never count as "an ALLOW policy exists".
 *
 * Within each action the first matching rule in policy-id order is reported, as Envoy's RBAC
 * engine walks its (sorted) policy map.
 */
import { EvalContext, type Predicate } from './context.ts';
import type { AuthzResult, CustomCheck, RequestAttributes, ShadowResult } from './types.ts';

/** A compiled rule: its Envoy policy id `ns[<ns>]-policy[<name>]-rule[<n>]` and its matcher. */
export interface CompiledRule {
  readonly id: string;
  readonly matches: Predicate;
}

/** A CUSTOM rule; `denyId` is set when its provider is unusable (the rule then denies). */
export interface CompiledCustomRule extends CompiledRule {
  readonly provider: string;
  readonly denyId?: string;
}

/** The rule arrays of one evaluator. */
export interface EvaluatorParts {
  readonly custom: readonly CompiledCustomRule[];
  readonly audit: readonly CompiledRule[];
  readonly deny: readonly CompiledRule[];
  readonly allow: readonly CompiledRule[];
  /** At least one enforced ALLOW policy applies (even with no rule left). */
  readonly hasAllow: boolean;
  readonly shadowDeny: readonly CompiledRule[];
  readonly shadowAllow: readonly CompiledRule[];
  /** At least one dry-run ALLOW policy applies. */
  readonly hasShadowAllow: boolean;
  /** Whether any dry-run DENY policy applies. */
  readonly hasShadowDeny: boolean;
  /** Refs (`AuthorizationPolicy/ns/name`) of the policies compiled in, for dumps and logs. */
  readonly policies: readonly string[];
}

/** Envoy's response code details for an RBAC denial: `rbac_access_denied_matched_policy[<id>|none]`. */
export function rbacDeniedDetails(result: AuthzResult): string {
  return `rbac_access_denied_matched_policy[${result.policy ?? 'none'}]`;
}

const ALLOW_NO_POLICY: AuthzResult = Object.freeze({ decision: 'ALLOW' });
const DENY_NO_MATCH: AuthzResult = Object.freeze({ decision: 'DENY' });

/** One context for every check: checks are synchronous and never overlap (no allocation per check). */
const scratch = new EvalContext();

function firstMatch(rules: readonly CompiledRule[], ctx: EvalContext): string | undefined {
  for (let i = 0; i < rules.length; i++) if (rules[i].matches(ctx)) return rules[i].id;
  return undefined;
}

function sortById<T extends CompiledRule>(rules: readonly T[]): readonly T[] {
  return Object.freeze([...rules].sort((a, b) => (a.id < b.id ? -1 : a.id > b.id ? 1 : 0)));
}

/** Immutable evaluator for one target and one chain. Build once per mesh snapshot. */
export class Evaluator {
  readonly #custom: readonly CompiledCustomRule[];
  readonly #audit: readonly CompiledRule[];
  readonly #deny: readonly CompiledRule[];
  readonly #allow: readonly CompiledRule[];
  readonly #hasAllow: boolean;
  readonly #shadowDeny: readonly CompiledRule[];
  readonly #shadowAllow: readonly CompiledRule[];
  readonly #hasShadowAllow: boolean;
  readonly #hasShadowDeny: boolean;
  readonly #hasShadow: boolean;
  readonly #empty: boolean;
  readonly #failClosed: boolean;
  /** Refs of the policies that apply here. */
  readonly policies: readonly string[];

  constructor(parts: EvaluatorParts, failClosed = false) {
    this.#custom = sortById(parts.custom);
    this.#audit = sortById(parts.audit);
    this.#deny = sortById(parts.deny);
    this.#allow = sortById(parts.allow);
    this.#hasAllow = parts.hasAllow;
    this.#shadowDeny = sortById(parts.shadowDeny);
    this.#shadowAllow = sortById(parts.shadowAllow);
    this.#hasShadowAllow = parts.hasShadowAllow;
    this.#hasShadowDeny = parts.hasShadowDeny;
    this.#hasShadow = parts.hasShadowAllow || parts.hasShadowDeny;
    this.#failClosed = failClosed;
    this.#empty = !failClosed && !this.#custom.length && !this.#audit.length && !this.#deny.length && !this.#hasAllow && !this.#hasShadow;
    this.policies = Object.freeze([...parts.policies]);
  }

  /** An evaluator that denies everything (used when the policies could not be compiled). */
  static denyAll(): Evaluator {
    return new Evaluator(
      { custom: [], audit: [], deny: [], allow: [], hasAllow: false, shadowDeny: [], shadowAllow: [], hasShadowAllow: false, hasShadowDeny: false, policies: [] },
      true,
    );
  }

  /** True when no policy applies: every check allows. Lets the filter skip building attributes. */
  get empty(): boolean {
    return this.#empty;
  }

  /** Decide one request or connection. Pure and synchronous; never throws for any input. */
  evaluate(attrs: RequestAttributes): AuthzResult {
    if (this.#empty) return ALLOW_NO_POLICY;
    if (this.#failClosed) return DENY_NO_MATCH;
    const ctx = scratch.reset(attrs);

    let custom: CustomCheck | undefined;
    const customRules = this.#custom;
    for (let i = 0; i < customRules.length; i++) {
      const rule = customRules[i];
      if (!rule.matches(ctx)) continue;
      if (rule.denyId !== undefined) return { decision: 'DENY', policy: rule.denyId };
      custom = { provider: rule.provider, policy: rule.id };
      break;
    }

    const audit = firstMatch(this.#audit, ctx);

    let shadow: ShadowResult | undefined;
    const shadowDenied = this.#hasShadow ? firstMatch(this.#shadowDeny, ctx) : undefined;

    const denied = firstMatch(this.#deny, ctx);
    if (denied !== undefined) {
      // Envoy never reaches the ALLOW filter (and its dry-run rules) after a DENY filter denied.
      if (shadowDenied !== undefined) shadow = { decision: 'DENY', policy: shadowDenied };
      else if (this.#hasShadowDeny) shadow = { decision: 'ALLOW' };
      return result('DENY', denied, audit, custom, shadow);
    }

    if (this.#hasShadow) {
      if (shadowDenied !== undefined) shadow = { decision: 'DENY', policy: shadowDenied };
      else if (this.#hasShadowAllow) {
        const allowedBy = firstMatch(this.#shadowAllow, ctx);
        shadow = allowedBy !== undefined ? { decision: 'ALLOW', policy: allowedBy } : { decision: 'DENY' };
      } else shadow = { decision: 'ALLOW' };
    }

    if (!this.#hasAllow) return result('ALLOW', undefined, audit, custom, shadow);
    const allowed = firstMatch(this.#allow, ctx);
    return result(allowed === undefined ? 'DENY' : 'ALLOW', allowed, audit, custom, shadow);
  }
}

function result(
  decision: 'ALLOW' | 'DENY',
  policy: string | undefined,
  audit: string | undefined,
  custom: CustomCheck | undefined,
  shadow: ShadowResult | undefined,
): AuthzResult {
  if (policy === undefined && audit === undefined && custom === undefined && shadow === undefined) {
    return decision === 'ALLOW' ? ALLOW_NO_POLICY : DENY_NO_MATCH;
  }
  const out: { -readonly [K in keyof AuthzResult]: AuthzResult[K] } = { decision };
  if (policy !== undefined) out.policy = policy;
  if (audit !== undefined) out.audit = audit;
  if (custom !== undefined) out.custom = custom;
  if (shadow !== undefined) out.shadow = shadow;
  return out;
}
