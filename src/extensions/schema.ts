/**
 * The `WaypointFilter` resource (`extensions.node-waypoint.dev/v1alpha1`): what it may say and its
 * validation, shaped like Istio's `WasmPlugin` (istio/api extensions/v1alpha1/wasm.proto:
 * `targetRefs`, `phase`, `priority`, `match`, `sha256`; `config` for `pluginConfig`) so Istio users
 * know it. The CRD is deploy/crds/waypointfilter.yaml; its OpenAPI schema and this one agree.
 */
import { z } from 'zod';
import { ConfigError } from '../util/index.ts';
import { locateField, type FieldPath, type KeptResource } from '../state/index.ts';

export const WAYPOINT_FILTER_GROUP = 'extensions.node-waypoint.dev';
export const WAYPOINT_FILTER_KIND = 'WaypointFilter';
/** Versions the CRD serves. */
const SERVED_VERSIONS = ['v1alpha1'];

/** WasmPlugin's phases, in chain order; unset (`UNSPECIFIED_PHASE`) = last, just before the router. */
export const PHASES = ['AUTHN', 'AUTHZ', 'STATS', 'UNSPECIFIED_PHASE'] as const;
export type PhaseName = (typeof PHASES)[number];

const show = (v: unknown): string => (v === undefined ? 'nothing' : JSON.stringify(v));
const text = () => z.string({ error: (iss) => (iss.input === undefined ? 'is required' : `must be a string, got ${show(iss.input)}`) });

const TargetRefSchema = z.object(
  {
    group: text().nullish(),
    kind: text().min(1, { error: 'must not be empty' }),
    name: text().min(1, { error: 'must not be empty' }),
    namespace: text().nullish(),
    sectionName: text().nullish(),
  },
  { error: (iss) => `must be a mapping, got ${show(iss.input)}` },
);

const MatchSchema = z.object({
  mode: z.enum(['UNDEFINED', 'CLIENT', 'SERVER', 'CLIENT_AND_SERVER'], { error: (iss) => `must be one of UNDEFINED, CLIENT, SERVER, CLIENT_AND_SERVER, got ${show(iss.input)}` }).nullish(),
  ports: z
    .array(z.object({ number: z.int({ error: (iss) => `must be a port number, got ${show(iss.input)}` }).min(1).max(65535) }))
    .max(64)
    .nullish(),
});

const SpecSchema = z.object(
  {
    targetRefs: z.array(TargetRefSchema).max(16, { error: 'must have at most 16 entries' }).nullish(),
    module: text().min(1, { error: 'must not be empty' }).nullish(),
    filter: text().min(1, { error: 'must not be empty' }).nullish(),
    // An all-digit hash is a number to YAML (`sha256: 000…0` reads as 0): say to quote it.
    sha256: z
      .string({
        error: (iss) =>
          typeof iss.input === 'number' ? `must be a string of 64 hex digits, got the number ${show(iss.input)}: quote it (sha256: "…"), as YAML reads an all-digit value as a number` : `must be a string, got ${show(iss.input)}`,
      })
      .regex(/^[a-f0-9]{64}$/, { error: (iss) => `must be 64 lower-case hex digits (the module file's SHA-256), got ${show(iss.input)}` })
      .nullish(),
    phase: z.enum(PHASES, { error: (iss) => `must be one of ${PHASES.join(', ')}, got ${show(iss.input)}` }).nullish(),
    priority: z.int({ error: (iss) => `must be an integer, got ${show(iss.input)}` }).min(-(2 ** 31)).max(2 ** 31 - 1).nullish(),
    config: z.unknown().optional(),
    match: z.array(MatchSchema).max(16).nullish(),
  },
  { error: (iss) => `must be a mapping, got ${show(iss.input)}` },
);

/** What a target reference attaches the filter to. */
export type TargetRef =
  | { readonly kind: 'Gateway'; readonly name: string; readonly at: FieldPath }
  | { readonly kind: 'Service'; readonly name: string; readonly at: FieldPath }
  | { readonly kind: 'ServiceEntry'; readonly name: string; readonly at: FieldPath }
  | { readonly kind: 'HTTPRoute'; readonly name: string; readonly sectionName: string | undefined; readonly at: FieldPath }
  | { readonly kind: 'GRPCRoute'; readonly name: string; readonly sectionName: string | undefined; readonly at: FieldPath };

/** A validated WaypointFilter. */
export interface WaypointFilterSpec {
  /** `WaypointFilter/<ns>/<name>`. */
  readonly ref: string;
  readonly namespace: string;
  readonly name: string;
  readonly resource: KeptResource;
  readonly targetRefs: readonly TargetRef[];
  /** Exactly one of `module` (a file path or package name) and `filter` (a built-in filter's name). */
  readonly module: string | undefined;
  readonly filter: string | undefined;
  readonly sha256: string | undefined;
  /** Index in {@link PHASES}. */
  readonly phase: number;
  readonly priority: number;
  readonly config: unknown;
  /** `match` entries (empty = every port); a SERVER-less match (mode CLIENT) never applies at a waypoint. */
  readonly match: readonly { readonly server: boolean; readonly ports: readonly number[] }[];
}

const GATEWAY_GROUP = 'gateway.networking.k8s.io';
const ISTIO_GROUP = 'networking.istio.io';

/** The kinds a targetRef may name, by group (`""` and `core` are the core group). */
const TARGET_KINDS: Readonly<Record<string, readonly string[]>> = {
  [GATEWAY_GROUP]: ['Gateway', 'HTTPRoute', 'GRPCRoute'],
  '': ['Service'],
  core: ['Service'],
  [ISTIO_GROUP]: ['ServiceEntry'],
};

/** Whether `r` is a WaypointFilter (any version: a version the CRD does not serve is refused by {@link parseWaypointFilter}). */
export function isWaypointFilter(r: KeptResource): boolean {
  return r.kind === WAYPOINT_FILTER_KIND && r.apiVersion.startsWith(`${WAYPOINT_FILTER_GROUP}/`);
}

/**
 * Validate a WaypointFilter.
 * @throws ConfigError naming the resource (`WaypointFilter/<ns>/<name>`) and the field.
 */
export function parseWaypointFilter(r: KeptResource): WaypointFilterSpec {
  const ref = `${WAYPOINT_FILTER_KIND}/${r.namespace}/${r.name}`;
  const fail = (path: FieldPath, message: string): never => {
    throw new ConfigError(message, locateField(r, ref, path));
  };
  const version = r.apiVersion.slice(WAYPOINT_FILTER_GROUP.length + 1);
  if (!SERVED_VERSIONS.includes(version)) fail(['apiVersion'], `apiVersion ${r.apiVersion} is not served (use ${WAYPOINT_FILTER_GROUP}/${SERVED_VERSIONS[0]})`);
  const parsed = SpecSchema.safeParse(r.object.spec ?? {});
  if (!parsed.success) {
    const issue = parsed.error.issues[0];
    fail(['spec', ...issue.path.filter((p): p is string | number => typeof p !== 'symbol')], issue.message);
  }
  const spec = parsed.data!;
  if (!spec.module === !spec.filter) fail(['spec'], 'exactly one of module (a file path or an installed package) and filter (a built-in filter name) must be set');
  if (spec.sha256 && !spec.module) fail(['spec', 'sha256'], 'applies to module only (a built-in filter has no file to check)');
  const targetRefs = (spec.targetRefs ?? []).map((t, i): TargetRef => {
    const at: FieldPath = ['spec', 'targetRefs', i];
    const group = t.group ?? (t.kind === 'Service' ? '' : GATEWAY_GROUP);
    const kinds = TARGET_KINDS[group];
    if (!kinds?.includes(t.kind)) {
      fail([...at, 'kind'], `${group || 'core'} ${t.kind} cannot be a target (Gateway, HTTPRoute, GRPCRoute of ${GATEWAY_GROUP}; Service; ServiceEntry of ${ISTIO_GROUP})`);
    }
    // As Istio's policy targetRefs: a policy attaches only to objects of its own namespace.
    if (t.namespace && t.namespace !== r.namespace) fail([...at, 'namespace'], `must be the WaypointFilter's own namespace (${r.namespace}): cross-namespace targets are not allowed`);
    const kind = t.kind as TargetRef['kind'];
    if (kind === 'HTTPRoute' || kind === 'GRPCRoute') return { kind, name: t.name, sectionName: t.sectionName ?? undefined, at };
    if (t.sectionName) fail([...at, 'sectionName'], `names a rule of a route; ${t.kind} targets take none`);
    return { kind, name: t.name, at } as TargetRef;
  });
  const match = (spec.match ?? []).map((m) => ({ server: m.mode !== 'CLIENT', ports: (m.ports ?? []).map((p) => p.number) }));
  return {
    ref,
    namespace: r.namespace,
    name: r.name,
    resource: r,
    targetRefs,
    module: spec.module ?? undefined,
    filter: spec.filter ?? undefined,
    sha256: spec.sha256 ?? undefined,
    phase: PHASES.indexOf(spec.phase ?? 'UNSPECIFIED_PHASE'),
    priority: spec.priority ?? 0,
    config: spec.config,
    match,
  };
}

/**
 * Whether the filter applies to traffic on `port` (Istio's `matchTrafficSelectors`: no entry
 * matches everything; else any entry whose mode and ports match). The waypoint's traffic is the
 * SERVER side of its services, so mode CLIENT never matches here.
 */
export function matchesPort(spec: WaypointFilterSpec, port: number): boolean {
  if (spec.match.length === 0) return true;
  return spec.match.some((m) => m.server && (m.ports.length === 0 || m.ports.includes(port)));
}
