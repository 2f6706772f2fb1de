/**
 * The floor: what bare Node needs to do the waypoint's job, with no filters, no routing, no
 * telemetry, no timers of its own. It stands in for a waypoint of the bench (the `floor` path,
 * `npm run bench -- --floor`, runs it in a topology of its own), so the bench measures it with the
 * same load, tunnels and backends as the waypoint:
 *
 *  - HBONE in: `http2.createSecureServer` (TLS 1.3, mTLS, the waypoint's HTTP/2 settings from its
 *    bootstrap, TCP_NODELAY); a CONNECT to a Service VIP is answered 200 and its stream handed
 *    (`emit('connection')`, as the waypoint does) to an inner server: `http.Server` for HTTP/1.1
 *    Services (the core echo Service, `bench-h1`), h2c for `bench-h2` and `bench-grpc`;
 *  - HBONE out: the waypoint's own pool of HBONE connections (src/hbone `HboneSessionPool`), one
 *    CONNECT stream per upstream connection to the pod's inbound role (`podIp:15008`, authority
 *    `podIp:targetPort`);
 *  - HTTP/1.1: each request forwarded by undici (a keep-alive `Pool` per backend whose `connect`
 *    opens that CONNECT stream, as src/upstream/cluster-manager.ts builds it) through its dispatch
 *    API, hop-by-hop headers stripped both ways; a body with a small declared length goes as one
 *    Buffer (as the waypoint sends it), any other is streamed; the response is written as it comes;
 *  - h2c: each inner stream (core `stream` API, no compatibility layer) goes upstream on a pooled
 *    h2c session over one CONNECT stream, headers minus connection-specific ones, bodies piped both
 *    ways, trailers relayed.
 *
 * What a careful bare relay does for throughput is kept (keep-alive, pooling, Nagle off, Node's
 * corked-write fix `joinWritev`, upstream reads one chunk at a time `readChunkwise`, ending a
 * response with its last chunk), what it needs only for
 * robustness is not (idle and stream timeouts, a mid-body CONNECT reset failing the request: the
 * waypoint's `asHttp1Socket`), so the difference to the waypoint is its L7 work.
 *
 * `H2C_FLOOR_API=compat` serves the inner h2c requests through Node's compatibility API instead
 * (what the waypoint's inner server does), to measure what that layer costs; `H2C_FLOOR_INNER=native`
 * runs both inner h2c sessions on the CONNECT streams' native handles (h2c-native.ts: it can abort Node).
 *
 * Takes the waypoint's arguments (`run --mesh F --ca-dir D --config C`); reads the listeners and the
 * HTTP/2, upstream and header limits from the bootstrap config, the Services from
 * bench/e2e/config.ts; answers `/healthz/ready` and Node's heap figures (`/stats/prometheus`) on the
 * admin listener. Identity: the waypoint's (`spiffe://cluster.local/ns/demo/sa/waypoint`).
 */
import type { EventEmitter } from 'node:events';
import http, { type IncomingMessage, type ServerResponse } from 'node:http';
import http2, { type ClientHttp2Session, type IncomingHttpHeaders, type OutgoingHttpHeaders, type ServerHttp2Stream } from 'node:http2';
import type { Socket } from 'node:net';
import type { Duplex, Readable } from 'node:stream';
import { Pool, type Dispatcher } from 'undici';
import { loadBootstrap } from '../../src/config/index.ts';
import { LocalCa } from '../../src/identity/ca.ts';
import { WorkloadCertificate } from '../../src/identity/workload-certificate.ts';
import { HboneSessionPool, http2Settings, joinWritev, readChunkwise } from '../../src/hbone/index.ts';
import { hboneTlsOptions, http2SessionOptions } from '../../src/hbone/settings.ts';
import { isHopByHop } from '../../src/pipeline/index.ts';
import { BACKEND_KINDS, BACKEND_PORTS, TOPOLOGIES } from '../e2e/config.ts';
import { attachNative, connectNative } from './h2c-native.ts';

const NATIVE = process.env.H2C_FLOOR_INNER === 'native';

const argv = process.argv.slice(2);
const arg = (name: string): string => {
  const i = argv.indexOf(name);
  if (i < 0 || !argv[i + 1]) throw new Error(`floor-relay: ${name} is required (the waypoint's run arguments)`);
  return argv[i + 1];
};
const cfg = loadBootstrap(arg('--config'));
const [hboneHost, hbonePort] = splitHostPort(cfg.listeners.hbone);
const [adminHost, adminPort] = splitHostPort(cfg.listeners.admin);
const spec = TOPOLOGIES.find((t) => t.options.waypointIp === hboneHost);
if (!spec) throw new Error(`floor-relay: no bench topology has waypoint IP ${hboneHost}`);

/** A backend behind a Service: the pod's `ip:port`, and whether it speaks h2c (else HTTP/1.1). */
interface Target {
  readonly ip: string;
  readonly port: number;
  readonly h2: boolean;
}
/** `vip:port` of each Service → its backend on the topology's (one) pod. */
const services = new Map<string, Target>();
const pod = spec.options.podIps[0];
services.set(`${spec.options.vip}:${spec.options.servicePort}`, { ip: pod, port: spec.options.targetPort ?? 8080, h2: false });
for (const kind of BACKEND_KINDS) services.set(`${spec.bench[kind].vip}:80`, { ip: pod, port: BACKEND_PORTS[kind], h2: kind !== 'h1' });

function splitHostPort(hp: string): [string, number] {
  const i = hp.lastIndexOf(':');
  return [hp.slice(0, i), Number(hp.slice(i + 1))];
}

const ca = await LocalCa.load(arg('--ca-dir'));
const cert = await WorkloadCertificate.start(ca, 'spiffe://cluster.local/ns/demo/sa/waypoint', 24 * 3600_000);
const tls = hboneTlsOptions(cert.current);
const p = cfg.http2;

// --- upstream: the waypoint's HBONE pool; per backend an undici Pool (HTTP/1.1) or an h2c session ---

const sessions = new HboneSessionPool({
  material: () => cert.current,
  http2: p,
  trustDomain: () => 'cluster.local',
  connectTimeoutMs: cfg.upstream.connectTimeoutMs,
  connectResponseTimeoutMs: cfg.upstream.connectResponseTimeoutMs,
  idleTimeoutMs: cfg.upstream.idleTimeoutMs,
  maxStreamsPerConnection: cfg.upstream.maxStreamsPerConnection,
});
const hboneDst = (t: Target) => ({ ip: t.ip, port: cfg.upstream.hbonePort, identity: undefined });

const h1Pools = new Map<Target, Pool>();
function h1Pool(t: Target): Pool {
  let pool = h1Pools.get(t);
  if (pool) return pool;
  const keepAlive = cfg.upstream.httpKeepAliveMs;
  pool = new Pool(`http://${t.ip}:${t.port}`, {
    keepAliveTimeout: keepAlive,
    keepAliveMaxTimeout: keepAlive,
    maxHeaderSize: cfg.http.maxRequestHeadersBytes,
    headersTimeout: 0,
    bodyTimeout: 0,
    pipelining: 1,
    // Each undici "socket" is one CONNECT stream on a pooled HBONE connection.
    connect: (_opts, callback) => {
      sessions.connect(hboneDst(t), `${t.ip}:${t.port}`).then(
        // Read one DATA chunk at a time, as the waypoint's upstream does (src/hbone/chunk-reads.ts).
        ({ stream }) => callback(null, readChunkwise(joinWritev(stream)) as unknown as Socket),
        (err: Error) => callback(err, null),
      );
    },
  });
  h1Pools.set(t, pool);
  return pool;
}

const h2c = new Map<string, Promise<ClientHttp2Session>>();
function h2cTo(t: Target): Promise<ClientHttp2Session> {
  const key = `${t.ip}:${t.port}`;
  let s = h2c.get(key);
  if (s) return s;
  s = sessions.connect(hboneDst(t), key).then(
    ({ stream: tunnel }) =>
      new Promise<ClientHttp2Session>((resolve, reject) => {
        const opts = { settings: http2Settings(p, false) };
        const session = (NATIVE && connectNative(tunnel, `http://${key}`, opts)) || http2.connect(`http://${key}`, { ...opts, createConnection: () => joinWritev(tunnel) });
        session.on('error', reject);
        session.once('close', () => h2c.delete(key));
        session.once('connect', () => resolve(session));
      }),
  );
  s.catch(() => h2c.delete(key));
  h2c.set(key, s);
  return s;
}

// --- inner HTTP/1.1: one server, fed each tunnel; each request forwarded by undici ---

const kTarget = Symbol('floor.target');
type TaggedSocket = Duplex & { [kTarget]?: Target };

const inner1 = http.createServer(
  {
    maxHeaderSize: cfg.http.maxRequestHeadersBytes,
    requireHostHeader: false,
    // No timers per connection or request: the floor has no idle or request timeouts.
    requestTimeout: 0,
    keepAliveTimeout: 0,
  },
  onH1Request,
);
inner1.on('clientError', (_err, socket: Duplex) => socket.destroy());

/** Bodies declared up to this size are sent upstream as one Buffer (the waypoint's SMALL_BODY_BYTES). */
const SMALL_BODY = 64 * 1024;

function onH1Request(req: IncomingMessage, res: ServerResponse): void {
  const target = (req.socket as TaggedSocket)[kTarget];
  if (!target) return void res.writeHead(503).end();
  const raw = req.rawHeaders;
  const headers: string[] = [];
  for (let i = 0; i < raw.length; i += 2) if (!isHopByHop(raw[i])) headers.push(raw[i], raw[i + 1]);
  const ex = new Exchange(res);
  res.on('close', onResClose);
  const declared = req.headers['content-length'];
  const length = declared === undefined ? -1 : Number(declared);
  const send = (body: Buffer | Readable | null) => h1Pool(target).dispatch({ method: req.method!, path: req.url!, headers, body }, ex);
  // No body (Node's server reads the request's end itself once the response is done).
  if (length === 0 || (length < 0 && req.headers['transfer-encoding'] === undefined)) send(null);
  else if (length > 0 && length <= SMALL_BODY) {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => send(chunks.length === 1 ? chunks[0] : Buffer.concat(chunks)));
  } else send(req);
}

const kExchange = Symbol('floor.exchange');
type TaggedResponse = ServerResponse & { [kExchange]?: Exchange };

/** The downstream went away before its response ended: cancel the upstream request. */
function onResClose(this: TaggedResponse): void {
  const ex = this[kExchange]!;
  if (!this.writableFinished) ex.abort?.(new Error('downstream closed'));
}

/** One request's undici handler: the response goes downstream as it arrives. */
class Exchange implements Dispatcher.DispatchHandler {
  readonly res: ServerResponse;
  abort: ((err?: Error) => void) | undefined;
  private resume: () => void;
  /** Body bytes the Content-Length still announces (-1 unknown), and the chunk that completed it (`res.end(chunk)`: head and body in one write). */
  private left: number;
  private last: Buffer | null;

  constructor(res: ServerResponse) {
    this.res = res;
    (res as TaggedResponse)[kExchange] = this;
    this.abort = undefined;
    this.resume = noop;
    this.left = -1;
    this.last = null;
  }

  onConnect(abort: (err?: Error) => void): void {
    this.abort = abort;
  }

  onHeaders(status: number, rawHeaders: Buffer[], resume: () => void, statusText: string): boolean {
    if (status < 200) return true;
    const headers: string[] = [];
    for (let i = 0; i < rawHeaders.length; i += 2) {
      const n = rawHeaders[i].toString('latin1');
      if (isHopByHop(n)) continue;
      const v = rawHeaders[i + 1].toString('latin1');
      headers.push(n, v);
      if (n.length === 14 && n.toLowerCase() === 'content-length') this.left = Number(v);
    }
    this.resume = resume;
    const res = this.res;
    if (res.destroyed) return false;
    res.writeHead(status, statusText, headers);
    return true;
  }

  onData(chunk: Buffer): boolean {
    if (this.left > 0 && (this.left -= chunk.length) === 0) {
      this.last = chunk;
      return true;
    }
    if (this.res.write(chunk)) return true;
    this.res.once('drain', this.resume);
    return false;
  }

  onComplete(trailers: string[] | null): void {
    const res = this.res;
    if (trailers && trailers.length > 0) {
      const t: Record<string, string> = {};
      for (let i = 0; i < trailers.length; i += 2) t[String(trailers[i])] = String(trailers[i + 1]);
      try {
        res.addTrailers(t);
      } catch {
        // Not chunked: no trailers.
      }
    }
    if (this.last) res.end(this.last);
    else res.end();
  }

  onError(): void {
    const res = this.res;
    if (!res.headersSent && !res.destroyed) res.writeHead(503, { 'content-length': '0' }).end();
    else res.destroy();
  }
}

function noop(): void {}

// --- inner h2c: one server, fed each tunnel ---

const inner = http2.createServer({
  settings: { ...http2Settings(p, true), maxHeaderListSize: cfg.http.maxRequestHeadersBytes },
  maxSessionMemory: p.maxSessionMemoryMb,
  maxHeaderListPairs: p.maxHeaderCount,
});
inner.on('session', (s) => s.on('error', () => {}));
const targetOf = (session: http2.Http2Session | undefined): Target | undefined => (session as (http2.ServerHttp2Session & { target?: Target }) | undefined)?.target;

/** The request's headers for the upstream: pseudo-headers kept (`:scheme` http), connection-specific ones dropped. */
function upstreamHeaders(headers: IncomingHttpHeaders): OutgoingHttpHeaders {
  const out: OutgoingHttpHeaders = {};
  for (const name in headers) {
    if (name === 'connection' || name === 'keep-alive' || name === 'transfer-encoding' || name === 'upgrade' || name === 'proxy-connection') continue;
    out[name] = headers[name];
  }
  out[':scheme'] = 'http';
  return out;
}

function responseHeaders(h: IncomingHttpHeaders): OutgoingHttpHeaders {
  const out: OutgoingHttpHeaders = {};
  for (const name in h) if (name !== 'connection' && name !== 'keep-alive' && name !== 'transfer-encoding') out[name] = h[name];
  return out;
}

/** The downstream side of one exchange, as the two APIs below offer it. */
interface Downstream {
  readonly body: Readable;
  readonly gone: () => boolean;
  readonly closed: EventEmitter;
  destroy(): void;
  respond(h: IncomingHttpHeaders, trailers: () => IncomingHttpHeaders | undefined, up: Readable): void;
  fail(): void;
}

/** Send the request upstream on the pooled h2c session to `target`; the answer goes to `down`. */
function forward(target: Target, out: OutgoingHttpHeaders, endStream: boolean, down: Downstream): void {
  h2cTo(target).then(
    (session) => {
      if (down.gone()) return;
      const up = session.request(out, { endStream });
      up.on('error', () => down.destroy());
      down.closed.once('close', () => {
        if (!up.destroyed) up.close(http2.constants.NGHTTP2_CANCEL);
      });
      if (!endStream) down.body.pipe(up);
      let trailers: IncomingHttpHeaders | undefined;
      up.once('trailers', (t: IncomingHttpHeaders) => (trailers = t));
      up.once('response', (h: IncomingHttpHeaders) => {
        if (!down.gone()) down.respond(h, () => trailers, up);
      });
    },
    () => down.fail(),
  );
}

if (process.env.H2C_FLOOR_API === 'compat') {
  // Node's compatibility API (Http2ServerRequest/Response per request), as the waypoint serves h2c.
  inner.on('request', (req: http2.Http2ServerRequest, res: http2.Http2ServerResponse) => {
    const target = targetOf(req.stream.session);
    if (!target) return req.stream.close(http2.constants.NGHTTP2_REFUSED_STREAM);
    forward(target, upstreamHeaders(req.headers), req.stream.endAfterHeaders, {
      body: req,
      gone: () => res.destroyed,
      closed: res,
      destroy: () => res.destroy(),
      respond: (h, trailers, up) => {
        const rh = responseHeaders(h);
        const status = Number(rh[':status']);
        delete rh[':status'];
        res.writeHead(status, rh);
        // Trailers arrive before the upstream's end, so before the response ends.
        up.once('end', () => {
          const t = trailers();
          if (t) res.addTrailers(t as OutgoingHttpHeaders);
        });
        up.pipe(res);
      },
      fail: () => res.writeHead(503).end(),
    });
  });
} else {
  // Node's core API: the stream and its header object.
  inner.on('stream', (down: ServerHttp2Stream, headers: IncomingHttpHeaders) => {
    down.on('error', () => {});
    const target = targetOf(down.session);
    if (!target) return down.close(http2.constants.NGHTTP2_REFUSED_STREAM);
    forward(target, upstreamHeaders(headers), down.endAfterHeaders, {
      body: down,
      gone: () => down.destroyed,
      closed: down,
      destroy: () => down.destroy(),
      respond: (h, trailers, up) => {
        down.respond(responseHeaders(h), { waitForTrailers: true });
        down.once('wantTrailers', () => down.sendTrailers((trailers() ?? {}) as OutgoingHttpHeaders));
        up.pipe(down);
      },
      fail: () => {
        if (!down.destroyed) down.respond({ ':status': 503 }, { endStream: true });
      },
    });
  });
}

// --- HBONE in ---

const outer = http2.createSecureServer({
  ...tls,
  requestCert: true,
  rejectUnauthorized: true,
  ...http2SessionOptions(p, true),
  peerMaxConcurrentStreams: p.maxConcurrentStreams,
  noDelay: true,
});
outer.on('session', (s) => {
  s.on('error', () => {});
  s.once('connect', () => s.setLocalWindowSize(p.initialConnectionWindowSize));
});
// The inner session of a tunnel is created synchronously by `emit('connection')`: tag it there.
let attaching: Target | undefined;
inner.prependListener('session', (s) => {
  (s as http2.ServerHttp2Session & { target?: Target }).target = attaching;
});
outer.on('stream', (stream: ServerHttp2Stream, headers: IncomingHttpHeaders) => {
  stream.on('error', () => {});
  const target = headers[':method'] === 'CONNECT' ? services.get(String(headers[':authority'])) : undefined;
  if (!target) {
    stream.respond({ ':status': 404 }, { endStream: true });
    return;
  }
  stream.respond({ ':status': 200 });
  if (!target.h2) {
    (stream as TaggedSocket)[kTarget] = target;
    inner1.emit('connection', joinWritev(stream));
    return;
  }
  attaching = target;
  try {
    // H2C_FLOOR_INNER=native: the inner session on the CONNECT stream's native handle (h2c-native.ts).
    if (!(NATIVE && attachNative(inner, stream))) inner.emit('connection', joinWritev(stream));
  } finally {
    attaching = undefined;
  }
});
await new Promise<void>((r) => outer.listen(hbonePort, hboneHost, r));

const admin = http.createServer((req, res) => {
  if (req.url === '/stats/prometheus') {
    // The two figures the bench's idle flow reads from a waypoint.
    const m = process.memoryUsage();
    return void res.writeHead(200, { 'content-type': 'text/plain' }).end(`nodejs_heap_size_used_bytes ${m.heapUsed}\nnodejs_external_memory_bytes ${m.external}\n`);
  }
  res.writeHead(req.url === '/healthz/ready' ? 200 : 404).end();
});
await new Promise<void>((r) => admin.listen(adminPort, adminHost, r));
process.stderr.write(`floor-relay: HBONE ${hboneHost}:${hbonePort}, admin ${adminHost}:${adminPort}, services ${[...services.keys()].join(', ')}\n`);

const stop = () => {
  sessions.destroy();
  for (const pool of h1Pools.values()) void pool.destroy();
  outer.close();
  admin.close();
  void cert.close();
  setTimeout(() => process.exit(0), 200).unref();
};
process.on('SIGTERM', stop);
process.on('SIGINT', stop);
