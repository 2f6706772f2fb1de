/**
 * PeerInfo ⇄ the `google.protobuf.Struct` Istio exchanges as peer metadata (the payload of
 * `x-envoy-peer-metadata` and of the TCP `istio-peer-exchange` frame).
 *
 * Follows istio/proxy `extensions/common/metadata_object.cc` (`convertWorkloadMetadataToStruct`,
 * `convertStructToWorkloadMetadata`, `parseOwner`; the compact key set of Istio ≥ 1.24, commit
 * 24a4847). Pure data conversion: no base64, no framing, never throws.
 */
import { create } from '@bufbuild/protobuf';
import { StructSchema, ValueSchema } from '@bufbuild/protobuf/wkt';
import type { Struct, Value } from '@bufbuild/protobuf/wkt';
import type { PeerInfo } from './peer-info.ts';

/** Struct keys (istio/proxy extensions/common/metadata_object.h `*MetadataField`). */
export const KEY = {
  name: 'NAME',
  namespace: 'NAMESPACE',
  workload: 'WORKLOAD_NAME',
  cluster: 'CLUSTER_ID',
  identity: 'IDENTITY',
  labels: 'LABELS',
  owner: 'OWNER',
  region: 'REGION',
  zone: 'AVAILABILITY_ZONE',
} as const;

/** Label keys Istio reads from / writes to `LABELS` (istio/proxy extensions/common/metadata_object.h). */
export const LABEL = {
  canonicalName: 'service.istio.io/canonical-name',
  canonicalRevision: 'service.istio.io/canonical-revision',
  app: 'app',
  appQualified: 'app.kubernetes.io/name',
  version: 'version',
  versionQualified: 'app.kubernetes.io/version',
} as const;

/** Workload types that have an OWNER form (istio/proxy extensions/common/metadata_object.h `*Suffix`). */
const WORKLOAD_TYPES: ReadonlySet<string> = new Set(['pod', 'deployment', 'job', 'cronjob']);

const OWNER_PREFIX = 'kubernetes://apis/apps/v1/namespaces/';

/**
 * Istio's OWNER string for a workload: `kubernetes://apis/apps/v1/namespaces/<ns>/<type>s/<name>`,
 * or `undefined` when `type` is not one of `pod`, `deployment`, `job`, `cronjob` (Envoy writes
 * no OWNER then; istio/proxy extensions/common/metadata_object.cc `WorkloadMetadataObject::owner`).
 */
export function ownerOf(namespace: string, type: string, workload: string): string | undefined {
  return WORKLOAD_TYPES.has(type) ? `${OWNER_PREFIX}${namespace}/${type}s/${workload}` : undefined;
}

/**
 * The workload type in an OWNER string: its second-to-last `/` segment without the trailing `s`,
 * if that is one of `pod`, `deployment`, `job`, `cronjob`; otherwise `''` (Envoy's
 * `WorkloadType::Unknown`, e.g. for `replicasets` or a malformed / short owner — PX `parseOwner`).
 */
export function workloadTypeFromOwner(owner: string): string {
  const segments = owner.split('/');
  if (segments.length < 2) return '';
  const plural = segments[segments.length - 2]!;
  if (!plural.endsWith('s')) return '';
  const type = plural.slice(0, -1);
  return WORKLOAD_TYPES.has(type) ? type : '';
}

function stringValue(value: string): Value {
  return create(ValueSchema, { kind: { case: 'stringValue', value } });
}

/**
 * A Struct whose map is filled in sorted key order. protobuf-es writes map entries in object key
 * order, so this reproduces C++ protobuf's deterministic serialization (entries sorted by key)
 * for the fixed, non-numeric keys used here. (Integer-like keys would be reordered by JS, which
 * is why callers only pass fixed key sets.)
 */
function sortedStruct(entries: readonly (readonly [string, Value])[]): Struct {
  const sorted = [...entries].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
  return create(StructSchema, { fields: Object.fromEntries(sorted) });
}

/**
 * The Struct Istio ≥ 1.24 exchanges for `peer` (PX `convertWorkloadMetadataToStruct`): NAME,
 * NAMESPACE, WORKLOAD_NAME, CLUSTER_ID, IDENTITY, LABELS {canonical-name ← service,
 * canonical-revision ← revision, app, version}, OWNER (only for a known workload type), REGION,
 * AVAILABILITY_ZONE. Empty strings are omitted; LABELS itself is always present (possibly empty),
 * as Envoy creates it unconditionally. `peer.labels` is not copied (Envoy copies only its
 * configured `additional_labels`). Keys are in sorted order, so `toBinary` gives Envoy's
 * deterministic bytes.
 */
export function peerToStruct(peer: PeerInfo): Struct {
  const labels: [string, Value][] = [];
  const addLabel = (key: string, value: string) => {
    if (value !== '') labels.push([key, stringValue(value)]);
  };
  addLabel(LABEL.canonicalName, peer.service);
  addLabel(LABEL.canonicalRevision, peer.revision);
  addLabel(LABEL.app, peer.app);
  addLabel(LABEL.version, peer.version);

  const fields: [string, Value][] = [
    [KEY.labels, create(ValueSchema, { kind: { case: 'structValue', value: sortedStruct(labels) } })],
  ];
  const add = (key: string, value: string | undefined) => {
    if (value !== undefined && value !== '') fields.push([key, stringValue(value)]);
  };
  add(KEY.name, peer.name);
  add(KEY.namespace, peer.namespace);
  add(KEY.workload, peer.workload);
  add(KEY.cluster, peer.cluster);
  add(KEY.identity, peer.identity);
  add(KEY.owner, ownerOf(peer.namespace, peer.type, peer.workload));
  add(KEY.region, peer.region);
  add(KEY.zone, peer.availabilityZone);
  return sortedStruct(fields);
}

/** A Value's string, or '' for any other kind (C++ `Value::string_value()`). */
function str(value: Value | undefined): string {
  return value?.kind.case === 'stringValue' ? value.kind.value : '';
}

/**
 * The PeerInfo described by a peer-metadata Struct of any Istio version (PX
 * `convertStructToWorkloadMetadata`). Every key is optional; unknown keys (PLATFORM_METADATA,
 * ISTIO_VERSION, MESH_ID, APP_CONTAINERS, INSTANCE_IPS, …) and non-string values are ignored.
 * - app = LABELS `app.kubernetes.io/name`, else `app`; version = `app.kubernetes.io/version`,
 *   else `version`; service / revision = the canonical-name / -revision labels;
 * - type = from OWNER (see {@link workloadTypeFromOwner});
 * - labels = every string-valued LABELS entry (all pod labels for Istio 1.19–1.23 peers, the
 *   four above for ≥ 1.24 peers).
 */
export function peerFromStruct(struct: Struct): PeerInfo {
  const f = struct.fields;
  const labelsValue = f[KEY.labels];
  const labelFields = labelsValue?.kind.case === 'structValue' ? labelsValue.kind.value.fields : {};
  const labelEntries: [string, string][] = [];
  for (const [key, value] of Object.entries(labelFields)) {
    if (value.kind.case === 'stringValue') labelEntries.push([key, value.kind.value]);
  }
  const labels: Readonly<Record<string, string>> = Object.freeze(Object.fromEntries(labelEntries));
  const label = (key: string) => (Object.hasOwn(labels, key) ? labels[key]! : '');
  return Object.freeze({
    name: str(f[KEY.name]),
    namespace: str(f[KEY.namespace]),
    cluster: str(f[KEY.cluster]),
    workload: str(f[KEY.workload]),
    type: workloadTypeFromOwner(str(f[KEY.owner])),
    service: label(LABEL.canonicalName),
    revision: label(LABEL.canonicalRevision),
    app: label(LABEL.appQualified) || label(LABEL.app),
    version: label(LABEL.versionQualified) || label(LABEL.version),
    identity: str(f[KEY.identity]),
    region: str(f[KEY.region]),
    availabilityZone: str(f[KEY.zone]),
    labels,
  });
}
