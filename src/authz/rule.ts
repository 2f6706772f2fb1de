/**
 * Compile one policy rule into a predicate (authz.md §3), for the HTTP or the TCP filter chain,
 * the way istio/istio `pilot/pkg/security/authz/model/model.go` (`New`, `Generate`, `checkError`)
 * and `builder.go` (`build`) do:
 *
 * - rule = (OR over `from`) AND (OR over `to`) AND (every `when`); a missing `from`/`to`/`when`
 *   adds no constraint, so `rules: [{}]` matches everything;
 * - a source / operation = AND of its set fields; a field = (any value matches, when values are
 *   given) AND (no notValue matches, when notValues are given);
 * - `principals`/`source.principal` values get trust-domain aliases (`MigrateTrustDomain`),
 *   `trustDomains`/`source.trustDomain` values are expanded to the bundle;
 * - TCP (authz.md §6.1): an ALLOW rule that uses any HTTP-only attribute is dropped entirely (fail
 *   closed); for DENY, AUDIT and CUSTOM only the HTTP-only values are dropped, and a field, source
 *   or operation left with nothing matches anything (the rule gets wider).
 */
import type { FieldPath } from '../state/yaml-locate.ts';
import type { Predicate } from './context.ts';
import { OPERATION_GENERATORS, PRINCIPAL_KEYS, TRUST_DOMAIN_KEYS, conditionGenerator, sourceGenerators, type Generator, type GeneratorScope } from './fields.ts';
import type { Rule } from './policy.ts';
import { expandTrustDomainAliases, replaceTrustDomainAliases } from './trust-domain.ts';
import type { AuthzAction } from './types.ts';

/** Which filter chain the rule is compiled for. */
export type Flavour = 'http' | 'tcp';

/** What rule compilation depends on besides the rule. */
export interface RuleScope extends GeneratorScope {
  readonly action: AuthzAction;
  readonly flavour: Flavour;
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
      const expanded = PRINCIPAL_KEYS.has(key)
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
