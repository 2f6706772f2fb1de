/**
 * Read the mesh's Kubernetes objects from either source: the YAML people `kubectl apply` (a
 * multi-document stream; a `kind: List` with `items` is flattened), each remembered with where it
 * came from so later validation can report `file:line`, the document index, the object and the
 * field; or objects already parsed (the API server's JSON), whose errors name the object and the
 * field. Both get the same checks: a kind its API group does not have (`kind: Servce`) is refused
 * as `kubectl apply` refuses it; a workload controller (Deployment, ...) whose Pods are not among
 * the objects gets a warning, since endpoints come from Pods.
 */
import { Composer, LineCounter, Parser, isMap, isScalar, type Document } from 'yaml';

import { ConfigError, type ConfigLocation, log, runNow, type Stepwise } from '../util/index.ts';
import { formatFieldPath, lineOf, nodeAt, type FieldPath } from './yaml-locate.ts';

/** Kinds without a namespace: their `ref` is `Kind/name` and `namespace` is `''`. */
const CLUSTER_SCOPED: ReadonlySet<string> = new Set([
  'Namespace',
  'Node',
  'GatewayClass',
  'ClusterRole',
  'ClusterRoleBinding',
  'CustomResourceDefinition',
  'MutatingWebhookConfiguration',
  'ValidatingWebhookConfiguration',
  'PersistentVolume',
  'StorageClass',
  'PriorityClass',
  'IngressClass',
]);

/**
 * Every kind of the API groups whose kinds are all known here (Kubernetes built-ins the mesh file
 * plausibly holds, Istio's CRDs). A kind outside its group's list is refused; groups not listed
 * (other CRDs, other built-ins) are not checked. Gateway API kinds are only used for hints: its
 * experimental channel keeps adding kinds, and the routing engine warns about ones it does not know.
 */
const KINDS_BY_GROUP: ReadonlyMap<string, ReadonlySet<string>> = new Map(
  Object.entries({
    '': 'Binding ComponentStatus ConfigMap Endpoints Event LimitRange Namespace Node PersistentVolume PersistentVolumeClaim Pod PodTemplate ReplicationController ResourceQuota Secret Service ServiceAccount',
    apps: 'ControllerRevision DaemonSet Deployment ReplicaSet StatefulSet',
    batch: 'CronJob Job',
    autoscaling: 'HorizontalPodAutoscaler',
    policy: 'PodDisruptionBudget',
    'networking.k8s.io': 'Ingress IngressClass IPAddress NetworkPolicy ServiceCIDR',
    'discovery.k8s.io': 'EndpointSlice',
    'rbac.authorization.k8s.io': 'ClusterRole ClusterRoleBinding Role RoleBinding',
    'networking.istio.io': 'DestinationRule EnvoyFilter Gateway ProxyConfig ServiceEntry Sidecar VirtualService WorkloadEntry WorkloadGroup',
    'security.istio.io': 'AuthorizationPolicy PeerAuthentication RequestAuthentication',
    'telemetry.istio.io': 'Telemetry',
    'extensions.istio.io': 'WasmPlugin',
    'extensions.node-waypoint.dev': 'WaypointFilter',
  }).map(([group, kinds]) => [group, new Set(kinds.split(' '))]),
);

/** Kinds named in hints only (`kind: HTTPRoute` under `apiVersion: v1`). */
const HINT_KINDS: ReadonlyMap<string, ReadonlySet<string>> = new Map([
  ...KINDS_BY_GROUP,
  ['gateway.networking.k8s.io', new Set(['Gateway', 'GatewayClass', 'HTTPRoute', 'GRPCRoute', 'ReferenceGrant', 'TCPRoute', 'TLSRoute', 'UDPRoute', 'BackendTLSPolicy'])],
]);

/** The version a hint names for groups whose kinds are not served as `v1`. */
const HINT_VERSION: Readonly<Record<string, string>> = { autoscaling: 'v2', 'extensions.istio.io': 'v1alpha1', 'extensions.node-waypoint.dev': 'v1alpha1' };

/** Levenshtein distance, for "did you mean". */
function distance(a: string, b: string): number {
  let prev = Array.from({ length: b.length + 1 }, (_, j) => j);
  for (let i = 1; i <= a.length; i++) {
    const cur = [i];
    for (let j = 1; j <= b.length; j++) cur[j] = Math.min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] === b[j - 1] ? 0 : 1));
    prev = cur;
  }
  return prev[b.length];
}

/** Why `kind` cannot be in `apiVersion` (kubectl's "no matches for kind"), with a hint; undefined when it can. */
function unknownKind(apiVersion: string, kind: string): string | undefined {
  const slash = apiVersion.lastIndexOf('/');
  const group = slash < 0 ? '' : apiVersion.slice(0, slash);
  const kinds = KINDS_BY_GROUP.get(group);
  if (!kinds || kinds.has(kind)) return undefined;
  const base = `no matches for kind "${kind}" in version "${apiVersion}"`;
  const elsewhere = [...HINT_KINDS].filter(([, ks]) => ks.has(kind)).map(([g]) => `apiVersion: ${g === '' ? 'v1' : `${g}/${HINT_VERSION[g] ?? 'v1'}`}`);
  if (elsewhere.length) return `${base} (${kind} is \`${elsewhere.join('` or `')}\`)`;
  let best: string | undefined;
  let bestDistance = Infinity;
  for (const k of kinds) {
    const d = k.toLowerCase() === kind.toLowerCase() ? 0 : distance(k, kind);
    if (d < bestDistance) [best, bestDistance] = [k, d];
  }
  const hint = best !== undefined && bestDistance <= Math.max(2, Math.floor(kind.length / 3)) ? `did you mean ${best}?` : `known kinds: ${[...kinds].join(', ')}`;
  return `${base} (${hint})`;
}

/** Where an object was read from, and how to find the line of one of its fields. */
interface Origin {
  /** The file, for objects read from one. */
  readonly file?: string;
  /** 0-based index of the YAML document that holds it. */
  readonly document?: number;
  /** Path of the object inside what was read: `[]`, or `['items', i]` inside a `kind: List`. */
  readonly prefix: FieldPath;
  /** 1-based line of the node at `path` (from the document root), or of its nearest existing parent. */
  line(path: FieldPath): number | undefined;
  /** Line where line 1 of a YAML string embedded at `path` (from the document root) sits. */
  embeddedBaseLine(path: FieldPath): number | undefined;
}

/** The origin of an object of a YAML document. */
function yamlOrigin(file: string, document: number, doc: Document, counter: LineCounter, prefix: FieldPath): Origin {
  return {
    file,
    document,
    prefix,
    line: (path) => lineOf(doc, counter, path),
    embeddedBaseLine(path) {
      const node = nodeAt(doc, path);
      if (!isScalar(node) || !node.range) return undefined;
      const line = counter.linePos(node.range[0]).line;
      return node.type === 'BLOCK_LITERAL' || node.type === 'BLOCK_FOLDED' ? line + 1 : line;
    },
  };
}

/** The origin of an already-parsed object (no file, no lines): errors name the object and field. */
function parsedOrigin(prefix: FieldPath): Origin {
  return { prefix, line: () => undefined, embeddedBaseLine: () => undefined };
}

interface SourceInit {
  readonly apiVersion: string;
  readonly kind: string;
  readonly name: string;
  readonly namespace: string;
  readonly body: Readonly<Record<string, unknown>>;
  readonly origin: Origin;
}

/** One Kubernetes object from the input, plus the means to point at any of its fields. */
export class SourceObject {
  readonly apiVersion: string;
  /** API group: `''` for core (`v1`), else the part of `apiVersion` before `/`. */
  readonly group: string;
  readonly kind: string;
  readonly name: string;
  /** `metadata.namespace`, defaulting to `default`; `''` for cluster-scoped kinds. */
  readonly namespace: string;
  /** `Kind/namespace/name` (`Kind/name` when cluster-scoped), as used in error messages. */
  readonly ref: string;
  /** The object as plain JavaScript (YAML 1.2 core schema, or the JSON it was given as). */
  readonly body: Readonly<Record<string, unknown>>;
  /** The file it was read from; undefined for parsed objects (from the API server). */
  readonly file: string | undefined;
  /** 0-based index of the YAML document that holds it; undefined for parsed objects. */
  readonly document: number | undefined;
  readonly #origin: Origin;

  constructor(init: SourceInit) {
    this.apiVersion = init.apiVersion;
    const slash = init.apiVersion.lastIndexOf('/');
    this.group = slash < 0 ? '' : init.apiVersion.slice(0, slash);
    this.kind = init.kind;
    this.name = init.name;
    this.namespace = init.namespace;
    this.ref = init.namespace ? `${init.kind}/${init.namespace}/${init.name}` : `${init.kind}/${init.name}`;
    this.body = init.body;
    this.file = init.origin.file;
    this.document = init.origin.document;
    this.#origin = init.origin;
  }

  /** True when read from a file (its locations have a file and lines). */
  get fromFile(): boolean {
    return this.file !== undefined;
  }

  /**
   * Location of a field (`[]` = the object itself): file, line (the nearest existing node's) and
   * document when read from a file; always the object and the field.
   */
  locate(path: FieldPath = []): ConfigLocation {
    const location: ConfigLocation = this.fromFile
      ? { file: this.file, line: this.#origin.line([...this.#origin.prefix, ...path]), document: this.document, object: this.ref }
      : { object: this.ref };
    return path.length ? { ...location, field: formatFieldPath(path) } : location;
  }

  /** A ConfigError about `path` of this object, for the caller to throw. */
  fail(message: string, path: FieldPath = []): ConfigError {
    return new ConfigError(message, this.locate(path));
  }

  /**
   * Line in the file where line 1 of a YAML string embedded at `path` sits (a block scalar's
   * content starts on the line after `|`), so errors inside it can point into this file.
   */
  embeddedBaseLine(path: FieldPath): number | undefined {
    return this.#origin.embeddedBaseLine([...this.#origin.prefix, ...path]);
  }
}

/**
 * Parse a multi-document YAML stream into objects, in file order. Empty documents are skipped;
 * `kind: List` (and `*List`) documents contribute their `items`.
 * @throws ConfigError on a YAML syntax error (first one, with its line), a document that is not a
 *   mapping, or an object without a string `apiVersion`, `kind` or `metadata.name`.
 */
export function readObjects(text: string, file: string): SourceObject[] {
  return runNow(readObjectsStepwise(text, file));
}

/** {@link readObjects}, pausing after each YAML document (for a mesh compiled in slices). */
export function* readObjectsStepwise(text: string, file: string): Stepwise<SourceObject[]> {
  const counter = new LineCounter();
  const out: SourceObject[] = [];
  // `parseAllDocuments` without collecting: the same Parser and Composer, one document at a time.
  const docs = new Composer({ prettyErrors: false }).compose(new Parser(counter.addNewLine).parse(text));
  let index = 0;
  for (const doc of docs) {
    readDocument(doc, index++);
    yield;
  }
  warnControllersWithoutPods(out);
  return out;

  function readDocument(doc: Document.Parsed, index: number): void {
    const syntax = doc.errors[0];
    if (syntax) {
      const message = syntax.message.split('\n')[0].replace(/ at line \d+, column \d+:?$/, '');
      throw new ConfigError(`YAML syntax error: ${message}`, {
        file,
        line: counter.linePos(syntax.pos[0]).line,
        document: index,
      });
    }
    if (doc.contents === null) return;
    const docLine = counter.linePos(doc.contents.range[0]).line;
    if (!isMap(doc.contents)) {
      throw new ConfigError('document is not a mapping (expected a Kubernetes object)', {
        file,
        line: docLine,
        document: index,
      });
    }
    let value: Record<string, unknown>;
    try {
      value = doc.toJS() as Record<string, unknown>;
    } catch (err) {
      throw new ConfigError(`cannot read YAML document: ${(err as Error).message}`, { file, line: docLine, document: index }, { cause: err });
    }
    const kind = value.kind;
    if (typeof kind === 'string' && kind.endsWith('List') && 'items' in value) {
      if (!Array.isArray(value.items)) {
        throw new ConfigError(`${kind}.items must be a list`, {
          file,
          line: lineOf(doc, counter, ['items']),
          document: index,
          field: 'items',
        });
      }
      value.items.forEach((item, i) => {
        out.push(toObject(item, yamlOrigin(file, index, doc, counter, ['items', i])));
      });
      return;
    }
    out.push(toObject(value, yamlOrigin(file, index, doc, counter, [])));
  }
}

/** Parsed objects read between two pauses of {@link readParsedObjectsStepwise}. */
const PARSED_PER_STEP = 256;

/**
 * Read objects already parsed (the API server's JSON), in the given order, with the checks of
 * {@link readObjects}; a `kind: List` contributes its `items`. Pauses every few hundred objects.
 * @throws ConfigError naming the object (as far as it names itself) and the field, for an object
 *   without a string `apiVersion`, `kind` or `metadata.name`, or of a kind its group does not have.
 */
export function* readParsedObjectsStepwise(values: readonly unknown[]): Stepwise<SourceObject[]> {
  const out: SourceObject[] = [];
  for (const value of values) {
    if (isRecord(value) && typeof value.kind === 'string' && value.kind.endsWith('List') && 'items' in value) {
      if (!Array.isArray(value.items)) throw new ConfigError(`${value.kind}.items must be a list`, { field: 'items' });
      value.items.forEach((item, i) => out.push(toObject(item, parsedOrigin(['items', i]))));
    } else {
      out.push(toObject(value, parsedOrigin([])));
    }
    if (out.length % PARSED_PER_STEP === 0) yield;
  }
  warnControllersWithoutPods(out);
  return out;
}

/** Workload controllers: where their Pods' labels are (`selector.matchLabels`, else the template's). */
const CONTROLLERS: Readonly<Record<string, FieldPath[]>> = {
  'apps/Deployment': [['spec', 'selector', 'matchLabels'], ['spec', 'template', 'metadata', 'labels']],
  'apps/StatefulSet': [['spec', 'selector', 'matchLabels'], ['spec', 'template', 'metadata', 'labels']],
  'apps/DaemonSet': [['spec', 'selector', 'matchLabels'], ['spec', 'template', 'metadata', 'labels']],
  'apps/ReplicaSet': [['spec', 'selector', 'matchLabels'], ['spec', 'template', 'metadata', 'labels']],
  '/ReplicationController': [['spec', 'selector'], ['spec', 'template', 'metadata', 'labels']],
  'batch/Job': [['spec', 'template', 'metadata', 'labels']],
  'batch/CronJob': [['spec', 'jobTemplate', 'spec', 'template', 'metadata', 'labels']],
};

function labelsAt(body: unknown, path: FieldPath): Record<string, string> | undefined {
  let v: unknown = body;
  for (const k of path) v = isRecord(v) ? v[k as string] : undefined;
  if (!isRecord(v)) return undefined;
  return Object.fromEntries(Object.entries(v).filter((e): e is [string, string] => typeof e[1] === 'string'));
}

/**
 * The mesh is read from Pods (their labels and `status.podIP`), as istiod reads it: a Deployment
 * (or other controller) says nothing about endpoints. Warn for each one whose Pods are not in the
 * file, and say how to get them.
 */
function warnControllersWithoutPods(objects: readonly SourceObject[]): void {
  let pods: SourceObject[] | undefined;
  for (const o of objects) {
    const paths = CONTROLLERS[`${o.group}/${o.kind}`];
    if (!paths) continue;
    pods ??= objects.filter((p) => p.group === '' && p.kind === 'Pod');
    const selector = paths.map((p) => labelsAt(o.body, p)).find((l) => l !== undefined && Object.keys(l).length > 0) ?? {};
    const matches = pods.some((p) => {
      if (p.namespace !== o.namespace) return false;
      const podLabels = labelsAt(p.body, ['metadata', 'labels']) ?? {};
      return Object.entries(selector).every(([k, v]) => podLabels[k] === v);
    });
    if (matches) continue;
    const at = o.locate();
    const l = Object.entries(selector).map(([k, v]) => `${k}=${v}`).join(',');
    const command = `kubectl get pods -n ${o.namespace}${l ? ` -l ${l}` : ''} -o yaml`;
    const where = o.fromFile ? `${at.file}:${at.line}: ` : '';
    log.warn(
      { file: at.file, line: at.line, document: at.document, object: o.ref },
      `${where}${o.ref}: none of its Pods is ${o.fromFile ? 'in the file' : 'among the mesh objects'}, so it has no endpoints here: the waypoint reads Pods (labels, status.podIP), not ${o.kind}s. Add them: ${command}`,
    );
  }
}

function toObject(value: unknown, origin: Origin): SourceObject {
  const where = (path: FieldPath, object?: string): ConfigLocation => {
    const field = path.length ? formatFieldPath([...origin.prefix, ...path]) : origin.prefix.length ? formatFieldPath(origin.prefix) : undefined;
    if (origin.file !== undefined) return { file: origin.file, line: origin.line([...origin.prefix, ...path]), document: origin.document, object, field };
    // Not from a file, there is no line to point at: name the object as far as it names itself.
    const ref = objectRef(value);
    return { ...(ref ? { object: ref } : {}), ...(field ? { field } : {}) };
  };
  if (!isRecord(value)) throw new ConfigError('object is not a mapping', where([]));
  const metadata = value.metadata;
  const name = isRecord(metadata) ? metadata.name : undefined;
  const label = typeof value.kind === 'string' ? value.kind : 'object';
  if (typeof value.apiVersion !== 'string' || value.apiVersion === '') {
    throw new ConfigError(`${label} has no apiVersion (e.g. \`apiVersion: v1\`)`, where(['apiVersion']));
  }
  if (typeof value.kind !== 'string' || value.kind === '') {
    throw new ConfigError('object has no kind (e.g. `kind: Service`)', where(['kind']));
  }
  const noKind = unknownKind(value.apiVersion, value.kind);
  if (noKind) {
    const ns = isRecord(metadata) && typeof metadata.namespace === 'string' ? `${metadata.namespace}/` : '';
    throw new ConfigError(noKind, where(['kind'], typeof name === 'string' ? `${value.kind}/${ns}${name}` : undefined));
  }
  if (!isRecord(metadata)) throw new ConfigError(`${label} has no metadata`, where(['metadata']));
  if (typeof name !== 'string' || name === '') {
    throw new ConfigError(`${label} has no metadata.name`, where(['metadata', 'name']));
  }
  const ns = metadata.namespace;
  if (ns !== undefined && ns !== null && (typeof ns !== 'string' || ns === '')) {
    throw new ConfigError('metadata.namespace must be a non-empty string', where(['metadata', 'namespace'], `${value.kind}/${name}`));
  }
  const namespace = CLUSTER_SCOPED.has(value.kind) ? '' : typeof ns === 'string' ? ns : 'default';
  return new SourceObject({ apiVersion: value.apiVersion, kind: value.kind, name, namespace, body: value, origin });
}

/**
 * The `ref` an object has (or, malformed, would have) as a {@link SourceObject}: `Kind/namespace/name`,
 * `Kind/name` when cluster-scoped (`object/...` without a kind); undefined without a name.
 */
export function objectRef(value: unknown): string | undefined {
  const metadata = isRecord(value) ? value.metadata : undefined;
  const name = isRecord(metadata) ? metadata.name : undefined;
  if (typeof name !== 'string' || name === '') return undefined;
  const kind = isRecord(value) && typeof value.kind === 'string' && value.kind ? value.kind : 'object';
  const ns = (metadata as Record<string, unknown>).namespace;
  const namespace = CLUSTER_SCOPED.has(kind) ? '' : typeof ns === 'string' && ns ? ns : 'default';
  return namespace ? `${kind}/${namespace}/${name}` : `${kind}/${name}`;
}

/** True for a plain mapping (not null, not an array). */
export function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}
