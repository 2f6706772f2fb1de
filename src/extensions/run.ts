/**
 * Running the filters WaypointFilters attach, with the isolation a filter loaded at run time needs:
 * a phase that throws (or whose promise rejects) answers 500 `FILTER_ERROR` and is logged (at most
 * one line per filter and phase every 10 s), an asynchronous request phase past its deadline
 * answers 504 `FILTER_TIMEOUT`, and the observer phases (response headers, completion) log and go
 * on. Nothing a filter does reaches other requests or the process. The runners mirror the chain's
 * (src/pipeline/chain.ts): synchronous while filters are, no closure per request on that path.
 */
import { ConnectionContext, FilterStatus, ResponseFlag, sendLocalReply, type Filter, type HeaderList, type PhaseResult, type StreamContext } from '../pipeline/index.ts';
import { log, LogLimiter } from '../util/index.ts';

/** One filter at one attachment. */
export interface Attached {
  readonly filter: Filter;
  /** `WaypointFilter/<ns>/<name>`: for logs and response code details. */
  readonly ref: string;
  /** Deadline (ms) of an asynchronous `onConnection`/`onRequestHeaders`; 0 = none (built-in filters: a fault delay is meant to wait). */
  readonly deadlineMs: number;
}

/** The filters of one place in the chain (a phase, a route rule), one array per hook, only those that implement it. */
export class AttachedList {
  readonly all: readonly Attached[];
  readonly connection: readonly Attached[];
  readonly upstreamConnected: readonly Attached[];
  readonly request: readonly Attached[];
  readonly upstreamRequest: readonly Attached[];
  /** Reverse order, as the chain runs these. */
  readonly response: readonly Attached[];
  readonly complete: readonly Attached[];
  readonly connectionComplete: readonly Attached[];

  constructor(all: readonly Attached[]) {
    const having = (hook: keyof Filter) => Object.freeze(all.filter((a) => typeof a.filter[hook] === 'function'));
    const reversed = (hook: keyof Filter) => Object.freeze([...having(hook)].reverse());
    this.all = Object.freeze([...all]);
    this.connection = having('onConnection');
    this.upstreamConnected = having('onUpstreamConnected');
    this.request = having('onRequestHeaders');
    this.upstreamRequest = having('onUpstreamRequest');
    this.response = reversed('onResponseHeaders');
    this.complete = reversed('onStreamComplete');
    this.connectionComplete = reversed('onConnectionComplete');
    Object.freeze(this);
  }
}

export const EMPTY_LIST = new AttachedList([]);

const reports = new LogLimiter(10_000);

function report(a: Attached, phase: string, err: unknown, what: string): void {
  const suppressed = reports.take(`${a.ref}\u0000${phase}`);
  if (suppressed === undefined) log.debug({ err, filter: a.ref, phase }, `WaypointFilter ${what}`);
  else log.error({ err, filter: a.ref, phase, suppressed }, `WaypointFilter ${what}`);
}

/** A request phase failed: 500 `FILTER_ERROR` (a reset when the response already started). */
function failed(stream: StreamContext, a: Attached, phase: string, err: unknown): FilterStatus {
  report(a, phase, err, `${a.ref} threw in ${phase}; answered 500`);
  sendLocalReply(stream, 500, 'filter failed', ResponseFlag.FilterError, `filter_failed{${a.ref}}`);
  return FilterStatus.StopAndReply;
}

function connectionFailed(conn: ConnectionContext, a: Attached, err: unknown): FilterStatus {
  report(a, 'onConnection', err, `${a.ref} threw in onConnection; tunnel refused with 500`);
  conn.responseFlags = ResponseFlag.FilterError;
  conn.reject(500, `filter_failed{${a.ref}}`);
  return FilterStatus.StopAndReply;
}

/**
 * Settle a filter's promise, or answer at its deadline: whichever comes first wins, and a filter
 * that finishes after its deadline changes nothing.
 */
function guarded(p: Promise<FilterStatus>, a: Attached, onError: (err: unknown) => FilterStatus, onTimeout: () => FilterStatus): Promise<FilterStatus> {
  if (a.deadlineMs <= 0) return p.then(undefined, onError);
  return new Promise((resolve) => {
    let done = false;
    const timer = setTimeout(() => {
      done = true;
      resolve(onTimeout());
    }, a.deadlineMs);
    p.then(
      (s) => {
        if (done) return;
        clearTimeout(timer);
        resolve(s);
      },
      (err: unknown) => {
        if (done) return;
        clearTimeout(timer);
        resolve(onError(err));
      },
    );
  });
}

/** How a guarded phase calls a filter and answers for it when it fails or runs out of time. */
interface GuardedPhase<C> {
  call(a: Attached, ctx: C): PhaseResult;
  failed(ctx: C, a: Attached, err: unknown): FilterStatus;
  timedOut(ctx: C, a: Attached): FilterStatus;
}

const REQUEST: GuardedPhase<StreamContext> = {
  call: (a, stream) => a.filter.onRequestHeaders!(stream),
  failed: (stream, a, err) => failed(stream, a, 'onRequestHeaders', err),
  timedOut(stream, a) {
    report(a, 'onRequestHeaders', undefined, `${a.ref} did not finish onRequestHeaders within ${a.deadlineMs} ms; answered 504`);
    sendLocalReply(stream, 504, 'filter timed out', ResponseFlag.FilterTimeout, `filter_timeout{${a.ref}}`);
    return FilterStatus.StopAndReply;
  },
};

const CONNECTION: GuardedPhase<ConnectionContext> = {
  call: (a, conn) => a.filter.onConnection!(conn),
  failed: connectionFailed,
  timedOut(conn, a) {
    report(a, 'onConnection', undefined, `${a.ref} did not finish onConnection within ${a.deadlineMs} ms; tunnel refused with 504`);
    conn.responseFlags = ResponseFlag.FilterTimeout;
    conn.reject(504, `filter_timeout{${a.ref}}`);
    return FilterStatus.StopAndReply;
  },
};

/** Run `phase` of `list` from `i`, guarded; synchronous while every filter is (the chain's runPhase, guarded). */
function runGuarded<C>(list: readonly Attached[], ctx: C, i: number, phase: GuardedPhase<C>): PhaseResult {
  for (; i < list.length; i++) {
    const a = list[i];
    let r: PhaseResult;
    try {
      r = phase.call(a, ctx);
    } catch (err) {
      return phase.failed(ctx, a, err);
    }
    if (typeof r === 'number') {
      if (r !== FilterStatus.Continue) return r;
      continue;
    }
    const next = i + 1;
    return guarded(
      Promise.resolve(r),
      a,
      (err) => phase.failed(ctx, a, err),
      () => phase.timedOut(ctx, a),
    ).then((s) => (s !== FilterStatus.Continue ? s : runGuarded(list, ctx, next, phase)));
  }
  return FilterStatus.Continue;
}

/** Run `onRequestHeaders` of `list` (an AttachedList's `request`) from `i`, guarded. */
export function runRequest(list: readonly Attached[], stream: StreamContext, i: number): PhaseResult {
  return runGuarded(list, stream, i, REQUEST);
}

/** Run `onConnection` of `list` (an AttachedList's `connection`) from `i`, guarded (a failure refuses the tunnel). */
export function runConnection(list: readonly Attached[], conn: ConnectionContext, i: number): PhaseResult {
  return runGuarded(list, conn, i, CONNECTION);
}

/**
 * Run `onUpstreamRequest`: a filter that throws answers 500 and stops the rest (the router sees
 * the answer and sends nothing upstream).
 */
export function runUpstreamRequest(list: readonly Attached[], stream: StreamContext, headers: HeaderList): void {
  for (let i = 0; i < list.length; i++) {
    try {
      list[i].filter.onUpstreamRequest!(stream, headers);
    } catch (err) {
      failed(stream, list[i], 'onUpstreamRequest', err);
      return;
    }
  }
}

type Observer = 'onResponseHeaders' | 'onStreamComplete' | 'onUpstreamConnected' | 'onConnectionComplete';

/** Run an observer hook of every filter in `list`; one that throws is logged and the others still run. */
export function runObservers(list: readonly Attached[], hook: Observer, ctx: StreamContext | ConnectionContext, headers?: HeaderList): void {
  for (let i = 0; i < list.length; i++) {
    try {
      (list[i].filter[hook] as (c: unknown, h: unknown) => void)(ctx, headers);
    } catch (err) {
      report(list[i], hook, err, `${list[i].ref} threw in ${hook}; continuing`);
    }
  }
}
