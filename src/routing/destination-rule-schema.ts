/**
 * The shape of a `networking.istio.io` DestinationRule (istio/api
 * networking/v1alpha3/destination_rule.proto; served as v1, v1beta1 and v1alpha3), as zod schemas.
 * Every field of the proto is known; fields this waypoint does not act on (`tls`, `tunnel`,
 * `proxyProtocol`, `warmup`, `localityLbSetting`, …) are type-checked and ignored, as a waypoint
 * without them would. An unknown field is refused by name (`unknown field "maxConnectons"`), as the
 * CRD's structural schema (`preserveUnknownFields: false`) and `kubectl --validate=strict` refuse
 * it. Integers are range-checked by their proto type: int32 (`maxConnections`, `http2MaxRequests`,
 * `maxEjectionPercent`, …) to -2^31..2^31-1, uint32 and `google.protobuf.UInt32Value`
 * (`consecutive5xxErrors`, …) to 0..2^32-1 with the API server's wording for the CRD's
 * `minimum`/`maximum`, uint64 to non-negative. `null` is accepted wherever a field is optional
 * (YAML `trafficPolicy:` with nothing after it).
 *
 * Semantic checks (Istio's admission validation) are in `destination-rule.ts`.
 */
import { z } from 'zod';

const show = (v: unknown): string => (v === undefined ? 'nothing' : JSON.stringify(v));

const text = () => z.string({ error: (iss) => (iss.input === undefined ? 'is required' : `must be a string, got ${show(iss.input)}`) });

const bool = () => z.boolean({ error: (iss) => `must be true or false, got ${show(iss.input)}` });

const notInteger = (iss: { input?: unknown }) => `must be an integer, got ${show(iss.input)}`;

const INT32_MIN = -(2 ** 31);
const INT32_MAX = 2 ** 31 - 1;
const UINT32_MAX = 2 ** 32 - 1;

/**
 * protobuf int32. Negative values pass here and are refused by validation with Istio's message
 * (`http2 max requests must be non-negative`); beyond int32 is refused with protojson's wording
 * (google.golang.org/protobuf/encoding/protojson `invalid value for int32 field`).
 */
const int32 = () =>
  z
    .number({ error: notInteger })
    .int({ error: notInteger })
    .min(INT32_MIN, { error: (iss) => `invalid value for int32 field: ${show(iss.input)} (an int32 is at least ${INT32_MIN})` })
    .max(INT32_MAX, { error: (iss) => `invalid value for int32 field: ${show(iss.input)} (an int32 is at most ${INT32_MAX})` });

/**
 * protobuf uint32 and `google.protobuf.UInt32Value`: the CRD gives them `minimum: 0` and
 * `maximum: 4294967295`, refused with the API server's wording.
 */
const uint32 = () =>
  z
    .number({ error: notInteger })
    .int({ error: notInteger })
    .min(0, { error: () => 'should be greater than or equal to 0' })
    .max(UINT32_MAX, { error: () => `should be less than or equal to ${UINT32_MAX}` });

/** protobuf uint64: a non-negative integer, or a string of digits (protojson's form for 64-bit integers). */
const uint64 = () => {
  const error = (iss: { input?: unknown }) => `must be a non-negative integer, got ${show(iss.input)}`;
  return z.union([z.number().int({ error }).min(0, { error }).max(Number.MAX_SAFE_INTEGER, { error }), z.string().regex(/^\d{1,15}$/).transform(Number)], { error });
};

/** protobuf double / `google.protobuf.DoubleValue`. */
const double = () => z.number({ error: (iss) => `must be a number, got ${show(iss.input)}` });

/** A google.protobuf.Duration as written in Istio YAML (`10s`, `1m30s`, `250ms`, `0.5s`); checked by validation. */
const duration = () => text().nullish();

/** A protobuf enum by name. */
const enumOf = <const T extends readonly [string, ...string[]]>(values: T) =>
  z.enum(values, { error: (iss) => `must be one of ${values.join(', ')}, got ${show(iss.input)}` });

/** A mapping's error: an unknown field by name (the path is the mapping), else the wrong type. */
const mappingError = (iss: { code?: string; keys?: readonly string[]; input?: unknown }): string =>
  iss.code === 'unrecognized_keys' ? `unknown field ${JSON.stringify(iss.keys?.[0])}` : `must be a mapping, got ${show(iss.input)}`;

/** A proto message: only its own fields. */
const message = <T extends z.ZodRawShape>(shape: T) => z.strictObject(shape, { error: mappingError });

const mapping = <T extends z.ZodRawShape>(shape: T) => message(shape).nullish();

const list = <T extends z.ZodType>(item: T) => z.array(item, { error: (iss) => `must be a list, got ${show(iss.input)}` }).nullish();

const HttpCookieSchema = mapping({
  name: text().nullish(),
  path: text().nullish(),
  ttl: duration(),
  attributes: list(message({ name: text().nullish(), value: text().nullish() })),
});

export const ConsistentHashSchema = mapping({
  httpHeaderName: text().nullish(),
  httpCookie: HttpCookieSchema,
  useSourceIp: bool().nullish(),
  httpQueryParameterName: text().nullish(),
  ringHash: mapping({ minimumRingSize: uint64().nullish() }),
  maglev: mapping({ tableSize: uint64().nullish() }),
  minimumRingSize: uint64().nullish(),
});
export type ConsistentHashDoc = NonNullable<z.output<typeof ConsistentHashSchema>>;

export const SIMPLE_LB = ['UNSPECIFIED', 'LEAST_CONN', 'RANDOM', 'PASSTHROUGH', 'ROUND_ROBIN', 'LEAST_REQUEST'] as const;

const LocalityLbSettingSchema = mapping({
  distribute: list(message({ from: text().nullish(), to: z.record(z.string(), uint32()).nullish() })),
  failover: list(message({ from: text().nullish(), to: text().nullish() })),
  failoverPriority: list(text()),
  enabled: bool().nullish(),
});

export const LoadBalancerSchema = mapping({
  simple: enumOf(SIMPLE_LB).nullish(),
  consistentHash: ConsistentHashSchema,
  localityLbSetting: LocalityLbSettingSchema,
  warmupDurationSecs: duration(),
  warmup: mapping({ duration: duration(), minimumPercent: double().nullish(), aggression: double().nullish() }),
});
export type LoadBalancerDoc = NonNullable<z.output<typeof LoadBalancerSchema>>;

export const H2_UPGRADE_POLICY = ['DEFAULT', 'DO_NOT_UPGRADE', 'UPGRADE'] as const;

export const ConnectionPoolSchema = mapping({
  tcp: mapping({
    maxConnections: int32().nullish(),
    connectTimeout: duration(),
    tcpKeepalive: mapping({ probes: uint32().nullish(), time: duration(), interval: duration() }),
    maxConnectionDuration: duration(),
    idleTimeout: duration(),
  }),
  http: mapping({
    http1MaxPendingRequests: int32().nullish(),
    http2MaxRequests: int32().nullish(),
    maxRequestsPerConnection: int32().nullish(),
    maxRetries: int32().nullish(),
    idleTimeout: duration(),
    h2UpgradePolicy: enumOf(H2_UPGRADE_POLICY).nullish(),
    useClientProtocol: bool().nullish(),
    maxConcurrentStreams: int32().nullish(),
  }),
});
export type ConnectionPoolDoc = NonNullable<z.output<typeof ConnectionPoolSchema>>;

export const OutlierDetectionSchema = mapping({
  consecutiveErrors: int32().nullish(),
  splitExternalLocalOriginErrors: bool().nullish(),
  consecutiveLocalOriginFailures: uint32().nullish(),
  consecutiveGatewayErrors: uint32().nullish(),
  consecutive5xxErrors: uint32().nullish(),
  interval: duration(),
  baseEjectionTime: duration(),
  maxEjectionPercent: int32().nullish(),
  minHealthPercent: int32().nullish(),
});
export type OutlierDetectionDoc = NonNullable<z.output<typeof OutlierDetectionSchema>>;

const ClientTlsSchema = mapping({
  mode: enumOf(['DISABLE', 'SIMPLE', 'MUTUAL', 'ISTIO_MUTUAL']).nullish(),
  clientCertificate: text().nullish(),
  privateKey: text().nullish(),
  caCertificates: text().nullish(),
  credentialName: text().nullish(),
  subjectAltNames: list(text()),
  sni: text().nullish(),
  insecureSkipVerify: bool().nullish(),
  caCrl: text().nullish(),
});

const policyFields = {
  loadBalancer: LoadBalancerSchema,
  connectionPool: ConnectionPoolSchema,
  outlierDetection: OutlierDetectionSchema,
  tls: ClientTlsSchema,
};

export const PortTrafficPolicySchema = message({ port: mapping({ number: uint32().nullish() }), ...policyFields });
export type PortTrafficPolicyDoc = z.output<typeof PortTrafficPolicySchema>;

export const TrafficPolicySchema = mapping({
  ...policyFields,
  portLevelSettings: list(PortTrafficPolicySchema),
  tunnel: mapping({ protocol: text().nullish(), targetHost: text().nullish(), targetPort: uint32().nullish() }),
  proxyProtocol: mapping({ version: enumOf(['V1', 'V2']).nullish() }),
});
export type TrafficPolicyDoc = NonNullable<z.output<typeof TrafficPolicySchema>>;

export const SubsetSchema = message({
  name: text().nullish(),
  labels: z.record(z.string(), z.string({ error: (iss) => `must be a string, got ${show(iss.input)}` })).nullish(),
  trafficPolicy: TrafficPolicySchema,
});
export type SubsetDoc = z.output<typeof SubsetSchema>;

export const DestinationRuleSpecSchema = message({
  host: text(),
  trafficPolicy: TrafficPolicySchema,
  subsets: z.array(SubsetSchema, { error: (iss) => `must be a list, got ${show(iss.input)}` }).nullish(),
  exportTo: z.array(text(), { error: (iss) => `must be a list of namespaces, got ${show(iss.input)}` }).nullish(),
  workloadSelector: mapping({ matchLabels: z.record(z.string(), z.string()).nullish() }),
});
export type DestinationRuleSpecDoc = z.output<typeof DestinationRuleSpecSchema>;
