/**
 * `istio.fault`: Envoy's HTTP fault injection filter (envoyproxy/envoy
 * source/extensions/filters/http/fault/fault_filter.cc) with Istio's VirtualService fault config
 * (config.ts), attached per Gateway, Service or route rule by a WaypointFilter, also from an
 * HTTPRoute rule's `ExtensionRef` filter naming one.
 *
 * Per request, as Envoy: with probability `delay.percentage` the request waits `fixedDelay` (flag
 * `DI`), then with probability `abort.percentage` it is answered locally, `fault filter abort`,
 * details `fault_filter_abort`, flag `FI`: with `httpStatus` that status (gRPC requests get it
 * mapped to grpc-status, as every local reply), with `grpcStatus` HTTP 200 carrying that
 * grpc-status (Envoy's rule; non-gRPC requests then get a plain 200). A client gone during the delay
 * ends the wait. `maxActiveFaults` caps the requests being faulted at once (further ones pass,
 * counted in `faults_overflow`).
 *
 * Counters (`/stats/prometheus`), Envoy's `http.<prefix>.fault.*`: `envoy_http_fault_delays_injected`,
 * `_aborts_injected`, `_faults_overflow`, and the gauge `envoy_http_fault_active_faults`, labelled
 * `envoy_http_conn_manager_prefix` (the service's `inbound-vip|…` chain).
 */
import { Counter, Gauge, type Registry } from 'prom-client';
import {
  defineSlot,
  FilterStatus,
  grpcMessageEncode,
  HeaderList,
  respond,
  ResponseFlag,
  sendLocalReply,
  type Filter,
  type FilterFactory,
  type PhaseResult,
  type StreamContext,
} from '../../src/pipeline/index.ts';
import { parseFaultConfig, type FaultConfig } from './config.ts';

export const FAULT_FILTER_NAME = 'istio.fault';
export { parseFaultConfig, type FaultConfig } from './config.ts';

const ABORT_BODY = 'fault filter abort';
const ABORT_DETAILS = 'fault_filter_abort';
const HCM = 'envoy_http_conn_manager_prefix';

/** The fault filter instance holding a fault on this stream (one active fault per filter, as Envoy counts). */
const ACTIVE = defineSlot<FaultFilter>('istio.fault.active', 'stream');

interface Instruments {
  delays: Counter<string>;
  aborts: Counter<string>;
  overflow: Counter<string>;
  active: Gauge<string>;
}

function instrumentsFor(registry: Registry): Instruments {
  const counter = (stat: string) =>
    (registry.getSingleMetric(`envoy_http_fault_${stat}`) as Counter<string> | undefined) ??
    new Counter({ name: `envoy_http_fault_${stat}`, help: `Envoy's http.<prefix>.fault.${stat}`, labelNames: [HCM], registers: [registry] });
  const active =
    (registry.getSingleMetric('envoy_http_fault_active_faults') as Gauge<string> | undefined) ??
    new Gauge({ name: 'envoy_http_fault_active_faults', help: "Envoy's http.<prefix>.fault.active_faults", labelNames: [HCM], registers: [registry] });
  return { delays: counter('delays_injected'), aborts: counter('aborts_injected'), overflow: counter('faults_overflow'), active };
}

class FaultFilter implements Filter {
  readonly name = FAULT_FILTER_NAME;
  private readonly config: FaultConfig;
  private readonly stats: Instruments;
  private readonly random: () => number;
  /** Requests this instance is faulting now (Envoy's `active_faults`, per filter config). */
  private active = 0;

  constructor(config: FaultConfig, stats: Instruments, random: () => number) {
    this.config = config;
    this.stats = stats;
    this.random = random;
  }

  onRequestHeaders(stream: StreamContext): PhaseResult {
    const { delay } = this.config;
    if (delay && delay.ms > 0 && this.chosen(delay.fraction) && this.startFault(stream)) {
      this.stats.delays.labels(stream.statPrefix).inc();
      stream.addFlag(ResponseFlag.DelayInjected);
      return new Promise((resolve) => {
        const res = stream.res;
        const gone = () => {
          clearTimeout(timer);
          resolve(FilterStatus.StopAndReply);
        };
        const timer = setTimeout(() => {
          res.off('close', gone);
          // Envoy rolls the abort after the delay.
          resolve(this.maybeAbort(stream));
        }, delay.ms);
        res.once('close', gone);
      });
    }
    return this.maybeAbort(stream);
  }

  onStreamComplete(stream: StreamContext): void {
    if (stream.get(ACTIVE) !== this) return;
    this.active--;
    this.stats.active.labels(stream.statPrefix).dec();
  }

  private chosen(fraction: number): boolean {
    return fraction >= 1 || (fraction > 0 && this.random() < fraction);
  }

  /** Count the stream as faulted (once per filter); false when `maxActiveFaults` is reached. */
  private startFault(stream: StreamContext): boolean {
    if (stream.get(ACTIVE) === this) return true;
    const max = this.config.maxActiveFaults;
    if (max !== undefined && this.active >= max) {
      this.stats.overflow.labels(stream.statPrefix).inc();
      return false;
    }
    this.active++;
    this.stats.active.labels(stream.statPrefix).inc();
    stream.set(ACTIVE, this);
    return true;
  }

  private maybeAbort(stream: StreamContext): FilterStatus {
    const { abort } = this.config;
    if (!abort || !this.chosen(abort.fraction) || !this.startFault(stream)) return FilterStatus.Continue;
    this.stats.aborts.labels(stream.statPrefix).inc();
    if (abort.httpStatus !== undefined) {
      sendLocalReply(stream, abort.httpStatus, ABORT_BODY, ResponseFlag.FaultInjected, ABORT_DETAILS);
      return FilterStatus.StopAndReply;
    }
    abortWithGrpcStatus(stream, abort.grpcStatus!);
    return FilterStatus.StopAndReply;
  }
}

/**
 * HTTP 200 with the configured grpc-status (Envoy's `sendLocalReply` with a gRPC status): gRPC
 * requests get it in trailers with the text as grpc-message, others the text as a plain body.
 */
function abortWithGrpcStatus(stream: StreamContext, code: number): void {
  stream.addFlag(ResponseFlag.FaultInjected);
  stream.responseCodeDetails = ABORT_DETAILS;
  if (!stream.isGrpc) {
    sendLocalReply(stream, 200, ABORT_BODY, ResponseFlag.None, ABORT_DETAILS);
    return;
  }
  if (!respond(stream, 200, undefined, new HeaderList(['content-type', 'application/grpc']))) return;
  stream.grpcStatus = String(code);
  stream.res.addTrailers({ 'grpc-status': String(code), 'grpc-message': grpcMessageEncode(ABORT_BODY) });
  stream.res.end();
}

/** The fault filter's factory, drawing from `random` (tests seed it; default `Math.random`). */
export function faultFactoryWith(random: () => number): FilterFactory<FaultConfig> {
  return {
    name: FAULT_FILTER_NAME,
    parseConfig: parseFaultConfig,
    create: (config, env) => new FaultFilter(config, instrumentsFor(env.metrics), random),
  };
}

/** `istio.fault`'s factory. */
export const faultFactory: FilterFactory<FaultConfig> = faultFactoryWith(Math.random);
