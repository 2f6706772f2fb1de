/**
 * IPC messages between the orchestrator (run.ts) and the load generator process (load.ts).
 * Every command carries an `id`; the load process answers with `result` or `error` of that id,
 * and sends `mark` messages (`start` / `end`) around the measured window so the orchestrator can
 * snapshot /proc exactly there.
 */

export interface SaturateCommand {
  readonly type: 'saturate';
  readonly id: number;
  readonly url: string;
  readonly connections: number;
  readonly warmupS: number;
  readonly durationS: number;
}

export interface RateCommand {
  readonly type: 'rate';
  readonly id: number;
  readonly url: string;
  readonly rate: number;
  readonly connections: number;
  readonly warmupS: number;
  readonly durationS: number;
  readonly bodyBytes: number;
}

export interface WarmCommand {
  readonly type: 'warm';
  readonly id: number;
  readonly url: string;
  readonly requests: number;
  readonly concurrency: number;
}

export interface IdleOpenCommand {
  readonly type: 'idle-open';
  readonly id: number;
  readonly host: string;
  readonly port: number;
  readonly count: number;
  readonly concurrency: number;
}

export interface IdleCloseCommand {
  readonly type: 'idle-close';
  readonly id: number;
}

export type LoadCommand = SaturateCommand | RateCommand | WarmCommand | IdleOpenCommand | IdleCloseCommand;

export interface SaturateResult {
  readonly requests: number;
  readonly durationS: number;
  readonly reqPerSec: number;
  readonly errors: number;
  readonly timeouts: number;
  readonly non2xx: number;
  readonly resets: number;
  readonly statusCodes: Record<string, number>;
  /** autocannon's own latency (1 ms resolution): only for orientation. */
  readonly latencyMs: { readonly p50: number; readonly p99: number; readonly max: number };
}

export interface RateResult {
  readonly targetRps: number;
  readonly sent: number;
  readonly completed: number;
  readonly achievedRps: number;
  readonly durationS: number;
  readonly errors: number;
  readonly badResponses: number;
  readonly errorSamples: string[];
  /** Latency from dispatch to the last response byte, µs. */
  readonly latencyUs: { readonly p50: number; readonly p90: number; readonly p95: number; readonly p99: number; readonly p999: number; readonly max: number; readonly mean: number };
  /** Requests slower than 1 ms and 10 ms. */
  readonly over1ms: number;
  readonly over10ms: number;
  readonly connectionsUsed: number;
  readonly maxInFlight: number;
}

export interface WarmResult {
  readonly ok: number;
  readonly failed: number;
  readonly errorSamples: string[];
}

export interface IdleOpenResult {
  readonly requested: number;
  readonly opened: number;
  readonly failed: number;
  readonly openMs: number;
  readonly errorSamples: string[];
}

export interface IdleCloseResult {
  /** Sockets that were still open when asked to close (the others closed by themselves). */
  readonly stillOpen: number;
  readonly closedEarly: number;
}

export type LoadMessage =
  | { readonly type: 'ready' }
  | { readonly type: 'mark'; readonly id: number; readonly name: 'start' | 'end' }
  | { readonly type: 'result'; readonly id: number; readonly result: unknown }
  | { readonly type: 'error'; readonly id: number; readonly message: string };
