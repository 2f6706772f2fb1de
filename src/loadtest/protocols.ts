/**
 * The clients a load test runs inside its connections: HTTP/1.1 (undici, one request at a time),
 * h2c (Node's http2 with prior knowledge, many streams) and gRPC unary calls (framed by hand over
 * the same h2c session: a 5-byte prefix per message, `grpc-status` in the trailers; grpc/grpc
 * doc/PROTOCOL-HTTP2.md). Each request ends in one {@link Outcome}, with its error kind when it
 * failed, so the report can count errors by kind.
 */
import http2, { type ClientHttp2Session, type IncomingHttpHeaders, type OutgoingHttpHeaders } from 'node:http2';
import type { Duplex } from 'node:stream';
import { Client, type Dispatcher } from 'undici';
import { HboneConnectError } from '../hbone/index.ts';
import type { Protocol } from './options.ts';
import type { Transport } from './transport.ts';

/** What every request of a run sends. */
export interface RequestSpec {
  readonly method: string;
  readonly path: string;
  /** Host header (HTTP/1.1) or `:authority` (h2c, gRPC). */
  readonly authority: string;
  readonly headers: Readonly<Record<string, string>>;
  readonly body: Buffer;
  /** gRPC: `/package.Service/Method`; the body is the message payload. */
  readonly grpcMethod: string;
  /** Response body bytes to expect (gRPC: the message payload); another size is a `bad_body` error. */
  readonly expectBytes?: number;
}

/** How one request ended. */
export interface Outcome {
  readonly ok: boolean;
  /** fortio's `RetCodes` key: the HTTP status (`200`), the gRPC status name (`OK`), or `-1` (no answer). */
  readonly code: string;
  /** Why it failed (`http_503`, `grpc_UNAVAILABLE`, `timeout`, `reset`, `connect_refused`, `bad_body`, ...); '' when ok. */
  readonly kind: string;
  readonly detail: string;
  /** Response headers, only when the request asked for them (the probe). */
  readonly headers?: IncomingHttpHeaders;
}

export type Done = (o: Outcome) => void;

/** One client connection (an HTTP/1.1 connection, or an h2c session carrying many streams). */
export interface Conn {
  /** Start one request; `done` is called exactly once. `extra` headers and `wantHeaders` serve the probe. */
  fire(done: Done, extra?: Readonly<Record<string, string>>, wantHeaders?: boolean): void;
  close(): void;
}

export interface ConnOptions {
  readonly transport: Transport;
  readonly spec: RequestSpec;
  readonly timeoutMs: number;
  /** h2c/gRPC: our SETTINGS_INITIAL_WINDOW_SIZE (default 4 MiB, ztunnel's stream window). */
  readonly http2Window?: number;
}

const GRPC_STATUS = ['OK', 'CANCELLED', 'UNKNOWN', 'INVALID_ARGUMENT', 'DEADLINE_EXCEEDED', 'NOT_FOUND', 'ALREADY_EXISTS', 'PERMISSION_DENIED', 'RESOURCE_EXHAUSTED', 'FAILED_PRECONDITION', 'ABORTED', 'OUT_OF_RANGE', 'UNIMPLEMENTED', 'INTERNAL', 'UNAVAILABLE', 'DATA_LOSS', 'UNAUTHENTICATED'];

/** The error kind and a one-line detail of a request that got no complete answer. */
export function failure(err: unknown): Outcome {
  const e = err as Error & { code?: string };
  let kind = 'error';
  if (err instanceof HboneConnectError) kind = err.status > 0 ? `connect_${err.status}` : hboneConnectKind(err);
  else if (e.code === 'ECONNREFUSED') kind = 'connect_refused';
  else if (e.code === 'ETIMEDOUT' || e.code === 'UND_ERR_CONNECT_TIMEOUT') kind = 'connect_timeout';
  else if (e.code === 'UND_ERR_HEADERS_TIMEOUT' || e.code === 'UND_ERR_BODY_TIMEOUT' || e.code === 'LOADTEST_TIMEOUT') kind = 'timeout';
  else if (['UND_ERR_SOCKET', 'UND_ERR_CLOSED', 'ECONNRESET', 'EPIPE', 'ERR_STREAM_PREMATURE_CLOSE', 'ERR_HTTP2_STREAM_ERROR', 'ERR_HTTP2_SESSION_ERROR', 'ERR_HTTP2_GOAWAY_SESSION', 'ERR_HTTP2_INVALID_SESSION', 'ERR_HTTP2_STREAM_CANCEL', 'LOADTEST_RESET'].includes(e.code ?? '')) kind = 'reset';
  return { ok: false, code: '-1', kind, detail: `${e.code ? `${e.code}: ` : ''}${e.message ?? String(err)}` };
}

/** `connect_refused` (nothing listening), `connect_reset`, `connect_tls_failure`, ...; a plain `CONNECT` failure is `connect_failed`. */
function hboneConnectKind(err: HboneConnectError): string {
  const code = (err.cause as { code?: string } | undefined)?.code;
  if (err.reason === 'CONNECT' && code === 'ECONNREFUSED') return 'connect_refused';
  if (err.reason === 'CONNECT' && code === 'ECONNRESET') return 'connect_reset';
  return err.reason === 'CONNECT' ? 'connect_failed' : `connect_${err.reason.toLowerCase()}`;
}

function httpOutcome(status: number, bytes: number, expect: number | undefined, headers?: IncomingHttpHeaders): Outcome {
  if (status < 200 || status > 299) return { ok: false, code: String(status), kind: `http_${status}`, detail: `status ${status}`, headers };
  if (expect !== undefined && bytes !== expect) return { ok: false, code: String(status), kind: 'bad_body', detail: `status ${status} with ${bytes} bytes (expected ${expect})`, headers };
  return { ok: true, code: String(status), kind: '', detail: '', headers };
}

const timeoutError = (ms: number) => Object.assign(new Error(`no complete answer within ${ms} ms`), { code: 'LOADTEST_TIMEOUT' });

/** Open one connection of `protocol` (connected and ready when the promise resolves). */
export function openConn(protocol: Protocol, o: ConnOptions): Promise<Conn> {
  return protocol === 'http1' ? h1Conn(o) : H2Conn.open(o, protocol === 'grpc');
}

// ---------------------------------------------------------------------------------------------
// HTTP/1.1: an undici Client per connection, one request at a time (no pipelining).

/** undici handler of one request (the dispatch interface: no body stream, no promise). */
class H1Request implements Dispatcher.DispatchHandler {
  private status = 0;
  private bytes = 0;
  private headers: IncomingHttpHeaders | undefined;
  private readonly expect: number | undefined;
  private readonly wantHeaders: boolean;
  private readonly done: Done;
  constructor(expect: number | undefined, wantHeaders: boolean, done: Done) {
    this.expect = expect;
    this.wantHeaders = wantHeaders;
    this.done = done;
  }
  onConnect(): void {}
  onHeaders(statusCode: number, raw: Buffer[]): boolean {
    if (statusCode < 200) return true;
    this.status = statusCode;
    if (this.wantHeaders) {
      const h: IncomingHttpHeaders = {};
      for (let i = 0; i + 1 < raw.length; i += 2) h[raw[i].toString('latin1').toLowerCase()] = raw[i + 1].toString('latin1');
      this.headers = h;
    }
    return true;
  }
  onData(chunk: Buffer): boolean {
    this.bytes += chunk.length;
    return true;
  }
  onComplete(): void {
    this.done(httpOutcome(this.status, this.bytes, this.expect, this.headers));
  }
  onError(err: Error): void {
    // Not from inside undici's error path: the engine may dispatch the next request on this client
    // at once, and undici's connect-failure handling asserts its queue is empty after failing the
    // queued ones (undici lib/dispatcher/client.js onError, `assert(client[kSize] === 0)`).
    const o = failure(err);
    queueMicrotask(() => this.done(o));
  }
}

async function h1Conn(o: ConnOptions): Promise<Conn> {
  // The first socket is opened now (so setup stays out of the measured latencies and a broken
  // path fails here); undici opens the later ones itself when the connection is lost.
  let first: Duplex | undefined = await o.transport.open('http1');
  const client = new Client(`http://${o.spec.authority}`, {
    pipelining: 1,
    keepAliveTimeout: 60_000,
    keepAliveMaxTimeout: 60_000,
    headersTimeout: o.timeoutMs,
    bodyTimeout: o.timeoutMs,
    connect: ((_opts: object, cb: (err: Error | null, socket: Duplex | null) => void) => {
      const s = first;
      first = undefined;
      // Never synchronously: undici does not resume its queue from inside its own connect call.
      if (s && !s.destroyed) return process.nextTick(cb, null, s);
      o.transport.open('http1').then(
        (sock) => cb(null, sock),
        (err: Error) => cb(err, null),
      );
    }) as unknown as Client.Options['connect'],
  });
  const base: Dispatcher.DispatchOptions = {
    method: o.spec.method as Dispatcher.HttpMethod,
    path: o.spec.path,
    headers: { ...o.spec.headers, host: o.spec.authority, ...(o.spec.body.length > 0 ? { 'content-type': o.spec.headers['content-type'] ?? 'application/octet-stream' } : {}) },
    body: o.spec.body.length > 0 ? o.spec.body : undefined,
  };
  return {
    fire(done, extra, wantHeaders = false) {
      const opts = extra ? { ...base, headers: { ...(base.headers as Record<string, string>), ...extra } } : base;
      try {
        client.dispatch(opts, new H1Request(o.spec.expectBytes, wantHeaders, done));
      } catch (err) {
        done(failure(err));
      }
    },
    close() {
      first?.destroy();
      void client.destroy().catch(() => {});
    },
  };
}

// ---------------------------------------------------------------------------------------------
// h2c and gRPC: one Node http2 session per connection (prior knowledge), reopened when it dies.

class H2Conn implements Conn {
  private session: ClientHttp2Session | undefined;
  private opening: Promise<ClientHttp2Session> | undefined;
  private closed = false;
  private readonly o: ConnOptions;
  private readonly grpc: boolean;
  private readonly headers: OutgoingHttpHeaders;
  private readonly payload: Buffer;

  private constructor(o: ConnOptions, grpc: boolean) {
    this.o = o;
    this.grpc = grpc;
    const s = o.spec;
    this.headers = grpc
      ? { ...s.headers, ':method': 'POST', ':path': s.grpcMethod, ':authority': s.authority, 'content-type': 'application/grpc', te: 'trailers' }
      : { ...s.headers, ':method': s.method, ':path': s.path, ':authority': s.authority };
    if (grpc) {
      // One uncompressed message: flag 0, length (uint32 big-endian), payload.
      this.payload = Buffer.alloc(5 + s.body.length);
      this.payload.writeUInt32BE(s.body.length, 1);
      s.body.copy(this.payload, 5);
    } else this.payload = s.body;
  }

  static async open(o: ConnOptions, grpc: boolean): Promise<Conn> {
    const c = new H2Conn(o, grpc);
    await c.ensure();
    return c;
  }

  private ensure(): Promise<ClientHttp2Session> {
    if (this.session && !this.session.closed && !this.session.destroyed) return Promise.resolve(this.session);
    this.opening ??= this.connect().finally(() => (this.opening = undefined));
    return this.opening;
  }

  private async connect(): Promise<ClientHttp2Session> {
    const socket = await this.o.transport.open('raw');
    if (this.closed) {
      socket.destroy();
      throw Object.assign(new Error('connection closed'), { code: 'LOADTEST_RESET' });
    }
    const session = http2.connect(`http://${this.o.spec.authority}`, {
      createConnection: () => socket as never,
      settings: { initialWindowSize: this.o.http2Window ?? 4 * 1024 * 1024, enablePush: false },
      maxSessionMemory: 64,
    });
    session.on('error', () => {});
    // The peer's FIN ends the connection even when the transport stays half-open (a tunnel).
    socket.once('end', () => session.destroy());
    socket.once('close', () => session.destroy());
    await new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => {
        session.destroy();
        reject(Object.assign(new Error(`no HTTP/2 SETTINGS from ${this.o.spec.authority} within ${this.o.timeoutMs} ms`), { code: 'ETIMEDOUT' }));
      }, this.o.timeoutMs);
      session.once('connect', () => {
        clearTimeout(timer);
        resolve();
      });
      session.once('close', () => {
        clearTimeout(timer);
        reject(Object.assign(new Error('HTTP/2 session closed before it was established'), { code: 'LOADTEST_RESET' }));
      });
    });
    try {
      session.setLocalWindowSize(16 * 1024 * 1024);
    } catch {
      // closing
    }
    this.session = session;
    return session;
  }

  fire(done: Done, extra?: Readonly<Record<string, string>>, wantHeaders = false): void {
    const s = this.session;
    if (s && !s.closed && !s.destroyed) return this.request(s, done, extra, wantHeaders);
    this.ensure().then(
      (session) => this.request(session, done, extra, wantHeaders),
      (err: unknown) => done(failure(err)),
    );
  }

  private request(session: ClientHttp2Session, done: Done, extra: Readonly<Record<string, string>> | undefined, wantHeaders: boolean): void {
    let status = 0;
    let bytes = 0;
    let grpcStatus: string | undefined;
    let grpcMessage = '';
    let respHeaders: IncomingHttpHeaders | undefined;
    let error: unknown;
    let finished = false;
    const finish = (o: Outcome) => {
      if (finished) return;
      finished = true;
      clearTimeout(timer);
      done(o);
    };
    let req: http2.ClientHttp2Stream;
    try {
      req = session.request(extra ? { ...this.headers, ...extra } : this.headers, { endStream: this.payload.length === 0 });
    } catch (err) {
      return done(failure(err));
    }
    const timer = setTimeout(() => {
      error = timeoutError(this.o.timeoutMs);
      req.close(http2.constants.NGHTTP2_CANCEL);
    }, this.o.timeoutMs);
    if (this.payload.length > 0) req.end(this.payload);
    const readGrpc = (h: IncomingHttpHeaders) => {
      if (h['grpc-status'] !== undefined) grpcStatus = String(h['grpc-status']);
      if (h['grpc-message'] !== undefined) grpcMessage = decodeURIComponent(String(h['grpc-message']));
    };
    req.on('response', (h) => {
      status = Number(h[':status']);
      if (wantHeaders) respHeaders = h;
      if (this.grpc) readGrpc(h);
    });
    req.on('trailers', (h) => readGrpc(h));
    req.on('data', (c: Buffer) => {
      bytes += c.length;
    });
    req.on('error', (err: Error) => {
      error ??= err;
    });
    req.once('close', () => {
      if (error) return finish(failure(error));
      if (status === 0) return finish(failure(Object.assign(new Error(`stream reset (code ${req.rstCode}) before a response`), { code: 'LOADTEST_RESET' })));
      if (!this.grpc) return finish(httpOutcome(status, bytes, this.o.spec.expectBytes, respHeaders));
      if (grpcStatus === undefined) return finish(status === 200 ? { ok: false, code: '-1', kind: 'grpc_no_status', detail: 'gRPC response without grpc-status', headers: respHeaders } : httpOutcome(status, 0, undefined, respHeaders));
      const name = GRPC_STATUS[Number(grpcStatus)] ?? grpcStatus;
      if (name !== 'OK') return finish({ ok: false, code: name, kind: `grpc_${name}`, detail: `${name}${grpcMessage ? `: ${grpcMessage}` : ''}`, headers: respHeaders });
      const payload = Math.max(0, bytes - 5);
      const expect = this.o.spec.expectBytes;
      if (expect !== undefined && payload !== expect) return finish({ ok: false, code: name, kind: 'bad_body', detail: `message of ${payload} bytes (expected ${expect})`, headers: respHeaders });
      finish({ ok: true, code: name, kind: '', detail: '', headers: respHeaders });
    });
  }

  close(): void {
    this.closed = true;
    this.session?.destroy();
  }
}
