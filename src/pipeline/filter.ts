/**
 * The filter API: what a filter may implement and how the chain calls it. Filters see only the
 * filter API (src/pipeline/index.ts: this module, the contexts, header lists, slots, local
 * replies), mesh snapshots, engine entries and their factory environment; never the listener or
 * the upstream pool. Modelled on Envoy's HTTP filters and Pingora's phases (filters/README.md).
 *
 * Every phase is optional; the chain keeps one array per phase holding only the filters that
 * implement it, so an unused phase costs nothing. A phase returns {@link FilterStatus} directly
 * when it finishes synchronously and a promise only when it must wait (the runner awaits only
 * thenables).
 */
import type { Logger } from 'pino';
import type { Registry } from 'prom-client';
import type { MeshSnapshot } from '../state/index.ts';
import type { ConnectionContext, StreamContext } from './context.ts';
import type { HeaderList } from './headers.ts';

/** What a request phase tells the chain. */
export const FilterStatus = {
  /** Run the next filter. */
  Continue: 0,
  /** The filter already answered (`sendLocalReply(stream, ...)`, or `conn.reject` for a tunnel): stop the request phases. */
  StopAndReply: 1,
} as const;
/** A value of {@link FilterStatus}. */
export type FilterStatus = (typeof FilterStatus)[keyof typeof FilterStatus];

/** A phase result: synchronous when possible. */
export type PhaseResult = FilterStatus | Promise<FilterStatus>;

/** One filter instance: a singleton per chain, stateless per request (state goes in slots). */
export interface Filter {
  readonly name: string;
  /**
   * Once per HBONE tunnel (CONNECT stream), before the CONNECT is answered; configuration order.
   * Return StopAndReply after `conn.reject(status)` to refuse the tunnel (e.g. an L4 deny).
   */
  onConnection?(conn: ConnectionContext): PhaseResult;
  /**
   * TCP tunnels only: the upstream connection to `conn.endpoint` is open and bytes are about to be
   * relayed (Envoy's tcp_proxy upstream connected); configuration order. Must not throw.
   */
  onUpstreamConnected?(conn: ConnectionContext): void;
  /**
   * Request headers of one inner HTTP request arrived (the connection manager's checks passed);
   * configuration order. `stream.requestHeaders` is the request's header list: edit it here and
   * later filters, the router's route match and the upstream request see the change. To answer,
   * call `sendLocalReply(stream, ...)` (local-reply.ts) and return StopAndReply.
   */
  onRequestHeaders?(stream: StreamContext): PhaseResult;
  /**
   * The upstream request is about to be sent (once, before the first attempt): `headers` are what
   * goes out (the request headers after the router's own changes; mutable).
   */
  onUpstreamRequest?(stream: StreamContext, headers: HeaderList): void;
  /**
   * Each upstream attempt (the first and every retry) is about to be sent to `stream.endpoint`
   * (pooled HTTP upstreams; `stream.attempts` counts it): `headers` are the attempt's (mutable,
   * shared by the attempts). Configuration order. Must not throw.
   */
  onUpstreamAttempt?(stream: StreamContext, headers: HeaderList): void;
  /**
   * Response headers (upstream or local reply) are about to be written downstream; reverse order.
   * `headers` is mutable; `stream.responseCode` is set.
   */
  onResponseHeaders?(stream: StreamContext, headers: HeaderList): void;
  /** Exactly once per inner request, on success, local reply, reset or drain; reverse order. Must not throw. */
  onStreamComplete?(stream: StreamContext): void;
  /** Exactly once per tunnel; reverse order. Must not throw. */
  onConnectionComplete?(conn: ConnectionContext): void;
  /**
   * Optional: true while the filter has nothing to do for any new request (e.g. the WaypointFilter
   * phase slots while the mesh has no WaypointFilter). Asked as each request starts; when every
   * filter that has it says so, that request's phases run without them (the chain keeps a second
   * set of phase arrays), so they cost nothing. Tunnel phases always include the filter.
   */
  dormant?(): boolean;
}

/**
 * The last filter of every chain: it produces the response (Envoy's router), through
 * `respond(stream, ...)` / `sendLocalReply(stream, ...)` of local-reply.ts; the chain never
 * continues after it.
 */
export interface TerminalFilter extends Filter {
  forward(stream: StreamContext): void;
}

/** Read-only services a factory may hand to the filter it creates. */
export interface FilterEnv {
  /**
   * The current mesh snapshot; read `.current` once per phase. `subscribe` (the waypoint's store
   * has it) tells a filter about each new snapshot, after it became current (e.g. to re-check
   * open tunnels); it returns the unsubscribe function.
   */
  readonly mesh: { readonly current: MeshSnapshot; subscribe?(fn: (next: MeshSnapshot, prev: MeshSnapshot) => void): () => void };
  readonly log: Logger;
  /** The waypoint's Prometheus registry (`/stats/prometheus`); create instruments in `create`, once. */
  readonly metrics: Registry;
}

/**
 * How a filter is registered: `name` (Istio/Envoy dotted style, e.g. `istio.stats`), config
 * parsing that validates and freezes once (throws `ConfigError`), and `create`, called once per
 * chain build.
 */
export interface FilterFactory<C = unknown> {
  readonly name: string;
  /** Names of filters that must appear earlier in the chain. */
  readonly dependsOn?: readonly string[];
  /**
   * Names of filters that, when they are in the chain at all, must come earlier (e.g. the stats
   * filter reads the peers `istio.peer_metadata` sets, but works without it).
   */
  readonly after?: readonly string[];
  parseConfig(raw: unknown): C;
  create(config: C, env: FilterEnv): Filter;
}

/**
 * What a filter module (named by a WaypointFilter's `module`) default-exports: a factory as
 * above, `parseConfig` optional. The module may also export `configSchema`, a zod schema the
 * WaypointFilter's `config` is validated with first (its output is what `parseConfig` or `create`
 * gets). `create` runs once per attachment (Gateway, Service, route rule) and again when the
 * resource's config or the module's code changes.
 */
export interface FilterModuleFactory<C = unknown> {
  readonly name?: string;
  parseConfig?(raw: unknown): C;
  create(config: C, env: FilterEnv): Filter;
}
