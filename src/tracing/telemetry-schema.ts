/**
 * The `telemetry.istio.io` Telemetry resource (istio/api telemetry/v1alpha1/telemetry.proto),
 * read and validated as istiod's admission does (istio/istio pkg/config/validation/validation.go
 * `ValidateTelemetry`): one of `selector` / `targetRef` / `targetRefs`, sampling within
 * [0, 100], non-empty provider names and tag names, `tagOverrides.value` only with UPSERT.
 * Unknown fields are refused (a misspelt field must not silently do nothing), and so are filter
 * expressions and tag values outside the CEL subset the waypoint evaluates (cel.ts; istiod only
 * checks that CEL parses). Errors name the object, field, file and line.
 */
import { z } from 'zod';
import { type CustomTag, type FieldPath, type FormatParts, type KeptResource, locateField, parseFormat } from '../state/index.ts';
import { ConfigError } from '../util/index.ts';
import { CelCompileError, compileCel, type CelExpression } from './cel.ts';

/** `match.mode` (`WorkloadMode`). */
export type WorkloadMode = 'CLIENT' | 'SERVER' | 'CLIENT_AND_SERVER';

/** A `targetRefs[]` entry. */
export interface TelemetryTargetRef {
  readonly group: string;
  readonly kind: string;
  readonly name: string;
  readonly namespace: string;
}

/** `tracing[].customTags` value: MeshConfig's kinds, or `formatter` (an access-log format string). */
export type TracingCustomTag = CustomTag | { readonly kind: 'formatter'; readonly parts: FormatParts };

export interface TracingEntry {
  readonly mode: WorkloadMode;
  readonly providers: readonly string[];
  readonly disableSpanReporting: boolean | undefined;
  readonly customTags: Readonly<Record<string, TracingCustomTag>> | undefined;
  readonly randomSamplingPercentage: number | undefined;
  readonly useRequestIdForTraceSampling: boolean | undefined;
  readonly enableIstioTags: boolean | undefined;
  readonly disableContextPropagation: boolean | undefined;
}

/** One `tagOverrides` entry: removed, or set to an expression's value. */
export interface TagOverride {
  readonly remove: boolean;
  readonly value: CelExpression | undefined;
}

export interface MetricsOverride {
  /** Istio metric names (`REQUEST_COUNT`, ...), every one for ALL_METRICS / no match; a custom metric's name. */
  readonly metrics: readonly string[];
  readonly allMetrics: boolean;
  readonly mode: WorkloadMode;
  readonly disabled: boolean | undefined;
  readonly tagOverrides: Readonly<Record<string, TagOverride>>;
}

export interface MetricsEntry {
  readonly providers: readonly string[];
  readonly overrides: readonly MetricsOverride[];
}

export interface AccessLoggingEntry {
  readonly mode: WorkloadMode;
  readonly providers: readonly string[];
  readonly disabled: boolean | undefined;
  readonly filter: CelExpression | undefined;
}

/** A validated Telemetry. */
export interface Telemetry {
  readonly ref: string;
  readonly name: string;
  readonly namespace: string;
  /** `metadata.creationTimestamp` ('' when absent): namespace-wide resources are taken oldest first. */
  readonly created: string;
  readonly hasSelector: boolean;
  readonly targetRefs: readonly TelemetryTargetRef[];
  readonly tracing: readonly TracingEntry[];
  readonly metrics: readonly MetricsEntry[];
  readonly accessLogging: readonly AccessLoggingEntry[];
}

/** Istio's standard metrics (`MetricSelector.IstioMetric`) and their Prometheus names (istio/istio pilot/pkg/model/telemetry.go). */
export const ISTIO_METRICS: Readonly<Record<string, string>> = Object.freeze({
  REQUEST_COUNT: 'istio_requests_total',
  REQUEST_DURATION: 'istio_request_duration_milliseconds',
  REQUEST_SIZE: 'istio_request_bytes',
  RESPONSE_SIZE: 'istio_response_bytes',
  TCP_OPENED_CONNECTIONS: 'istio_tcp_connections_opened_total',
  TCP_CLOSED_CONNECTIONS: 'istio_tcp_connections_closed_total',
  TCP_SENT_BYTES: 'istio_tcp_sent_bytes_total',
  TCP_RECEIVED_BYTES: 'istio_tcp_received_bytes_total',
  GRPC_REQUEST_MESSAGES: 'istio_request_messages_total',
  GRPC_RESPONSE_MESSAGES: 'istio_response_messages_total',
});

const show = (v: unknown): string => (v === undefined ? 'nothing' : JSON.stringify(v));
const mapping = <T extends z.ZodRawShape>(shape: T) =>
  z.strictObject(shape, {
    error: (iss) => (iss.code === 'unrecognized_keys' ? `unknown field${iss.keys.length > 1 ? 's' : ''} ${iss.keys.map((k) => JSON.stringify(k)).join(', ')}` : `must be a mapping, got ${show(iss.input)}`),
  });
const text = z.string({ error: (iss) => (iss.input === undefined ? 'is required' : `must be a string, got ${show(iss.input)}`) });
const flag = z.boolean({ error: (iss) => `must be true or false, got ${show(iss.input)}` }).nullish();
const mode = mapping({ mode: z.enum(['CLIENT', 'SERVER', 'CLIENT_AND_SERVER'], { error: (iss) => `must be CLIENT, SERVER or CLIENT_AND_SERVER, got ${show(iss.input)}` }).nullish() }).nullish();
const providers = z.array(mapping({ name: text.min(1, { error: 'providers.name may not be empty' }) }), { error: 'must be a list of {name: ...}' }).nullish();
const targetRef = mapping({ group: z.string().nullish(), kind: text, name: text, namespace: z.string().nullish(), sectionName: z.string().nullish() });
const tagValue = mapping({ value: z.string().nullish(), name: z.string().nullish(), defaultValue: z.string().nullish() });

const TelemetrySchema = z.looseObject({
  metadata: z.looseObject({ creationTimestamp: z.unknown().optional() }).optional(),
  spec: mapping({
    selector: mapping({ matchLabels: z.record(z.string(), z.string()).nullish() }).nullish(),
    targetRef: targetRef.nullish(),
    targetRefs: z.array(targetRef).nullish(),
    tracing: z
      .array(
        mapping({
          match: mode,
          providers,
          customTags: z.record(z.string(), mapping({ literal: tagValue.nullish(), environment: tagValue.nullish(), header: tagValue.nullish(), formatter: tagValue.nullish() })).nullish(),
          disableSpanReporting: flag,
          randomSamplingPercentage: z.number({ error: (iss) => `must be a number, got ${show(iss.input)}` }).min(0, { error: 'randomSamplingPercentage must be in range [0.0, 100.0]' }).max(100, { error: 'randomSamplingPercentage must be in range [0.0, 100.0]' }).nullish(),
          useRequestIdForTraceSampling: flag,
          enableIstioTags: flag,
          disableContextPropagation: flag,
        }),
      )
      .nullish(),
    metrics: z
      .array(
        mapping({
          providers,
          overrides: z
            .array(
              mapping({
                match: mapping({
                  metric: z.enum(['ALL_METRICS', ...Object.keys(ISTIO_METRICS)] as [string, ...string[]], { error: (iss) => `must be ALL_METRICS or one of ${Object.keys(ISTIO_METRICS).join(', ')}, got ${show(iss.input)}` }).nullish(),
                  customMetric: z.string().nullish(),
                  mode: z.enum(['CLIENT', 'SERVER', 'CLIENT_AND_SERVER']).nullish(),
                }).nullish(),
                disabled: flag,
                tagOverrides: z.record(z.string(), mapping({ operation: z.enum(['UPSERT', 'REMOVE']).nullish(), value: z.string().nullish() })).nullish(),
              }),
            )
            .nullish(),
          reportingInterval: z.string().nullish(),
        }),
      )
      .nullish(),
    accessLogging: z.array(mapping({ match: mode, providers, disabled: flag, filter: mapping({ expression: z.string().nullish() }).nullish() })).nullish(),
  }).nullish(),
});

const LABEL_NAME = /^[a-zA-Z_][a-zA-Z0-9_]*$/;
const opt = <T>(v: T | null | undefined): T | undefined => (v === null ? undefined : v);

/**
 * Parse and validate one Telemetry; `known` says whether MeshConfig defines a provider name
 * (`names` lists them for the message). @throws ConfigError naming the object and field.
 */
export function parseTelemetry(resource: KeptResource, known: (provider: string) => boolean = () => true, names: readonly string[] = []): Telemetry {
  const ref = `Telemetry/${resource.namespace}/${resource.name}`;
  const fail = (path: FieldPath, message: string): never => {
    throw new ConfigError(message, locateField(resource, ref, path));
  };
  const parsed = TelemetrySchema.safeParse(resource.object);
  if (!parsed.success) {
    const issue = parsed.error.issues[0];
    fail(
      issue.path.filter((p): p is string | number => typeof p !== 'symbol'),
      issue.message,
    );
  }
  const spec = parsed.data!.spec ?? {};
  const refs = [...(spec.targetRefs ?? []), ...(spec.targetRef ? [spec.targetRef] : [])];
  if ([spec.selector != null, spec.targetRef != null, (spec.targetRefs?.length ?? 0) > 0].filter(Boolean).length > 1) {
    fail(['spec'], 'only one of targetRefs or workloadSelector can be set');
  }
  const cel = (path: FieldPath, expr: string, types: readonly ('bool' | 'string' | 'int')[]): CelExpression => {
    try {
      return compileCel(expr, types);
    } catch (err) {
      return fail(path, err instanceof CelCompileError ? err.message : String(err));
    }
  };
  const providerNames = (list: readonly { name: string }[] | null | undefined, at: FieldPath) =>
    Object.freeze(
      (list ?? []).map((p, k) => {
        if (!known(p.name)) fail([...at, 'providers', k, 'name'], `no extensionProviders entry named ${JSON.stringify(p.name)} in MeshConfig (known: ${names.join(', ')})`);
        return p.name;
      }),
    );

  const tracing = (spec.tracing ?? []).map((t, i): TracingEntry => {
    let customTags: Record<string, TracingCustomTag> | undefined;
    for (const [name, tag] of Object.entries(t.customTags ?? {})) {
      const at = ['spec', 'tracing', i, 'customTags', name];
      if (name === '') fail(at, 'tag name may not be empty');
      customTags ??= {};
      if (tag.literal) {
        if (!tag.literal.value) fail([...at, 'literal', 'value'], 'literal tag value may not be empty');
        customTags[name] = { kind: 'literal', value: tag.literal.value! };
      } else if (tag.environment) {
        if (!tag.environment.name) fail([...at, 'environment', 'name'], 'environment tag name may not be empty');
        customTags[name] = { kind: 'environment', name: tag.environment.name!, defaultValue: tag.environment.defaultValue ?? '' };
      } else if (tag.header) {
        if (!tag.header.name) fail([...at, 'header', 'name'], 'header tag name may not be empty');
        customTags[name] = { kind: 'header', name: tag.header.name!.toLowerCase(), defaultValue: tag.header.defaultValue ?? '' };
      } else if (tag.formatter) {
        try {
          customTags[name] = { kind: 'formatter', parts: parseFormat(tag.formatter.value ?? '') };
        } catch (err) {
          fail([...at, 'formatter', 'value'], (err as Error).message);
        }
      } else fail(at, 'needs one of literal, environment, header, formatter');
    }
    return Object.freeze({
      mode: t.match?.mode ?? 'CLIENT_AND_SERVER',
      providers: providerNames(t.providers, ['spec', 'tracing', i]),
      disableSpanReporting: opt(t.disableSpanReporting),
      customTags: customTags && Object.freeze(customTags),
      randomSamplingPercentage: opt(t.randomSamplingPercentage),
      useRequestIdForTraceSampling: opt(t.useRequestIdForTraceSampling),
      enableIstioTags: opt(t.enableIstioTags),
      disableContextPropagation: opt(t.disableContextPropagation),
    });
  });

  const metrics = (spec.metrics ?? []).map((m, i): MetricsEntry => {
    const overrides = (m.overrides ?? []).map((o, j): MetricsOverride => {
      const at = ['spec', 'metrics', i, 'overrides', j];
      const tagOverrides: Record<string, TagOverride> = {};
      for (const [tag, to] of Object.entries(o.tagOverrides ?? {})) {
        const tat = [...at, 'tagOverrides', tag];
        if (!LABEL_NAME.test(tag)) fail(tat, `tag name ${JSON.stringify(tag)} is not a Prometheus label name ([a-zA-Z_][a-zA-Z0-9_]*)`);
        if ((to.operation ?? 'UPSERT') === 'REMOVE') {
          if (to.value) fail([...tat, 'value'], 'tagOverrides.value may only be set when operation is UPSERT');
          tagOverrides[tag] = { remove: true, value: undefined };
        } else {
          if (!to.value) fail([...tat, 'value'], 'tagOverrides.value must be set when operation is UPSERT');
          tagOverrides[tag] = { remove: false, value: cel([...tat, 'value'], to.value!, ['string', 'int']) };
        }
      }
      const match = o.match;
      if (match?.customMetric === '') fail([...at, 'match', 'customMetric'], 'customMetric may not be empty');
      const all = !match || (!match.customMetric && (match.metric ?? 'ALL_METRICS') === 'ALL_METRICS');
      return Object.freeze({
        metrics: Object.freeze(match?.customMetric ? [match.customMetric] : all ? Object.keys(ISTIO_METRICS) : [match!.metric!]),
        allMetrics: all,
        mode: match?.mode ?? 'CLIENT_AND_SERVER',
        disabled: opt(o.disabled),
        tagOverrides: Object.freeze(tagOverrides),
      });
    });
    return Object.freeze({ providers: providerNames(m.providers, ['spec', 'metrics', i]), overrides: Object.freeze(overrides) });
  });

  const accessLogging = (spec.accessLogging ?? []).map((l, i): AccessLoggingEntry => {
    const expr = l.filter?.expression;
    return Object.freeze({
      mode: l.match?.mode ?? 'CLIENT_AND_SERVER',
      providers: providerNames(l.providers, ['spec', 'accessLogging', i]),
      disabled: opt(l.disabled),
      filter: expr ? cel(['spec', 'accessLogging', i, 'filter', 'expression'], expr, ['bool']) : undefined,
    });
  });

  const created = parsed.data!.metadata?.creationTimestamp;
  return Object.freeze({
    ref,
    name: resource.name,
    namespace: resource.namespace,
    created: created instanceof Date ? created.toISOString() : typeof created === 'string' ? created : '',
    hasSelector: spec.selector != null,
    targetRefs: Object.freeze(refs.map((r) => Object.freeze({ group: r.group ?? '', kind: r.kind, name: r.name, namespace: r.namespace ?? '' }))),
    tracing: Object.freeze(tracing),
    metrics: Object.freeze(metrics),
    accessLogging: Object.freeze(accessLogging),
  });
}
