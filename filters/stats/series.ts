/**
 * The stats filter's caches (index.ts): interned source and destination label tuples, the series
 * of each (source, destination) pair by the per-request rest of the tuple, and what open TCP
 * tunnels and gRPC streams have reported so far. Bounded: see CACHE_ENTRIES and BoundedMap.
 */
import type { ConnectionContext, StreamContext } from '../../src/pipeline/index.ts';
import type { PeerInfo } from '../../src/peer/index.ts';
import type { CounterSeries, HistogramSeries } from './instruments.ts';

/**
 * A Map with at most `max` entries: when full, the oldest quarter (by insertion) is dropped.
 * Reads are a plain `Map.get`; an evicted tuple is only rebuilt (its series stay in the instruments).
 */
export class BoundedMap<K, V> {
  private readonly map = new Map<K, V>();
  private readonly max: number;
  constructor(max: number) {
    this.max = max;
  }
  get(k: K): V | undefined {
    return this.map.get(k);
  }
  set(k: K, v: V): void {
    if (this.map.size >= this.max) {
      let n = Math.max(1, this.max >> 2);
      for (const key of this.map.keys()) {
        this.map.delete(key);
        if (--n === 0) break;
      }
    }
    this.map.set(k, v);
  }
}

let nextTupleId = 1;

/**
 * A source or destination part of a label tuple, interned: equal values, one object (while
 * cached). A source tuple also holds the series cache of its pairs, by destination id.
 */
export class Tuple {
  readonly id: number;
  readonly values: readonly string[];
  /** Source tuples: destination id → pair (valid for cache generation `gen`). */
  readonly pairs: Map<number, Pair>;
  gen: number;
  constructor(values: readonly string[], gen: number) {
    this.id = nextTupleId++;
    this.values = values;
    this.pairs = new Map();
    this.gen = gen;
  }
}

/** The series one HTTP/gRPC label tuple records into. */
export interface HttpSeries {
  readonly requests: CounterSeries;
  readonly duration: HistogramSeries;
  readonly requestBytes: HistogramSeries;
  readonly responseBytes: HistogramSeries;
}
export interface TcpSeries {
  readonly opened: CounterSeries;
  readonly closed: CounterSeries;
  readonly sent: CounterSeries;
  readonly received: CounterSeries;
}
export interface MessageSeries {
  readonly request: CounterSeries;
  readonly response: CounterSeries;
}

/**
 * The series of one (source, destination) pair, by the per-request rest of the tuple. The common
 * case (no response flag, a 3-digit status) is keyed by one small integer; the rest by a string.
 */
export class Pair {
  readonly src: Tuple;
  readonly dst: Tuple;
  readonly http = new Map<number, HttpSeries>();
  readonly other = new Map<string, HttpSeries>();
  readonly tcp = new Map<string, TcpSeries>();
  messages: MessageSeries | undefined = undefined;
  constructor(src: Tuple, dst: Tuple) {
    this.src = src;
    this.dst = dst;
  }
}

/** Cached pairs and series, all generations together; past it the caches start over. */
export const CACHE_ENTRIES = 8192;

/** Per tunnel: its source tuple (for the downstream peer it was built from) and its TCP reporting state. */
export class ConnStats {
  peer: PeerInfo | undefined;
  src: Tuple;
  tcp: TcpLive | undefined;
  constructor(peer: PeerInfo | undefined, src: Tuple) {
    this.peer = peer;
    this.src = src;
    this.tcp = undefined;
  }
}

/** An open TCP tunnel: what it has reported so far, and under which series (its pair and response flags). */
export class TcpLive {
  readonly conn: ConnectionContext;
  readonly pair: Pair;
  series: TcpSeries;
  /** The response flags `series` was picked for. */
  flags: string;
  sent = 0;
  received = 0;
  constructor(conn: ConnectionContext, pair: Pair, series: TcpSeries) {
    this.conn = conn;
    this.pair = pair;
    this.series = series;
    this.flags = conn.responseFlags;
  }
  /** Add the bytes moved since the last report. */
  report(): void {
    const c = this.conn;
    if (c.bytesSent !== this.sent) {
      this.series.sent.add(c.bytesSent - this.sent);
      this.sent = c.bytesSent;
    }
    if (c.bytesReceived !== this.received) {
      this.series.received.add(c.bytesReceived - this.received);
      this.received = c.bytesReceived;
    }
  }
}

/** An open gRPC stream: its message series (fixed at its first report, as Envoy's) and what it has reported. */
export class GrpcLive {
  readonly stream: StreamContext;
  series: MessageSeries | undefined;
  request = 0;
  response = 0;
  constructor(stream: StreamContext) {
    this.stream = stream;
    this.series = undefined;
  }
}
