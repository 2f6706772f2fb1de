/**
 * Runs one filter (or a small chain) through the real FilterChain on real contexts: a
 * ConnectionContext over a compiled mesh snapshot, and StreamContexts over Node's own request and
 * response objects — an HTTP/1.x `IncomingMessage`/`ServerResponse` pair built in memory (the
 * response writes to a capturing socket), or an HTTP/2 exchange over an in-memory session pair —
 * with the head read by the connection manager's `requestHead`, as on the data path. What a filter
 * answered is read back as the downstream client would see it. The harness's terminal stands in
 * for the router: it answers each forwarded request (200 by default), so the response-header and
 * completion phases run through the real chain.
 *
 *   // parseConfig, dependsOn/after and create run as the waypoint's registry runs them
 *   const h = FilterHarness.fromFactory(authzFactory, undefined, { mesh: snap });
 *   const { status, response } = await h.request(h.connection({ at: { ip: '10.96.0.10', port: 8080 } }), { url: '/admin' });
 *   expect([response.status, response.body]).toEqual([403, 'RBAC: access denied']);
 */
import http from 'node:http';
import http2 from 'node:http2';
import net from 'node:net';
import { duplexPair } from 'node:stream';
import { pino } from 'pino';
import { Registry } from 'prom-client';
import { normalizeRequestPath } from '../../src/authz/index.ts';
import { admitRequest, H2Request, H2Response, requestHead } from '../../src/inner-http/index.ts';
import {
  ConnectionContext,
  FilterChain,
  FilterRegistry,
  FilterStatus,
  HeaderList,
  StreamContext,
  respond,
  sendLocalReply,
  type ConnectInfo,
  type Filter,
  type FilterEnv,
  type FilterFactory,
  type TerminalFilter,
} from '../../src/pipeline/index.ts';
import type { MeshSnapshot, PortProtocol, Target } from '../../src/state/index.ts';
import { meshText, namespace, pod, service, snapshotOf, usesWaypoint, waypointGateway } from './mesh.ts';

/** The default tunnel: client `demo/client` at 10.0.0.1 (never dialed) to Service `demo/echo` 10.96.0.10:8080. */
export const CLIENT_INFO: ConnectInfo = Object.freeze({
  peer: { uri: 'spiffe://cluster.local/ns/demo/sa/client', trustDomain: 'cluster.local', namespace: 'demo', serviceAccount: 'client' },
  downstreamAddress: '10.0.0.1',
  downstreamPort: 40000,
  authority: '10.96.0.10:8080',
  targetIp: '10.96.0.10',
  targetPort: 8080,
  forwarded: '',
  baggage: '',
  traceparent: '',
});

/** The default mesh: the waypoint of namespace `demo`, Service `echo` (10.96.0.10:8080 http), pods `echo-1` and `client`. */
export const DEFAULT_MESH_TEXT = meshText(
  waypointGateway('demo'),
  namespace('demo', usesWaypoint()),
  service({ name: 'echo', namespace: 'demo', vip: '10.96.0.10', ports: [{ name: 'http', port: 8080, targetPort: 8080 }] }),
  pod({ name: 'echo-1', namespace: 'demo', labels: { app: 'echo', version: 'v1' }, sa: 'echo', ip: '10.0.1.11' }),
  pod({ name: 'client', namespace: 'demo', labels: { app: 'client' }, sa: 'client', ip: '10.0.0.1' }),
);
let defaultMesh: MeshSnapshot | undefined;

/** How a test tunnel is set up. */
export interface ConnectionOptions {
  /** Fields of the CONNECT over {@link CLIENT_INFO} (`authority` follows `at` when not given). */
  readonly info?: Partial<ConnectInfo>;
  /** The snapshot the tunnel was admitted under (default: the harness's). */
  readonly mesh?: MeshSnapshot;
  /** The CONNECT target, resolved in the snapshot (default: `info`'s target address). */
  readonly at?: { readonly ip: string; readonly port: number };
  /** A target as is, instead of resolving one. */
  readonly target?: Target;
  /** The port protocol (default: the Service port's, `UNKNOWN` for a workload address). */
  readonly protocol?: PortProtocol;
}

/** One request as the client sends it. */
export interface RequestSpec {
  readonly method?: string;
  readonly url?: string;
  /** `1.1` (default), `1.0`, or `2` (an HTTP/2 request: use {@link FilterHarness.h2Stream}). */
  readonly version?: '1.0' | '1.1';
  /** Header lines in order, names as sent (a repeated name = the header sent several times). */
  readonly headers?: readonly (readonly [string, string])[] | Readonly<Record<string, string>>;
  readonly body?: string | Buffer;
}

/** What the downstream client received (status 0: nothing was written yet). */
export interface ClientResponse {
  readonly status: number;
  readonly headers: HeaderList;
  readonly body: string;
  /** HTTP/2 trailers (gRPC status of a local reply). */
  readonly trailers: Readonly<Record<string, string>>;
  /** The downstream connection (HTTP/1) or stream (HTTP/2) was reset. */
  readonly reset: boolean;
}

/** A socket that keeps what is written to it (the downstream of an in-memory HTTP/1 response). */
class CaptureSocket extends net.Socket {
  readonly written: Buffer[] = [];
  override _write(chunk: Buffer | string, encoding: BufferEncoding, cb: (err?: Error | null) => void): void {
    this.written.push(Buffer.isBuffer(chunk) ? chunk : Buffer.from(chunk, encoding));
    cb();
  }
  override _writev(chunks: { chunk: Buffer | string; encoding: BufferEncoding }[], cb: (err?: Error | null) => void): void {
    for (const c of chunks) this.written.push(Buffer.isBuffer(c.chunk) ? c.chunk : Buffer.from(c.chunk, c.encoding));
    cb();
  }
}

const headerPairs = (h: RequestSpec['headers']): (readonly [string, string])[] => (h === undefined ? [] : Array.isArray(h) ? [...(h as readonly (readonly [string, string])[])] : Object.entries(h));

/** The answer of the harness's terminal to a forwarded request (`false`: answer nothing, the test does). */
export interface TerminalAnswer {
  readonly status?: number;
  readonly headers?: readonly (readonly [string, string])[];
  readonly body?: string;
}

/** The router's name: the terminal's place in a chain the registry builds. */
const ROUTER = 'envoy.filters.http.router';

/** The terminal filter of a harness chain: records what reached it and answers it (the router's part). */
class Terminal implements TerminalFilter {
  readonly name = ROUTER;
  readonly forwarded: StreamContext[] = [];
  readonly answer: TerminalAnswer | false;
  constructor(answer: TerminalAnswer | false) {
    this.answer = answer;
  }
  forward(stream: StreamContext): void {
    this.forwarded.push(stream);
    if (this.answer === false) return;
    const { status = 200, headers = [['content-type', 'text/plain']], body = 'ok' } = this.answer;
    if (respond(stream, status, undefined, new HeaderList(headers.flatMap(([n, v]) => [n, v])))) stream.res.end(body);
  }
}

/** The mesh a {@link filterEnv} hands out: the current snapshot and `subscribe`, like the waypoint's store. */
export class MeshStub {
  current: MeshSnapshot;
  readonly #listeners = new Set<(next: MeshSnapshot, prev: MeshSnapshot) => void>();
  constructor(current: MeshSnapshot) {
    this.current = current;
  }
  subscribe(fn: (next: MeshSnapshot, prev: MeshSnapshot) => void): () => void {
    this.#listeners.add(fn);
    return () => this.#listeners.delete(fn);
  }
  /** Make `next` current and tell the subscribers (as the store does after an update). */
  publish(next: MeshSnapshot): void {
    const prev = this.current;
    this.current = next;
    for (const fn of [...this.#listeners]) fn(next, prev);
  }
  get subscribers(): number {
    return this.#listeners.size;
  }
}

/** The harness's default mesh snapshot (see {@link DEFAULT_MESH_TEXT}). */
export function defaultMeshSnapshot(): MeshSnapshot {
  return (defaultMesh ??= snapshotOf(DEFAULT_MESH_TEXT));
}

/** A factory's environment as the waypoint builds it: a mesh store stub, a silent pino logger, a fresh (or given) Prometheus registry. */
export function filterEnv(o: { readonly mesh?: MeshSnapshot; readonly metrics?: Registry } = {}): FilterEnv & { readonly mesh: MeshStub; readonly metrics: Registry } {
  return { mesh: new MeshStub(o.mesh ?? defaultMeshSnapshot()), log: pino({ level: 'silent' }), metrics: o.metrics ?? new Registry() };
}

/** Options of {@link FilterHarness.fromFactory}. */
export interface FactoryHarnessOptions {
  /** The snapshot of the env's mesh and of the harness's tunnels (default: {@link DEFAULT_MESH_TEXT}). */
  readonly mesh?: MeshSnapshot;
  /** The env's Prometheus registry (default: a fresh one). */
  readonly metrics?: Registry;
  /** Filters listed before this one, as in the bootstrap `filters` list (e.g. what `dependsOn` names). */
  readonly before?: readonly (readonly [FilterFactory<unknown>, unknown])[];
  /** The terminal's answer (default 200 `ok`). */
  readonly answer?: TerminalAnswer | false;
}

/** A chain of `filters` and a recording terminal, with real contexts to run it on. */
export class FilterHarness {
  readonly chain: FilterChain;
  readonly mesh: MeshSnapshot;
  /** The env the factory's filter was created with ({@link fromFactory} only). */
  env?: ReturnType<typeof filterEnv>;
  readonly #responses = new WeakMap<StreamContext, () => Promise<ClientResponse>>();
  readonly #sessions: { close(): void }[] = [];

  /** `filters` with the harness's terminal after them (answering `answer`), or a chain as built elsewhere. */
  constructor(filters: Filter | readonly Filter[] | FilterChain, mesh?: MeshSnapshot, answer: TerminalAnswer | false = {}) {
    this.chain = filters instanceof FilterChain ? filters : new FilterChain([...(Array.isArray(filters) ? filters : [filters as Filter]), new Terminal(answer)]);
    this.mesh = mesh ?? defaultMeshSnapshot();
  }

  /**
   * The filter of `factory` as the waypoint builds it: a {@link FilterRegistry} builds the list
   * (`before`, then `factory` with `rawConfig`, then the terminal in the router's place), so
   * `parseConfig`, `dependsOn`, `after` and `create` (with a {@link filterEnv}) run; throws the
   * registry's ConfigError.
   */
  static fromFactory<C>(factory: FilterFactory<C>, rawConfig: unknown, o: FactoryHarnessOptions = {}): FilterHarness {
    const env = filterEnv(o);
    const registry = new FilterRegistry();
    const terminal = new Terminal(o.answer ?? {});
    for (const [f] of o.before ?? []) registry.register(f);
    registry.register(factory).register({ name: ROUTER, parseConfig: () => undefined, create: () => terminal });
    const entries = [...(o.before ?? []).map(([f, config]) => ({ name: f.name, config })), { name: factory.name, config: rawConfig }, { name: ROUTER }];
    const h = new FilterHarness(registry.build(entries, env), env.mesh.current);
    h.env = env;
    return h;
  }

  /** Streams the harness's terminal was given (request phase passed; none for a chain built elsewhere). */
  get forwarded(): readonly StreamContext[] {
    return this.chain.terminal instanceof Terminal ? this.chain.terminal.forwarded : [];
  }

  /** A tunnel context (see {@link ConnectionOptions}). */
  connection(o: ConnectionOptions = {}): ConnectionContext {
    const mesh = o.mesh ?? this.mesh;
    const ip = o.at?.ip ?? o.info?.targetIp ?? CLIENT_INFO.targetIp;
    const port = o.at?.port ?? o.info?.targetPort ?? CLIENT_INFO.targetPort;
    const target = o.target ?? mesh.resolveTarget(ip, port);
    if (!target) throw new Error(`no target at ${ip}:${port} in the mesh`);
    const info: ConnectInfo = { ...CLIENT_INFO, authority: `${ip}:${port}`, targetIp: ip, targetPort: port, ...o.info };
    const protocol = o.protocol ?? (target.kind === 'service' ? target.port.protocol : 'UNKNOWN');
    return new ConnectionContext(info, mesh, target, protocol);
  }

  /** An HTTP/1.x stream on `conn` (default: a new default tunnel), built synchronously; nothing has run yet. */
  stream(conn: ConnectionContext = this.connection(), r: RequestSpec = {}): StreamContext {
    const socket = new CaptureSocket();
    const req = new http.IncomingMessage(socket);
    const version = r.version ?? '1.1';
    req.httpVersion = version;
    req.httpVersionMajor = 1;
    req.httpVersionMinor = version === '1.0' ? 0 : 1;
    req.method = r.method ?? 'GET';
    req.url = r.url ?? '/';
    const pairs = headerPairs(r.headers);
    req.rawHeaders = pairs.flatMap(([n, v]) => [n, v]);
    for (const [n, v] of pairs) {
      const k = n.toLowerCase();
      const had = req.headers[k];
      req.headers[k] = had === undefined ? v : `${had}, ${v}`;
    }
    if (r.body !== undefined) req.push(r.body);
    req.push(null);
    const res = new http.ServerResponse(req);
    res.assignSocket(socket);
    const stream = new StreamContext(conn, this.chain, req, res, requestHead(req));
    // As the connection manager: the stream completes when its response closes. Node's HTTP server
    // emits that 'close' after 'finish' (_http_server.js resOnFinish); a response built outside a
    // server gets it only from its socket, so the harness emits it the same way.
    res.once('finish', () => process.nextTick(() => res.emit('close')));
    res.once('close', () => stream.chain.completeStream(stream));
    this.#responses.set(stream, async () => {
      await new Promise((resolve) => setImmediate(resolve));
      return { ...parseHttp1(Buffer.concat(socket.written)), reset: socket.destroyed && !res.writableFinished };
    });
    return stream;
  }

  /**
   * An HTTP/2 stream on `conn`, over a real in-memory HTTP/2 session (`grpc`: content-type
   * application/grpc). `:authority` comes from a `:authority` header, else `headers.host`.
   */
  async h2Stream(conn: ConnectionContext = this.connection(), r: Omit<RequestSpec, 'version'> & { grpc?: boolean } = {}): Promise<StreamContext> {
    const [clientSide, serverSide] = duplexPair();
    const server = http2.createServer();
    // As the inner h2c server serves streams (src/inner-http/h2-exchange.ts).
    const arrived = new Promise<[H2Request, H2Response]>((resolve) =>
      server.once('stream', (s, h, _flags, raw: string[]) => {
        s.on('error', () => {});
        resolve([new H2Request(s, h, raw), new H2Response(s)]);
      }),
    );
    server.emit('connection', serverSide);
    const client = http2.connect('http://harness.test', { createConnection: () => clientSide });
    this.#sessions.push({ close: () => (client.destroy(), server.close(), clientSide.destroy(), serverSide.destroy()) });
    const headers: http2.OutgoingHttpHeaders = { ':method': r.method ?? 'GET', ':path': r.url ?? '/' };
    for (const [n, v] of headerPairs(r.headers)) {
      const k = n === 'host' && !(':authority' in headers) ? ':authority' : n.toLowerCase();
      const had = headers[k];
      headers[k] = had === undefined ? v : Array.isArray(had) ? [...had, v] : [String(had), v];
    }
    if (r.grpc) headers['content-type'] = 'application/grpc';
    const call = client.request(headers);
    call.end(r.body);
    const seen = { status: 0, headers: new HeaderList(), body: [] as Buffer[], trailers: {} as Record<string, string>, reset: false };
    const done = new Promise<void>((resolve) => {
      call.on('response', (h) => {
        seen.status = Number(h[':status']);
        seen.headers = new HeaderList(Object.entries(h).flatMap(([k, v]) => (k.startsWith(':') ? [] : [k, String(v)])));
      });
      call.on('data', (c: Buffer) => seen.body.push(c));
      call.on('trailers', (t) => (seen.trailers = Object.fromEntries(Object.entries(t).map(([k, v]) => [k, String(v)]))));
      call.on('error', () => (seen.reset = true));
      call.on('close', () => {
        if (call.rstCode > 0) seen.reset = true;
        resolve();
      });
    });
    const [req, res] = await arrived;
    const stream = new StreamContext(conn, this.chain, req, res, requestHead(req));
    res.once('close', () => stream.chain.completeStream(stream));
    this.#responses.set(stream, async () => {
      // Answered or reset: wait until the client saw all of it.
      if (res.headersSent || res.stream.destroyed) await done;
      return { status: seen.status, headers: seen.headers, body: Buffer.concat(seen.body).toString(), trailers: seen.trailers, reset: seen.reset };
    });
    return stream;
  }

  /**
   * The request phase as the data path runs it on a new stream: the connection manager's checks
   * first (a refusal is answered and reported as StopAndReply), then the chain's
   * `onRequestHeaders`; with what the client received.
   */
  async request(conn: ConnectionContext = this.connection(), r: RequestSpec = {}): Promise<{ status: FilterStatus; stream: StreamContext; response: ClientResponse }> {
    const stream = this.stream(conn, r);
    const status = await this.run(stream);
    return { status, stream, response: await this.response(stream) };
  }

  /** Run the request phase of `stream` (connection manager checks, then the chain). */
  async run(stream: StreamContext): Promise<FilterStatus> {
    // As app.ts: `:path` normalized per the snapshot's MeshConfig `pathNormalization` before any filter.
    const refused = admitRequest(stream, { rejectHttp10: false, normalizePath: harnessNormalizer });
    if (refused) {
      sendLocalReply(stream, refused.status, refused.body, refused.flag, refused.details);
      return FilterStatus.StopAndReply;
    }
    const status = await this.chain.runRequestHeaders(stream);
    if (status === FilterStatus.Continue) this.chain.terminal.forward(stream);
    return status;
  }

  /** What the client of `stream` received so far. */
  response(stream: StreamContext): Promise<ClientResponse> {
    const read = this.#responses.get(stream);
    if (!read) throw new Error('not a stream of this harness');
    return read();
  }

  /** Close the HTTP/2 sessions {@link h2Stream} opened. */
  close(): void {
    for (const s of this.#sessions.splice(0)) s.close();
  }
}

/** Parse what an HTTP/1 response wrote (nothing yet: status 0). */
function parseHttp1(raw: Buffer): Omit<ClientResponse, 'reset'> {
  const end = raw.indexOf('\r\n\r\n');
  if (end < 0) return { status: 0, headers: new HeaderList(), body: '', trailers: {} };
  const lines = raw.subarray(0, end).toString('latin1').split('\r\n');
  const headers = new HeaderList();
  for (const l of lines.slice(1)) {
    const i = l.indexOf(':');
    headers.append(l.slice(0, i), l.slice(i + 1).trim());
  }
  let body = raw.subarray(end + 4);
  if (/chunked/i.test(headers.get('transfer-encoding') ?? '')) {
    const parts: Buffer[] = [];
    for (let at = 0; ; ) {
      const eol = body.indexOf('\r\n', at);
      const size = parseInt(body.subarray(at, eol).toString('latin1'), 16);
      if (!(size > 0)) break;
      parts.push(body.subarray(eol + 2, eol + 2 + size));
      at = eol + 2 + size + 2;
    }
    body = Buffer.concat(parts);
  }
  return { status: Number(lines[0].split(' ')[1]), headers, body: body.toString(), trailers: {} };
}

/** The connection manager's path normalization, as the waypoint runs it with MeshConfig's default (`BASE`). */
const harnessNormalizer = (target: string): string | undefined => normalizeRequestPath(target)?.forward;
