/**
 * The load generator: `connections` connections with `streams` requests in flight on each, driven
 * either open loop at a fixed rate or closed loop (saturation), for a warm-up and then a measured
 * window of a duration or a request count.
 *
 * Open loop follows wrk2 (giltene/wrk2 README "coordinated omission") and Nighthawk: request i is
 * due at `start + i / rate` whatever happened before; a request due while every connection is busy
 * waits in a queue and is sent as soon as one frees up. Its latency is recorded twice: from the
 * time it was due (corrected: what a user arriving then would have seen) and from the time it was
 * sent (uncorrected: what a closed-loop tool reports, blind to a stalled server).
 *
 * Bounded: once the measured schedule is done, what is still queued or in flight gets `timeoutMs`
 * (plus a second) to finish; after that it is counted as `not_sent` or `timeout` and the run ends.
 */
import { openConn, type Conn, type Outcome, type RequestSpec } from './protocols.ts';
import type { Protocol } from './options.ts';
import { Recorder, type IntervalSample } from './recorder.ts';
import type { Transport } from './transport.ts';

export interface LoadPlan {
  readonly protocol: Protocol;
  readonly transport: Transport;
  readonly connections: number;
  readonly streams: number;
  /** Requests per second (open loop), or null (closed loop). */
  readonly rate: number | null;
  /** The measured window: a request count or a duration (exactly one is set). */
  readonly requests: number | null;
  readonly durationMs: number | null;
  readonly warmupMs: number;
  readonly spec: RequestSpec;
  readonly timeoutMs: number;
  readonly intervalMs: number;
  /** h2c/gRPC: our SETTINGS_INITIAL_WINDOW_SIZE. */
  readonly http2Window?: number;
  /** Extra headers of the probe, the one request sent before the run (its answer's headers are kept). */
  readonly probeHeaders?: Readonly<Record<string, string>>;
}

/** Where a run is, for progress displays. */
export interface Progress {
  readonly phase: 'warmup' | 'measure' | 'drain';
  /** ms since the measured window began (negative during the warm-up). */
  readonly elapsedMs: number;
  /** Planned length of the measured window (ms), when known in advance. */
  readonly plannedMs: number | null;
  readonly completed: number;
  readonly planned: number | null;
  readonly errors: number;
  /** Corrected p99 so far (µs). */
  readonly p99Us: number;
}

export interface LoadHooks {
  /** The measured window begins / ends (the bench reads /proc exactly there). */
  onMeasureStart?(): void;
  onMeasureEnd?(): void;
  /** Every `intervalMs`; `sample` is the interval just closed (undefined during the warm-up). */
  onInterval?(sample: IntervalSample | undefined, progress: Progress): void;
}

export interface LoadResult {
  readonly recorder: Recorder;
  /** Wall clock at the start of the measured window. */
  readonly startedAt: Date;
  /** The measured window: from its start to the last measured answer (ms). */
  readonly windowMs: number;
  /** Measured requests scheduled, and of those sent. */
  readonly scheduled: number;
  readonly sent: number;
  readonly maxInFlight: number;
  /** Most requests due and waiting for a free connection at once (open loop only). */
  readonly maxQueued: number;
  readonly connectionsOpened: number;
  /** The probe's response headers. */
  readonly probeHeaders: Record<string, string | string[] | undefined>;
  /** Stopped early by the caller's signal. */
  readonly interrupted: boolean;
}

/** The path is unusable: a connection could not be opened, or the probe request failed. Nothing was measured. */
export class LoadProbeError extends Error {
  readonly outcome: Outcome | undefined;
  constructor(message: string, outcome?: Outcome, options?: { cause?: unknown }) {
    super(message, options);
    this.name = 'LoadProbeError';
    this.outcome = outcome;
  }
}

/** A FIFO of numbers (schedule indices, connection indices) without `Array.shift()`'s O(n). */
class Queue {
  private items: number[] = [];
  private head = 0;
  get length(): number {
    return this.items.length - this.head;
  }
  push(v: number): void {
    this.items.push(v);
  }
  shift(): number {
    const v = this.items[this.head++];
    if (this.head > 4096 && this.head * 2 > this.items.length) {
      this.items = this.items.slice(this.head);
      this.head = 0;
    }
    return v;
  }
}

async function openAll(plan: LoadPlan, conns: Conn[]): Promise<Record<string, string | string[] | undefined>> {
  const open = () => openConn(plan.protocol, { transport: plan.transport, spec: plan.spec, timeoutMs: plan.timeoutMs, http2Window: plan.http2Window });
  try {
    conns.push(await open());
  } catch (err) {
    throw new LoadProbeError(`cannot open a connection through ${plan.transport.description}: ${(err as Error).message}`, undefined, { cause: err });
  }
  const probe = await new Promise<Outcome>((resolve) => conns[0].fire(resolve, plan.probeHeaders, true));
  if (!probe.ok) throw new LoadProbeError(`the first request through ${plan.transport.description} failed (${probe.kind}): ${probe.detail}`, probe);
  while (conns.length < plan.connections) {
    const batch = Math.min(16, plan.connections - conns.length);
    try {
      conns.push(...(await Promise.all(Array.from({ length: batch }, open))));
    } catch (err) {
      throw new LoadProbeError(`opening connection ${conns.length + 1} of ${plan.connections} through ${plan.transport.description}: ${(err as Error).message}`);
    }
  }
  return { ...probe.headers };
}

/** Run `plan`; rejects with {@link LoadProbeError} when the path does not work at all. */
export async function runLoad(plan: LoadPlan, hooks: LoadHooks = {}, signal?: AbortSignal): Promise<LoadResult> {
  if ((plan.requests === null) === (plan.durationMs === null)) throw new Error('a load plan needs exactly one of requests and durationMs');
  const conns: Conn[] = [];
  // The HBONE pool's connections do not hold the process (a waypoint's pool must not): the run does.
  const hold = setInterval(() => {}, 60_000);
  try {
    const probeHeaders = await openAll(plan, conns);
    return await new Run(plan, hooks, conns, probeHeaders).start(signal);
  } finally {
    clearInterval(hold);
    for (const c of conns) c.close();
    plan.transport.close();
  }
}

class Run {
  private readonly rec = new Recorder();
  /** Connections with a free stream, least recently used first (spreads the load over all of them). */
  private readonly free = new Queue();
  /** Open loop: indices (in the schedule) of requests due and waiting for a free connection. */
  private readonly queue = new Queue();
  private readonly inFlight = new Set<{ due: number; sent: number; measured: boolean }>();
  private t0 = 0;
  private measureAt = 0;
  private startedAt = new Date();
  private phase: Progress['phase'] = 'warmup';
  /** Open loop: requests of the schedule issued so far (warm-up included), and their total. */
  private issued = 0;
  private warmCount = 0;
  private total = 0;
  /** Measured requests started (open loop: due), sent and settled. */
  private mStarted = 0;
  private mSent = 0;
  private mSettled = 0;
  private scheduleDone = false;
  private interrupted = false;
  private maxInFlight = 0;
  private maxQueued = 0;
  private endMs = 0;
  private tickTimer: NodeJS.Timeout | undefined;
  private intervalTimer: NodeJS.Timeout | undefined;
  private readonly timers = new Set<NodeJS.Timeout>();
  private finished: (() => void) | undefined;
  private readonly plan: LoadPlan;
  private readonly hooks: LoadHooks;
  private readonly conns: Conn[];
  private readonly probeHeaders: Record<string, string | string[] | undefined>;

  constructor(plan: LoadPlan, hooks: LoadHooks, conns: Conn[], probeHeaders: Record<string, string | string[] | undefined>) {
    this.plan = plan;
    this.hooks = hooks;
    this.conns = conns;
    this.probeHeaders = probeHeaders;
    // Round-robin over connections: slot k of connection c comes after slot k of every other one.
    for (let k = 0; k < plan.streams; k++) for (let c = 0; c < conns.length; c++) this.free.push(c);
  }

  private later(fn: () => void, ms: number): void {
    const t = setTimeout(() => {
      this.timers.delete(t);
      fn();
    }, ms);
    this.timers.add(t);
  }

  async start(signal?: AbortSignal): Promise<LoadResult> {
    const p = this.plan;
    this.t0 = performance.now();
    this.measureAt = this.t0 + p.warmupMs;
    if (p.rate !== null) {
      this.warmCount = Math.ceil((p.warmupMs * p.rate) / 1000);
      this.total = this.warmCount + (p.requests ?? Math.max(1, Math.round(((p.durationMs ?? 0) * p.rate) / 1000)));
    }
    const onAbort = () => {
      this.interrupted = true;
      this.endSchedule();
    };
    signal?.addEventListener('abort', onAbort, { once: true });
    const done = new Promise<void>((r) => (this.finished = r));
    if (p.warmupMs > 0) this.later(() => this.beginMeasure(), p.warmupMs);
    else this.beginMeasure();
    if (p.rate === null) this.fillClosed();
    else this.tick();
    this.intervalTimer = setTimeout(this.onInterval, p.warmupMs > 0 ? Math.min(p.intervalMs, p.warmupMs) : p.intervalMs);
    if (signal?.aborted) onAbort();
    await done;
    signal?.removeEventListener('abort', onAbort);
    clearTimeout(this.tickTimer);
    clearTimeout(this.intervalTimer);
    for (const t of this.timers) clearTimeout(t);
    return {
      recorder: this.rec,
      startedAt: this.startedAt,
      windowMs: Math.max(1, this.endMs - this.measureAt),
      scheduled: this.mStarted,
      sent: this.mSent,
      maxInFlight: this.maxInFlight,
      maxQueued: this.maxQueued,
      connectionsOpened: this.conns.length,
      probeHeaders: this.probeHeaders,
      interrupted: this.interrupted,
    };
  }

  private beginMeasure(): void {
    if (this.phase !== 'warmup') return;
    this.phase = 'measure';
    this.measureAt = performance.now();
    this.startedAt = new Date();
    this.hooks.onMeasureStart?.();
    // Intervals of the time series start with the window (not mid-way from the warm-up's).
    if (this.intervalTimer) {
      clearTimeout(this.intervalTimer);
      this.intervalTimer = setTimeout(this.onInterval, this.plan.intervalMs);
    }
    const d = this.plan.durationMs;
    // Closed loop with a duration: new requests stop at the end of the window.
    if (this.plan.rate === null && d !== null) this.later(() => this.endSchedule(), d);
  }

  private onInterval = (): void => {
    const p = this.plan;
    const elapsed = performance.now() - this.measureAt;
    const sample = this.phase === 'warmup' || elapsed <= 0 ? undefined : this.rec.cut(elapsed, this.inFlight.size, this.queue.length);
    this.hooks.onInterval?.(sample, {
      phase: this.phase,
      elapsedMs: this.phase === 'warmup' ? performance.now() - this.t0 - p.warmupMs : elapsed,
      plannedMs: p.durationMs ?? (p.rate !== null && p.requests !== null ? (p.requests * 1000) / p.rate : null),
      completed: this.rec.completed,
      planned: p.requests ?? (p.rate !== null ? this.total - this.warmCount : null),
      errors: this.rec.errorCount,
      p99Us: this.rec.p99Us,
    });
    this.intervalTimer = setTimeout(this.onInterval, p.intervalMs);
  };

  /** Due time of request `i` of the open-loop schedule. */
  private dueOf(i: number): number {
    return this.t0 + (i * 1000) / this.plan.rate!;
  }

  /** Open loop: enqueue what is due by now, send what the free slots allow, come back in 1 ms. */
  private tick = (): void => {
    if (this.scheduleDone) return;
    const due = Math.min(this.total, Math.floor(((performance.now() - this.t0) * this.plan.rate!) / 1000) + 1);
    while (this.issued < due) {
      if (this.issued === this.warmCount) this.beginMeasure();
      if (this.issued >= this.warmCount) this.mStarted++;
      this.queue.push(this.issued++);
    }
    if (this.queue.length > this.maxQueued) this.maxQueued = this.queue.length;
    this.drainQueue();
    if (this.issued >= this.total) this.endSchedule();
    else this.tickTimer = setTimeout(this.tick, 1);
  };

  private drainQueue(): void {
    while (this.queue.length > 0 && this.free.length > 0) {
      const i = this.queue.shift();
      // Measured by when it was due, not by when a connection could take it.
      this.send(this.free.shift(), this.dueOf(i), i >= this.warmCount);
    }
  }

  /** Closed loop: every free slot sends at once. */
  private fillClosed(): void {
    while (this.free.length > 0 && !this.scheduleDone) {
      const measured = this.phase === 'measure';
      if (measured) {
        if (this.plan.requests !== null && this.mStarted >= this.plan.requests) {
          this.endSchedule();
          return;
        }
        this.mStarted++;
      }
      this.send(this.free.shift(), performance.now(), measured);
    }
  }

  private send(ci: number, due: number, measured: boolean): void {
    const r = { due, sent: performance.now(), measured };
    if (measured) this.mSent++;
    this.inFlight.add(r);
    if (this.inFlight.size > this.maxInFlight) this.maxInFlight = this.inFlight.size;
    this.conns[ci].fire((o) => {
      if (!this.inFlight.delete(r)) return; // already written off at the drain deadline
      if (r.measured) {
        this.rec.record(r.due, r.sent, performance.now(), o);
        this.mSettled++;
      }
      this.free.push(ci);
      // A failing path must not turn a closed loop into a busy loop.
      if (this.plan.rate === null && !o.ok) this.later(() => this.afterFree(), 5);
      else this.afterFree();
    });
  }

  private afterFree(): void {
    if (this.plan.rate === null) this.fillClosed();
    else this.drainQueue();
    this.checkDone();
  }

  private endSchedule(): void {
    if (this.scheduleDone) return;
    this.scheduleDone = true;
    clearTimeout(this.tickTimer);
    this.beginMeasure();
    this.phase = 'drain';
    // Interrupted, nothing more goes out: what was due and waiting is lost now (a stall the user
    // stopped shows in full), not dropped from the run.
    if (this.interrupted) this.writeOffQueue('due but never sent: every connection was busy when the run was interrupted');
    this.later(() => this.writeOff(), this.plan.timeoutMs + 1_000);
    this.checkDone();
  }

  /** Measured requests still waiting for a connection are counted as `not_sent`. */
  private writeOffQueue(detail: string): void {
    while (this.queue.length > 0) {
      if (this.queue.shift() < this.warmCount) continue;
      this.rec.recordLost('not_sent', detail);
      this.mSettled++;
    }
  }

  /** The drain deadline: what is still queued or in flight is counted as lost. */
  private writeOff(): void {
    this.writeOffQueue('due but never sent: every connection stayed busy until the run ended');
    for (const r of [...this.inFlight]) {
      this.inFlight.delete(r);
      if (!r.measured) continue;
      this.rec.recordLost('timeout', `no answer by the end of the run (${this.plan.timeoutMs} ms after the last request was due)`);
      this.mSettled++;
    }
    this.checkDone(true);
  }

  private checkDone(force = false): void {
    if (!this.scheduleDone || !this.finished) return;
    if (!force && (this.mSettled < this.mStarted || this.queue.length > 0)) return;
    this.endMs = performance.now();
    this.hooks.onMeasureEnd?.();
    const elapsed = this.endMs - this.measureAt;
    // The last (partial) interval, so the series covers the whole window.
    const last = this.rec.timeline.at(-1);
    if (!last || elapsed - last.tMs > 1) this.rec.cut(elapsed, this.inFlight.size, this.queue.length);
    const f = this.finished;
    this.finished = undefined;
    f();
  }
}
