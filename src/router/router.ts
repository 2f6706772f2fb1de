/**
 * `envoy.filters.http.router`: the terminal filter. Picks an endpoint of the tunnel's target
 * (service port endpoints, or the workload itself for workload-addressed traffic), sends the
 * request upstream through the cluster manager with bodies streamed both ways under
 * back-pressure, and maps failures to Envoy's status codes and response flags:
 * no endpoint ⇒ 503 `UH`; connect failure ⇒ 503 `UF`; reset after connect ⇒ 503 `UC`/`UR`
 * (before response headers) or a downstream reset (after).
 *
 * It is the one filter that talks to the upstream; it gets the cluster manager from the core,
 * which never hands it to other filters.
 */
import type { IncomingMessage } from 'node:http';
import type { Dispatcher } from 'undici';
import { HboneConnectError } from '../hbone/pool.ts';
import type { FilterEnv, FilterFactory, TerminalFilter } from '../pipeline/filter.ts';
import type { StreamContext } from '../pipeline/context.ts';
import { HeaderList, stripHopByHop } from '../pipeline/headers.ts';
import type { Endpoint } from '../state/types.ts';
import { ResponseFlag } from '../telemetry/response-flags.ts';
import type { ClusterManager } from '../upstream/cluster-manager.ts';
import { pickEndpoint } from '../upstream/pick-endpoint.ts';

/** The router's filter name, as Envoy's. */
export const ROUTER_FILTER_NAME = 'envoy.filters.http.router';

/** The router's factory, bound to the core's cluster manager. */
export function routerFactory(clusters: ClusterManager): FilterFactory<Record<string, never>> {
  return {
    name: ROUTER_FILTER_NAME,
    parseConfig(raw) {
      if (raw !== undefined && (typeof raw !== 'object' || raw === null || Object.keys(raw).length > 0)) {
        throw new Error('the router takes no configuration yet');
      }
      return {};
    },
    create: (_config, env) => new Router(clusters, env),
  };
}

class Router implements TerminalFilter {
  readonly name = ROUTER_FILTER_NAME;
  private readonly clusters: ClusterManager;
  private readonly env: FilterEnv;

  constructor(clusters: ClusterManager, env: FilterEnv) {
    this.clusters = clusters;
    this.env = env;
  }

  forward(stream: StreamContext): void {
    const conn = stream.conn;
    // A tunnel lives across mesh updates: use the current snapshot's view of its target, so new
    // requests on an old tunnel see today's endpoints (Envoy updates clusters under live connections).
    const mesh = this.env.mesh.current;
    const target = mesh === conn.mesh ? conn.target : mesh.resolveTarget(conn.info.targetIp, conn.info.targetPort);
    if (!target) {
      stream.sendLocalReply(404, '', ResponseFlag.NoRouteFound, 'route_not_found');
      return;
    }
    const ep = pickEndpoint(this.clusters.lb, target, conn.info.targetIp);
    if (!ep) {
      stream.sendLocalReply(503, undefined, ResponseFlag.NoHealthyUpstream, 'no_healthy_upstream');
      return;
    }
    const req = stream.req;
    if (countHost(req.rawHeaders) > 1) {
      // Two Host headers make the target ambiguous (RFC 9112 §3.2): refuse rather than forward,
      // and close the connection as after any protocol error.
      stream.res.shouldKeepAlive = false;
      stream.sendLocalReply(400, 'Bad Request: duplicate host header', ResponseFlag.DownstreamProtocolError, 'duplicate_host_header');
      return;
    }
    stream.endpoint = ep;
    stream.upstreamHost = ep.authority;
    const headers = new HeaderList(stripHopByHop(req.rawHeaders, req.headers.connection));
    let path = req.url ?? '/';
    // (`OPTIONS *` lands here too and gets 400: undici cannot send an asterisk-form target.)
    if (path.charCodeAt(0) !== 0x2f) {
      // Absolute-form request target (`GET http://host/p`): send origin-form upstream with the
      // URI's authority as Host, as Envoy does with allow_absolute_url.
      const abs = absoluteForm(path);
      if (!abs) {
        stream.sendLocalReply(400, 'Bad Request: invalid request target', ResponseFlag.DownstreamProtocolError, 'invalid_request_target');
        return;
      }
      path = abs.path;
      headers.set('host', abs.host);
    }
    // Node's server answers `Expect: 100-continue` itself; undici refuses to send the header.
    if (req.headers.expect !== undefined) headers.remove('expect');
    stream.chain.runUpstreamRequest(stream, headers);
    const handler = new UpstreamHandler(stream, ep, this.clusters, headers, path);
    this.clusters.lb.start(ep);
    const length = bodyLength(req);
    if (length === 0) return handler.send(this.clusters.dispatcherFor(ep), null);
    if (length > 0 && length <= SMALL_BODY_BYTES) return collectBody(req, length, handler, this.clusters.dispatcherFor(ep));
    handler.send(this.clusters.dispatcherFor(ep), req);
  }
}

/**
 * Bodies up to this size (bytes, declared by Content-Length) are gathered before the request is
 * sent, so head and body leave in one write: one HTTP/2 DATA frame and one TLS record upstream
 * instead of two. Larger and chunked bodies stream with back-pressure.
 */
const SMALL_BODY_BYTES = 64 * 1024;

/** Declared body size: 0 none, -1 unknown (chunked: stream it), else Content-Length. */
function bodyLength(req: IncomingMessage): number {
  const cl = req.headers['content-length'];
  if (req.headers['transfer-encoding'] !== undefined) return -1;
  if (cl === undefined) return 0;
  const n = Number(cl);
  return Number.isSafeInteger(n) && n >= 0 ? n : -1;
}

function collectBody(req: IncomingMessage, length: number, handler: UpstreamHandler, dispatcher: Dispatcher): void {
  const chunks: Buffer[] = [];
  req.on('data', (c: Buffer) => chunks.push(c));
  req.once('end', () => handler.send(dispatcher, chunks.length === 1 ? chunks[0] : Buffer.concat(chunks, length)));
  // An aborted upload never ends: the downstream close handler cancels the stream.
}

/**
 * undici dispatch handler for one request (legacy handler interface: it hands us raw header
 * buffers, so header case survives). One object per request, no closures on the hot path.
 */
class UpstreamHandler implements Dispatcher.DispatchHandler {
  private readonly stream: StreamContext;
  private readonly ep: Endpoint;
  private readonly clusters: ClusterManager;
  private abort: ((err?: Error) => void) | undefined;
  private finished: boolean;
  /** undici's resume function for this request (one per request, reused for every drain). */
  private resume: () => void;

  private readonly headers: HeaderList;
  private readonly path: string;

  constructor(stream: StreamContext, ep: Endpoint, clusters: ClusterManager, headers: HeaderList, path: string) {
    this.stream = stream;
    this.ep = ep;
    this.clusters = clusters;
    this.headers = headers;
    this.path = path;
    this.abort = undefined;
    this.finished = false;
    this.resume = noop;
    stream.abortUpstream = this;
  }

  /** Send the request upstream with `body` (null, a gathered Buffer, or the request stream). */
  send(dispatcher: Dispatcher, body: Buffer | IncomingMessage | null): void {
    const req = this.stream.req;
    if (this.stream.res.destroyed) return this.done();
    dispatcher.dispatch({ method: req.method ?? 'GET', path: this.path, headers: this.headers.raw, body }, this);
  }

  /** Called by the core when the downstream went away before the response completed. */
  cancel(): void {
    if (this.abort && !this.finished) this.abort(new Error('downstream disconnected'));
    else this.done();
  }

  onConnect(abort: (err?: Error) => void): void {
    this.abort = abort;
  }

  onHeaders(statusCode: number, rawHeaders: Buffer[], resume: () => void, statusText: string): boolean {
    if (statusCode < 200) return true; // 1xx: Node's server already handled Continue.
    this.resume = resume;
    const raw: string[] = new Array(rawHeaders.length);
    for (let i = 0; i < rawHeaders.length; i++) raw[i] = rawHeaders[i].toString('latin1');
    let connection: string | undefined;
    for (let i = 0; i < raw.length; i += 2) if (raw[i].length === 10 && raw[i].toLowerCase() === 'connection') connection = raw[i + 1];
    const s = this.stream;
    s.responseCodeDetails = 'via_upstream';
    if (!s.respond(statusCode, statusText, new HeaderList(stripHopByHop(raw, connection)))) return false;
    const res = s.res;
    if (!res.writableNeedDrain) return true;
    res.once('drain', resume);
    return false;
  }

  onData(chunk: Buffer): boolean {
    const res = this.stream.res;
    if (res.write(chunk)) return true;
    res.once('drain', this.resume);
    return false;
  }

  onComplete(trailers: string[] | null): void {
    this.done();
    const res = this.stream.res;
    if (trailers && trailers.length > 0) {
      const t: Record<string, string> = {};
      for (let i = 0; i < trailers.length; i += 2) t[trailers[i]] = trailers[i + 1];
      try {
        res.addTrailers(t);
      } catch {
        // Non-chunked response: trailers cannot be sent on HTTP/1.1.
      }
    }
    res.end();
  }

  onError(err: Error): void {
    this.done();
    const s = this.stream;
    // Already answered (e.g. a local reply after the request was cancelled): nothing to undo.
    if (s.downstreamClosed || s.res.writableEnded) return;
    const [flag, details] = classify(err, s.res.headersSent);
    if (s.res.headersSent) {
      s.addFlag(flag);
      s.responseCodeDetails = details;
      s.res.destroy();
      return;
    }
    s.sendLocalReply(undefined, undefined, flag, details);
  }

  private done(): void {
    if (this.finished) return;
    this.finished = true;
    this.clusters.lb.finish(this.ep);
  }
}

function noop(): void {}

/** `http(s)://authority/path?q` → origin-form path and authority; undefined for anything else. */
function absoluteForm(target: string): { path: string; host: string } | undefined {
  if (!/^https?:\/\//i.test(target)) return undefined;
  try {
    const u = new URL(target);
    return { path: `${u.pathname}${u.search}`, host: u.host };
  } catch {
    return undefined;
  }
}

function countHost(raw: readonly string[]): number {
  let n = 0;
  for (let i = 0; i < raw.length; i += 2) if (raw[i].length === 4 && raw[i].toLowerCase() === 'host') n++;
  return n;
}

/** Map an upstream failure to Envoy's response flag and details. */
function classify(err: Error & { code?: string }, started: boolean): [string, string] {
  if (err instanceof HboneConnectError || err.code === 'ECONNREFUSED' || err.code === 'UND_ERR_CONNECT_TIMEOUT' || err.code === 'EHOSTUNREACH' || err.code === 'ENETUNREACH') {
    return [ResponseFlag.UpstreamConnectionFailure, 'upstream_reset_before_response_started{connection_failure}'];
  }
  if (err.code === 'UND_ERR_HEADERS_OVERFLOW' || err.code === 'HPE_INVALID_CONSTANT' || (err.code ?? '').startsWith('HPE_')) {
    return [ResponseFlag.UpstreamProtocolError, 'upstream_reset_before_response_started{protocol_error}'];
  }
  if (err.code === 'UND_ERR_ABORTED' || err.name === 'AbortError') {
    return [ResponseFlag.DownstreamConnectionTermination, 'downstream_remote_disconnect'];
  }
  if (started) return [ResponseFlag.UpstreamConnectionTermination, 'upstream_reset_after_response_started{connection_termination}'];
  return [ResponseFlag.UpstreamConnectionTermination, 'upstream_reset_before_response_started{connection_termination}'];
}
