/**
 * FilterChain: an immutable, compiled filter list with one array per phase (only the filters that
 * implement it), and the runners for each phase. Built once per configuration; each tunnel and
 * stream captures the chain current when it starts, so a reload never changes a running request.
 */
import { log } from '../util/index.ts';
import type { ConnectionContext, StreamContext, StreamPhases } from './context.ts';
import { FilterStatus, type Filter, type PhaseResult, type TerminalFilter } from './filter.ts';
import type { HeaderList } from './headers.ts';

type Phase = 'onConnection' | 'onRequestHeaders';

/** An immutable compiled chain; build through {@link FilterRegistry.build}. */
export class FilterChain implements StreamPhases {
  readonly filters: readonly Filter[];
  readonly terminal: TerminalFilter;
  private readonly connectionPhase: readonly Filter[];
  private readonly requestPhase: readonly Filter[];
  private readonly upstreamRequestPhase: readonly Filter[];
  private readonly upstreamAttemptPhase: readonly Filter[];
  private readonly upstreamConnectedPhase: readonly Filter[];
  /** Reverse configuration order. */
  private readonly responsePhase: readonly Filter[];
  private readonly streamCompletePhase: readonly Filter[];
  private readonly connectionCompletePhase: readonly Filter[];
  /** The chain without the filters that can be dormant, and those filters (see {@link forStream}). */
  private readonly lean: FilterChain | undefined;
  private readonly dormantCapable: readonly Filter[];

  /** Throws when the last filter is not terminal or a terminal filter is not last. */
  constructor(filters: readonly Filter[]) {
    const last = filters[filters.length - 1] as TerminalFilter | undefined;
    if (!last || typeof last.forward !== 'function') throw new Error('the last filter of a chain must be a terminal filter (the router)');
    for (const f of filters.slice(0, -1)) {
      if (typeof (f as TerminalFilter).forward === 'function') throw new Error(`terminal filter ${f.name} must be last in the chain`);
    }
    this.filters = Object.freeze([...filters]);
    this.terminal = last;
    const having = (p: keyof Filter) => Object.freeze(filters.filter((f) => typeof f[p] === 'function'));
    this.connectionPhase = having('onConnection');
    this.requestPhase = having('onRequestHeaders');
    this.upstreamRequestPhase = having('onUpstreamRequest');
    this.upstreamAttemptPhase = having('onUpstreamAttempt');
    this.upstreamConnectedPhase = having('onUpstreamConnected');
    this.responsePhase = Object.freeze([...having('onResponseHeaders')].reverse());
    this.streamCompletePhase = Object.freeze([...having('onStreamComplete')].reverse());
    this.connectionCompletePhase = Object.freeze([...having('onConnectionComplete')].reverse());
    this.dormantCapable = having('dormant');
    this.lean = this.dormantCapable.length > 0 ? new FilterChain(filters.filter((f) => typeof f.dormant !== 'function')) : undefined;
  }

  /**
   * The chain a new request runs: this one, or, while every filter that can be dormant is
   * (Filter.dormant), the same chain without them, so that they cost the request nothing.
   */
  forStream(): FilterChain {
    const lean = this.lean;
    if (lean === undefined) return this;
    const fs = this.dormantCapable;
    for (let i = 0; i < fs.length; i++) if (!fs[i].dormant!()) return this;
    return lean;
  }

  /** Run `onConnection` in order. Sync when every filter is. */
  runConnection(conn: ConnectionContext): PhaseResult {
    return runPhase(this.connectionPhase, 'onConnection', conn, 0);
  }

  /** Run `onRequestHeaders` in order. Sync when every filter is. A throw becomes a rejected/500 by the caller. */
  runRequestHeaders(stream: StreamContext): PhaseResult {
    return runPhase(this.requestPhase, 'onRequestHeaders', stream, 0);
  }

  /** Runs `onUpstreamConnected` in order (TCP tunnels); a throwing filter is logged and skipped. */
  runUpstreamConnected(conn: ConnectionContext): void {
    const fs = this.upstreamConnectedPhase;
    for (let i = 0; i < fs.length; i++) {
      try {
        fs[i].onUpstreamConnected!(conn);
      } catch (err) {
        log.error({ err, filter: fs[i].name }, 'onUpstreamConnected failed');
      }
    }
  }

  runUpstreamRequest(stream: StreamContext, headers: HeaderList): void {
    const fs = this.upstreamRequestPhase;
    for (let i = 0; i < fs.length; i++) fs[i].onUpstreamRequest!(stream, headers);
  }

  /** Runs `onUpstreamAttempt` in order (none: one length check); a throwing filter is logged and skipped. */
  runUpstreamAttempt(stream: StreamContext, headers: HeaderList): void {
    const fs = this.upstreamAttemptPhase;
    for (let i = 0; i < fs.length; i++) {
      try {
        fs[i].onUpstreamAttempt!(stream, headers);
      } catch (err) {
        log.error({ err, filter: fs[i].name }, 'onUpstreamAttempt failed');
      }
    }
  }

  /** Runs `onResponseHeaders` in reverse order; a throwing filter is logged and skipped. */
  runResponseHeaders(stream: StreamContext, headers: HeaderList): void {
    runObservers(this.responsePhase, 'onResponseHeaders', stream, headers);
  }

  /** Runs `onStreamComplete` once per stream (guarded by `stream.completed`). Never throws. */
  completeStream(stream: StreamContext): void {
    if (stream.completed) return;
    stream.completed = true;
    runObservers(this.streamCompletePhase, 'onStreamComplete', stream, undefined);
  }

  /** Runs `onConnectionComplete` (once per tunnel: the caller guarantees it). Never throws. */
  completeConnection(conn: ConnectionContext): void {
    runObservers(this.connectionCompletePhase, 'onConnectionComplete', conn, undefined);
  }
}

type ObserverPhase = 'onResponseHeaders' | 'onStreamComplete' | 'onConnectionComplete';

// Phases whose filters must all run even if one throws: each error is logged with the filter's name.
function runObservers(fs: readonly Filter[], phase: ObserverPhase, ctx: ConnectionContext | StreamContext, headers: HeaderList | undefined): void {
  for (let i = 0; i < fs.length; i++) {
    try {
      (fs[i][phase] as (c: unknown, h: unknown) => void)(ctx, headers);
    } catch (err) {
      log.error({ err, filter: fs[i].name }, `${phase} threw; continuing`);
    }
  }
}

// Module-level runner (no per-request closures): runs filters from `i`; on the first promise it
// continues asynchronously from the next filter.
function runPhase(fs: readonly Filter[], phase: Phase, ctx: ConnectionContext | StreamContext, i: number): PhaseResult {
  for (; i < fs.length; i++) {
    const r = (fs[i][phase] as (c: unknown) => PhaseResult)(ctx);
    if (typeof r === 'number') {
      if (r !== FilterStatus.Continue) return r;
      continue;
    }
    const next = i + 1;
    return r.then((s) => (s !== FilterStatus.Continue ? s : runPhase(fs, phase, ctx, next)));
  }
  return FilterStatus.Continue;
}
