/**
 * Whether a request's span is sampled, as Envoy decides it for a waypoint (envoyproxy/envoy
 * source/common/http/conn_manager_utility.cc `mutateTracingRequestHeader`, Istio setting
 * `client_sampling` and `overall_sampling` to 100%):
 *
 * 1. a parent context that carries a decision (W3C flags, B3 sampled/debug) decides: an incoming
 *    sampled request is traced, an unsampled one is not;
 * 2. else `x-client-trace-id` or `x-envoy-force-trace` traces it;
 * 3. else random sampling at the target's percentage, stable per request id: the first 8 hex
 *    digits of a UUID `x-request-id` modulo 10000 against percentage × 100 (envoyproxy/envoy
 *    source/extensions/request_id/uuid/config.cc `getInteger`), so every hop that sees the same
 *    request id decides alike; a random number without one (or with
 *    `useRequestIdForTraceSampling: false`).
 *
 * Also the percentage an OpenTelemetry SDK would sample at from `OTEL_TRACES_SAMPLER` /
 * `OTEL_TRACES_SAMPLER_ARG`, used for the environment-configured collector.
 */
import { TraceFlags } from '@opentelemetry/api';
import type { HeaderList } from '../pipeline/index.ts';
import type { IncomingContext } from './propagation.ts';

/** Istio's `PILOT_TRACE_SAMPLING` default (percent). */
export const DEFAULT_SAMPLING_PERCENT = 1;

const HEX8 = /^[0-9a-fA-F]{8}/;

/** See the module comment. `percent` in [0, 100]. */
export function sampleRequest(incoming: IncomingContext | undefined, headers: HeaderList, requestId: string, percent: number, useRequestId: boolean): boolean {
  if (incoming !== undefined && !incoming.deferred) return (incoming.parent.traceFlags & TraceFlags.SAMPLED) !== 0;
  if (headers.get('x-client-trace-id') !== undefined || headers.get('x-envoy-force-trace') !== undefined) return true;
  if (percent >= 100) return true;
  if (percent <= 0) return false;
  const stable = useRequestId && HEX8.test(requestId) ? parseInt(requestId.slice(0, 8), 16) : Math.floor(Math.random() * 0x1_0000_0000);
  return stable % 10000 < Math.round(percent * 100);
}

/**
 * The sampling percentage `OTEL_TRACES_SAMPLER` (and `_ARG`) ask for (opentelemetry-specification
 * sdk-environment-variables.md); undefined when unset or not one of the standard samplers.
 * Parent-based samplers map to their root sampler: the parent's decision always wins here.
 */
export function envSamplingPercent(env: NodeJS.ProcessEnv): number | undefined {
  const sampler = env.OTEL_TRACES_SAMPLER?.trim().toLowerCase();
  if (!sampler) return undefined;
  const ratio = () => {
    const r = Number(env.OTEL_TRACES_SAMPLER_ARG ?? '1');
    return Number.isFinite(r) && r >= 0 && r <= 1 ? r * 100 : 100;
  };
  switch (sampler) {
    case 'always_on':
    case 'parentbased_always_on':
      return 100;
    case 'always_off':
    case 'parentbased_always_off':
      return 0;
    case 'traceidratio':
    case 'parentbased_traceidratio':
      return ratio();
    default:
      return undefined;
  }
}
