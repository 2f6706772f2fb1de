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

/**
 * A closed-loop run (the loadtest engine): `connections` × `streams` workers, each with one request in
 * flight at a time, for `warmupS` then `durationS` (marks around the measured window). One probe
 * request first: if it fails, nothing runs and the result says why (`probeError`).
 *
 *  - h1:   one undici Client per connection, `streams` must be 1 (no pipelining), `GET path`;
 *  - h2:   one Node http2 session (h2c, prior knowledge) per connection, `streams` concurrent `GET path`;
 *  - grpc: one h2c session per connection, `streams` concurrent unary calls (`path` is the method) of `bodyBytes`.
 */
export interface ClosedCommand {
  readonly type: 'closed';
  readonly id: number;
  readonly proto: 'h1' | 'h2' | 'grpc';
  readonly host: string;
  readonly port: number;
  readonly connections: number;
  readonly streams: number;
  /** h1/h2: request path (`/bytes/<n>`); `expectBytes` is the response size to check. */
  readonly path: string;
  readonly expectBytes: number;
  /** grpc: payload bytes of each call (echoed back). */
  readonly bodyBytes: number;
  readonly warmupS: number;
  readonly durationS: number;
}

export type LoadCommand = SaturateCommand | RateCommand | WarmCommand | IdleOpenCommand | IdleCloseCommand | ClosedCommand;

export interface ClosedResult {
  /** Why the probe request failed (nothing was measured then), else null. */
  readonly probeError: string | null;
  /** Requests completed (successfully or not) in the measured window. */
  readonly requests: number;
  readonly durationS: number;
  readonly reqPerSec: number;
  readonly errors: number;
  readonly badResponses: number;
  readonly errorSamples: string[];
  /** Latency of the successful requests of the window, request start to last response byte (µs). */
  readonly latencyUs: { readonly p50: number; readonly p90: number; readonly p99: number; readonly max: number; readonly mean: number };
  /** Workers (requests in flight) and connections that served at least one request. */
  readonly inFlight: number;
  readonly connectionsUsed: number;
  /** h2/grpc: the HTTP/2 peer window the backend saw on the probe (backend-wire.ts), else null. */
  readonly peerWindow: number | null;
}

export interface SaturateResult {
  readonly requests: number;
  readonly durationS: number;
  readonly reqPerSec: number;
  readonly errors: number;
  readonly timeouts: number;
  readonly non2xx: number;
  readonly resets: number;
  readonly statusCodes: Record<string, number>;
  /** Latency in ms (the same figures as `latencyUs`; kept for tools that read the older shape). */
  readonly latencyMs: { readonly p50: number; readonly p99: number; readonly max: number };
  /** Request start to last response byte, µs. */
  readonly latencyUs: { readonly p50: number; readonly p90: number; readonly p99: number; readonly max: number; readonly mean: number };
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
  /** Latency from when each request was sent to its last response byte, µs (blind to queueing in the generator). */
  readonly latencyUs: RatePercentiles;
  /** Latency from when each request was due in the schedule (corrected for coordinated omission), µs. */
  readonly latencyCorrectedUs: RatePercentiles;
  /** Requests slower than 1 ms and 10 ms. */
  readonly over1ms: number;
  readonly over10ms: number;
  readonly connectionsUsed: number;
  readonly maxInFlight: number;
  /** Most requests due at once while every connection was busy. */
  readonly maxQueued: number;
}

export interface RatePercentiles {
  readonly p50: number;
  readonly p90: number;
  readonly p95: number;
  readonly p99: number;
  readonly p999: number;
  readonly max: number;
  readonly mean: number;
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
