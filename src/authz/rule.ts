/**
 * Compile one policy rule into a predicate, for the HTTP or the TCP filter chain,
 * the way istio/istio `pilot/pkg/security/authz/model/model.go` (`New`, `Generate`, `checkError`)
 * and `builder.go` (`build`) do:
 *
 * - rule = (OR over `from`) AND (OR over `to`) AND (every `when`); a missing `from`/`to`/`when`
 *   adds no constraint, so `rules: [{}]` matches everything;
 * - a source / operation = AND of its set fields; a field = (any value matches, when values are
 *   given) AND (no notValue matches, when notValues are given);
 * - `principals`/`source.principal` values get trust-domain aliases (`MigrateTrustDomain`),
 *   `trustDomains`/`source.trustDomain` values are expanded to the bundle;
 * - TCP (model.go `checkError`): an ALLOW rule that uses any HTTP-only attribute is dropped
 *   entirely (fail closed); for DENY, AUDIT and CUSTOM only the HTTP-only values are dropped, and a
 *   field, source or operation left with nothing matches anything (the rule gets wider).
 * - ztunnel: the rule as istiod converts it for ztunnel and ztunnel matches it;
 *   see {@link compileZtunnelRule}.
 */
import type { FieldPath } from '../state/index.ts';
import type { Predicate } from './context.ts';
import { OPERATION_GENERATORS, PRINCIPAL_KEYS, TRUST_DOMAIN_KEYS, conditionGenerator, sourceGenerators, type Generator, type GeneratorScope } from './fields.ts';
import type { Rule } from './policy.ts';
import { parseSpiffeId, type SpiffeId } from '../identity/index.ts';
import { stringMatcher } from './string-match.ts';
import { expandTrustDomainAliases, replaceTrustDomainAliases } from './trust-domain.ts';
import type { AuthzAction } from './types.ts';

/** Which filter chain the rule is compiled for. */
export type Flavour = 'http' | 'tcp';

/** Which enforcer a rule is compiled for: a waypoint chain, or ztunnel (the `inbound` role). */
export type RuleFlavour = Flavour | 'ztunnel';

/** What rule compilation depends on besides the rule. */
export interface RuleScope extends GeneratorScope {
  readonly action: AuthzAction;
  readonly flavour: RuleFlavour;
  /** `[trustDomain, ...trustDomainAliases]`. */
  readonly bundle: readonly string[];
}

/** Reports a value that cannot be compiled (a ConfigError at the value's field path). */
export type Fail = (path: FieldPath, message: string) => never;

/** Always true: a rule with nothing left in it. */
export const MATCH_ALL: Predicate = () => true;
/** Never true: Istio's `rbacPolicyMatchNever` for a policy without rules. */
export const MATCH_NEVER: Predicate = () => false;

/** The rule was dropped: for ALLOW on TCP, it needs an HTTP attribute. */
const DROP = Symbol('drop');
type Compiled = Predicate | null | typeof DROP; // null = no constraint

function and(preds: readonly Predicate[]): Predicate | null {
  if (preds.length === 0) return null;
  if (preds.length === 1) return preds[0];
  if (preds.length === 2) {
    const [a, b] = preds;
    return (ctx) => a(ctx) && b(ctx);
  }
  // Indexed loops on the data path: for-of allocates an iterator wherever V8 does not optimize it away.
  return (ctx) => {
    for (let i = 0; i < preds.length; i++) if (!preds[i](ctx)) return false;
    return true;
  };
}

function or(preds: readonly Predicate[]): Predicate {
  if (preds.length === 1) return preds[0];
  return (ctx) => {
    for (let i = 0; i < preds.length; i++) if (preds[i](ctx)) return true;
    return false;
  };
}

/**
 * One attribute with its values and notValues. `values`/`notValues` are the lists as written,
 * `at(list, k)` the field path of one value for error messages.
 */
function compileField(
  key: string,
  gen: Generator,
  values: readonly string[] | null | undefined,
  notValues: readonly string[] | null | undefined,
  scope: RuleScope,
  at: (list: 'values' | 'notValues', k: number) => FieldPath,
  fail: Fail,
): Compiled {
  if (!values?.length && !notValues?.length) return null;
  if (gen.httpOnly && scope.flavour === 'tcp') return scope.action === 'ALLOW' ? DROP : null;
  const build = (list: readonly string[], which: 'values' | 'notValues'): Predicate[] =>
    list.flatMap((v, k) => {
      // ztunnel gets principals as written: istiod's conversion rewrites no alias.
      const expanded = scope.flavour === 'ztunnel'
        ? [v]
        : PRINCIPAL_KEYS.has(key)
        ? replaceTrustDomainAliases([v], scope.bundle)
        : TRUST_DOMAIN_KEYS.has(key)
          ? expandTrustDomainAliases([v], scope.bundle)
          : [v];
      return expanded.map((x) => {
        try {
          return gen.value(x);
        } catch (err) {
          return fail(at(which, k), (err as Error).message);
        }
      });
    });
  const parts: Predicate[] = [];
  if (values?.length) parts.push(or(build(values, 'values')));
  if (notValues?.length) {
    const negated = or(build(notValues, 'notValues'));
    parts.push((ctx) => !negated(ctx));
  }
  return and(parts);
}

/** AND of compiled fields; DROP wins. */
function allOf(fields: readonly Compiled[]): Compiled {
  if (fields.includes(DROP)) return DROP;
  return and(fields.filter((f): f is Predicate => f !== null));
}

/** OR of compiled sources/operations; DROP wins, and an unconstrained entry makes the whole clause unconstrained. */
function anyOf(entries: readonly Compiled[]): Compiled {
  if (entries.includes(DROP)) return DROP;
  if (entries.includes(null)) return null;
  return or(entries as Predicate[]);
}

/**
 * Compile `rule` (at field path `at`, e.g. `spec.rules[2]`).
 * @returns the predicate, or null when the rule is dropped (ALLOW rule with an HTTP-only attribute
 *   compiled for TCP).
 * @throws ConfigError (through `fail`) when a value cannot be compiled, e.g. a principal suffix that
 *   is not a valid regular expression.
 */
export function compileRule(rule: Rule, scope: RuleScope, at: FieldPath, fail: Fail): Predicate | null {
  if (scope.flavour === 'ztunnel') return compileZtunnelRule(rule, scope, at, fail);
  const sources = sourceGenerators(scope);
  const clauses: Compiled[] = [];

  if (rule.from) {
    clauses.push(
      anyOf(
        rule.from.map(({ source }, j) =>
          allOf(
            Object.entries(sources).map(([field, gen]) => {
              const notField = `not${field[0].toUpperCase()}${field.slice(1)}` as keyof typeof source;
              const base = [...at, 'from', j, 'source'];
              return compileField(field, gen, source[field as keyof typeof source], source[notField], scope, (list, k) => [...base, list === 'values' ? field : notField, k], fail);
            }),
          ),
        ),
      ),
    );
  }

  if (rule.to) {
    clauses.push(
      anyOf(
        rule.to.map(({ operation }, j) =>
          allOf(
            Object.entries(OPERATION_GENERATORS).map(([field, gen]) => {
              const notField = `not${field[0].toUpperCase()}${field.slice(1)}` as keyof typeof operation;
              const base = [...at, 'to', j, 'operation'];
              return compileField(field, gen, operation[field as keyof typeof operation], operation[notField], scope, (list, k) => [...base, list === 'values' ? field : notField, k], fail);
            }),
          ),
        ),
      ),
    );
  }

  rule.when?.forEach((c, j) => {
    let gen: Generator;
    try {
      gen = conditionGenerator(c.key, scope);
    } catch (err) {
      return fail([...at, 'when', j, 'key'], (err as Error).message);
    }
    clauses.push(compileField(c.key, gen, c.values, c.notValues, scope, (list, k) => [...at, 'when', j, list, k], fail));
  });

  const all = allOf(clauses);
  if (all === DROP) return null;
  return all ?? MATCH_ALL;
}

// --- ztunnel ---------------------------------------------------------------------------------

/** An attribute ztunnel cannot evaluate: istiod's conversion reports it as an HTTP attribute. */
const L7 = 'L7';
type ZtunnelField = Generator | typeof L7;

const SPIFFE = 'spiffe://';

/** The last peer identity parsed: every matcher of one check reads the same principal. */
let lastUri: string | undefined;
let lastId: SpiffeId | undefined;
function peerIdentity(uri: string | undefined): SpiffeId | undefined {
  if (uri !== lastUri) {
    lastUri = uri;
    try {
      lastId = uri === undefined ? undefined : parseSpiffeId(uri);
    } catch {
      lastId = undefined;
    }
  }
  return lastId;
}

/**
 * `principals`, `source.principal` at ztunnel (ZT `StringMatch::matches_principal`): `spiffe://` is
 * stripped from the peer id (no peer or another scheme: no match) and the rest compared exactly,
 * by prefix (`x*`), by suffix (`*x`, literal) or for presence (`*`), as istiod's `stringToMatch`.
 */
const ztunnelPrincipal: Generator = {
  httpOnly: false,
  value(v) {
    const m = stringMatcher(v);
    return (ctx) => {
      const p = ctx.attrs.principal;
      return p !== undefined && p.startsWith(SPIFFE) && m(p.slice(SPIFFE.length));
    };
  },
};

/** `namespaces`, `source.namespace` at ztunnel: a string match on the peer id's namespace (no regex: `f*o` is literal). */
const ztunnelNamespace: Generator = {
  httpOnly: false,
  value(v) {
    const m = stringMatcher(v);
    return (ctx) => m(peerIdentity(ctx.attrs.principal)?.namespace);
  },
};

/** `serviceAccounts` at ztunnel (istiod `stringToServiceAccountMatch`, ZT `ServiceAccountMatch`): exact namespace and name. */
function ztunnelServiceAccount(scope: GeneratorScope): Generator {
  return {
    httpOnly: false,
    value(v) {
      // Validation allows `<sa>` or `<ns>/<sa>` only.
      const [ns, sa] = v.includes('/') ? v.split('/') : [scope.policyNamespace, v];
      return (ctx) => {
        const id = peerIdentity(ctx.attrs.principal);
        return id?.namespace === ns && id.serviceAccount === sa;
      };
    },
  };
}

function ztunnelSourceFields(scope: GeneratorScope): Readonly<Record<string, ZtunnelField>> {
  return {
    principals: ztunnelPrincipal,
    namespaces: ztunnelNamespace,
    serviceAccounts: ztunnelServiceAccount(scope),
    ipBlocks: sourceGenerators(scope).ipBlocks,
    // istiod `httpSources`: no field of ztunnel's Match can hold these.
    requestPrincipals: L7,
    remoteIpBlocks: L7,
    trustDomains: L7,
  };
}

/** istiod `httpOperations`: only `ports` reaches ztunnel. */
const ZTUNNEL_OPERATION_FIELDS: Readonly<Record<string, ZtunnelField>> = { ports: OPERATION_GENERATORS.ports, hosts: L7, methods: L7, paths: L7 };

/** istiod `l4WhenAttributes`: the only `when` keys ztunnel evaluates; every other key is L7. */
function ztunnelCondition(key: string, scope: GeneratorScope): ZtunnelField {
  switch (key) {
    case 'source.ip':
    case 'destination.ip':
    case 'destination.port':
      return conditionGenerator(key, scope);
    case 'source.namespace':
      return ztunnelNamespace;
    case 'source.principal':
      return ztunnelPrincipal;
    default:
      return L7;
  }
}

/** A rule as istiod converts it for ztunnel. */
export interface ZtunnelRule {
  /** The predicate; null when the rule is not sent (ALLOW rule with an HTTP attribute). */
  readonly matches: Predicate | null;
  /** HTTP attributes found (`methods`, `request.headers[x]`...), as istiod's status lists them. */
  readonly l7: readonly string[];
  /** False when some clause holds only empty matches, so the rule can never match at ztunnel. */
  readonly effective: boolean;
}

/**
 * Convert `rule` as istiod's `handleRule` (pilot/pkg/serviceregistry/ambient/authorization.go,
 * `convertAuthorizationPolicy`) does for ztunnel, and match it as ztunnel's `Authorization::matches`
 * (ztunnel src/rbac.rs) does:
 *
 * - each `to` operation and each `from` source becomes one Match holding only its L4 fields
 *   (`ports`; `principals`, `namespaces`, `serviceAccounts`, `ipBlocks` and their `not*`), ANDed;
 *   `to` and `from` are one clause each (OR over their Matches); each `when` condition is a clause
 *   of its own (`source.ip`, `source.namespace`, `source.principal`, `destination.ip`,
 *   `destination.port`); the rule is the AND of its clauses, and a rule without clauses matches all;
 * - HTTP attributes (`hosts`, `methods`, `paths`, `requestPrincipals`, `remoteIpBlocks`,
 *   `trustDomains`, their `not*`, and every other `when` key) are left out of the Match;
 * - ALLOW: a rule with any HTTP attribute is not sent at all (fail closed: if every rule goes, the
 *   policy still exists and matches nothing);
 * - DENY: the rest of the rule stays. A Match left empty is skipped by ztunnel (never match-all),
 *   so a clause of only empty Matches never matches and the rule has no effect; a Match that kept
 *   some L4 field matches without the HTTP part (wider).
 * Principals are compared as written (no trust-domain alias rewriting) with `spiffe://` stripped
 * from the peer; namespaces and service accounts against the peer id's parts.
 * @throws ConfigError (through `fail`) for a value that cannot be compiled (validation rejects those first).
 */
export function ztunnelRule(rule: Rule, scope: RuleScope, at: FieldPath, fail: Fail): ZtunnelRule {
  const l7 = new Set<string>();
  let effective = true;
  /** One Match: AND of its L4 fields; null = empty (skipped by ztunnel). */
  const match = (fields: Readonly<Record<string, ZtunnelField>>, doc: Readonly<Record<string, readonly string[] | null | undefined>>, base: FieldPath): Predicate | null => {
    const parts: Predicate[] = [];
    for (const [field, gen] of Object.entries(fields)) {
      const notField = `not${field[0].toUpperCase()}${field.slice(1)}`;
      const values = doc[field];
      const notValues = doc[notField];
      if (gen === L7) {
        if (values?.length) l7.add(field);
        if (notValues?.length) l7.add(notField);
        continue;
      }
      const p = compileField(field, gen, values, notValues, scope, (list, k) => [...base, list === 'values' ? field : notField, k], fail);
      if (typeof p === 'function') parts.push(p);
    }
    return and(parts);
  };
  /** One clause: OR over its non-empty Matches; never true when all are empty. */
  const clause = (matches: readonly (Predicate | null)[]): Predicate => {
    const live = matches.filter((m): m is Predicate => m !== null);
    if (live.length === 0) {
      effective = false;
      return MATCH_NEVER;
    }
    return or(live);
  };

  const clauses: Predicate[] = [];
  if (rule.to) {
    clauses.push(clause(rule.to.map(({ operation }, j) => match(ZTUNNEL_OPERATION_FIELDS, operation as Record<string, string[] | undefined>, [...at, 'to', j, 'operation']))));
  }
  if (rule.from) {
    const fields = ztunnelSourceFields(scope);
    clauses.push(clause(rule.from.map(({ source }, j) => match(fields, source as Record<string, string[] | undefined>, [...at, 'from', j, 'source']))));
  }
  rule.when?.forEach((c, j) => {
    const gen = ztunnelCondition(c.key, scope);
    if (gen === L7) {
      l7.add(c.key);
      clauses.push(clause([null]));
      return;
    }
    const p = compileField(c.key, gen, c.values, c.notValues, scope, (list, k) => [...at, 'when', j, list, k], fail);
    clauses.push(clause([typeof p === 'function' ? p : null]));
  });

  const found = [...l7].sort();
  if (found.length && scope.action === 'ALLOW') return { matches: null, l7: found, effective: false };
  return { matches: and(clauses) ?? MATCH_ALL, l7: found, effective };
}

/** {@link ztunnelRule}'s predicate (null: an ALLOW rule not sent to ztunnel). */
function compileZtunnelRule(rule: Rule, scope: RuleScope, at: FieldPath, fail: Fail): Predicate | null {
  return ztunnelRule(rule, scope, at, fail).matches;
}
