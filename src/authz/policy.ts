/**
 * Read one AuthorizationPolicy object into a validated {@link AuthorizationPolicy}, rejecting what
 * Istio's admission validation rejects (istio/istio `pkg/config/validation/validation.go`
 * `ValidateAuthorizationPolicy`, `validatePolicyTargetReference`, `validateOneOfSelectorType`,
 * `checkDryRunAnnotation`; `pkg/config/security/security.go` `ValidateAttribute`, `ValidateIPs`,
 * `ValidatePorts`, `CheckEmptyValues`, `CheckValidPathTemplate`).
 *
 * In this standalone waypoint the mesh file plays the API server: a policy that Istio would refuse
 * at admission makes the whole mesh file invalid (the last good state stays).
 */
import { ConfigError, log } from '../util/index.ts';
import { type KeptResource, locateField, type FieldPath } from '../state/index.ts';
import { parseClaimPath } from './jwt.ts';
import { cidrMatcher } from './ip-match.ts';
import { compilePathTemplate, isPathTemplate } from './path-template.ts';
import {
  AuthorizationPolicySchema,
  type ConditionDoc,
  type OperationDoc,
  type RuleDoc,
  type SourceDoc,
  type TargetRefDoc,
} from './policy-schema.ts';
import type { AuthzAction } from './types.ts';

/** Annotation that makes a policy dry-run (API annotation `istio.io/dry-run`). */
export const DRY_RUN_ANNOTATION = 'istio.io/dry-run';

/** A target reference with its group made canonical (`''` → `core`). */
export interface TargetRef {
  readonly group: string;
  readonly kind: string;
  readonly name: string;
}

/** A non-null rule (`rules: [{}]` gives a rule with nothing in it). */
export interface Rule {
  readonly from?: readonly { readonly source: SourceDoc }[];
  readonly to?: readonly { readonly operation: OperationDoc }[];
  readonly when?: readonly ConditionDoc[];
}

/** A validated AuthorizationPolicy. */
export interface AuthorizationPolicy {
  readonly namespace: string;
  readonly name: string;
  /** `AuthorizationPolicy/<ns>/<name>`, for messages. */
  readonly ref: string;
  readonly action: AuthzAction;
  /** `istio.io/dry-run` parsed as Go's `strconv.ParseBool` does. */
  readonly dryRun: boolean;
  /** `provider.name` (CUSTOM only). */
  readonly provider?: string;
  /** True when `spec.selector` is set (a ztunnel/sidecar policy). */
  readonly hasSelector: boolean;
  /**
   * `targetRefs`, or the deprecated `targetRef` as a one-element list (istio/istio
   * pilot/pkg/model/policyattachment.go `GetTargetRefs`).
   */
  readonly targetRefs: readonly TargetRef[];
  readonly rules: readonly Rule[];
}

/** Source fields, in the order they are reported. */
export const SOURCE_FIELDS = [
  'principals',
  'notPrincipals',
  'requestPrincipals',
  'notRequestPrincipals',
  'namespaces',
  'notNamespaces',
  'serviceAccounts',
  'notServiceAccounts',
  'trustDomains',
  'notTrustDomains',
  'ipBlocks',
  'notIpBlocks',
  'remoteIpBlocks',
  'notRemoteIpBlocks',
] as const satisfies readonly (keyof SourceDoc)[];

export const OPERATION_FIELDS = ['hosts', 'notHosts', 'ports', 'notPorts', 'methods', 'notMethods', 'paths', 'notPaths'] as const satisfies readonly (keyof OperationDoc)[];

/**
 * `when` keys accepted by Istio's validation (pkg/config/security/security.go `ValidateAttribute`);
 * prefixes end with `[` or `.`.
 */
const EXACT_KEYS = new Set([
  'source.ip',
  'remote.ip',
  'source.namespace',
  'source.principal',
  'source.serviceAccount',
  'source.trustDomain',
  'request.auth.principal',
  'request.auth.audiences',
  'request.auth.presenter',
  'destination.ip',
  'destination.port',
  'connection.sni',
]);
export const HEADER_KEY = 'request.headers';
export const CLAIMS_KEY = 'request.auth.claims';
export const EXPERIMENTAL_KEY = 'experimental.envoy.filters.';

const GATEWAY_API = 'gateway.networking.k8s.io';
const NETWORKING_ISTIO = 'networking.istio.io';
/** Kinds a targetRef may name (validation.go `allowedTargetRefs`), by canonical group. */
const ALLOWED_TARGETS: readonly { group: string; kind: string }[] = [
  { group: 'core', kind: 'Service' },
  { group: NETWORKING_ISTIO, kind: 'ServiceEntry' },
  { group: GATEWAY_API, kind: 'Gateway' },
  { group: GATEWAY_API, kind: 'GatewayClass' },
];
const MAX_TARGET_REFS = 16;
const MAX_SERVICE_ACCOUNTS = 16;

/** Go's `strconv.ParseBool`. */
function parseBool(text: string): boolean | undefined {
  if (['1', 't', 'T', 'TRUE', 'true', 'True'].includes(text)) return true;
  if (['0', 'f', 'F', 'FALSE', 'false', 'False'].includes(text)) return false;
  return undefined;
}

/** `''` and `core` are the same API group (Istio `config.CanonicalGroup`). */
export function canonicalGroup(group: string | null | undefined): string {
  return group ? group : 'core';
}

/**
 * Parse and validate the AuthorizationPolicy `resource`.
 * @throws ConfigError naming the object (`AuthorizationPolicy/<ns>/<name>`) and the offending
 *   field (`spec.rules[0].from[0].source.principals[1]`) for the first problem found.
 */
export function parsePolicy(resource: KeptResource): AuthorizationPolicy {
  const ref = `AuthorizationPolicy/${resource.namespace}/${resource.name}`;
  const fail = (path: FieldPath, message: string): never => {
    throw new ConfigError(message, locateField(resource, ref, path));
  };

  const parsed = AuthorizationPolicySchema.safeParse(resource.object);
  if (!parsed.success) {
    const issue = parsed.error.issues[0];
    fail(
      issue.path.filter((p): p is string | number => typeof p !== 'symbol'),
      issue.message,
    );
  }
  const { metadata, spec: maybeSpec } = parsed.data!;
  const spec = maybeSpec ?? {};
  const action: AuthzAction = spec.action ?? 'ALLOW';

  // Dry-run annotation (validation.go `checkDryRunAnnotation`).
  let dryRun = false;
  const dryRunText = metadata.annotations?.[DRY_RUN_ANNOTATION];
  if (dryRunText !== undefined) {
    const at = ['metadata', 'annotations', DRY_RUN_ANNOTATION];
    if (action !== 'ALLOW' && action !== 'DENY') fail(at, `the annotation ${DRY_RUN_ANNOTATION} currently only supports action ALLOW/DENY, found action ${action}`);
    const value = parseBool(dryRunText);
    if (value === undefined) fail(at, `invalid value ${JSON.stringify(dryRunText)}: must be "true" or "false"`);
    dryRun = value!;
  }

  // Selector and target references.
  const set = [spec.selector != null, spec.targetRef != null, (spec.targetRefs?.length ?? 0) > 0].filter(Boolean).length;
  if (set > 1) fail(['spec'], 'only one of selector, targetRef or targetRefs can be set');
  for (const [key, value] of Object.entries(spec.selector?.matchLabels ?? {})) {
    const at = ['spec', 'selector', 'matchLabels', key];
    if (key === '') fail(at, 'empty key is not supported in selector');
    if (key.includes('*') || value.includes('*')) fail(at, `wildcard is not supported in selector: "${key}=${value}"`);
  }
  const refs: { doc: TargetRefDoc; at: FieldPath }[] = spec.targetRefs?.length
    ? spec.targetRefs.map((doc, i) => ({ doc, at: ['spec', 'targetRefs', i] }))
    : spec.targetRef
      ? [{ doc: spec.targetRef, at: ['spec', 'targetRef'] }]
      : [];
  if (refs.length > MAX_TARGET_REFS) fail(['spec', 'targetRefs'], `at most ${MAX_TARGET_REFS} target references are allowed, found ${refs.length}`);
  const targetRefs = refs.map(({ doc, at }) => {
    if (doc.name === '') fail([...at, 'name'], 'targetRef name must be set');
    if (doc.namespace) fail([...at, 'namespace'], 'targetRef namespace must not be set; cross namespace referencing is not supported');
    const group = canonicalGroup(doc.group);
    if (!ALLOWED_TARGETS.some((t) => t.group === group && t.kind === doc.kind)) {
      fail(at, `targetRef must be to a core/Service, ${NETWORKING_ISTIO}/ServiceEntry, ${GATEWAY_API}/Gateway or ${GATEWAY_API}/GatewayClass, got ${doc.group ?? ''}/${doc.kind}`);
    }
    return { group, kind: doc.kind, name: doc.name };
  });

  // Action-specific rules.
  const rawRules = spec.rules ?? [];
  if (action === 'CUSTOM') {
    if (rawRules.length === 0) {
      fail(['spec', 'rules'], 'CUSTOM action without `rules` is meaningless as it will never be triggered, add an empty rule `{}` if you want it be triggered for every request');
    }
    if (!spec.provider?.name) fail(['spec', 'provider', 'name'], '`provider.name` must not be empty');
    checkCustomRules(rawRules, fail);
  } else if (spec.provider != null) {
    fail(['spec', 'provider'], `\`provider\` must not be with non CUSTOM action, found ${action}`);
  }
  if (action === 'DENY' && rawRules.length === 0) {
    fail(['spec', 'rules'], 'DENY action without `rules` is meaningless as it will never be triggered, add an empty rule `{}` if you want it be triggered for every request');
  }

  const rules = rawRules.map((rule, i) => checkRule(rule, ['spec', 'rules', i], fail));

  return {
    namespace: resource.namespace,
    name: resource.name,
    ref,
    action,
    dryRun,
    ...(action === 'CUSTOM' ? { provider: spec.provider!.name! } : {}),
    hasSelector: spec.selector != null,
    targetRefs,
    rules,
  };
}

type Fail = (path: FieldPath, message: string) => never;

/** validation.go: CUSTOM rules may not use source identity or `request.auth.*`. */
function checkCustomRules(rules: readonly RuleDoc[], fail: Fail): void {
  const identity = ['namespaces', 'notNamespaces', 'serviceAccounts', 'notServiceAccounts', 'principals', 'notPrincipals', 'requestPrincipals', 'notRequestPrincipals'] as const;
  rules.forEach((rule, i) => {
    rule?.from?.forEach((from, j) => {
      for (const field of identity) {
        if (from?.source?.[field]?.length) fail(['spec', 'rules', i, 'from', j, 'source', field], `${field} is currently not supported with CUSTOM action`);
      }
    });
    rule?.when?.forEach((c, j) => {
      const key = c?.key ?? '';
      if (['source.namespace', 'source.serviceAccount', 'source.principal'].includes(key) || key.startsWith('request.auth.')) {
        fail(['spec', 'rules', i, 'when', j, 'key'], `${key} is currently not supported with CUSTOM action`);
      }
    });
  });
}

function checkRule(rule: RuleDoc, at: FieldPath, fail: Fail): Rule {
  if (rule === null) return fail(at, '`rule` must not be null');
  if (rule.from != null && rule.from.length === 0) fail([...at, 'from'], '`from` must not be empty');
  if (rule.to != null && rule.to.length === 0) fail([...at, 'to'], '`to` must not be empty');
  const from = rule.from?.map((f, j) => {
    const fat = [...at, 'from', j];
    if (f === null) return fail(fat, '`from` must not be null');
    if (f.source == null) return fail([...fat, 'source'], '`from.source` must not be null');
    checkSource(f.source, [...fat, 'source'], fail);
    return { source: f.source };
  });
  const to = rule.to?.map((t, j) => {
    const tat = [...at, 'to', j];
    if (t === null) return fail(tat, '`to` must not be null');
    if (t.operation == null) return fail([...tat, 'operation'], '`to.operation` must not be null');
    checkOperation(t.operation, [...tat, 'operation'], fail);
    return { operation: t.operation };
  });
  const when = rule.when?.map((c, j) => {
    const cat = [...at, 'when', j];
    if (c === null) return fail(cat, 'condition must not be null');
    checkCondition(c, cat, fail);
    return c;
  });
  return { ...(from ? { from } : {}), ...(to ? { to } : {}), ...(when ? { when } : {}) };
}

function checkEmptyValues(values: readonly string[] | null | undefined, at: FieldPath, fail: Fail): void {
  values?.forEach((v, k) => {
    if (v === '') fail([...at, k], 'empty value not allowed');
  });
}

function checkIps(values: readonly string[] | null | undefined, at: FieldPath, fail: Fail): void {
  values?.forEach((v, k) => {
    try {
      cidrMatcher(v);
    } catch (err) {
      fail([...at, k], (err as Error).message);
    }
  });
}

function checkPorts(values: readonly string[] | null | undefined, at: FieldPath, fail: Fail): void {
  values?.forEach((v, k) => {
    if (!/^\d+$/.test(v) || Number(v) > 65535) fail([...at, k], `bad port (${v}): must be a decimal number from 0 to 65535`);
  });
}

/** `security.CheckServiceAccount`: `<sa>` or `<ns>/<sa>`, no wildcard, at most 16. */
function checkServiceAccounts(values: readonly string[] | null | undefined, at: FieldPath, fail: Fail): void {
  if (!values) return;
  if (values.length > MAX_SERVICE_ACCOUNTS) fail(at, `at most ${MAX_SERVICE_ACCOUNTS} service accounts are allowed, found ${values.length}`);
  values.forEach((v, k) => {
    if (v === '') fail([...at, k], 'empty value not allowed');
    if (v.includes('*')) fail([...at, k], `wildcard is not supported in service accounts: ${JSON.stringify(v)}`);
    const parts = v.split('/');
    if (parts.length > 2 || parts.some((p) => p === '')) fail([...at, k], `service account must be <name> or <namespace>/<name>, got ${JSON.stringify(v)}`);
  });
}

/** Trust domains: no `/`, at most one `*`, and only at an end. */
function checkTrustDomains(values: readonly string[] | null | undefined, at: FieldPath, fail: Fail): void {
  values?.forEach((v, k) => {
    if (v === '') fail([...at, k], 'empty value not allowed');
    if (v.includes('/')) fail([...at, k], `trust domain must not contain "/": ${JSON.stringify(v)}`);
    const stars = v.split('*').length - 1;
    if (stars > 1 || (stars === 1 && !v.startsWith('*') && !v.endsWith('*'))) {
      fail([...at, k], `trust domain may hold one "*", only at its start or end: ${JSON.stringify(v)}`);
    }
  });
}

function checkSource(src: SourceDoc, at: FieldPath, fail: Fail): void {
  if (SOURCE_FIELDS.every((f) => !src[f]?.length)) fail(at, '`from.source` must not be empty');
  if (
    (src.principals?.length || src.notPrincipals?.length || src.namespaces?.length || src.notNamespaces?.length) &&
    (src.serviceAccounts?.length || src.notServiceAccounts?.length)
  ) {
    fail(at, 'cannot set serviceAccounts with namespaces or principals');
  }
  for (const f of SOURCE_FIELDS) checkEmptyValues(src[f], [...at, f], fail);
  for (const f of ['ipBlocks', 'notIpBlocks', 'remoteIpBlocks', 'notRemoteIpBlocks'] as const) checkIps(src[f], [...at, f], fail);
  for (const f of ['serviceAccounts', 'notServiceAccounts'] as const) checkServiceAccounts(src[f], [...at, f], fail);
  for (const f of ['trustDomains', 'notTrustDomains'] as const) checkTrustDomains(src[f], [...at, f], fail);
}

function checkOperation(op: OperationDoc, at: FieldPath, fail: Fail): void {
  if (OPERATION_FIELDS.every((f) => !op[f]?.length)) fail(at, '`to.operation` must not be empty');
  for (const f of OPERATION_FIELDS) checkEmptyValues(op[f], [...at, f], fail);
  for (const f of ['ports', 'notPorts'] as const) checkPorts(op[f], [...at, f], fail);
  for (const f of ['paths', 'notPaths'] as const) {
    op[f]?.forEach((v, k) => {
      if (!isPathTemplate(v)) return;
      try {
        compilePathTemplate(v);
      } catch (err) {
        fail([...at, f, k], (err as Error).message);
      }
    });
  }
}

/** `a[b]` with a non-empty `b` (validation.go `validateMapKey`). */
function checkMapKey(key: string, at: FieldPath, fail: Fail): void {
  const open = key.indexOf('[');
  if (!(key.endsWith(']') && open > 0 && open < key.length - 2)) fail(at, `bad key (${key}): should have format a[b]`);
}

/** The kind of a `when` key, or undefined when Istio's validation does not know it. */
export function conditionKind(key: string): 'exact' | 'header' | 'claims' | 'experimental' | undefined {
  if (EXACT_KEYS.has(key)) return 'exact';
  if (key.startsWith(HEADER_KEY)) return 'header';
  if (key.startsWith(CLAIMS_KEY)) return 'claims';
  if (key.startsWith(EXPERIMENTAL_KEY)) return 'experimental';
  return undefined;
}

function checkCondition(c: ConditionDoc, at: FieldPath, fail: Fail): void {
  const key = c.key;
  const kat = [...at, 'key'];
  if (key === '') fail(kat, '`key` must not be empty');
  if (!c.values?.length && !c.notValues?.length) fail(at, `at least one of \`values\` or \`notValues\` must be set for key ${key}`);
  const kind = conditionKind(key);
  if (kind === undefined) {
    if (key === 'destination.namespace') fail(kat, `attribute ${key} is replaced by the metadata.namespace`);
    if (key.startsWith('destination.labels')) fail(kat, `attribute ${key} is replaced by the workload selector`);
    if (key === 'destination.name' || key === 'destination.user') fail(kat, `deprecated attribute ${key}: only supported in v1alpha1`);
    fail(kat, `unknown attribute: ${key}`);
  }
  if (kind !== 'exact') checkMapKey(key, kat, fail);
  if (kind === 'header' && !/^\[[^\[\]]+\]$/.test(key.slice(HEADER_KEY.length))) fail(kat, `bad key (${key}): should have format request.headers[<name>]`);
  if (kind === 'claims') {
    try {
      parseClaimPath(key.slice(CLAIMS_KEY.length));
    } catch (err) {
      fail(kat, (err as Error).message);
    }
  }
  for (const list of ['values', 'notValues'] as const) {
    const lat = [...at, list];
    checkEmptyValues(c[list], lat, fail);
    if (key === 'source.ip' || key === 'remote.ip' || key === 'destination.ip') checkIps(c[list], lat, fail);
    if (key === 'destination.port') checkPorts(c[list], lat, fail);
    if (key === 'source.serviceAccount') checkServiceAccounts(c[list], lat, fail);
    if (key === 'source.trustDomain') checkTrustDomains(c[list], lat, fail);
  }
}

/** The rules each policy was last warned about, by ref: a reload that leaves a policy as it was warns no more. */
const warnedRules = new Map<string, string>();
/** Policies remembered at most; beyond it the oldest are forgotten (and could be warned about again). */
const MAX_WARNED = 4096;

/**
 * Istio's validation warning: a DENY rule made only of HTTP attributes denies every connection to a
 * TCP port in its scope (istio/istio pkg/config/validation/validation.go). Logged at warn, not
 * rejected; called for the policies a waypoint enforces, once per version of the policy's rules
 * (istiod warns when a policy is applied, not at every push).
 */
export function warnHttpOnlyDeny(policy: AuthorizationPolicy): void {
  if (policy.action !== 'DENY') return;
  const ref = policy.ref;
  const generation = JSON.stringify(policy.rules);
  if (warnedRules.get(ref) === generation) return;
  warnedRules.delete(ref);
  if (warnedRules.size >= MAX_WARNED) warnedRules.delete(warnedRules.keys().next().value!);
  warnedRules.set(ref, generation);
  policy.rules.forEach((rule, i) => {
    const tcpInFrom = rule.from?.some(({ source: s }) => SOURCE_FIELDS.some((f) => f !== 'requestPrincipals' && f !== 'notRequestPrincipals' && s[f] != null));
    const tcpInTo = rule.to?.some(({ operation: o }) => o.ports != null || o.notPorts != null);
    const fromExists = (rule.from?.length ?? 0) > 0;
    const toExists = (rule.to?.length ?? 0) > 0;
    if ((fromExists && !toExists && !tcpInFrom) || (toExists && !tcpInTo)) {
      log.warn(
        { policy: ref, rule: i },
        'authz: this DENY rule uses only HTTP attributes; it will deny all traffic to TCP ports under its scope (specify the port explicitly)',
      );
    }
  });
}
