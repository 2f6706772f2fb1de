/**
 * HTTP/1.1 exchanges the pooled undici dispatcher cannot carry, sent with Node's own HTTP client
 * over an upstream tunnel of their own (one HBONE CONNECT stream, or one TCP connection for
 * endpoints outside the mesh, per request; never reused). The router delegates two cases here:
 *
 * - **WebSocket upgrades** (istio/istio#27078; Istio's waypoint routes carry `upgrade_configs:
 *   websocket`). The request goes upstream over HTTP/1.1 whatever the port's protocol (Envoy falls
 *   back to HTTP/1.1 for upgrades: istio/istio#27078), with `Upgrade`, `Connection: Upgrade` and
 *   `Sec-WebSocket-*` intact. A `101` is relayed as received (status line, header spelling and
 *   `Sec-WebSocket-Accept` unchanged; response-header filters still run), then bytes flow both
 *   ways with half-close and teardown as in {@link relay}, counted into the StreamContext
 *   (`bytesReceived`: client → upstream, `bytesSent`: upstream → client). The exchange completes
 *   (`onStreamComplete`, response code 101) when both sides are closed. Any other answer is
 *   passed through and the tunnel is then closed. The request timeout runs until the 101 only.
 * - **`Expect: 100-continue`** (envoyproxy/envoy#12131, istio/istio#36278): `Expect` is relayed end
 *   to end. The client's body is piped upstream as it arrives (a client that gets no 100 sends it
 *   after its own wait, about 1 s for curl). The upstream's first `100 Continue` is written
 *   downstream; later ones are dropped (envoyproxy/envoy#2563). A final answer that comes before
 *   the upload is complete (417, 401, an early 413, …) is passed through, the rest of the upload is
 *   read and discarded, the upstream tunnel is reset and the downstream connection closes after the
 *   response. A 100 never counts as the response: a request timeout after it still answers 504 `UT`
 *   (envoyproxy/envoy#12131).
 *
 * No retries: an upgrade or a streamed upload cannot be replayed. Failures map to Envoy's flags
 * as the router's do (upstream/failure.ts): no endpoint 503 `UH`, connect failure 503 `UF`, reset
 * before the response 503 `UC`; after the response started the downstream is reset and the flag
 * recorded; after a 101 the side that failed first decides the flag (`UC` upstream, `DC`
 * downstream).
 */
import http, { type ClientRequest, type IncomingMessage, type ServerResponse } from 'node:http';
import type { Socket } from 'node:net';
import type { Duplex } from 'node:stream';
import { relay, teardown, joinWritev } from '../hbone/index.ts';
import type { Target } from '../state/index.ts';
import { ResponseFlag, asksForContinue, downstreamClosed, HeaderList, type OverloadManager, OVERLOAD_DETAILS, RelayAccount } from '../pipeline/index.ts';
import { respond, type StreamContext, stripHopByHop } from '../pipeline/index.ts';
import { replyIfAllRefused } from '../netpol/index.ts';
import { answerFailure, connectResponseHeaders, type ClusterManager, isConnectFailure, NO_HEALTHY_UPSTREAM, RESPONSE_TIMEOUT, upstreamFailure, type UpstreamFailure, type UpstreamLease } from '../upstream/index.ts';
import { log } from '../util/index.ts';
import { startAttempt } from './attempt-endpoint.ts';

/** Which of the two cases an exchange is. */
export type DedicatedKind = 'upgrade' | 'continue';

/** What the router hands over once the upstream headers are final (filters ran). */
export interface DedicatedRequest {
  readonly kind: DedicatedKind;
  readonly target: Target;
  /** The upstream header block, raw (case kept): hop-by-hop removed, upgrade headers restored. */
  readonly headers: HeaderList;
  /** Origin-form request target. */
  readonly path: string;
  /** Request timeout (ms) until the final response ends (upgrades: until the 101); 0 = none. */
  readonly requestTimeoutMs: number;
  /** Largest upstream response header block (bytes). */
  readonly maxResponseHeadersBytes: number;
  /**
   * Retries when the upstream tunnel cannot be opened (the route's `connect-failure` policy), each
   * on another endpoint when there is one. Nothing was sent yet, so this is always safe.
   */
  readonly connectRetries: number;
  /** The buffered-bytes budget an upgraded exchange's relay counts in, if any. */
  readonly overload?: OverloadManager;
}

/**
 * Whether an HTTP/1.1 downstream still waits for `100 Continue`. Node's inner server hands such
 * requests over without answering 100 (it has a `checkContinue` listener); HTTP/1.0 and
 * HTTP/2 requests never count (Node ignores Expect on 1.0; its h2 layer answers 100 itself), nor
 * do requests whose body a filter already read (it answered 100: `bufferRequestBody`).
 */
export function expectsContinue(stream: StreamContext): boolean {
  return stream.bufferedBody === undefined && asksForContinue(stream);
}

/**
 * The dedicated case `stream` falls in, if any: a WebSocket upgrade (the inner server emitted it
 * as `upgrade`), or a 100-continue request toward an HTTP/1.1 upstream (`upstreamH2` false; an
 * h2c upstream keeps the pooled path and the waypoint answers 100 itself).
 */
export function dedicatedKind(stream: StreamContext, upstreamH2: boolean): DedicatedKind | undefined {
  if (stream.http2) return undefined;
  // Node sets `upgrade` on requests its server emitted as `upgrade` (WebSocket ones only here).
  if ((stream.req as IncomingMessage & { upgrade?: boolean }).upgrade === true) return 'upgrade';
  if (!upstreamH2 && expectsContinue(stream)) return 'continue';
  return undefined;
}

/**
 * Put an upgrade request's `Upgrade` header (as received) and `Connection: Upgrade` back into
 * `headers`, which lost them with the other hop-by-hop headers.
 */
export function restoreUpgradeHeaders(raw: readonly string[], headers: HeaderList): void {
  let connection = 'Connection';
  let upgrade: [string, string] | undefined;
  for (let i = 0; i < raw.length; i += 2) {
    const n = raw[i].toLowerCase();
    if (n === 'upgrade') upgrade ??= [raw[i], raw[i + 1]];
    else if (n === 'connection') connection = raw[i];
  }
  if (!upgrade) return;
  headers.append(connection, 'Upgrade');
  headers.append(upgrade[0], upgrade[1]);
}

/** Forward `stream` over a dedicated upstream tunnel (see the module comment). Never throws. */
export function forwardDedicated(stream: StreamContext, clusters: ClusterManager, r: DedicatedRequest): void {
  new DedicatedExchange(stream, clusters, r).start(r.target);
}

/** A clean close of a finished upstream exchange waits this long (ms) for the peer's end before a reset. */
const CLOSE_GRACE_MS = 2000;

/** One request on its own upstream tunnel; `cancel()` is the core's handle (StreamContext.abortUpstream). */
class DedicatedExchange {
  readonly stream: StreamContext;
  private readonly clusters: ClusterManager;
  private readonly r: DedicatedRequest;
  /** The endpoint of the current connect attempt, counted active in the load balancer until released. */
  private lease: UpstreamLease | undefined;
  private tunnel: Duplex | undefined;
  private creq: ClientRequest | undefined;
  private timer: NodeJS.Timeout | undefined;
  /** Nothing more is to be done upstream (answered, failed, cancelled, timed out or upgraded). */
  private over: boolean;
  private sent100: boolean;

  constructor(stream: StreamContext, clusters: ClusterManager, r: DedicatedRequest) {
    this.stream = stream;
    this.clusters = clusters;
    this.r = r;
    this.lease = undefined;
    this.tunnel = undefined;
    this.creq = undefined;
    this.timer = undefined;
    this.over = false;
    this.sent100 = false;
  }

  start(target: Target): void {
    if (this.r.requestTimeoutMs > 0) this.timer = setTimeout(onTimeout, this.r.requestTimeoutMs, this);
    this.connect(target, undefined);
  }

  /** Pick an endpoint (avoiding `tried`) and open its tunnel. */
  private connect(target: Target, tried: string[] | undefined): void {
    const s = this.stream;
    const lease = startAttempt(this.clusters, target, s, tried);
    if (!lease) {
      this.over = true;
      this.closeDownstreamAfterReply();
      if (!replyIfAllRefused(s, target)) answerFailure(s, NO_HEALTHY_UPSTREAM);
      return;
    }
    this.lease = lease;
    const ep = lease.ep;
    s.abortUpstream = this;
    this.clusters.openTcp(ep, 'http/1.1').then(
      (t) => this.onTunnel(t),
      (err: Error) => {
        if (this.over || !isConnectFailure(err)) return this.fail(err);
        if (s.attempts <= this.r.connectRetries) {
          this.release();
          return this.connect(target, [...(tried ?? []), ep.authority]);
        }
        this.fail(err);
        // Envoy's `UF,URX`: the retry policy wanted another attempt but the budget was spent.
        if (this.r.connectRetries > 0) s.addFlag(ResponseFlag.UpstreamRetryLimitExceeded);
      },
    );
  }

  private onTunnel(t: Duplex): void {
    if (this.over || downstreamClosed(this.stream)) {
      teardown(t);
      this.finish();
      return;
    }
    const tunnel = joinWritev(t);
    this.tunnel = tunnel;
    this.stream.upstreamConnectHeaders = connectResponseHeaders(t);
    // Errors surface through the client request (and the relay); a late one must not throw.
    tunnel.on('error', onTunnelError);
    const s = this.stream;
    // No agent: the request owns this one connection, which says so to the upstream (an
    // upgrade's headers carry `Connection: Upgrade` instead).
    const raw = this.r.kind === 'upgrade' ? this.r.headers.raw : [...this.r.headers.raw, 'Connection', 'close'];
    let creq: ClientRequest;
    try {
      creq = http.request({
        method: s.method,
        path: this.r.path,
        headers: raw,
        setHost: false,
        maxHeaderSize: this.r.maxResponseHeadersBytes,
        createConnection: () => tunnel as unknown as Socket,
      });
    } catch (err) {
      // Node's client validates the target and header values (the inner parser let them through).
      return this.fail(err as Error);
    }
    this.creq = creq;
    creq.on('error', (err) => this.fail(err));
    creq.once('response', (res) => this.onResponse(res));
    if (this.r.kind === 'upgrade') {
      creq.once('upgrade', (res, socket, head) => this.onUpgrade(res, socket, head));
      creq.end();
      return;
    }
    creq.on('continue', () => this.onContinue());
    // The head goes now: the client sends its body only after a 100 (or its own wait).
    creq.flushHeaders();
    const req = s.req as IncomingMessage;
    req.on('data', (c: Buffer) => {
      s.bytesReceived += c.length;
    });
    req.pipe(creq);
  }

  /** The upstream's `100 Continue`: relayed once, before any final response. */
  private onContinue(): void {
    const s = this.stream;
    if (this.sent100 || this.over || s.res.headersSent || downstreamClosed(s)) return;
    this.sent100 = true;
    (s.res as ServerResponse).writeContinue();
  }

  /** A final (non-101) response: passed through, then the tunnel is closed. */
  private onResponse(ures: IncomingMessage): void {
    if (this.over) {
      ures.resume();
      return;
    }
    const s = this.stream;
    const res = s.res as ServerResponse;
    const req = s.req as IncomingMessage;
    s.upstreamResponseMonotonic = performance.now();
    s.responseCodeDetails = 'via_upstream';
    const uploadDone = this.r.kind === 'upgrade' || req.complete;
    if (!uploadDone) {
      // The rest of the upload is not needed (417, 401, an early answer): stop forwarding it,
      // read and discard it, and close the downstream connection after this response.
      req.unpipe(this.creq);
      req.resume();
      res.shouldKeepAlive = false;
    }
    const headers = new HeaderList(stripHopByHop(ures.rawHeaders, ures.headers.connection));
    if (!respond(s, ures.statusCode ?? 502, ures.statusMessage, headers)) {
      this.over = true;
      this.finish();
      return;
    }
    ures.on('data', (c: Buffer) => {
      s.bytesSent += c.length;
      if (!res.write(c)) {
        ures.pause();
        res.once('drain', () => ures.resume());
      }
    });
    ures.once('error', (err) => this.fail(err));
    ures.once('end', () => {
      if (this.over) return;
      this.over = true;
      const t = ures.rawTrailers;
      if (t.length > 0) {
        const pairs: [string, string][] = [];
        for (let i = 0; i < t.length; i += 2) pairs.push([t[i], t[i + 1]]);
        try {
          res.addTrailers(pairs);
        } catch {
          // Non-chunked response: trailers cannot be sent.
        }
      }
      res.end();
      this.finish(uploadDone && this.creq?.writableFinished === true);
    });
  }

  /** `101 Switching Protocols`: relay the head, then bytes both ways until both sides close. */
  private onUpgrade(ures: IncomingMessage, upstream: Duplex, head: Buffer): void {
    const s = this.stream;
    const res = s.res as ServerResponse;
    const downstream = res.socket;
    if (this.over || downstreamClosed(s) || !downstream) {
      teardown(upstream);
      this.finish();
      return;
    }
    this.over = true;
    this.clearTimer();
    s.abortUpstream = undefined;
    s.upstreamResponseMonotonic = performance.now();
    s.responseCodeDetails = 'via_upstream';
    // The head as received: no Date added, header names and values (Sec-WebSocket-Accept) kept.
    res.sendDate = false;
    if (!respond(s, 101, ures.statusMessage, new HeaderList([...ures.rawHeaders]))) {
      teardown(upstream);
      this.finish();
      return;
    }
    res.end();
    // The tunnel now carries the upgraded protocol: the response object lets go of it, and the
    // exchange signals its own end (the response's 'close') once the relay is over.
    res.detachSocket(downstream);
    if (head.length > 0) upstream.unshift(head);
    let firstFailure: 'upstream' | 'downstream' | undefined;
    const failed = (side: 'upstream' | 'downstream') => () => {
      firstFailure ??= side;
    };
    upstream.on('error', failed('upstream'));
    upstream.once('aborted', failed('upstream'));
    downstream.on('error', failed('downstream'));
    downstream.once('aborted', failed('downstream'));
    // Counted in the overload budget while it relays; reset under overload with flag `OM`.
    const overload = this.r.overload;
    const account = overload
      ? new RelayAccount(downstream, upstream, () => {
          s.addFlag(ResponseFlag.OverloadManager);
          s.responseCodeDetails = OVERLOAD_DETAILS;
          teardown(downstream);
          teardown(upstream);
        })
      : undefined;
    if (account) overload!.open(account);
    void relay(downstream, upstream).then((result) => {
      if (account) overload!.close(account);
      s.bytesReceived += result.bytesReceived;
      s.bytesSent += result.bytesSent;
      if (result.error && s.responseFlags === ResponseFlag.None) {
        if (firstFailure === 'upstream') {
          const f = upstreamFailure(result.error, true);
          s.addFlag(f.flag);
          s.responseCodeDetails = f.details;
        } else {
          s.addFlag(ResponseFlag.DownstreamConnectionTermination);
          s.responseCodeDetails = 'downstream_remote_disconnect';
        }
      }
      this.release();
      res.emit('close');
    });
  }

  /** An upstream failure (connect, reset, protocol error) before the exchange was over. */
  private fail(err: Error & { code?: string }): void {
    if (this.over) return;
    this.over = true;
    this.finish();
    const s = this.stream;
    if (downstreamClosed(s) || s.res.writableEnded) return;
    this.reply(upstreamFailure(err, s.res.headersSent));
  }

  /** Answer `f` (a reset once the response started); an incomplete upload then closes the downstream. */
  private reply(f: UpstreamFailure): void {
    if (!this.stream.res.headersSent) this.closeDownstreamAfterReply();
    answerFailure(this.stream, f);
  }

  /** Called by the core when the downstream went away before the response completed. */
  cancel(): void {
    this.over = true;
    this.finish();
  }

  /** The request timeout: 504 `UT` before the response started (a 100 does not count), else a reset. */
  timeout(): void {
    this.timer = undefined;
    if (this.over) return;
    this.over = true;
    this.finish();
    if (downstreamClosed(this.stream)) return;
    this.reply(RESPONSE_TIMEOUT);
  }

  /** A local answer while the upload is incomplete closes the downstream connection after it. */
  private closeDownstreamAfterReply(): void {
    const req = this.stream.req as IncomingMessage;
    if (this.r.kind === 'continue' && !req.complete) {
      (this.stream.res as ServerResponse).shouldKeepAlive = false;
      if (this.creq) req.unpipe(this.creq);
      req.resume();
    }
  }

  /**
   * Release everything upstream: timer, load-balancer slot, the client request and the tunnel.
   * `clean`: the exchange completed both ways, so the tunnel is ended (END_STREAM / FIN) rather
   * than reset, and reset only if the peer does not close within {@link CLOSE_GRACE_MS}.
   */
  private finish(clean = false): void {
    this.clearTimer();
    this.release();
    const tunnel = this.tunnel;
    if (!tunnel || tunnel.destroyed) return;
    if (clean) {
      if (!tunnel.writableEnded) tunnel.end();
      const t = setTimeout(teardown, CLOSE_GRACE_MS, tunnel);
      t.unref();
      tunnel.once('close', () => clearTimeout(t));
      return;
    }
    const req = this.stream.req as IncomingMessage;
    if (this.creq) req.unpipe(this.creq);
    teardown(tunnel);
    this.creq?.destroy();
  }

  private release(): void {
    this.lease?.release();
  }

  private clearTimer(): void {
    if (this.timer) {
      clearTimeout(this.timer);
      this.timer = undefined;
    }
  }
}

function onTunnelError(err: Error): void {
  log.debug({ err: err.message }, 'dedicated upstream tunnel error');
}

function onTimeout(x: DedicatedExchange): void {
  x.timeout();
}
