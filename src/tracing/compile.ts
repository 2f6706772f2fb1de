/**
 * The Telemetry API of one mesh snapshot, compiled once as its `telemetry` part: every Telemetry
 * validated (telemetry-schema.ts; provider names must exist in MeshConfig `extensionProviders`),
 * then, per served service and for workload-addressed traffic, the attached resources
 * (attachment.ts) merged into what the waypoint does (merge.ts): the server span's settings, the
 * `istio_*` metric overrides, the access logs. Targets with the same attached resources share one
 * result. Nothing here runs per request: filters read the result through {@link telemetryOf},
 * cached on the tunnel.
 */
import { defineSlot, type ConnectionContext } from '../pipeline/index.ts';
import { ConfigError, log } from '../util/index.ts';
import { definePart, UNSUPPORTED_PROVIDER_KINDS, type MeshSnapshot, type MeshTelemetryConfig, type Service, type Target } from '../state/index.ts';
import { TelemetryIndex } from './attachment.ts';
import { findProvider, mergeAccessLogs, mergeMetrics, mergeTracing, NO_METRIC_OVERRIDES, type AccessLogSink, type MetricsPolicy, type TraceExporterRef, type TracingSpec } from './merge.ts';
import { parseTelemetry, type Telemetry } from './telemetry-schema.ts';

/** Span attributes that are the same for every request of a target. */
export type StaticAttributes = Readonly<Record<string, string>>;

/** A target's tracing: the merged settings and what is known before any request. */
export interface TracingPolicy extends TracingSpec {
  /** `istio.*` tags of this waypoint (when `istioTags`), `component`, literal and environment custom tags. */
  readonly attributes: StaticAttributes;
}

/** What the Telemetry API says about one target's traffic. */
export interface TargetTelemetry {
  /** Undefined: no span for this traffic (tracing off). */
  readonly tracing: TracingPolicy | undefined;
  readonly metrics: MetricsPolicy;
  /** Undefined: MeshConfig `accessLogFile` applies; else these file logs (none: no line). */
  readonly accessLogs: readonly AccessLogSink[] | undefined;
}

/** The compiled part. */
export interface CompiledTelemetry {
  /** Every Telemetry of the mesh, validated (also those that apply to no traffic of this waypoint). */
  readonly telemetries: readonly Telemetry[];
  /** The exporters some target sends spans to (one entry per provider, `env` at most once). */
  readonly exporters: readonly TraceExporterRef[];
  forTarget(target: Target): TargetTelemetry;
}

/** A target without any Telemetry configuration (and a snapshot compiled without this part). */
export const NO_TELEMETRY: TargetTelemetry = Object.freeze({ tracing: undefined, metrics: NO_METRIC_OVERRIDES, accessLogs: undefined });

/** The `istio.*` tags Istio puts on every span of a proxy (istio/istio pilot/pkg/networking/core/tracing.go `buildServiceTags`). */
function istioTags(snapshot: MeshSnapshot): Record<string, string> {
  const wp = snapshot.waypoint;
  const m = snapshot.meshConfig;
  return {
    'istio.canonical_revision': 'latest',
    'istio.canonical_service': wp.name,
    'istio.mesh_id': m.telemetry.meshId || m.trustDomain,
    'istio.namespace': wp.namespace,
    'istio.cluster_id': snapshot.workloads[0]?.clusterId || 'Kubernetes',
  };
}

function policyOf(spec: TracingSpec | undefined, snapshot: MeshSnapshot, env: NodeJS.ProcessEnv): TracingPolicy | undefined {
  if (!spec) return undefined;
  const attributes: Record<string, string> = { component: 'proxy', ...(spec.istioTags ? istioTags(snapshot) : {}) };
  for (const [name, tag] of Object.entries(spec.customTags)) {
    if (tag.kind === 'literal') attributes[name] = tag.value;
    else if (tag.kind === 'environment') attributes[name] = env[tag.name] ?? tag.defaultValue;
  }
  return Object.freeze({ ...spec, attributes: Object.freeze(attributes) });
}

/** Refuse provider names MeshConfig does not define (a misspelt name would silently turn telemetry off). */
function checkDefaultProviders(mesh: MeshTelemetryConfig): void {
  for (const kind of ['tracing', 'metrics', 'accessLogging'] as const) {
    mesh.defaultProviders[kind].forEach((name, i) => {
      if (!findProvider(mesh, name)) {
        throw new ConfigError(`no extensionProviders entry named ${JSON.stringify(name)} (known: ${mesh.extensionProviders.map((p) => p.name).join(', ')})`, {
          object: 'MeshConfig',
          field: `defaultProviders.${kind}[${i}]`,
        });
      }
    });
  }
}

/**
 * Compile the Telemetry API of `snapshot`. `env` resolves `environment` custom tags.
 * @throws ConfigError naming the Telemetry, field, file and line of the first invalid one.
 */
export function compileTelemetry(snapshot: MeshSnapshot, env: NodeJS.ProcessEnv = process.env): CompiledTelemetry {
  const mesh = snapshot.meshConfig.telemetry;
  checkDefaultProviders(mesh);
  const known = (name: string) => findProvider(mesh, name) !== undefined;
  const telemetries = snapshot
    .resources('Telemetry')
    .filter((r) => r.apiVersion.startsWith('telemetry.istio.io/'))
    .map((r) => parseTelemetry(r, known, mesh.extensionProviders.map((p) => p.name)));
  const index = new TelemetryIndex(telemetries);
  const { waypoint, meshConfig } = snapshot;
  const warned = new Set<string>();
  const warn = (msg: string) => {
    if (!warned.has(msg)) log.warn({ version: snapshot.version }, `telemetry: ${msg}`);
    warned.add(msg);
  };
  // Real MeshConfigs carry Istio's other providers (zipkin, skywalking, ...): kept, said once per snapshot.
  for (const p of mesh.extensionProviders) {
    if (p.kind === 'other' && UNSUPPORTED_PROVIDER_KINDS.includes(p.otherKind)) warn(`MeshConfig extensionProviders ${p.name}: ${p.otherKind} is not supported by node-waypoint (it implements opentelemetry, envoyFileAccessLog, prometheus and ext_authz providers); ignored`);
  }
  // Targets with the same attached Telemetries (by identity) share one result.
  const shared = new Map<string, TargetTelemetry>();
  const ids = new Map<Telemetry, number>(telemetries.map((t, i) => [t, i]));
  const resolve = (service: Service | undefined): TargetTelemetry => {
    const applicable = index.applicable(service, waypoint, meshConfig.rootNamespace);
    const key = applicable.map((t) => ids.get(t)).join(',');
    let t = shared.get(key);
    if (!t) {
      const tracing = policyOf(mergeTracing(applicable, mesh, warn), snapshot, env);
      const metrics = mergeMetrics(applicable, mesh, warn);
      const accessLogs = mergeAccessLogs(applicable, mesh, warn);
      t = !tracing && metrics === NO_METRIC_OVERRIDES && !accessLogs ? NO_TELEMETRY : Object.freeze({ tracing, metrics, accessLogs });
      shared.set(key, t);
    }
    return t;
  };
  const byService = new Map<Service, TargetTelemetry>();
  for (const s of snapshot.services) if (s.servedByThisWaypoint) byService.set(s, resolve(s));
  const workloads = resolve(undefined);
  const exporters = new Map<string, TraceExporterRef>();
  for (const t of shared.values()) {
    const e = t.tracing?.exporter;
    if (e) exporters.set(e.kind === 'env' ? '' : e.name, e);
  }
  return Object.freeze({
    telemetries: Object.freeze(telemetries),
    exporters: Object.freeze([...exporters.values()]),
    forTarget: (target: Target) => (target.kind === 'service' ? (byService.get(target.service) ?? workloads) : workloads),
  });
}

/** The Telemetry API's compiled part of every waypoint snapshot (bound by the tracing runtime to publish exporters). */
export const TELEMETRY = definePart<CompiledTelemetry>('telemetry', { compile: (s) => compileTelemetry(s), refusal: 'invalid Telemetry' });

const TARGET_TELEMETRY = defineSlot<TargetTelemetry>('istio.telemetry', 'connection');
const bySnapshot = new WeakMap<MeshSnapshot, CompiledTelemetry | undefined>();

/** The compiled part of `snapshot`; undefined for a snapshot compiled without it (embedding, tests). */
function compiledOf(snapshot: MeshSnapshot): CompiledTelemetry | undefined {
  if (typeof snapshot !== 'object' || snapshot === null) return undefined;
  if (bySnapshot.has(snapshot)) return bySnapshot.get(snapshot);
  let c: CompiledTelemetry | undefined;
  try {
    c = snapshot.part(TELEMETRY);
  } catch {
    c = undefined;
  }
  bySnapshot.set(snapshot, c);
  return c;
}

/**
 * What the Telemetry API says about a tunnel's traffic, under the snapshot it was admitted with
 * (a Telemetry change applies to tunnels opened after it, as a listener update in Envoy leaves
 * open connections on their filter chain). Looked up once per tunnel, then read from its slot.
 */
export function telemetryOf(conn: ConnectionContext): TargetTelemetry {
  let t = conn.get(TARGET_TELEMETRY);
  if (t === undefined) {
    t = compiledOf(conn.mesh)?.forTarget(conn.target) ?? NO_TELEMETRY;
    conn.set(TARGET_TELEMETRY, t);
  }
  return t;
}
