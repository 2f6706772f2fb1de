/**
 * The overload manager's budget for buffered bytes: Envoy's overload manager reduced to one
 * resource, the bytes proxied exchanges hold in their buffers (envoyproxy/envoy
 * docs/root/configuration/operations/overload_manager/overload_manager.rst).
 *
 * Each proxied exchange that can hold relayed bytes (an HTTP request the router forwards, a TCP
 * tunnel) is a {@link BufferAccount}: it says what its streams hold now (readable buffers: bytes
 * received and not yet passed on; writable buffers: bytes written and not yet sent) and how to
 * reset it. Nothing is counted per chunk: the manager samples the live accounts every
 * `refreshIntervalMs` (a few length reads per account, no allocation), as Envoy samples its
 * resource monitors every `refresh_interval`, and sets two actions from the total:
 *  - past `stopAcceptingRequests` × the budget, `envoy.overload_actions.stop_accepting_requests`:
 *    new CONNECTs and requests are answered 503 (flag `OM`, details `overload`);
 *  - past `resetHighMemoryStreams` × the budget, `envoy.overload_actions.reset_high_memory_stream`:
 *    the accounts holding the most (at least 2^`minimumAccountToTrackPowerOfTwo` bytes, Envoy's
 *    `buffer_factory_config.minimum_account_to_track_power_of_two`) are reset, largest first and
 *    at most 50 per refresh as Envoy's action (per worker), at this and the next refreshes until
 *    the total is back under the first threshold, so that new requests are served again.
 *
 * What one stream can hold is bounded by HTTP/2 flow control: Node pushes every DATA frame into
 * the stream's readable buffer whether or not anyone reads it, so a stream whose reader stalled
 * holds up to one stream window (`http2.initialStreamWindowSize`), plus its writable high-water
 * mark toward the stalled side.
 */

/** Anything with Node stream buffers (a Duplex, or an object that reads them through). */
export interface BufferHolder {
  readonly readableLength: number;
  readonly writableLength: number;
}

/** Bytes `h` holds (0 for none). */
export function heldBy(h: BufferHolder | null | undefined): number {
  return h ? h.readableLength + h.writableLength : 0;
}

/** One exchange's share of the budget. */
export interface BufferAccount {
  /** Bytes its streams hold now; cheap (a few length reads), called at every refresh. */
  bufferedBytes(): number;
  /** Reset by the overload manager: end the exchange with flag `OM` and release its buffers. */
  overloadReset(): void;
  /** What the manager counted for it at its last refresh (the manager's field). */
  accounted: number;
  /**
   * The manager's links in its list of live accounts (undefined while not counted). An intrusive
   * list rather than a Set, which one add and one delete per request kept from letting finished
   * requests die young (measured at saturation: +20 % CPU per request, +150 MiB RSS).
   */
  prevAccount: BufferAccount | undefined;
  nextAccount: BufferAccount | undefined;
}

/** The account of bytes relayed between two sides (a TCP tunnel, an upgraded WebSocket): what both hold; `reset` ends the relay. */
export class RelayAccount implements BufferAccount {
  accounted = 0;
  prevAccount: BufferAccount | undefined = undefined;
  nextAccount: BufferAccount | undefined = undefined;
  private readonly a: BufferHolder;
  private readonly b: BufferHolder;
  private readonly reset: () => void;

  constructor(a: BufferHolder, b: BufferHolder, reset: () => void) {
    this.a = a;
    this.b = b;
    this.reset = reset;
  }

  bufferedBytes(): number {
    return heldBy(this.a) + heldBy(this.b);
  }

  overloadReset(): void {
    this.reset();
  }
}

/** Settings of an {@link OverloadManager} (bytes, fractions of the budget, ms). */
export interface OverloadSettings {
  /** The budget: bytes all exchanges together may hold in their buffers. */
  readonly maxBufferedBytes: number;
  /** Fraction of the budget past which new CONNECTs and requests are refused (503 `OM`). */
  readonly stopAcceptingRequests: number;
  /** Fraction of the budget past which the largest accounts are reset. */
  readonly resetHighMemoryStreams: number;
  /** Only accounts holding at least 2^this bytes are reset. */
  readonly minimumAccountToTrackPowerOfTwo: number;
  /** How often (ms) the accounts are sampled. */
  readonly refreshIntervalMs: number;
}

/** Envoy's local reply under `stop_accepting_requests`: its body and response code details. */
export const OVERLOAD_BODY = 'envoy overloaded';
export const OVERLOAD_DETAILS = 'overload';

/** Resets per refresh at most (Envoy's reset_high_memory_stream: 50 per worker per invocation). */
const MAX_RESETS_PER_REFRESH = 50;

/** See the module comment. One per process (the waypoint's composition root makes it). */
export class OverloadManager {
  readonly settings: OverloadSettings;
  private readonly stopBytes: number;
  private readonly resetBytes: number;
  private readonly minimumAccount: number;
  /** The sentinel of the circular list of live accounts (see {@link BufferAccount.prevAccount}). */
  private readonly accounts: BufferAccount;
  private count = 0;
  /** Reused between refreshes (accounts big enough to be reset). */
  private readonly candidates: BufferAccount[] = [];
  private timer: NodeJS.Timeout | undefined = undefined;
  /** Bytes the live accounts held at the last refresh (less those closed since). */
  bufferedBytes = 0;
  /** `stop_accepting_requests` is active. */
  stopAccepting = false;
  /** `reset_high_memory_stream` was active at the last refresh. */
  resetting = false;
  /** Requests and CONNECTs answered 503 `OM` since start. */
  rejectedRequests = 0;
  rejectedTunnels = 0;
  /** Accounts reset since start. */
  resets = 0;

  constructor(settings: OverloadSettings) {
    if (!(settings.stopAcceptingRequests <= settings.resetHighMemoryStreams)) {
      throw new RangeError('overload: stopAcceptingRequests must not exceed resetHighMemoryStreams');
    }
    this.settings = settings;
    this.stopBytes = settings.maxBufferedBytes * settings.stopAcceptingRequests;
    this.resetBytes = settings.maxBufferedBytes * settings.resetHighMemoryStreams;
    this.minimumAccount = 2 ** settings.minimumAccountToTrackPowerOfTwo;
    const head: BufferAccount = { bufferedBytes: () => 0, overloadReset: () => {}, accounted: 0, prevAccount: undefined, nextAccount: undefined };
    head.prevAccount = head.nextAccount = head;
    this.accounts = head;
  }

  /** False while `stop_accepting_requests` is active: new CONNECTs and requests get 503 `OM`. */
  get acceptingRequests(): boolean {
    return !this.stopAccepting;
  }

  /** Live accounts. */
  get accountCount(): number {
    return this.count;
  }

  /** Count a refusal under `stop_accepting_requests` (`tunnel`: a CONNECT). */
  refused(kind: 'request' | 'tunnel'): void {
    if (kind === 'tunnel') this.rejectedTunnels++;
    else this.rejectedRequests++;
  }

  /** Start counting `a` (sampled from the next refresh on). */
  open(a: BufferAccount): void {
    if (a.nextAccount !== undefined) return;
    a.accounted = 0;
    const head = this.accounts;
    a.prevAccount = head;
    a.nextAccount = head.nextAccount;
    head.nextAccount!.prevAccount = a;
    head.nextAccount = a;
    this.count++;
    if (this.timer === undefined) {
      this.timer = setInterval(refreshManager, this.settings.refreshIntervalMs, this);
      this.timer.unref();
    }
  }

  /** Stop counting `a` (its exchange is over); idempotent. */
  close(a: BufferAccount): void {
    const prev = a.prevAccount;
    const next = a.nextAccount;
    if (prev === undefined || next === undefined) return;
    prev.nextAccount = next;
    next.prevAccount = prev;
    a.prevAccount = a.nextAccount = undefined;
    this.count--;
    this.bufferedBytes -= a.accounted;
    a.accounted = 0;
  }

  /** Sample every account, then set the actions (see the module comment). */
  refresh(): void {
    let total = 0;
    const head = this.accounts;
    for (let a = head.nextAccount!; a !== head; a = a.nextAccount!) {
      const n = a.bufferedBytes();
      a.accounted = n;
      total += n;
    }
    this.bufferedBytes = total;
    // Once past the budget, keep shedding until under the first threshold: streams still filling
    // after a reset would otherwise hold the total between the thresholds, refusing all new traffic.
    this.resetting = total > this.resetBytes || (this.resetting && total > this.stopBytes);
    if (this.resetting) this.shed();
    this.stopAccepting = this.bufferedBytes > this.stopBytes;
    if (this.count === 0 && this.timer !== undefined) {
      clearInterval(this.timer);
      this.timer = undefined;
    }
  }

  /** Reset the largest accounts until the total is under the first threshold. */
  private shed(): void {
    const c = this.candidates;
    const head = this.accounts;
    for (let a = head.nextAccount!; a !== head; a = a.nextAccount!) if (a.accounted >= this.minimumAccount) c.push(a);
    c.sort(largestFirst);
    let n = 0;
    for (const a of c) {
      if (this.bufferedBytes <= this.stopBytes || n === MAX_RESETS_PER_REFRESH) break;
      n++;
      this.resets++;
      this.close(a);
      a.overloadReset();
    }
    c.length = 0;
  }

  /** Stop sampling (shutdown); accounts are left to their exchanges. */
  stop(): void {
    if (this.timer !== undefined) clearInterval(this.timer);
    this.timer = undefined;
  }
}

function refreshManager(m: OverloadManager): void {
  m.refresh();
}

function largestFirst(a: BufferAccount, b: BufferAccount): number {
  return b.accounted - a.accounted;
}
