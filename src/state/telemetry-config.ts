/**
 * The MeshConfig fields telemetry reads (istio/api mesh/v1alpha1/config.proto, proxy.proto):
 * `extensionProviders[]` of kind `opentelemetry`, `envoyFileAccessLog` and `prometheus` (other
 * kinds are kept by name and kind only; ext_authz reads its own), `defaultProviders`,
 * `enableTracing` and `defaultConfig.tracing` / `defaultConfig.meshId`.
 *
 * Defaults are an Istio install's: the built-in providers `prometheus` and `envoy` (a file log on
 * `/dev/stdout`, istio/istio pkg/config/mesh/mesh.go `DefaultMeshConfig`), replaced by a user
 * provider of the same name; `defaultProviders.metrics: [prometheus]` when MeshConfig has no
 * `defaultProviders` (istio-discovery chart, templates/configmap.yaml).
 */
import { z } from 'zod';
import { parseLogFormat, type LogFormat } from './log-format.ts';

/** An OTLP collector (`extensionProviders[].opentelemetry`). */
export interface OpenTelemetryProvider {
  /** `[<namespace>/]<hostname>` as written; dialed by hostname (or IP), without the namespace. */
  readonly service: string;
  readonly host: string;
  readonly port: number;
  /** OTLP/HTTP (`http` set) or OTLP/gRPC (the default, as Istio). */
  readonly protocol: 'http' | 'grpc';
  /** OTLP/HTTP path (default `/v1/traces`). */
  readonly path: string;
  /** Export timeout (ms); undefined: the exporter's default. */
  readonly timeoutMs: number | undefined;
  /** `http.headers` / `grpc.initialMetadata`, values resolved (`envName` read once at compile). */
  readonly headers: Readonly<Record<string, string>>;
  /** Longest tag value kept (`maxTagLength`); 0 = Envoy's default (256 for the path). */
  readonly maxTagLength: number;
  /** `resourceDetectors.environment`: `OTEL_RESOURCE_ATTRIBUTES` goes into the resource. */
  readonly environmentResource: boolean;
}

/** A file access log (`extensionProviders[].envoyFileAccessLog`). */
export interface FileAccessLogProvider {
  readonly path: string;
  /** Undefined: Istio's default TEXT line (istio/istio pilot/pkg/model/telemetry_logging.go `fileAccessLogFromTelemetry`). */
  readonly format: LogFormat | undefined;
}

/** One `extensionProviders[]` entry, by the kind of provider it is. */
export type ExtensionProvider =
  | { readonly name: string; readonly kind: 'opentelemetry'; readonly opentelemetry: OpenTelemetryProvider }
  | { readonly name: string; readonly kind: 'envoyFileAccessLog'; readonly envoyFileAccessLog: FileAccessLogProvider }
  | { readonly name: string; readonly kind: 'prometheus' }
  /** Any other kind (zipkin, envoyOtelAls, envoyExtAuthzGrpc, ...): `kind` is its field name, '' when none. */
  | { readonly name: string; readonly kind: 'other'; readonly otherKind: string };

/** A `customTags` entry of `defaultConfig.tracing` (or of a Telemetry `tracing[]`). */
export type CustomTag =
  | { readonly kind: 'literal'; readonly value: string }
  | { readonly kind: 'environment'; readonly name: string; readonly defaultValue: string }
  | { readonly kind: 'header'; readonly name: string; readonly defaultValue: string };

/** What telemetry reads of MeshConfig. */
export interface MeshTelemetryConfig {
  readonly extensionProviders: readonly ExtensionProvider[];
  readonly defaultProviders: { readonly tracing: readonly string[]; readonly metrics: readonly string[]; readonly accessLogging: readonly string[] };
  /** `enableTracing` as written; undefined when absent. */
  readonly enableTracing: boolean | undefined;
  /** `defaultConfig.tracing.sampling` (percent); undefined when absent or 0 (Istio treats 0 as unset). */
  readonly tracingSampling: number | undefined;
  readonly tracingCustomTags: Readonly<Record<string, CustomTag>>;
  /** `defaultConfig.tracing.maxPathTagLength`; 0 = Envoy's 256. */
  readonly maxPathTagLength: number;
  /** `defaultConfig.meshId`; '' when absent (the trust domain is used). */
  readonly meshId: string;
}

const got = (v: unknown) => `got ${JSON.stringify(v)}`;
const str = z.string({ error: (iss) => `must be a string, ${got(iss.input)}` });
const names = z.array(str, { error: (iss) => `must be a list of provider names, ${got(iss.input)}` }).nullish();
/** A protobuf JSON Duration: `"5s"`, `"0.5s"`. */
const duration = z
  .string({ error: (iss) => `must be a duration like "5s", ${got(iss.input)}` })
  .regex(/^\d+(\.\d+)?s$/, { error: (iss) => `must be a duration like "5s", ${got(iss.input)}` })
  .nullish();
/**
 * A mapping whose every field is known: a misspelled one (`prot: 4318`) is refused by name, as a
 * Telemetry's fields are (telemetry-schema.ts), not read as a missing `port`.
 */
const strict = <T extends z.core.$ZodLooseShape>(shape: T) =>
  z.strictObject(shape, { error: (iss) => (iss.code === 'unrecognized_keys' ? `unknown field ${JSON.stringify(iss.keys[0])}` : `must be a mapping, ${got(iss.input)}`) });

const header = strict({ name: str.min(1, { error: 'must not be empty' }), value: str.nullish(), envName: str.nullish() });

const OtelSchema = strict({
  service: str.min(1, { error: 'must name the collector service' }),
  port: z.number({ error: (iss) => `must be a port number, ${got(iss.input)}` }).int().min(1, { error: 'must be 1-65535' }).max(65535, { error: 'must be 1-65535' }),
  maxTagLength: z.number().int().min(0).nullish(),
  http: strict({ path: str.nullish(), timeout: duration, headers: z.array(header).nullish() }).nullish(),
  grpc: strict({ timeout: duration, initialMetadata: z.array(header).nullish() }).nullish(),
  resourceDetectors: strict({ environment: z.looseObject({}).nullish(), dynatrace: z.looseObject({}).nullish() }).nullish(),
  // Istio's, not read here (Dynatrace's sampler).
  dynatraceSampler: z.unknown().optional(),
});

const FileLogSchema = strict({
  path: str.nullish(),
  logFormat: strict({ text: str.nullish(), labels: z.record(z.string(), z.unknown()).nullish() })
    .nullish()
    .superRefine((f, ctx) => {
      if (!f) return;
      try {
        parseLogFormat({ text: f.text ?? undefined, labels: f.labels ?? undefined });
      } catch (err) {
        ctx.addIssue({ code: 'custom', message: (err as Error).message });
      }
    }),
});

const tagValue = z.looseObject({ value: str.nullish(), name: str.nullish(), defaultValue: str.nullish() });
const CustomTagSchema = z.looseObject({ literal: tagValue.nullish(), environment: tagValue.nullish(), header: tagValue.nullish() });

/** The provider kinds of Istio's MeshConfig (istio/api mesh/v1alpha1/config.proto `ExtensionProvider.provider`). */
const ISTIO_PROVIDER_KINDS = ['envoyExtAuthzHttp', 'envoyExtAuthzGrpc', 'zipkin', 'lightstep', 'datadog', 'stackdriver', 'opencensus', 'skywalking', 'opentelemetry', 'prometheus', 'envoyFileAccessLog', 'envoyHttpAls', 'envoyTcpAls', 'envoyOtelAls'];

/** Istio's kinds node-waypoint does not implement: accepted (real MeshConfigs carry them), warned about, ignored. */
export const UNSUPPORTED_PROVIDER_KINDS: readonly string[] = ISTIO_PROVIDER_KINDS.filter((k) => !['opentelemetry', 'prometheus', 'envoyFileAccessLog', 'envoyExtAuthzHttp', 'envoyExtAuthzGrpc'].includes(k));

/** The telemetry fields, for the MeshConfig schema (mesh-config.ts). */
export const TELEMETRY_FIELDS = {
  extensionProviders: z
    .array(
      z
        .looseObject({
          name: str.min(1, { error: 'must not be empty' }),
          opentelemetry: OtelSchema.nullish(),
          envoyFileAccessLog: FileLogSchema.nullish(),
          prometheus: strict({}).nullish(),
        })
        .superRefine((p, ctx) => {
          // A misspelled kind (`opentelemtry:`) would leave the provider without one: refused, not ignored.
          for (const k of Object.keys(p)) {
            if (k !== 'name' && !ISTIO_PROVIDER_KINDS.includes(k)) ctx.addIssue({ code: 'custom', path: [k], message: `unknown field ${JSON.stringify(k)}: not an extension provider kind (Istio's are ${ISTIO_PROVIDER_KINDS.join(', ')})` });
          }
        }),
      { error: (iss) => `must be a list of providers, ${got(iss.input)}` },
    )
    .superRefine((list, ctx) => {
      // istio/istio pkg/config/validation/agent/validation.go `validateExtensionProvider`: names are unique.
      const seen = new Set<string>();
      list.forEach((p, i) => {
        if (seen.has(p.name)) ctx.addIssue({ code: 'custom', path: [i, 'name'], message: `duplicate provider name ${JSON.stringify(p.name)}` });
        seen.add(p.name);
      });
    })
    .nullish(),
  defaultProviders: z.looseObject({ tracing: names, metrics: names, accessLogging: names }).nullish(),
  enableTracing: z.boolean({ error: (iss) => `must be true or false, ${got(iss.input)}` }).nullish(),
  defaultConfig: z
    .looseObject({
      meshId: str.nullish(),
      tracing: z
        .looseObject({
          sampling: z.number({ error: (iss) => `must be a percentage, ${got(iss.input)}` }).nullish(),
          maxPathTagLength: z.number().int().min(0).nullish(),
          customTags: z.record(z.string(), CustomTagSchema).nullish(),
        })
        .nullish(),
    })
    .nullish(),
};

type Parsed = { [K in keyof typeof TELEMETRY_FIELDS]?: z.output<(typeof TELEMETRY_FIELDS)[K]> };

const BUILT_IN: readonly ExtensionProvider[] = [
  { name: 'prometheus', kind: 'prometheus' },
  { name: 'envoy', kind: 'envoyFileAccessLog', envoyFileAccessLog: { path: '/dev/stdout', format: undefined } },
];

const PROVIDER_KINDS = ['opentelemetry', 'envoyFileAccessLog', 'prometheus'];

/** Istio's defaults when MeshConfig says nothing about telemetry. */
export const DEFAULT_TELEMETRY_CONFIG: MeshTelemetryConfig = buildTelemetryConfig({}, {});

/** Seconds of a protobuf Duration (`"1.5s"`) in ms. */
function durationMs(d: string | null | undefined): number | undefined {
  return d ? Math.round(Number(d.slice(0, -1)) * 1000) : undefined;
}

function headerValues(list: readonly { name: string; value?: string | null; envName?: string | null }[] | null | undefined, env: NodeJS.ProcessEnv): Record<string, string> {
  const out: Record<string, string> = {};
  for (const h of list ?? []) out[h.name] = h.value ?? (h.envName ? (env[h.envName] ?? '') : '');
  return out;
}

function provider(p: Record<string, unknown> & { name: string }, env: NodeJS.ProcessEnv): ExtensionProvider {
  const otel = p.opentelemetry as z.output<typeof OtelSchema> | null | undefined;
  if (otel) {
    const slash = otel.service.indexOf('/');
    return {
      name: p.name,
      kind: 'opentelemetry',
      opentelemetry: {
        service: otel.service,
        host: slash < 0 ? otel.service : otel.service.slice(slash + 1),
        port: otel.port,
        protocol: otel.http ? 'http' : 'grpc',
        path: otel.http?.path || '/v1/traces',
        timeoutMs: durationMs(otel.http ? otel.http.timeout : otel.grpc?.timeout),
        headers: headerValues(otel.http ? otel.http.headers : otel.grpc?.initialMetadata, env),
        maxTagLength: otel.maxTagLength ?? 0,
        environmentResource: Boolean(otel.resourceDetectors?.environment),
      },
    };
  }
  const file = p.envoyFileAccessLog as z.output<typeof FileLogSchema> | null | undefined;
  if (file) {
    const f = file.logFormat;
    return { name: p.name, kind: 'envoyFileAccessLog', envoyFileAccessLog: { path: file.path || '/dev/stdout', format: f ? parseLogFormat({ text: f.text ?? undefined, labels: f.labels ?? undefined }) : undefined } };
  }
  if (p.prometheus !== undefined && p.prometheus !== null) return { name: p.name, kind: 'prometheus' };
  const other = Object.keys(p).find((k) => k !== 'name' && !PROVIDER_KINDS.includes(k)) ?? '';
  return { name: p.name, kind: 'other', otherKind: other };
}

function customTags(tags: Record<string, z.output<typeof CustomTagSchema>> | null | undefined): Record<string, CustomTag> {
  const out: Record<string, CustomTag> = {};
  for (const [name, t] of Object.entries(tags ?? {})) {
    if (t.literal) out[name] = { kind: 'literal', value: t.literal.value ?? '' };
    else if (t.environment) out[name] = { kind: 'environment', name: t.environment.name ?? '', defaultValue: t.environment.defaultValue ?? '' };
    else if (t.header) out[name] = { kind: 'header', name: (t.header.name ?? '').toLowerCase(), defaultValue: t.header.defaultValue ?? '' };
  }
  return out;
}

/** The telemetry part of a parsed MeshConfig (`m` already validated against {@link TELEMETRY_FIELDS}). */
export function buildTelemetryConfig(m: Parsed, env: NodeJS.ProcessEnv = process.env): MeshTelemetryConfig {
  const own = (m.extensionProviders ?? []).map((p) => provider(p, env));
  const providers = [...BUILT_IN.filter((b) => !own.some((p) => p.name === b.name)), ...own];
  const dp = m.defaultProviders;
  const tracing = m.defaultConfig?.tracing;
  const sampling = tracing?.sampling ?? 0;
  return {
    extensionProviders: providers,
    defaultProviders: dp ? { tracing: dp.tracing ?? [], metrics: dp.metrics ?? [], accessLogging: dp.accessLogging ?? [] } : { tracing: [], metrics: ['prometheus'], accessLogging: [] },
    enableTracing: m.enableTracing ?? undefined,
    // istio/istio pilot/pkg/networking/core/tracing.go `proxyConfigSamplingValue`: 0 is unset, over 100 is 1.
    tracingSampling: sampling === 0 ? undefined : sampling > 100 ? 1 : sampling,
    tracingCustomTags: customTags(tracing?.customTags),
    maxPathTagLength: tracing?.maxPathTagLength ?? 0,
    meshId: m.defaultConfig?.meshId ?? '',
  };
}
