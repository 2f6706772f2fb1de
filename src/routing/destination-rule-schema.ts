/**
 * The shape of a `networking.istio.io` DestinationRule (API:networking/v1alpha3/destination_rule.proto;
 * served as v1, v1beta1 and v1alpha3), as zod schemas for the parts this waypoint reads. Fields
 * it does not act on (`tls`, `tunnel`, `proxyProtocol`, `warmup`, `localityLbSetting`, …) are
 * accepted and ignored, as a waypoint without them would; wrong types are refused. `null` is
 * accepted wherever a field is optional (YAML `trafficPolicy:` with nothing after it).
 *
 * Semantic checks (Istio's admission validation) are in `destination-rule.ts`.
 */
import { z } from 'zod';

const show = (v: unknown): string => (v === undefined ? 'nothing' : JSON.stringify(v));

const text = () => z.string({ error: (iss) => (iss.input === undefined ? 'is required' : `must be a string, got ${show(iss.input)}`) });

/** protobuf int32/uint32: a YAML integer (negative ones are refused by validation, with Istio's message). */
const int = () => z.number({ error: (iss) => `must be an integer, got ${show(iss.input)}` }).int({ error: (iss) => `must be an integer, got ${show(iss.input)}` });

/** protobuf uint64: an integer, or a string of digits (protojson's form for 64-bit integers). */
const uint64 = () =>
  z.union([int(), z.string().regex(/^\d+$/).transform(Number)], { error: (iss) => `must be a non-negative integer, got ${show(iss.input)}` });

/** A google.protobuf.Duration as written in Istio YAML (`10s`, `1m30s`, `250ms`, `0.5s`); checked by validation. */
const duration = () => text().nullish();

const mapping = <T extends z.ZodRawShape>(shape: T) =>
  z.looseObject(shape, { error: (iss) => `must be a mapping, got ${show(iss.input)}` }).nullish();

const HttpCookieSchema = mapping({ name: text().nullish(), path: text().nullish(), ttl: duration() });

export const ConsistentHashSchema = mapping({
  httpHeaderName: text().nullish(),
  httpCookie: HttpCookieSchema,
  useSourceIp: z.boolean({ error: (iss) => `must be true or false, got ${show(iss.input)}` }).nullish(),
  httpQueryParameterName: text().nullish(),
  ringHash: mapping({ minimumRingSize: uint64().nullish() }),
  maglev: mapping({ tableSize: uint64().nullish() }),
  minimumRingSize: uint64().nullish(),
});
export type ConsistentHashDoc = NonNullable<z.output<typeof ConsistentHashSchema>>;

export const SIMPLE_LB = ['UNSPECIFIED', 'LEAST_CONN', 'RANDOM', 'PASSTHROUGH', 'ROUND_ROBIN', 'LEAST_REQUEST'] as const;

export const LoadBalancerSchema = mapping({
  simple: z.enum(SIMPLE_LB, { error: (iss) => `must be one of ${SIMPLE_LB.join(', ')}, got ${show(iss.input)}` }).nullish(),
  consistentHash: ConsistentHashSchema,
});
export type LoadBalancerDoc = NonNullable<z.output<typeof LoadBalancerSchema>>;

export const ConnectionPoolSchema = mapping({
  tcp: mapping({
    maxConnections: int().nullish(),
    connectTimeout: duration(),
    idleTimeout: duration(),
    maxConnectionDuration: duration(),
  }),
  http: mapping({
    http1MaxPendingRequests: int().nullish(),
    http2MaxRequests: int().nullish(),
    maxRequestsPerConnection: int().nullish(),
    maxRetries: int().nullish(),
    idleTimeout: duration(),
    maxConcurrentStreams: int().nullish(),
  }),
});
export type ConnectionPoolDoc = NonNullable<z.output<typeof ConnectionPoolSchema>>;

export const OutlierDetectionSchema = mapping({
  consecutiveErrors: int().nullish(),
  consecutive5xxErrors: int().nullish(),
  consecutiveGatewayErrors: int().nullish(),
  consecutiveLocalOriginFailures: int().nullish(),
  splitExternalLocalOriginErrors: z.boolean().nullish(),
  interval: duration(),
  baseEjectionTime: duration(),
  maxEjectionPercent: int().nullish(),
  minHealthPercent: int().nullish(),
});
export type OutlierDetectionDoc = NonNullable<z.output<typeof OutlierDetectionSchema>>;

const policyFields = {
  loadBalancer: LoadBalancerSchema,
  connectionPool: ConnectionPoolSchema,
  outlierDetection: OutlierDetectionSchema,
};

export const PortTrafficPolicySchema = z.looseObject(
  { port: mapping({ number: int().nullish() }), ...policyFields },
  { error: (iss) => `must be a mapping, got ${show(iss.input)}` },
);
export type PortTrafficPolicyDoc = z.output<typeof PortTrafficPolicySchema>;

export const TrafficPolicySchema = mapping({
  ...policyFields,
  portLevelSettings: z.array(PortTrafficPolicySchema, { error: (iss) => `must be a list, got ${show(iss.input)}` }).nullish(),
});
export type TrafficPolicyDoc = NonNullable<z.output<typeof TrafficPolicySchema>>;

export const SubsetSchema = z.looseObject(
  {
    name: text().nullish(),
    labels: z.record(z.string(), z.string({ error: (iss) => `must be a string, got ${show(iss.input)}` })).nullish(),
    trafficPolicy: TrafficPolicySchema,
  },
  { error: (iss) => `must be a mapping, got ${show(iss.input)}` },
);
export type SubsetDoc = z.output<typeof SubsetSchema>;

export const DestinationRuleSpecSchema = z.looseObject(
  {
    host: text(),
    trafficPolicy: TrafficPolicySchema,
    subsets: z.array(SubsetSchema, { error: (iss) => `must be a list, got ${show(iss.input)}` }).nullish(),
    exportTo: z.array(text(), { error: (iss) => `must be a list of namespaces, got ${show(iss.input)}` }).nullish(),
    workloadSelector: mapping({ matchLabels: z.record(z.string(), z.string()).nullish() }),
  },
  { error: (iss) => `must be a mapping, got ${show(iss.input)}` },
);
export type DestinationRuleSpecDoc = z.output<typeof DestinationRuleSpecSchema>;
