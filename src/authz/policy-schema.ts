/**
 * The shape of a `security.istio.io` AuthorizationPolicy (istio/api
 * `security/v1beta1/authorization_policy.proto`), as zod schemas. Unknown fields are rejected
 * (a misspelt `notPrincipal` in a security policy must not be silently dropped); `null` is
 * accepted wherever a field is optional (YAML `rules:` with nothing after it). Values are strings,
 * ports included (`ports: ["8080"]`), as the CRD's schema demands.
 *
 * Semantic checks (Istio's admission validation) are in `policy-validate.ts`.
 */
import { z } from 'zod';

/** A value as an error message shows it. */
export const show = (v: unknown): string => (v === undefined ? 'nothing' : JSON.stringify(v));

const text = (what = 'a string') =>
  z.string({
    error: (iss) =>
      iss.input === undefined ? 'is required' : `must be ${what}${typeof iss.input === 'number' ? ' (quote numbers)' : ''}, got ${show(iss.input)}`,
  });

const list = (what: string) =>
  z.array(text(`a ${what} string`), { error: (iss) => `must be a list of ${what} strings, got ${show(iss.input)}` }).nullish();

/** A strict mapping (unknown fields refused, named in the message); also PeerAuthentication's. */
export const mapping = <T extends z.ZodRawShape>(shape: T) =>
  z.strictObject(shape, {
    error: (iss) =>
      iss.code === 'unrecognized_keys'
        ? `unknown field${iss.keys.length > 1 ? 's' : ''} ${iss.keys.map((k) => JSON.stringify(k)).join(', ')}`
        : `must be a mapping, got ${show(iss.input)}`,
  });

export const SourceSchema = mapping({
  principals: list('principal'),
  notPrincipals: list('principal'),
  requestPrincipals: list('request principal'),
  notRequestPrincipals: list('request principal'),
  namespaces: list('namespace'),
  notNamespaces: list('namespace'),
  serviceAccounts: list('service account'),
  notServiceAccounts: list('service account'),
  trustDomains: list('trust domain'),
  notTrustDomains: list('trust domain'),
  ipBlocks: list('IP or CIDR'),
  notIpBlocks: list('IP or CIDR'),
  remoteIpBlocks: list('IP or CIDR'),
  notRemoteIpBlocks: list('IP or CIDR'),
});
export type SourceDoc = z.output<typeof SourceSchema>;

export const OperationSchema = mapping({
  hosts: list('host'),
  notHosts: list('host'),
  ports: list('port'),
  notPorts: list('port'),
  methods: list('method'),
  notMethods: list('method'),
  paths: list('path'),
  notPaths: list('path'),
});
export type OperationDoc = z.output<typeof OperationSchema>;

export const ConditionSchema = mapping({
  key: text(),
  values: list('value'),
  notValues: list('value'),
});
export type ConditionDoc = z.output<typeof ConditionSchema>;

export const RuleSchema = mapping({
  from: z.array(mapping({ source: SourceSchema.nullish() }).nullable(), { error: 'must be a list of {source: ...}' }).nullish(),
  to: z.array(mapping({ operation: OperationSchema.nullish() }).nullable(), { error: 'must be a list of {operation: ...}' }).nullish(),
  when: z.array(ConditionSchema.nullable(), { error: 'must be a list of conditions' }).nullish(),
}).nullable();
export type RuleDoc = z.output<typeof RuleSchema>;

export const TargetRefSchema = mapping({
  group: z.string({ error: (iss) => `must be a string, got ${show(iss.input)}` }).nullish(),
  kind: text(),
  name: text(),
  namespace: z.string({ error: (iss) => `must be a string, got ${show(iss.input)}` }).nullish(),
});
export type TargetRefDoc = z.output<typeof TargetRefSchema>;

export const AuthorizationPolicySpecSchema = mapping({
  selector: mapping({
    matchLabels: z.record(z.string(), z.string({ error: 'label values must be strings' })).nullish(),
  }).nullish(),
  targetRef: TargetRefSchema.nullish(),
  targetRefs: z.array(TargetRefSchema, { error: 'must be a list of target references' }).nullish(),
  action: z
    .enum(['ALLOW', 'DENY', 'AUDIT', 'CUSTOM'], { error: (iss) => `must be one of ALLOW, DENY, AUDIT, CUSTOM, got ${show(iss.input)}` })
    .nullish(),
  provider: mapping({ name: z.string({ error: 'must be a string' }).nullish() }).nullish(),
  rules: z.array(RuleSchema, { error: 'must be a list of rules' }).nullish(),
}).nullish();
export type AuthorizationPolicySpecDoc = z.output<typeof AuthorizationPolicySpecSchema>;

/** The parts of the object read: annotations (dry-run) and the spec. */
export const AuthorizationPolicySchema = z.object({
  metadata: z.object({
    annotations: z.record(z.string(), z.string({ error: 'annotation values must be strings' })).nullish(),
  }),
  spec: AuthorizationPolicySpecSchema,
});
