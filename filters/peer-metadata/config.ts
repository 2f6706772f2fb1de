/**
 * Configuration of `istio.peer_metadata`, parsed and frozen once. The shape follows Istio's
 * `io.istio.http.peer_metadata.Config` (istio/proxy
 * source/extensions/filters/http/peer_metadata/config.proto) in camelCase; each method may be
 * written as its name (`workload_discovery`) or as Istio's one-key object (`{ workload_discovery:
 * {} }`), so an Envoy config can be pasted.
 *
 * ```yaml
 * - name: istio.peer_metadata
 *   config:
 *     downstreamDiscovery: [workload_discovery]   # default; also istio_headers, baggage
 *     upstreamDiscovery: [workload_discovery]     # default; also istio_headers, baggage
 *     downstreamPropagation: []                   # istio_headers, baggage
 *     upstreamPropagation: []                     # istio_headers, baggage
 *     stripIncomingPeerMetadata: true             # false: unread x-envoy-peer-metadata* pass (debugging)
 * ```
 */
import { z } from 'zod';

/** Discovery methods (Istio's `DiscoveryMethod` oneof, minus `upstream_filter_state`). */
export const DISCOVERY_METHODS = ['workload_discovery', 'istio_headers', 'baggage'] as const;
export type DiscoveryMethod = (typeof DISCOVERY_METHODS)[number];

/** Propagation methods (Istio's `PropagationMethod` oneof). */
export const PROPAGATION_METHODS = ['istio_headers', 'baggage'] as const;
export type PropagationMethod = (typeof PROPAGATION_METHODS)[number];

/** The parsed, frozen configuration. */
export interface PeerMetadataConfig {
  /** Ordered; the first method that finds the peer wins. */
  readonly downstreamDiscovery: readonly DiscoveryMethod[];
  readonly upstreamDiscovery: readonly DiscoveryMethod[];
  /** Headers describing the waypoint added to responses (downstream) / upstream requests. */
  readonly downstreamPropagation: readonly PropagationMethod[];
  readonly upstreamPropagation: readonly PropagationMethod[];
  /**
   * Remove `x-envoy-peer-metadata` / `-id` from requests and responses passing through (default);
   * false lets them pass unless `istio_headers` discovery read them (debugging only: a client
   * could then forge its metadata toward the app, and an app leak its own to the client).
   */
  readonly stripIncomingPeerMetadata: boolean;
}

/** Istio's waypoint: workload discovery both ways, no propagation; peer-metadata headers stripped (Istio's pass). */
export const DEFAULT_CONFIG: PeerMetadataConfig = Object.freeze({
  downstreamDiscovery: Object.freeze(['workload_discovery'] as const),
  upstreamDiscovery: Object.freeze(['workload_discovery'] as const),
  downstreamPropagation: Object.freeze([] as const),
  upstreamPropagation: Object.freeze([] as const),
  stripIncomingPeerMetadata: true,
});

/** `{ name: {} }` (Istio's proto JSON form of a oneof) → `name`; anything else unchanged. */
function unwrapOneof(v: unknown): unknown {
  if (typeof v !== 'object' || v === null || Array.isArray(v)) return v;
  const keys = Object.keys(v);
  if (keys.length !== 1) return v;
  const inner = (v as Record<string, unknown>)[keys[0]];
  const empty = inner === null || (typeof inner === 'object' && !Array.isArray(inner) && Object.keys(inner).length === 0);
  return empty ? keys[0] : v;
}

function methodList<const M extends readonly [string, ...string[]]>(names: M, what: string) {
  const method = z.preprocess(
    unwrapOneof,
    z.string({ error: `expected a ${what} method name (${names.join(', ')})` }).refine((s): s is M[number] => (names as readonly string[]).includes(s), {
      error: (issue) => `unknown ${what} method ${JSON.stringify(issue.input)} (expected one of ${names.join(', ')})`,
    }),
  );
  return z.array(method).superRefine((list, ctx) => {
    list.forEach((m, i) => {
      if (list.indexOf(m) !== i) ctx.addIssue({ code: 'custom', path: [i], message: `${what} method ${m} is listed twice` });
    });
  });
}

const schema = z.strictObject({
  downstreamDiscovery: methodList(DISCOVERY_METHODS, 'discovery').optional(),
  upstreamDiscovery: methodList(DISCOVERY_METHODS, 'discovery').optional(),
  downstreamPropagation: methodList(PROPAGATION_METHODS, 'propagation').optional(),
  upstreamPropagation: methodList(PROPAGATION_METHODS, 'propagation').optional(),
  stripIncomingPeerMetadata: z.boolean().optional(),
});

function pathText(path: readonly PropertyKey[]): string {
  let out = '';
  for (const p of path) out += typeof p === 'number' ? `[${p}]` : `${out ? '.' : ''}${String(p)}`;
  return out;
}

/**
 * Validate `raw` (the filter's `config:`; absent = defaults) into a frozen config.
 * @throws Error naming the field, e.g. `upstreamDiscovery[1]: unknown discovery method "wds" …`.
 */
export function parsePeerMetadataConfig(raw: unknown): PeerMetadataConfig {
  if (raw === undefined || raw === null) return DEFAULT_CONFIG;
  const result = schema.safeParse(raw);
  if (!result.success) {
    const issue = result.error.issues[0];
    const at = pathText(issue.path);
    throw new Error(at ? `${at}: ${issue.message}` : issue.message);
  }
  const c = result.data;
  return Object.freeze({
    downstreamDiscovery: Object.freeze([...(c.downstreamDiscovery ?? DEFAULT_CONFIG.downstreamDiscovery)]) as readonly DiscoveryMethod[],
    upstreamDiscovery: Object.freeze([...(c.upstreamDiscovery ?? DEFAULT_CONFIG.upstreamDiscovery)]) as readonly DiscoveryMethod[],
    downstreamPropagation: Object.freeze([...(c.downstreamPropagation ?? [])]) as readonly PropagationMethod[],
    upstreamPropagation: Object.freeze([...(c.upstreamPropagation ?? [])]) as readonly PropagationMethod[],
    stripIncomingPeerMetadata: c.stripIncomingPeerMetadata ?? true,
  });
}
