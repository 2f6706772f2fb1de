/**
 * Configuration of `istio.fault`: Istio's VirtualService `HTTPFaultInjection` (istio/api
 * networking/v1alpha3/virtual_service.proto), which istiod turns into Envoy's `HTTPFault`
 * (envoyproxy/envoy api/envoy/extensions/filters/http/fault/v3/fault.proto):
 *
 * ```yaml
 * config:
 *   delay: { fixedDelay: 2s, percentage: { value: 10 } }      # 10 % of requests wait 2 s
 *   abort: { httpStatus: 503, percentage: { value: 5 } }      # or grpcStatus: UNAVAILABLE (or 14)
 *   maxActiveFaults: 100                                      # optional (Envoy's max_active_faults)
 * ```
 * `percentage` is Istio's `Percent` (`{ value: 0-100 }`, fractions allowed) or a bare number;
 * left out, it is 100 as in Istio.
 */
import { z } from 'zod';
import { parseTtl } from '../../src/identity/index.ts';
import { ConfigError } from '../../src/util/index.ts';

/** gRPC status names (grpc/grpc doc/statuscodes.md), by code. */
const GRPC_CODES = [
  'OK',
  'CANCELLED',
  'UNKNOWN',
  'INVALID_ARGUMENT',
  'DEADLINE_EXCEEDED',
  'NOT_FOUND',
  'ALREADY_EXISTS',
  'PERMISSION_DENIED',
  'RESOURCE_EXHAUSTED',
  'FAILED_PRECONDITION',
  'ABORTED',
  'OUT_OF_RANGE',
  'UNIMPLEMENTED',
  'INTERNAL',
  'UNAVAILABLE',
  'DATA_LOSS',
  'UNAUTHENTICATED',
] as const;

export interface FaultConfig {
  /** Fractions 0..1 of requests delayed / aborted. */
  readonly delay: { readonly ms: number; readonly fraction: number } | undefined;
  readonly abort: { readonly httpStatus: number | undefined; readonly grpcStatus: number | undefined; readonly fraction: number } | undefined;
  readonly maxActiveFaults: number | undefined;
}

const percentage = z
  .union([z.number(), z.strictObject({ value: z.number() })])
  .transform((p) => (typeof p === 'number' ? p : p.value))
  .pipe(z.number().min(0, 'must be between 0 and 100').max(100, 'must be between 0 and 100'))
  .default(100);

const schema = z
  .strictObject({
    delay: z
      .strictObject({
        fixedDelay: z.string().transform((v, ctx) => {
          try {
            return parseTtl(v);
          } catch (err) {
            ctx.addIssue({ code: 'custom', message: (err as Error).message });
            return z.NEVER;
          }
        }),
        percentage,
      })
      .optional(),
    abort: z
      .strictObject({
        httpStatus: z.int().min(200).max(599).optional(),
        grpcStatus: z.union([z.int().min(0).max(16), z.enum(GRPC_CODES)]).optional(),
        percentage,
      })
      .refine((a) => (a.httpStatus === undefined) !== (a.grpcStatus === undefined), 'exactly one of httpStatus and grpcStatus must be set')
      .optional(),
    maxActiveFaults: z.int().min(0).optional(),
  })
  .refine((c) => c.delay !== undefined || c.abort !== undefined, 'at least one of delay and abort must be set');

/**
 * Validate and freeze a config.
 * @throws ConfigError naming the field.
 */
export function parseFaultConfig(raw: unknown): FaultConfig {
  const r = schema.safeParse(raw ?? {});
  if (!r.success) {
    const issue = r.error.issues[0];
    throw new ConfigError(issue.message, { field: issue.path.map(String).join('.') || undefined });
  }
  const { delay, abort, maxActiveFaults } = r.data;
  const grpc = abort?.grpcStatus;
  return Object.freeze({
    delay: delay && Object.freeze({ ms: delay.fixedDelay, fraction: delay.percentage / 100 }),
    abort:
      abort &&
      Object.freeze({
        httpStatus: abort.httpStatus,
        grpcStatus: grpc === undefined ? undefined : typeof grpc === 'number' ? grpc : GRPC_CODES.indexOf(grpc),
        fraction: abort.percentage / 100,
      }),
    maxActiveFaults,
  });
}
