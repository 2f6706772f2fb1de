/**
 * The `x-envoy-peer-metadata` / `x-envoy-peer-metadata-id` header pair of Istio's HTTP metadata
 * exchange (istio/proxy `source/extensions/filters/http/peer_metadata/filter.cc`, `IstioHeaders`
 * discovery and propagation): the value is standard base64 of a deterministically serialized
 * `google.protobuf.Struct` (see `peer-struct.ts` for its keys); the id is the Envoy node id.
 *
 * Decoding never throws: it returns a result object, and refuses oversized input before decoding.
 */
import { fromBinary, toBinary } from '@bufbuild/protobuf';
import { StructSchema } from '@bufbuild/protobuf/wkt';
import type { PeerInfo } from './peer-info.ts';
import { trimOws } from './baggage-parse.ts';
import { peerFromStruct, peerToStruct } from './peer-struct.ts';

export const PEER_METADATA_HEADER = 'x-envoy-peer-metadata';
export const PEER_METADATA_ID_HEADER = 'x-envoy-peer-metadata-id';

/** Longest header value (base64 characters) {@link decodePeerMetadata} accepts: 64 KiB. */
export const MAX_PEER_METADATA_BASE64 = 64 * 1024;

/** Outcome of decoding peer metadata; `error` is a short human-readable reason. */
export type PeerDecodeResult = { ok: true; peer: PeerInfo } | { ok: false; error: string };

/**
 * The serialized Struct for `peer`: Envoy's deterministic protobuf bytes (map keys sorted).
 * Shared with the TCP exchange, which nests the same Struct.
 */
export function serializePeerMetadata(peer: PeerInfo): Uint8Array {
  return toBinary(StructSchema, peerToStruct(peer));
}

/** The `x-envoy-peer-metadata` value for `peer`: padded standard base64 (Envoy `Base64::encode`). */
export function encodePeerMetadata(peer: PeerInfo): string {
  return Buffer.from(serializePeerMetadata(peer)).toString('base64');
}


const BASE64_BODY = /^[A-Za-z0-9+/]*$/;

/**
 * Strict standard-alphabet base64 → bytes, padded or not (Node's decoder alone would silently skip
 * junk characters and accept the URL-safe alphabet). `undefined` when malformed.
 */
function decodeBase64(text: string): Buffer | undefined {
  let body = text;
  if (body.endsWith('==')) body = body.slice(0, -2);
  else if (body.endsWith('=')) body = body.slice(0, -1);
  const padded = body.length !== text.length;
  if (!BASE64_BODY.test(body)) return undefined;
  if (body.length % 4 === 1) return undefined;
  if (padded && text.length % 4 !== 0) return undefined;
  return Buffer.from(body, 'base64');
}

/**
 * Decode a peer Struct from its protobuf bytes (no size check; callers bound the input).
 * Errors: truncated or otherwise invalid protobuf, nesting deeper than protobuf-es' limit (100).
 */
export function parsePeerMetadata(bytes: Uint8Array): PeerDecodeResult {
  try {
    const struct = fromBinary(StructSchema, bytes, { readUnknownFields: false });
    return { ok: true, peer: peerFromStruct(struct) };
  } catch (err) {
    return { ok: false, error: `invalid protobuf Struct: ${(err as Error).message}` };
  }
}

/**
 * Decode an `x-envoy-peer-metadata` value into a PeerInfo. Tolerant like Envoy's reader: padded or
 * unpadded base64 (surrounding spaces/tabs ignored), any subset of keys, and the key sets of
 * Istio 1.19–1.23 (all pod labels in LABELS, PLATFORM_METADATA) and ≤ 1.18 (ISTIO_VERSION,
 * MESH_ID, APP_CONTAINERS, INSTANCE_IPS); see `peerFromStruct` for the field rules.
 *
 * Never throws. `{ ok: false }` for: an empty value, more than {@link MAX_PEER_METADATA_BASE64}
 * characters (checked first, before any other work), characters outside the standard base64 alphabet or
 * misplaced padding, bytes that are not a valid `google.protobuf.Struct`.
 */
export function decodePeerMetadata(value: string): PeerDecodeResult {
  if (typeof value !== 'string') return { ok: false, error: 'not a string' };
  if (value.length > MAX_PEER_METADATA_BASE64) return { ok: false, error: 'value too large' };
  const text = trimOws(value);
  if (text === '') return { ok: false, error: 'empty value' };
  const bytes = decodeBase64(text);
  if (bytes === undefined) return { ok: false, error: 'invalid base64' };
  return parsePeerMetadata(bytes);
}

/** What {@link nodeId} needs; `ip` is the proxy's own pod IP (IPv4 or IPv6, unbracketed). */
export interface NodeIdParts {
  readonly ip: string;
  readonly pod: string;
  readonly namespace: string;
  /** Proxy type: `waypoint` (default), `sidecar`, `router`, `ztunnel`. */
  readonly type?: string;
  /** Cluster DNS domain; default `cluster.local`. */
  readonly clusterDomain?: string;
}

/**
 * Envoy's node id for this proxy, `<type>~<ip>~<pod>.<ns>~<ns>.svc.<domain>`, e.g.
 * `waypoint~10.0.0.5~waypoint-7d9f.demo~demo.svc.cluster.local` (istio/istio pkg/model/proxy.go, the
 * `x-envoy-peer-metadata-id` value). Throws `TypeError` if a part is empty or contains `~`
 * (which would make the id unparsable by Istio).
 */
export function nodeId(parts: NodeIdParts): string {
  const { ip, pod, namespace, type = 'waypoint', clusterDomain = 'cluster.local' } = parts;
  for (const [name, value] of Object.entries({ ip, pod, namespace, type, clusterDomain })) {
    if (value === '' || value.includes('~')) throw new TypeError(`nodeId: invalid ${name} ${JSON.stringify(value)}`);
  }
  return `${type}~${ip}~${pod}.${namespace}~${namespace}.svc.${clusterDomain}`;
}
