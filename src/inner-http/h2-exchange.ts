/**
 * The request and response of one h2c exchange inside a tunnel, served on Node's core http2
 * stream API (the server's `stream` event): what the connection manager, filters and router use
 * of a request (its head; the stream itself is the body) and of a response (writeHead, write,
 * end, trailers, 'close'/'drain'), with nothing done per request that nobody uses. Node's
 * compatibility layer (Http2ServerRequest/Response) costs a second Readable per request that
 * every body chunk passes through, five stream listeners and a header object built twice per
 * response: 7-25 % of the CPU of a bare inner-h2c relay (bench/micro/floor-relay.ts,
 * `H2C_FLOOR_API=compat`).
 *
 * Behaviour kept from the compatibility layer (lib/internal/http2/compat.js): headers go out at
 * `writeHead`; every response that has a body or trailers ends with a trailers HEADERS frame when
 * trailers were added, else an empty DATA frame with END_STREAM (`waitForTrailers`); `date` is
 * added by Node; a connection-specific header (RFC 9113 §8.2.2) is dropped rather than refused;
 * a header block Node refuses resets the stream.
 */
import http2, { type IncomingHttpHeaders, type ServerHttp2Stream } from 'node:http2';
import { log } from '../util/index.ts';
import type { Http2DownstreamRequest, Http2DownstreamResponse } from '../pipeline/index.ts';

/** The head of an h2c request as received; its body is the stream's readable side. */
export class H2Request implements Http2DownstreamRequest {
  readonly httpVersion = '2.0' as const;
  readonly method: string;
  readonly url: string;
  readonly headers: IncomingHttpHeaders;
  readonly rawHeaders: string[];
  readonly stream: ServerHttp2Stream;

  constructor(stream: ServerHttp2Stream, headers: IncomingHttpHeaders, rawHeaders: string[]) {
    this.stream = stream;
    this.headers = headers;
    this.rawHeaders = rawHeaders;
    this.method = headers[':method'] ?? '';
    this.url = headers[':path'] ?? '';
  }
}

const WANT_TRAILERS = { waitForTrailers: true } as const;
const END_STREAM = { endStream: true } as const;

/** The response of an h2c exchange, written on its stream. */
export class H2Response implements Http2DownstreamResponse {
  readonly stream: ServerHttp2Stream;
  statusCode = 200;
  private ended = false;
  private trailers: Record<string, string> | undefined = undefined;

  constructor(stream: ServerHttp2Stream) {
    this.stream = stream;
  }

  get headersSent(): boolean {
    return this.stream.headersSent;
  }

  get writableEnded(): boolean {
    return this.ended;
  }

  get writableFinished(): boolean {
    return this.stream.writableFinished;
  }

  get writableNeedDrain(): boolean {
    return this.stream.writableNeedDrain;
  }

  get destroyed(): boolean {
    return this.stream.destroyed;
  }

  writeHead(status: number, headers?: readonly string[] | Readonly<Record<string, string>>): void {
    this.statusCode = status;
    this.sendHead(headers, false);
  }

  write(chunk: Buffer | string): boolean {
    const s = this.stream;
    if (this.ended || s.destroyed) return false;
    if (!s.headersSent) this.sendHead(undefined, false);
    // Node ended the stream on the head (HEAD request, 204, 304): the body is dropped.
    if (s.writableEnded) return true;
    return s.write(chunk);
  }

  end(chunk?: Buffer | string): void {
    if (this.ended) return;
    this.ended = true;
    const s = this.stream;
    if (s.destroyed) return;
    if (!s.headersSent) {
      // Nothing written yet: HEADERS with END_STREAM when there is no body nor trailers either.
      this.sendHead(undefined, chunk === undefined);
      if (s.destroyed || s.writableEnded) return;
    }
    if (chunk === undefined || s.writableEnded) s.end();
    else s.end(chunk);
  }

  addTrailers(trailers: Readonly<Record<string, string>>): void {
    const t = (this.trailers ??= {});
    for (const name in trailers) t[name] = trailers[name];
  }

  /** A `100 Continue` interim answer (HTTP/2 sends it as HEADERS with `:status` 100). */
  writeContinue(): void {
    const s = this.stream;
    if (!s.headersSent && !s.destroyed) s.additionalHeaders({ ':status': 100 });
  }

  destroy(err?: Error): void {
    this.stream.destroy(err);
  }

  on(event: 'close' | 'drain', listener: () => void): void {
    this.stream.on(event, listener);
  }

  once(event: 'close' | 'drain', listener: () => void): void {
    this.stream.once(event, listener);
  }

  off(event: 'close' | 'drain', listener: () => void): void {
    this.stream.off(event, listener);
  }

  private sendHead(headers: readonly string[] | Readonly<Record<string, string>> | undefined, endStream: boolean): void {
    const s = this.stream;
    if (s.destroyed || s.closed || s.headersSent) return;
    const list: string[] = [':status', String(this.statusCode)];
    if (Array.isArray(headers)) {
      for (let i = 0; i < headers.length; i += 2) if (allowed(headers[i], headers[i + 1])) list.push(headers[i], headers[i + 1]);
    } else if (headers) {
      const record = headers as Readonly<Record<string, string>>;
      for (const name in record) if (allowed(name, record[name])) list.push(name, record[name]);
    }
    const trailers = !endStream || this.trailers !== undefined;
    try {
      if (trailers) s.once('wantTrailers', () => this.sendTrailers());
      s.respond(list, trailers ? WANT_TRAILERS : END_STREAM);
    } catch (err) {
      // A header name or value Node refuses (invalid token, a repeated single-value field).
      s.destroy(err as Error);
    }
  }

  private sendTrailers(): void {
    try {
      // No trailers: Node ends the stream with an empty DATA frame.
      this.stream.sendTrailers(this.trailers ?? {});
    } catch (err) {
      this.stream.destroy(err as Error);
    }
  }
}

/**
 * Whether a response header may go out on HTTP/2: not a pseudo-header and not connection-specific
 * (RFC 9113 §8.2.2: `connection` and what it names, `keep-alive`, `proxy-connection`,
 * `transfer-encoding`, `upgrade`; `te` only as `trailers`), which Node's http2 core refuses.
 */
function allowed(name: string, value: string): boolean {
  const len = name.length;
  if (len === 0 || name.charCodeAt(0) === 0x3a /* : */) return false;
  if (len !== 2 && len !== 7 && len !== 10 && len !== 14 && len !== 16 && len !== 17) return true;
  switch (name.toLowerCase()) {
    case 'connection':
    case 'upgrade':
    case 'keep-alive':
    case 'http2-settings':
    case 'proxy-connection':
    case 'transfer-encoding':
      return false;
    case 'te':
      return value === 'trailers';
    default:
      return true;
  }
}

/** RFC 9113 §6.5.2's size of a header list: name and value octets plus 32 per field (ASCII: one octet a char). */
export function headerListSize(raw: readonly string[]): number {
  let n = 0;
  for (let i = 0; i < raw.length; i++) n += raw[i].length + 16;
  return n;
}

export function refuseOversizedHeaders(h2: ServerHttp2Stream): void {
  log.debug({ streamId: h2.id }, 'inner h2c request headers over http.maxRequestHeadersBytes: stream reset');
  h2.close(http2.constants.NGHTTP2_INTERNAL_ERROR);
}
