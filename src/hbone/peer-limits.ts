/**
 * Per-client limits of the HBONE listener, keyed by the client's IP address (in ambient mode the
 * source pod's: ztunnel dials from the pod's network namespace): concurrent connections, a
 * connection rate and a stream rate, each a token bucket. They bound what one client can cost
 * everyone else, e.g. a rapid-reset attacker that reconnects after each GOAWAY: its streams beyond
 * the budget are refused before any CONNECT handling, its sessions are then closed, and its new
 * connections are refused before the TLS handshake until its stream budget is half full again.
 * Envoy has no per-client equivalent by default (its connection_limit and local_ratelimit filters
 * are per listener); 0 turns a limit off.
 *
 * Under `--concurrency N` (src/workers) the primary accepts the connections and counts them with
 * its own PeerLimits for all the workers; each worker keeps the stream budgets of the connections
 * it holds and tells the primary when it throttles a client ({@link PeerLimits.onThrottle}), which
 * then refuses that client's new connections for as long ({@link PeerLimits.block}).
 */

/** The limits (counts, per second); 0 disables one. */
export interface PeerLimitSettings {
  readonly maxConnectionsPerPeer: number;
  readonly peerConnectionRate: number;
  readonly peerConnectionBurst: number;
  readonly peerStreamRate: number;
  readonly peerStreamBurst: number;
}

/** Why a connection is refused, for the counter and the log. */
export type PeerRefusal = 'peer_connections' | 'peer_connection_rate' | 'peer_stream_rate';

interface Bucket {
  tokens: number;
  at: number;
}

interface Peer {
  connections: number;
  conn: Bucket;
  streams: Bucket;
  /** The stream budget ran out: connections are refused until it is half full again. */
  throttled: boolean;
  /** Connections are refused until then (performance.now() ms): throttled by another process ({@link PeerLimits.block}). */
  blockedUntil: number;
  lastUsed: number;
}

/** Peers remembered at most; beyond it, those without connections are forgotten first. */
const MAX_PEERS = 65_536;

export class PeerLimits {
  private readonly s: PeerLimitSettings;
  private readonly peers = new Map<string, Peer>();
  /** Told when a client gets throttled, with how long until its stream budget is half full again (ms). */
  private readonly onThrottle: ((ip: string, forMs: number) => void) | undefined;

  constructor(settings: PeerLimitSettings, onThrottle?: (ip: string, forMs: number) => void) {
    this.s = settings;
    this.onThrottle = onThrottle;
  }

  /** A TCP connection from `ip` was accepted: undefined to keep it (call {@link closed} later), else why to refuse it. */
  opened(ip: string, now = performance.now()): PeerRefusal | undefined {
    const p = this.peer(ip, now);
    if (now < p.blockedUntil) return 'peer_stream_rate';
    if (p.throttled) {
      refill(p.streams, this.s.peerStreamRate, this.s.peerStreamBurst, now);
      if (p.streams.tokens < this.s.peerStreamBurst / 2) return 'peer_stream_rate';
      p.throttled = false;
    }
    if (this.s.maxConnectionsPerPeer > 0 && p.connections >= this.s.maxConnectionsPerPeer) return 'peer_connections';
    if (this.s.peerConnectionRate > 0 && !take(p.conn, this.s.peerConnectionRate, this.s.peerConnectionBurst, now)) return 'peer_connection_rate';
    p.connections++;
    return undefined;
  }

  /** A connection {@link opened} without refusal closed. */
  closed(ip: string): void {
    const p = this.peers.get(ip);
    if (p && p.connections > 0) p.connections--;
  }

  /** A new stream from `ip`: true to serve it, false when the client is over its stream rate (it is then throttled). */
  stream(ip: string, now = performance.now()): boolean {
    if (this.s.peerStreamRate <= 0) return true;
    const p = this.peer(ip, now);
    if (take(p.streams, this.s.peerStreamRate, this.s.peerStreamBurst, now)) return true;
    if (!p.throttled) this.throttled(ip, p);
    return false;
  }

  /**
   * The client was caught abusing its streams (a rapid reset): its stream budget is spent, so its
   * next stream is refused (and its session closed) and its new connections wait until the budget
   * is half full again, as when it ran out. False when the stream rate is not limited.
   */
  throttle(ip: string, now = performance.now()): boolean {
    if (this.s.peerStreamRate <= 0) return false;
    const p = this.peer(ip, now);
    refill(p.streams, this.s.peerStreamRate, this.s.peerStreamBurst, now);
    p.streams.tokens = 0;
    this.throttled(ip, p);
    return true;
  }

  /** Refuse `ip`'s new connections for `forMs` (another process throttled it: src/workers). */
  block(ip: string, forMs: number, now = performance.now()): void {
    const p = this.peer(ip, now);
    p.blockedUntil = Math.max(p.blockedUntil, now + forMs);
  }

  private throttled(ip: string, p: Peer): void {
    p.throttled = true;
    const s = this.s;
    this.onThrottle?.(ip, (Math.max(0, s.peerStreamBurst / 2 - p.streams.tokens) / s.peerStreamRate) * 1000);
  }

  private peer(ip: string, now: number): Peer {
    let p = this.peers.get(ip);
    if (!p) {
      if (this.peers.size >= MAX_PEERS) this.forget();
      p = {
        connections: 0,
        conn: { tokens: this.s.peerConnectionBurst, at: now },
        streams: { tokens: this.s.peerStreamBurst, at: now },
        throttled: false,
        blockedUntil: 0,
        lastUsed: now,
      };
      this.peers.set(ip, p);
    }
    p.lastUsed = now;
    return p;
  }

  /** Drop the peers without connections (their buckets would be full again soon anyway). */
  private forget(now = performance.now()): void {
    for (const [ip, p] of this.peers) if (p.connections === 0 && !p.throttled && p.blockedUntil <= now) this.peers.delete(ip);
  }
}

function refill(b: Bucket, rate: number, burst: number, now: number): void {
  b.tokens = Math.min(burst, b.tokens + ((now - b.at) / 1000) * rate);
  b.at = now;
}

function take(b: Bucket, rate: number, burst: number, now: number): boolean {
  refill(b, rate, burst, now);
  if (b.tokens < 1) return false;
  b.tokens--;
  return true;
}
