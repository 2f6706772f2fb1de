/**
 * The xDS `Node` this proxy sends istiod, as ztunnel builds its own (istio/ztunnel
 * src/xds/client.rs `node`): id `<type>~<INSTANCE_IP>~<POD_NAME>.<POD_NAMESPACE>~<POD_NAMESPACE>.svc.cluster.local`
 * and metadata `NAME`, `NAMESPACE`, `INSTANCE_IPS`, `NODE_NAME`, every `ISTIO_META_<KEY>` as
 * `<KEY>` and every `ISTIO_METAJSON_<KEY>` parsed as JSON (istio/ztunnel src/config.rs). The type
 * is `waypoint` by default, one of the node types istiod knows (sidecar, router, waypoint,
 * ztunnel: istio/istio pilot/pkg/model/context.go `NodeType`).
 */
import type { JsonObject, JsonValue } from '@bufbuild/protobuf';
import { log } from '../util/index.ts';

/** What identifies this proxy to istiod. */
export interface XdsNodeOptions {
  /** Node type (default `waypoint`). */
  readonly type?: string;
  /** The pod's IP (`INSTANCE_IP`). */
  readonly instanceIp: string;
  readonly podName: string;
  readonly podNamespace: string;
  /** Kubernetes node of the pod (`NODE_NAME`), '' when unknown. */
  readonly nodeName?: string;
  /** More metadata, after the fixed keys (it may override them, as ztunnel's proxy metadata does). */
  readonly metadata?: JsonObject;
}

/** The `Node` of every first xDS request. */
export interface XdsNode {
  readonly id: string;
  readonly metadata: JsonObject;
}

export const DEFAULT_NODE_TYPE = 'waypoint';

/** The node of {@link XdsNodeOptions}. @throws Error for a type, IP, pod name or namespace that is empty or contains `~`. */
export function xdsNode(o: XdsNodeOptions): XdsNode {
  const type = o.type ?? DEFAULT_NODE_TYPE;
  for (const [what, value] of [['node type', type], ['INSTANCE_IP', o.instanceIp], ['POD_NAME', o.podName], ['POD_NAMESPACE', o.podNamespace]] as const) {
    if (!value || value.includes('~')) throw new Error(`xDS node: ${what} must be a non-empty string without "~", got ${JSON.stringify(value)}`);
  }
  return {
    id: `${type}~${o.instanceIp}~${o.podName}.${o.podNamespace}~${o.podNamespace}.svc.cluster.local`,
    metadata: {
      NAME: o.podName,
      NAMESPACE: o.podNamespace,
      INSTANCE_IPS: o.instanceIp,
      NODE_NAME: o.nodeName ?? '',
      ...(o.metadata ?? {}),
    },
  };
}

const META = 'ISTIO_META_';
const META_JSON = 'ISTIO_METAJSON_';

/**
 * The metadata environment variables: `ISTIO_META_<KEY>=v` ⇒ `<KEY>: "v"`, `ISTIO_METAJSON_<KEY>=json`
 * ⇒ `<KEY>: <parsed>` (a value that is not JSON is logged and skipped, as ztunnel does).
 */
export function nodeMetadataFromEnv(env: Readonly<Record<string, string | undefined>> = process.env): JsonObject {
  const out: Record<string, JsonValue> = {};
  for (const [key, value] of Object.entries(env)) {
    if (value === undefined) continue;
    if (key.startsWith(META_JSON)) {
      try {
        out[key.slice(META_JSON.length)] = JSON.parse(value) as JsonValue;
      } catch (err) {
        log.error({ variable: key, err }, `xDS node: ${key} is not JSON; left out of the node metadata`);
      }
    } else if (key.startsWith(META)) {
      out[key.slice(META.length)] = value;
    }
  }
  return out;
}

/**
 * The node from the pod's environment (Istio's waypoint pod template: `INSTANCE_IP`, `POD_NAME`,
 * `POD_NAMESPACE`, `NODE_NAME`, `ISTIO_META_*`, `ISTIO_METAJSON_*`).
 * @throws Error naming the variables that are missing.
 */
export function xdsNodeFromEnv(env: Readonly<Record<string, string | undefined>> = process.env, type = DEFAULT_NODE_TYPE): XdsNode {
  const missing = ['INSTANCE_IP', 'POD_NAME', 'POD_NAMESPACE'].filter((k) => !env[k]);
  if (missing.length) throw new Error(`xDS node: environment variable${missing.length > 1 ? 's' : ''} ${missing.join(', ')} not set (Istio's waypoint pod template sets them)`);
  return xdsNode({
    type,
    instanceIp: env.INSTANCE_IP!,
    podName: env.POD_NAME!,
    podNamespace: env.POD_NAMESPACE!,
    nodeName: env.NODE_NAME ?? '',
    metadata: nodeMetadataFromEnv(env),
  });
}
