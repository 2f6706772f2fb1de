/**
 * RequestMirror: fire-and-forget copies of requests to another backend, as Envoy's shadowing
 * (ENV:source/common/router/shadow_writer_impl.cc; Istio maps Gateway API RequestMirror to
 * `request_mirror_policies`): the copy carries the primary's upstream headers with the host
 * suffixed `-shadow`, its response is read and discarded, and it never delays or fails the
 * primary request. Copies in flight are bounded (beyond the bound a copy is dropped, logged at
 * debug) and each is aborted after a timeout.
 */
import type { Dispatcher } from 'undici';
import { log } from '../util/log.ts';
import type { ClusterManager } from '../upstream/cluster-manager.ts';
import type { UpstreamHandler } from '../upstream/h2-upstream.ts';
import { pickEndpoint } from '../upstream/pick-endpoint.ts';
import { shadowAuthority } from './filters.ts';
import type { Mirror } from './types.ts';

/** Bounds of mirrored requests. */
export interface MirrorOptions {
  /** Copies in flight at once (default 64); beyond it copies are dropped. */
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
  private inFlight = 0;

  constructor(clusters: ClusterManager, opts: MirrorOptions = {}) {
    this.clusters = clusters;
    this.maxInFlight = opts.maxInFlight ?? 64;
    this.timeoutMs = opts.timeoutMs ?? 30_000;
  }

  /** Copies currently in flight. */
  get active(): number {
    return this.inFlight;
  }

  /**
   * Send a copy of `req` to `mirror`'s backend (sampled by its fraction) using HTTP/2 when `h2`.
   * Returns at once; never throws.
   */
  send(mirror: Mirror, req: MirroredRequest, h2: boolean): void {
    if (mirror.fraction < 1 && Math.random() >= mirror.fraction) return;
    if (this.inFlight >= this.maxInFlight) {
      log.debug({ cluster: mirror.backend.cluster, inFlight: this.inFlight }, 'routing: mirror dropped, too many mirrored requests in flight');
      return;
    }
    const ep = pickEndpoint(this.clusters.lb, mirror.backend.target, '', undefined);
    if (!ep) {
      log.debug({ cluster: mirror.backend.cluster }, 'routing: mirror dropped, no healthy endpoint');
      return;
    }
    const authority = shadowAuthority(req.authority);
    const headers: string[] = [];
    for (let i = 0; i < req.headers.length; i += 2) if (req.headers[i].toLowerCase() !== 'host') headers.push(req.headers[i], req.headers[i + 1]);
    this.inFlight++;
    const handler = new MirrorHandler(() => this.inFlight--, this.timeoutMs);
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
}

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
