/**
 * RequestMirror: fire-and-forget copies of requests to another backend, as Envoy's shadowing
 * (envoyproxy/envoy source/common/router/shadow_writer_impl.cc; Istio maps Gateway API
 * RequestMirror to `request_mirror_policies`): the copy carries the primary's upstream headers with
 * the host suffixed `-shadow`, its response is read and discarded, and it never delays or fails the
 * primary request. Copies in flight are bounded per mirror target cluster, as Envoy bounds requests
 * per cluster (`circuit_breakers` `max_requests`, envoyproxy/envoy
 * source/common/upstream/resource_manager_impl.h): one slow mirror target only loses its own
 * copies. Beyond the bound a copy is dropped; the first drop of a target is logged at warn, then at
 * most one warning per target a minute (with the count dropped since). Each copy is aborted after a
 * timeout.
 */
import type { Dispatcher } from 'undici';
import { log } from '../util/index.ts';
import { type ClusterManager, type UpstreamHandler, pickEndpoint } from '../upstream/index.ts';
import { shadowAuthority, type Mirror } from '../routing/index.ts';

/** Bounds of mirrored requests. */
export interface MirrorOptions {
  /** Copies in flight at once to one mirror target cluster (default 64); beyond it that target's copies are dropped. */
  readonly maxInFlight?: number;
  /** A copy still running after this long (ms, default 30 s) is aborted. */
  readonly timeoutMs?: number;
}

/** The request to copy, as the router sends it upstream. */
export interface MirroredRequest {
  readonly method: string;
  /** Origin-form path as sent to the primary (after rewrites). */
  readonly path: string;
  /** The primary's `:authority` / Host. */
  readonly authority: string;
  /** The primary's upstream header list (copied, not shared). */
  readonly headers: readonly string[];
  /** The whole request body, or null for none. */
  readonly body: Buffer | null;
}

/** Sends mirror copies through the cluster manager (one per router). */
export class MirrorSender {
  private readonly clusters: ClusterManager;
  private readonly maxInFlight: number;
  private readonly timeoutMs: number;
  /** Copies in flight by mirror target cluster (entries removed at 0). */
  private readonly inFlight = new Map<string, number>();
  /** Dropped copies by cluster: when the last warning went out and how many were dropped since. */
  private readonly drops = new Map<string, { warnedAt: number; since: number }>();

  constructor(clusters: ClusterManager, opts: MirrorOptions = {}) {
    this.clusters = clusters;
    this.maxInFlight = opts.maxInFlight ?? 64;
    this.timeoutMs = opts.timeoutMs ?? 30_000;
  }

  /** Copies currently in flight to `cluster`, or to every target when omitted. */
  active(cluster?: string): number {
    if (cluster !== undefined) return this.inFlight.get(cluster) ?? 0;
    let n = 0;
    for (const v of this.inFlight.values()) n += v;
    return n;
  }

  /** Log a drop: warn at the first one of a target, then at most once a minute per target. */
  private dropped(cluster: string, inFlight: number): void {
    const now = Date.now();
    const d = this.drops.get(cluster);
    if (d && now - d.warnedAt < DROP_WARN_INTERVAL_MS) {
      d.since++;
      log.debug({ cluster, inFlight }, 'routing: mirror dropped, too many mirrored requests in flight to this target');
      return;
    }
    log.warn(
      { cluster, inFlight, dropped: (d?.since ?? 0) + 1 },
      `routing: mirrored requests to ${cluster} dropped: ${this.maxInFlight} copies already in flight to it (the target is slow or unreachable); other mirror targets are not affected`,
    );
    this.drops.set(cluster, { warnedAt: now, since: 0 });
  }

  /**
   * Send a copy of `req` to `mirror`'s backend (sampled by its fraction) using HTTP/2 when `h2`.
   * Returns at once; never throws.
   */
  send(mirror: Mirror, req: MirroredRequest, h2: boolean): void {
    if (mirror.fraction < 1 && Math.random() >= mirror.fraction) return;
    const cluster = mirror.backend.cluster;
    const inFlight = this.inFlight.get(cluster) ?? 0;
    if (inFlight >= this.maxInFlight) return this.dropped(cluster, inFlight);
    const ep = pickEndpoint(this.clusters.lb, mirror.backend.target, '', undefined);
    if (!ep) {
      log.debug({ cluster: mirror.backend.cluster }, 'routing: mirror dropped, no healthy endpoint');
      return;
    }
    const authority = shadowAuthority(req.authority);
    const headers: string[] = [];
    for (let i = 0; i < req.headers.length; i += 2) if (req.headers[i].toLowerCase() !== 'host') headers.push(req.headers[i], req.headers[i + 1]);
    this.inFlight.set(cluster, inFlight + 1);
    const handler = new MirrorHandler(() => this.release(cluster), this.timeoutMs);
    try {
      if (h2) this.clusters.h2For(ep).dispatch({ method: req.method, path: req.path, authority, headers, body: req.body }, handler);
      else {
        headers.unshift('host', authority);
        this.clusters.dispatcherFor(ep).dispatch({ method: req.method, path: req.path, headers, body: req.body }, handler);
      }
    } catch (err) {
      handler.onError(err as Error);
    }
  }

  private release(cluster: string): void {
    const n = (this.inFlight.get(cluster) ?? 1) - 1;
    if (n <= 0) this.inFlight.delete(cluster);
    else this.inFlight.set(cluster, n);
  }
}

/** A warning about dropped mirror copies at most this often per target (ms). */
const DROP_WARN_INTERVAL_MS = 60_000;

/** Reads and discards the mirror's answer; releases its slot once, on completion, error or timeout. */
class MirrorHandler implements UpstreamHandler, Dispatcher.DispatchHandler {
  private abort: ((err?: Error) => void) | undefined;
  private done: (() => void) | undefined;
  private readonly timer: NodeJS.Timeout;

  constructor(done: () => void, timeoutMs: number) {
    this.done = done;
    this.timer = setTimeout(() => {
      this.abort?.(new Error('mirror timeout'));
      this.finish();
    }, timeoutMs);
    this.timer.unref();
  }

  onConnect(abort: (err?: Error) => void): void {
    this.abort = abort;
    if (!this.done) abort(new Error('mirror timeout'));
  }

  onHeaders(): boolean {
    return true;
  }

  onData(): boolean {
    return true;
  }

  onComplete(): void {
    this.finish();
  }

  onError(err: Error): void {
    if (this.done) log.debug({ err: err.message }, 'routing: mirrored request failed');
    this.finish();
  }

  private finish(): void {
    clearTimeout(this.timer);
    const d = this.done;
    this.done = undefined;
    d?.();
  }
}
