/**
 * The two recorders of the integration tests:
 * - {@link recorder}: a filter in the waypoint's chain recording what each inner request and each
 *   tunnel ended with (status, response flags and details, authz decision, peers, ...); when the
 *   waypoint runs in worker processes (WAYPOINT_TEST_CONCURRENCY), its counterpart there
 *   (recorder-worker.ts) sends each record here over the workers' IPC channel;
 * - {@link startBackend}: an HTTP backend (a pod's application) recording every request it received
 *   and answering each as the test tells it; {@link startTcpBackend}, its TCP (echo) counterpart.
 */
import cluster from 'node:cluster';
import http from 'node:http';
import net from 'node:net';
import { fileURLToPath } from 'node:url';
import { AUTHZ_RESULT, TCP_AUTHZ_RESULT, type AuthzResult } from '../../src/authz/index.ts';
import { DOWNSTREAM_PEER, TCP_UPSTREAM_PEER, UPSTREAM_PEER, downstreamPeerOf, type PeerInfo } from '../../src/peer/index.ts';
import { FilterStatus, type Filter, type FilterFactory } from '../../src/pipeline/index.ts';
import { closeServer, listen, sleep, track } from './servers.ts';
import { WORKER_COUNTERPART, type WorkerCounterpart } from './worker-filters.ts';

/** One finished inner request as the filter chain saw it. */
export interface StreamRecord {
  /** The request target as received (origin form). */
  readonly path: string;
  /** The target sent upstream when a filter rewrote it (normalized path). */
  readonly forwardPath: string | undefined;
  readonly code: number;
  readonly flags: string;
  readonly details: string;
  readonly grpcStatus: string;
  /** Upstream attempts (1 + router retries). */
  readonly attempts: number;
  readonly upstreamHost: string;
  readonly protocol: string;
  readonly requestId: string;
  readonly bytesReceived: number;
  /** The `istio.authz` decision, when that filter ran. */
  readonly result: AuthzResult | undefined;
  /** Downstream and upstream peers (`istio.peer_metadata`). */
  readonly down: PeerInfo | undefined;
  readonly up: PeerInfo | undefined;
}

/** One finished tunnel. */
export interface TunnelRecord {
  readonly authority: string;
  /** The client's SPIFFE URI. */
  readonly peer: string;
  readonly protocol: string;
  /** How the payload was handled: 'TCP', 'HTTP/1.1', 'HTTP/2'. */
  readonly inner: string;
  readonly rejectStatus: number;
  readonly details: string;
  readonly bytesReceived: number;
  readonly result: AuthzResult | undefined;
  readonly down: PeerInfo | undefined;
  readonly up: PeerInfo | undefined;
}

/** The recording filter's name, usable in a bootstrap `filters:` list. */
export const RECORDER = 'test.recorder';

/** Where a recording filter puts what it saw. */
export interface RecordSink {
  opened(): void;
  stream(r: StreamRecord): void;
  tunnel(r: TunnelRecord): void;
}

/** The recording filter (in this process, or in a worker: recorder-worker.ts). */
export function recordingFilter(sink: RecordSink): Filter {
  return {
    name: RECORDER,
    onConnection() {
      sink.opened();
      return FilterStatus.Continue;
    },
    onStreamComplete(s) {
      sink.stream({
        path: s.path,
        forwardPath: s.forwardPath,
        code: s.responseCode,
        flags: s.responseFlags,
        details: s.responseCodeDetails,
        grpcStatus: s.grpcStatus,
        attempts: s.attempts,
        upstreamHost: s.upstreamHost,
        protocol: s.protocol,
        requestId: s.requestId,
        bytesReceived: s.bytesReceived,
        result: s.get(AUTHZ_RESULT),
        down: downstreamPeerOf(s),
        up: s.get(UPSTREAM_PEER),
      });
    },
    onConnectionComplete(c) {
      sink.tunnel({
        authority: c.info.authority,
        peer: c.info.peer.uri,
        protocol: c.protocol,
        inner: c.innerProtocol,
        rejectStatus: c.rejectStatus,
        details: c.rejectDetails,
        bytesReceived: c.bytesReceived,
        result: c.get(TCP_AUTHZ_RESULT),
        down: c.get(DOWNSTREAM_PEER),
        up: c.get(TCP_UPSTREAM_PEER),
      });
    },
  };
}

/** A record a worker's recorder sent (recorder-worker.ts): `sink` names the {@link recorder} it is for. */
export type WorkerRecord = { readonly t: typeof RECORDER; readonly sink: string; readonly pid: number } & (
  | { readonly kind: 'opened' }
  | { readonly kind: 'stream'; readonly record: StreamRecord }
  | { readonly kind: 'tunnel'; readonly record: TunnelRecord }
);

/** The recorders of this process, by sink id, for what workers send. */
const sinks = new Map<string, RecordSink & { readonly workerPids: Set<number> }>();
let nextSink = 1;
let listening = false;

function listenToWorkers(): void {
  if (listening) return;
  listening = true;
  cluster.on('message', (_worker, m: WorkerRecord) => {
    if (m?.t !== RECORDER) return;
    const sink = sinks.get(m.sink);
    if (!sink) return;
    sink.workerPids.add(m.pid);
    if (m.kind === 'opened') sink.opened();
    else if (m.kind === 'stream') sink.stream(m.record);
    else sink.tunnel(m.record);
  });
}

/**
 * A filter recording every stream and tunnel at completion and counting tunnels opened and
 * completed. Put `factory` in the waypoint's `extraFilters` and `{ name: RECORDER }` in its
 * bootstrap `filters` (`filters` is the recorder then the router); list it after the filters
 * whose results it reads. With the waypoint in workers, the test topology swaps `factory` for its
 * worker counterpart, whose records arrive here (`workerPids`: the workers they came from).
 */
export function recorder() {
  const streams: StreamRecord[] = [];
  const tunnels: TunnelRecord[] = [];
  const conns = { opened: 0, completed: 0 };
  const workerPids = new Set<number>();
  const sink: RecordSink = {
    opened: () => void conns.opened++,
    stream: (r) => void streams.push(r),
    tunnel: (r) => {
      conns.completed++;
      tunnels.push(r);
    },
  };
  const id = `${process.pid}-${nextSink++}`;
  sinks.set(id, { ...sink, workerPids });
  listenToWorkers();
  const counterpart: WorkerCounterpart = { module: fileURLToPath(new URL('./recorder-worker.ts', import.meta.url)), config: { sink: id } };
  const factory: FilterFactory<unknown> & { [WORKER_COUNTERPART]: WorkerCounterpart } = {
    name: RECORDER,
    parseConfig: () => ({}),
    create: () => recordingFilter(sink),
    [WORKER_COUNTERPART]: counterpart,
  };
  /** What `pick` returns once it returns something (bounded wait; `what` names it on a timeout). */
  const wait = async <T>(pick: () => T | undefined, what: () => string, timeoutMs: number): Promise<T> => {
    const end = Date.now() + timeoutMs;
    for (;;) {
      const r = pick();
      if (r !== undefined) return r;
      if (Date.now() > end) throw new Error(`timed out waiting for ${what()}`);
      await sleep(10);
    }
  };
  return {
    factory,
    streams,
    tunnels,
    conns,
    workerPids,
    /** The bootstrap `filters` of a chain of this recorder and the router. */
    filters: [{ name: RECORDER }, { name: 'envoy.filters.http.router' }],
    /** The record of the first finished request to `path` (as sent), once there is one. */
    find: (path: string, timeoutMs = 5000): Promise<StreamRecord> =>
      wait(() => streams.find((s) => s.path === path), () => `the record of ${path}; have ${streams.map((s) => s.path).join(' ')}`, timeoutMs),
    /** The `n`th finished tunnel matching every field of `match`, once there is one. */
    tunnel: (match: Partial<TunnelRecord>, n = 0, timeoutMs = 5000): Promise<TunnelRecord> => {
      const fits = (t: TunnelRecord) => Object.entries(match).every(([k, v]) => t[k as keyof TunnelRecord] === v);
      return wait(() => tunnels.filter(fits)[n], () => `tunnel record ${n} of ${JSON.stringify(match)}`, timeoutMs);
    },
  };
}

/** The recording filter's handle. */
export type Recorder = ReturnType<typeof recorder>;

// ---- the backend ------------------------------------------------------------------------------------

/** A request as a backend received it. */
export interface Received {
  readonly method: string;
  readonly url: string;
  readonly httpVersion: string;
  readonly headers: http.IncomingHttpHeaders;
  /** The request body (filled once it ended). */
  body: Buffer;
}

/** How to answer one request; `delayMs` waits before answering. */
export interface Reply {
  readonly status?: number;
  readonly headers?: http.OutgoingHttpHeaders;
  /** JSON-encoded unless a string or Buffer (then sent as is); `content-length` is set. */
  readonly body?: unknown;
  readonly delayMs?: number;
}

/**
 * What the backend answers `r` (called once the request body was read), or `undefined` to leave
 * the request unanswered (a hung pod). `req`/`res` are there for what a reply cannot say.
 */
export type Answer = (r: Received, req: http.IncomingMessage, res: http.ServerResponse) => Reply | undefined;

/** The default answer: 200 with the request's method and target as JSON. */
export const describeRequest: Answer = (r) => ({ body: { method: r.method, url: r.url } });

/** A running recording backend. */
export interface Backend {
  readonly server: http.Server;
  /** Every request received, in arrival order (`body` filled once read). */
  readonly received: Received[];
  close(): Promise<void>;
}

/**
 * An HTTP/1.1 backend on `ip:port` recording every request and answering as `answer` says.
 * `afterBody`: a request is recorded once its body was read (default: on its head).
 */
export async function startBackend(ip: string, port: number, answer: Answer = describeRequest, opts: { afterBody?: boolean } = {}): Promise<Backend> {
  const received: Received[] = [];
  const server = http.createServer((req, res) => {
    const seen: Received = { method: req.method ?? '', url: req.url ?? '', httpVersion: req.httpVersion, headers: req.headers, body: Buffer.alloc(0) };
    if (!opts.afterBody) received.push(seen);
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      seen.body = Buffer.concat(chunks);
      if (opts.afterBody) received.push(seen);
      const reply = answer(seen, req, res);
      if (reply === undefined) return;
      const send = () => {
        const body = typeof reply.body === 'string' || Buffer.isBuffer(reply.body) ? reply.body : reply.body === undefined ? '' : JSON.stringify(reply.body);
        const json = reply.body !== undefined && typeof reply.body !== 'string' && !Buffer.isBuffer(reply.body);
        res.writeHead(reply.status ?? 200, { ...(json ? { 'content-type': 'application/json' } : {}), 'content-length': Buffer.byteLength(body), ...reply.headers });
        res.end(body);
      };
      if (reply.delayMs) setTimeout(send, reply.delayMs);
      else send();
    });
  });
  const sockets = track(server);
  await listen(server, ip, port);
  return { server, received, close: () => closeServer(server, sockets) };
}

/** A plain TCP echo backend (an L4 pod) counting what it received. */
export interface TcpBackend {
  /** Connections accepted, bytes received, connections open now. */
  readonly connections: number;
  readonly bytes: number;
  readonly open: number;
  close(): Promise<void>;
}

/** A TCP backend on `ip:port` echoing every byte back and counting connections and bytes. */
export async function startTcpBackend(ip: string, port: number): Promise<TcpBackend> {
  const state = { connections: 0, bytes: 0 };
  const server = net.createServer((s) => {
    state.connections++;
    s.on('data', (c: Buffer) => {
      state.bytes += c.length;
      s.write(c);
    });
    s.on('end', () => s.end());
    s.on('error', () => {});
  });
  const sockets = track(server);
  await listen(server, ip, port);
  return {
    get connections() {
      return state.connections;
    },
    get bytes() {
      return state.bytes;
    },
    get open() {
      return sockets.size;
    },
    close: () => closeServer(server, sockets),
  };
}
