/**
 * Kubernetes label selectors (`metav1.LabelSelector`: `matchLabels` + `matchExpressions`),
 * validated as the API server does (apimachinery `ValidateLabelSelector`,
 * `ValidateLabelSelectorRequirement`, `ValidateLabels`) and compiled once into a predicate over a
 * label map. Semantics (apimachinery `LabelSelectorAsSelector`): every `matchLabels` pair and every
 * expression must hold (AND); an empty selector `{}` selects everything.
 * - `In`: the key is present and its value is one of `values`;
 * - `NotIn`: the key is absent, or its value is none of `values`;
 * - `Exists` / `DoesNotExist`: the key is present / absent (`values` must be empty).
 */

/** Labels of a pod or namespace. */
export type Labels = Readonly<Record<string, string>>;

/** A compiled selector. */
export type LabelPredicate = (labels: Labels) => boolean;

/** Reports a validation problem at a path relative to the selector; never returns. */
export type Fail = (path: readonly (string | number)[], message: string) => never;

const OPERATORS = ['In', 'NotIn', 'Exists', 'DoesNotExist'] as const;
type Operator = (typeof OPERATORS)[number];

const NAME = /^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$/;
const DNS_SUBDOMAIN = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/;

/** apimachinery `IsQualifiedName`: `[prefix/]name`, name ≤ 63 characters, prefix a DNS subdomain ≤ 253. */
function qualifiedNameProblem(key: string): string | undefined {
  const slash = key.indexOf('/');
  const prefix = slash < 0 ? undefined : key.slice(0, slash);
  const name = slash < 0 ? key : key.slice(slash + 1);
  if (prefix !== undefined && (prefix.length === 0 || prefix.length > 253 || !DNS_SUBDOMAIN.test(prefix))) {
    return `invalid label key ${JSON.stringify(key)}: the prefix must be a DNS subdomain (lower case, at most 253 characters)`;
  }
  if (name.length === 0 || name.length > 63 || !NAME.test(name)) {
    return `invalid label key ${JSON.stringify(key)}: a name of at most 63 alphanumeric characters, '-', '_' or '.', starting and ending with an alphanumeric character`;
  }
  return undefined;
}

/** apimachinery `IsValidLabelValue`: empty, or ≤ 63 characters of the name alphabet. */
function labelValueProblem(value: string): string | undefined {
  if (value === '' || (value.length <= 63 && NAME.test(value))) return undefined;
  return `invalid label value ${JSON.stringify(value)}: at most 63 alphanumeric characters, '-', '_' or '.', starting and ending with an alphanumeric character`;
}

const isRecord = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);

/**
 * Validate and compile a selector document (`undefined`/`null` is the empty selector).
 * @throws whatever `fail` throws, for a non-mapping selector, a non-string label value, an invalid
 *   key or value, an unknown operator, `In`/`NotIn` without values, or `Exists`/`DoesNotExist` with values.
 */
export function compileSelector(doc: unknown, fail: Fail): LabelPredicate {
  if (doc === undefined || doc === null) return MATCH_ALL;
  if (!isRecord(doc)) return fail([], 'must be a label selector (matchLabels and/or matchExpressions)');
  const checks: LabelPredicate[] = [];

  const matchLabels = doc.matchLabels;
  if (matchLabels !== undefined && matchLabels !== null) {
    if (!isRecord(matchLabels)) fail(['matchLabels'], 'must be a mapping of label keys to values');
    for (const [key, value] of Object.entries(matchLabels as Record<string, unknown>)) {
      const at = ['matchLabels', key];
      if (typeof value !== 'string') fail(at, `label values must be strings (quote numbers and booleans), got ${JSON.stringify(value)}`);
      const problem = qualifiedNameProblem(key) ?? labelValueProblem(value as string);
      if (problem) fail(at, problem);
      checks.push((labels) => labels[key] === value);
    }
  }

  const expressions = doc.matchExpressions;
  if (expressions !== undefined && expressions !== null) {
    if (!Array.isArray(expressions)) fail(['matchExpressions'], 'must be a list of label selector requirements');
    (expressions as unknown[]).forEach((e, i) => checks.push(compileRequirement(e, (path, message) => fail(['matchExpressions', i, ...path], message))));
  }

  if (checks.length === 0) return MATCH_ALL;
  if (checks.length === 1) return checks[0];
  return (labels) => {
    for (const c of checks) if (!c(labels)) return false;
    return true;
  };
}

function compileRequirement(doc: unknown, fail: Fail): LabelPredicate {
  if (!isRecord(doc)) return fail([], 'must be a mapping with key, operator and values');
  const key = doc.key;
  if (typeof key !== 'string' || key === '') return fail(['key'], 'is required');
  const keyProblem = qualifiedNameProblem(key);
  if (keyProblem) fail(['key'], keyProblem);
  const operator = doc.operator;
  if (!OPERATORS.includes(operator as Operator)) {
    return fail(['operator'], `Unsupported value: ${JSON.stringify(operator)}: supported values: "In", "NotIn", "Exists", "DoesNotExist"`);
  }
  const raw = doc.values ?? [];
  if (!Array.isArray(raw)) return fail(['values'], 'must be a list of strings');
  const values = raw.map((v, i) => {
    if (typeof v !== 'string') fail(['values', i], `label values must be strings (quote numbers and booleans), got ${JSON.stringify(v)}`);
    const problem = labelValueProblem(v as string);
    if (problem) fail(['values', i], problem);
    return v as string;
  });
  switch (operator as Operator) {
    case 'In':
    case 'NotIn': {
      if (values.length === 0) fail(['values'], 'must be specified when `operator` is \'In\' or \'NotIn\'');
      const set = new Set(values);
      return operator === 'In'
        ? (labels) => Object.hasOwn(labels, key) && set.has(labels[key])
        : (labels) => !Object.hasOwn(labels, key) || !set.has(labels[key]);
    }
    case 'Exists':
    case 'DoesNotExist':
      if (values.length > 0) fail(['values'], 'may not be specified when `operator` is \'Exists\' or \'DoesNotExist\'');
      return operator === 'Exists' ? (labels) => Object.hasOwn(labels, key) : (labels) => !Object.hasOwn(labels, key);
  }
}

/** The empty selector. */
export const MATCH_ALL: LabelPredicate = () => true;
