/**
 * PeerAuthentication as ztunnel enforces it in ambient mode (istio/api
 * security/v1beta1/peer_authentication.proto; istio/istio architecture/ambient/peer-authentication.md
 * "PeerAuthentication and ztunnel", pilot/pkg/serviceregistry/ambient/authorization.go
 * `convertPeerAuthentication`).
 *
 * ztunnel never sees PeerAuthentication: istiod turns each workload's *effective* mode into DENY
 * policies ("no principal" ⇒ deny, optionally limited to / excepting ports). The observable result,
 * which this module computes directly, is one mode per (workload, destination port):
 *
 * - scopes: **mesh** = root namespace, no selector; **namespace** = other namespace, no selector;
 *   **workload** = has a selector (non-empty `matchLabels`) matching the workload, not in the root
 *   namespace (selector policies in the root namespace are ignored entirely);
 * - the narrowest scope wins; several at one scope → the oldest (`metadata.creationTimestamp`,
 *   then name, then namespace, as Istio sorts configs; a missing timestamp sorts first);
 * - `UNSET` (or no `mtls`) inherits from the parent scope; at the top it means PERMISSIVE;
 * - `portLevelMtls` (only on workload-scope policies, as validation requires a selector): keyed by
 *   workload (container) port; a port-level `UNSET` inherits the workload's effective mode;
 * - an invalid PeerAuthentication (unknown mode such as `STRICTT`, `portLevelMtls` without a
 *   selector, a bad port key, ...) refuses the mesh file, as Kubernetes and istiod refuse it
 *   ({@link validatePeerAuthentication}, run by the {@link PEER_AUTHENTICATION} part): at start,
 *   and on reload (state kept);
 * - `DISABLE` is not supported in ambient: it is treated as PERMISSIVE at every level (plaintext
 *   accepted, and HBONE stays mTLS whatever it says).
 *
 * HBONE connections always carry a verified principal, so these decisions only ever refuse
 * plaintext connections (the `waypoint inbound` role's `--plaintext` listeners). Pure, no I/O;
 * compiled once per mesh snapshot.
 */
import { z } from 'zod';
import { ConfigError, log } from '../util/index.ts';
import { definePart, locateField, type KeptResource, type MeshSnapshot, type Workload, type FieldPath } from '../state/index.ts';
import { mapping, show } from '../authz/index.ts';

/** Effective mode as ztunnel applies it: only STRICT refuses plaintext. */
export type EffectiveMtlsMode = 'STRICT' | 'PERMISSIVE';

/** A mode as written in a policy (`UNSET` = inherit). */
export type MtlsMode = 'UNSET' | 'DISABLE' | 'PERMISSIVE' | 'STRICT';

/** One parsed PeerAuthentication. */
interface ParsedPeerAuthentication {
  readonly namespace: string;
  readonly name: string;
  readonly created: string;
  /** `spec.selector.matchLabels`, undefined when absent or empty. */
  readonly selector: Readonly<Record<string, string>> | undefined;
  readonly mode: MtlsMode;
  readonly ports: ReadonlyMap<number, MtlsMode>;
}

/** PeerAuthentication compiled for one snapshot. */
export interface CompiledPeerAuthentication {
  /** True when the snapshot has at least one PeerAuthentication. */
  readonly any: boolean;
  /**
   * The effective mode for plaintext traffic to `workload` on its container port `port`.
   * `workload` undefined (not in the mesh state): only the mesh-wide policy applies.
   */
  modeFor(workload: Workload | undefined, port: number): EffectiveMtlsMode;
  /** Same, with the policy that decided it (`ns/name`, or undefined for the default). */
  explain(workload: Workload | undefined, port: number): { mode: EffectiveMtlsMode; policy: string | undefined };
}

const MODES = ['UNSET', 'DISABLE', 'PERMISSIVE', 'STRICT'] as const;

/** `MutualTLS`: the mode is the CRD's enum (case-sensitive, as the API server checks it). */
const MutualTlsSchema = mapping({
  mode: z
    .enum(MODES, { error: (iss) => `Unsupported value: ${show(iss.input)}: supported values: ${MODES.map((m) => `"${m}"`).join(', ')}` })
    .nullish(),
}).nullish();
/**
 * The fields of a PeerAuthentication the schema knows (istio/api
 * security/v1beta1/peer_authentication.proto).
 */
const PeerAuthenticationSpecSchema = mapping({
  selector: mapping({ matchLabels: z.record(z.string(), z.string({ error: 'label values must be strings' })).nullish() }).nullish(),
  mtls: MutualTlsSchema,
  portLevelMtls: z.record(z.string(), MutualTlsSchema, { error: (iss) => `must be a mapping of port to mtls, got ${show(iss.input)}` }).nullish(),
}).nullish();

/**
 * Refuse an invalid PeerAuthentication `body` as the API server and istiod's webhook do, so a typo
 * never weakens mTLS (it used to be read as UNSET): the CRD schema (unknown fields, `mode` one of
 * UNSET/DISABLE/PERMISSIVE/STRICT; `portLevelMtls` keys 1-65535 and at least one entry; "portLevelMtls
 * requires selector" with non-empty `matchLabels`: API security/v1beta1/peer_authentication.proto
 * XValidation rules) and istio/istio pkg/config/validation `ValidatePeerAuthentication` /
 * `validateWorkloadSelector`, with their wording. `fail` gets the offending field's path.
 */
export function validatePeerAuthentication(body: unknown, fail: (path: FieldPath, message: string) => never): void {
  const parsed = PeerAuthenticationSpecSchema.safeParse(record(body).spec);
  if (!parsed.success) {
    const issue = parsed.error.issues[0];
    fail(['spec', ...issue.path.filter((p): p is string | number => typeof p !== 'symbol')], issue.message);
  }
  const spec = parsed.data ?? {};
  const labels = spec.selector?.matchLabels ?? {};
  const ports = spec.portLevelMtls;
  if (ports != null) {
    if (Object.keys(labels).length === 0) fail(['spec', 'portLevelMtls'], 'portLevelMtls requires selector');
    if (Object.keys(ports).length === 0) fail(['spec', 'portLevelMtls'], 'port level mTLS, if defined, must have at least one element');
    for (const key of Object.keys(ports)) {
      const port = /^[0-9]+$/.test(key) ? Number(key) : NaN;
      if (!(port >= 1 && port <= 65535)) fail(['spec', 'portLevelMtls', key], `port must be between 1-65535, got ${JSON.stringify(key)}`);
    }
  }
  for (const [key, value] of Object.entries(labels)) {
    const at = ['spec', 'selector', 'matchLabels', key];
    if (key === '') fail(at, `empty key is not supported in selector: "${key}=${value}"`);
    if (key.includes('*') || value.includes('*')) fail(at, `wildcard is not supported in selector: "${key}=${value}"`);
  }
}

/** A validated mode (see {@link validatePeerAuthentication}); absent = UNSET. */
function parseMode(value: unknown): MtlsMode {
  return value == null ? 'UNSET' : (value as MtlsMode);
}

function record(v: unknown): Record<string, unknown> {
  return v && typeof v === 'object' && !Array.isArray(v) ? (v as Record<string, unknown>) : {};
}

/** Read one kept `security.istio.io` PeerAuthentication, already validated ({@link validatePeerAuthentication}). */
export function parsePeerAuthentication(r: KeptResource): ParsedPeerAuthentication {
  const spec = record(r.object.spec);
  const metadata = record(r.object.metadata);
  const labels = record(record(spec.selector).matchLabels);
  const selector = Object.keys(labels).length > 0 ? Object.fromEntries(Object.entries(labels).map(([k, v]) => [k, String(v)])) : undefined;
  const ports = new Map<number, MtlsMode>();
  for (const [key, value] of Object.entries(record(spec.portLevelMtls))) ports.set(Number(key), parseMode(record(value).mode));
  const created = metadata.creationTimestamp;
  return {
    namespace: r.namespace,
    name: r.name,
    created: timestamp(created),
    selector,
    mode: parseMode(record(spec.mtls).mode),
    ports: selector ? ports : new Map(),
  };
}

/** ISO form of `metadata.creationTimestamp`; '' (sorts first) when absent or unparseable. */
function timestamp(v: unknown): string {
  const t = v instanceof Date ? v.getTime() : typeof v === 'string' ? Date.parse(v) : NaN;
  return Number.isFinite(t) ? new Date(t).toISOString() : '';
}

/** Istio's order for same-scope configs: creation time, then name, then namespace. */
function older(a: ParsedPeerAuthentication, b: ParsedPeerAuthentication): number {
  if (a.created !== b.created) return a.created < b.created ? -1 : 1;
  if (a.name !== b.name) return a.name < b.name ? -1 : 1;
  return a.namespace < b.namespace ? -1 : a.namespace > b.namespace ? 1 : 0;
}

function selects(selector: Readonly<Record<string, string>>, labels: Readonly<Record<string, string>>): boolean {
  for (const [k, v] of Object.entries(selector)) if (labels[k] !== v) return false;
  return true;
}

/** Apply an explicit mode over an inherited one (UNSET inherits; DISABLE is PERMISSIVE in ambient). */
function over(parent: EffectiveMtlsMode, mode: MtlsMode): EffectiveMtlsMode {
  return mode === 'UNSET' ? parent : mode === 'STRICT' ? 'STRICT' : 'PERMISSIVE';
}

/**
 * Validate and compile the snapshot's PeerAuthentications (the {@link PEER_AUTHENTICATION} part's compiler).
 * @throws ConfigError naming the file, line, resource and field of the first invalid one.
 */
export function compilePeerAuthentication(snapshot: MeshSnapshot): CompiledPeerAuthentication {
  const root = snapshot.meshConfig.rootNamespace;
  const resources = snapshot.resources('PeerAuthentication').filter((r) => r.apiVersion.startsWith('security.istio.io/'));
  for (const r of resources) {
    validatePeerAuthentication(r.object, (path, message) => {
      throw new ConfigError(message, locateField(r, `PeerAuthentication/${r.namespace}/${r.name}`, path));
    });
  }
  const all = resources.map(parsePeerAuthentication).sort(older);
  let mesh: ParsedPeerAuthentication | undefined;
  const namespaces = new Map<string, ParsedPeerAuthentication>();
  const selectors = new Map<string, ParsedPeerAuthentication[]>();
  for (const p of all) {
    if (!p.selector) {
      if (p.namespace === root) mesh ??= p;
      else if (!namespaces.has(p.namespace)) namespaces.set(p.namespace, p);
    } else if (p.namespace === root) {
      log.debug({ policy: `${p.namespace}/${p.name}` }, 'PeerAuthentication: selector policy in the root namespace ignored (as ambient does)');
    } else {
      let list = selectors.get(p.namespace);
      if (!list) selectors.set(p.namespace, (list = []));
      list.push(p); // already oldest first
    }
  }
  const name = (p: ParsedPeerAuthentication) => `${p.namespace}/${p.name}`;
  const explain = (w: Workload | undefined, port: number): { mode: EffectiveMtlsMode; policy: string | undefined } => {
    let mode: EffectiveMtlsMode = 'PERMISSIVE';
    let policy: string | undefined;
    const step = (p: ParsedPeerAuthentication | undefined, m: MtlsMode | undefined) => {
      if (!p || m === undefined || m === 'UNSET') return;
      mode = over(mode, m);
      policy = name(p);
    };
    step(mesh, mesh?.mode);
    if (!w) return { mode, policy };
    const ns = namespaces.get(w.namespace);
    step(ns, ns?.mode);
    const wl = selectors.get(w.namespace)?.find((p) => selects(p.selector!, w.labels));
    step(wl, wl?.mode);
    step(wl, wl?.ports.get(port));
    return { mode, policy };
  };
  return { any: all.length > 0, explain, modeFor: (w, port) => explain(w, port).mode };
}

/**
 * PeerAuthentication as a compiled part of every mesh snapshot: an invalid one refuses the whole
 * mesh update (a typo must not weaken mTLS).
 */
export const PEER_AUTHENTICATION = definePart<CompiledPeerAuthentication>('peerAuthentication', { compile: compilePeerAuthentication });

/** PeerAuthentication of a snapshot (its {@link PEER_AUTHENTICATION} part): a lookup. */
export function peerAuthenticationFor(snapshot: MeshSnapshot): CompiledPeerAuthentication {
  return snapshot.part(PEER_AUTHENTICATION);
}
