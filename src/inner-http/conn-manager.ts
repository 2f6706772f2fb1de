/**
 * The HTTP connection manager's own part of an inner request (Envoy's HCM, envoyproxy/envoy
 * source/common/http/conn_manager_impl.cc `ActiveStream::decodeHeaders` and conn_manager_utility.cc
 * `mutateRequestHeaders`), run before any filter:
 *
 * - the request head read once from Node's request: pseudo-headers become fields, every other
 *   header goes in the one mutable HeaderList filters edit (hop-by-hop headers removed, TE kept
 *   only as `trailers`);
 * - the checks, each refused with a local reply carrying Envoy's details: HTTP/0.9 (400
 *   `http1.codec_error`), more header fields than `max_headers_count` (431), HTTP/1.0 when refused
 *   (426), a method that is not upper case, a missing (HTTP/1.1, HTTP/2) or repeated Host, a
 *   request target that is neither origin-form nor absolute-form (400); an absolute-form target
 *   (`GET http://host/p`) becomes origin-form with the URI's authority, as Envoy does with
 *   `allow_absolute_url`; then the path normalization hook;
 * - `x-request-id`: the client's is kept, else a UUID v4 is added to the headers, so every filter,
 *   the ext_authz check, the upstream request and the access-log line carry the same id.
 *
 * And the statuses of Node's HTTP/1 codec errors (the `clientError` event), which Envoy's codec
 * answers the same way (envoyproxy/envoy source/common/http/http1/codec_impl.cc `sendProtocolError`).
 */
import { randomUUID } from 'node:crypto';
import type { IncomingMessage } from 'node:http';
import { HeaderList, isHopByHop, namesMoreHeaders, ResponseFlag, sendLocalReply, stripHopByHop, type ResponseFlagName, type DownstreamRequest, type Http2DownstreamRequest, type RequestHead, type StreamContext } from '../pipeline/index.ts';
import { clusterName, type Target } from '../state/index.ts';

/**
 * A path normalization step (Envoy's `normalize_path` / `merge_slashes` on the HCM): returns the
 * request target to use from here on (query kept), or undefined to refuse the request (400
 * `path_normalization_failed`). Called with an origin-form target.
 */
export type PathNormalizer = (target: string, stream: StreamContext) => string | undefined;

/** What the connection manager is configured with. */
export interface ConnManagerOptions {
  /** Answer HTTP/1.0 with 426 (Envoy without `ISTIO_META_HTTP10`). */
  readonly rejectHttp10: boolean;
  /** Optional path normalization before the filters; none by default. */
  readonly normalizePath?: PathNormalizer;
  /**
   * Most header fields of an HTTP/1 request (Envoy's `max_headers_count`); beyond: 431. HTTP/2's
   * are bounded by its codec (Node resets the stream).
   */
  readonly maxHeaderCount?: number;
}

/** A refusal: the local reply to send, and whether the HTTP/1 connection closes after it. */
export interface Refusal {
  readonly status: number;
  readonly body: string;
  readonly flag: ResponseFlagName;
  readonly details: string;
  readonly close: boolean;
}

// --- the request head ---------------------------------------------------------------------

const TE_TRAILERS = /(?:^|[\s,])trailers(?:$|[\s,;])/i;

/** Read the head of a request once (see the module comment). */
export function requestHead(req: DownstreamRequest): RequestHead {
  if (req.httpVersion === '2.0') return h2Head(req as Http2DownstreamRequest);
  const raw = req.rawHeaders;
  let host: string | undefined;
  let connection: string | undefined;
  let teTrailers = false;
  // One pass: the fields the connection manager reads, and the list without hop-by-hop headers.
  let headers: string[] = [];
  for (let i = 0; i < raw.length; i += 2) {
    const n = raw[i];
    const len = n.length;
    if (len === 4 && host === undefined && n.toLowerCase() === 'host') host = raw[i + 1];
    else if (len === 2 && n.toLowerCase() === 'te') teTrailers ||= TE_TRAILERS.test(raw[i + 1]);
    else if (len === 10 && n.toLowerCase() === 'connection') connection = connection === undefined ? raw[i + 1] : `${connection},${raw[i + 1]}`;
    if (!isHopByHop(n)) headers.push(n, raw[i + 1]);
  }
  // Headers the Connection header names are hop-by-hop too (rare: a second pass).
  if (connection !== undefined && namesMoreHeaders(connection)) headers = stripHopByHop(headers, connection);
  // TE is hop-by-hop, but its `trailers` token is kept (Envoy's HCM sanitizes TE to `trailers`;
  // gRPC needs it upstream), in the list filters see and edit.
  if (teTrailers) headers.push('te', 'trailers');
  return {
    protocol: req.httpVersion === '1.1' ? 'HTTP/1.1' : `HTTP/${req.httpVersion}`,
    method: (req as IncomingMessage).method ?? 'GET',
    path: req.url ?? '/',
    authority: host ?? '',
    headers: new HeaderList(headers),
  };
}

/** HTTP/2: pseudo-headers to fields; `:authority`, else a `host` field, is the authority. */
function h2Head(req: Http2DownstreamRequest): RequestHead {
  const raw = req.rawHeaders;
  const out: string[] = [];
  let method = '';
  let path = '';
  let authority: string | undefined;
  let host: string | undefined;
  for (let i = 0; i < raw.length; i += 2) {
    const n = raw[i];
    if (n.charCodeAt(0) !== 0x3a) {
      if (n === 'host') host ??= raw[i + 1];
      out.push(n, raw[i + 1]);
    } else if (n === ':method') method = raw[i + 1];
    else if (n === ':path') path = raw[i + 1];
    else if (n === ':authority') authority = raw[i + 1];
  }
  return { protocol: 'HTTP/2', method, path, authority: authority ?? host ?? '', headers: new HeaderList(out) };
}

/** A head for a request the codec could not read (no method, target or headers known). */
export function unreadableHead(protocol: string): RequestHead {
  return { protocol, method: '', path: '', authority: '', headers: new HeaderList() };
}

// --- the checks ---------------------------------------------------------------------------

const BAD_REQUEST = 'Bad Request';
const HTTP09_BODY = 'HTTP/0.9 requests are not supported\n';

/** Stat prefixes by tunnel target (targets are immutable per snapshot; the name was built per request). */
const statPrefixes = new WeakMap<Target, string>();

/** Set the stream's connection-manager facts: the stat prefix and the request id (kept or generated). */
export function prepareStream(stream: StreamContext): void {
  const target = stream.conn.target;
  let prefix = statPrefixes.get(target);
  if (prefix === undefined) statPrefixes.set(target, (prefix = clusterName(target, 'http')));
  stream.statPrefix = prefix;
  keepOrGenerateRequestId(stream);
}

/**
 * {@link prepareStream}, then the checks: returns the refusal to send, or undefined when the
 * filters may run. May rewrite `stream.path`, `stream.authority` and the Host header
 * (absolute-form target, path normalization).
 */
export function admitRequest(stream: StreamContext, opts: ConnManagerOptions): Refusal | undefined {
  prepareStream(stream);
  // HTTP/0.9 (a request line without version, which Node's parser takes as one): neither HTTP/1
  // nor TCP on an HTTP port, refused like any request the codec cannot take.
  if (stream.protocol === 'HTTP/0.9') return { status: 400, body: HTTP09_BODY, flag: ResponseFlag.DownstreamProtocolError, details: 'http1.codec_error', close: true };
  // Envoy's HTTP/1 codec answers a header block of more fields than `max_headers_count` 431
  // (codec_impl.cc, details `http1.too_many_headers`); Node's parser would drop the excess silently.
  if (!stream.http2 && opts.maxHeaderCount !== undefined && stream.req.rawHeaders.length / 2 > opts.maxHeaderCount) {
    return { status: 431, body: 'Request Header Fields Too Large', flag: ResponseFlag.DownstreamProtocolError, details: 'http1.too_many_headers', close: true };
  }
  if (stream.protocol === 'HTTP/1.0' && opts.rejectHttp10) {
    return { status: 426, body: 'Upgrade Required', flag: ResponseFlag.DownstreamProtocolError, details: 'http1.0_not_allowed', close: true };
  }
  // Methods are case-sensitive tokens and Envoy takes only upper-case ones (HTTP/1's parser already
  // refuses the others; HTTP/2 `:method` gets here).
  if (hasLowerCase(stream.method)) return refuse('invalid_method');
  const hosts = stream.http2 ? 0 : countHost(stream.requestHeaders.raw);
  // Two Host headers make the target ambiguous (RFC 9112 §3.2).
  if (hosts > 1) return refuse('duplicate_host_header', 'Bad Request: duplicate host header');
  // HTTP/1.1 needs Host (RFC 9112 §3.2), HTTP/2 an authority (Envoy: `missing_host_header`).
  if (stream.authority === '' && (stream.http2 || stream.protocol === 'HTTP/1.1')) return refuse('missing_host_header');
  if (stream.path.charCodeAt(0) !== 0x2f) {
    const abs = stream.http2 ? undefined : absoluteForm(stream.path);
    // (`OPTIONS *` is refused too: the upstream clients cannot send an asterisk-form target.)
    if (!abs) return refuse('invalid_request_target', 'Bad Request: invalid request target');
    stream.path = abs.path;
    stream.authority = abs.host;
    stream.requestHeaders.set('host', abs.host);
  }
  if (opts.normalizePath) {
    const normalized = opts.normalizePath(stream.path, stream);
    if (normalized === undefined) return { status: 400, body: BAD_REQUEST, flag: ResponseFlag.None, details: 'path_normalization_failed', close: false };
    stream.path = normalized;
  }
  return undefined;
}

/**
 * CONNECT inside a tunnel: the waypoint does not proxy a second tunnel (Envoy's HCM has no
 * CONNECT route inside the waypoint's chains); answered 405, flag `DPE`.
 */
export function refuseConnect(stream: StreamContext): void {
  prepareStream(stream);
  sendLocalReply(stream, 405, '', ResponseFlag.DownstreamProtocolError, 'method_not_allowed');
}

function refuse(details: string, body = BAD_REQUEST): Refusal {
  return { status: 400, body, flag: ResponseFlag.DownstreamProtocolError, details, close: true };
}

/**
 * Envoy's connection manager sets `x-request-id` before the first filter runs
 * (`mutateRequestHeaders` → the UUID request-id extension `UUIDRequestIDExtension::set`): a
 * client's is kept, otherwise a UUID v4 is generated and added to the request headers.
 */
function keepOrGenerateRequestId(stream: StreamContext): void {
  const have = stream.requestHeaders.get('x-request-id');
  if (have) {
    stream.requestId = have;
    return;
  }
  const generated = randomUUID();
  // An empty value is replaced; an absent one appended (no second scan).
  if (have === undefined) stream.requestHeaders.append('x-request-id', generated);
  else stream.requestHeaders.set('x-request-id', generated);
  stream.requestId = generated;
}

function hasLowerCase(s: string): boolean {
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c >= 0x61 && c <= 0x7a) return true;
  }
  return false;
}

function countHost(raw: readonly string[]): number {
  let n = 0;
  for (let i = 0; i < raw.length; i += 2) if (raw[i].length === 4 && raw[i].toLowerCase() === 'host') n++;
  return n;
}

const ABSOLUTE_FORM = /^https?:\/\/([^/?#\s]+)([^#\s]*)$/i;

/**
 * `http(s)://authority/path?q` → origin-form path and authority, both as sent (no case folding or
 * dot-segment removal here: that is path normalization's job); undefined for anything else.
 */
function absoluteForm(target: string): { path: string; host: string } | undefined {
  const m = ABSOLUTE_FORM.exec(target);
  if (!m) return undefined;
  const rest = m[2];
  return { path: rest.charCodeAt(0) === 0x2f ? rest : `/${rest}`, host: m[1] };
}

/** `Upgrade: websocket` (a token of the header, any case) on a request with `Connection: upgrade`. */
export function isWebSocketUpgrade(req: IncomingMessage): boolean {
  const u = req.headers.upgrade;
  return u !== undefined && /(?:^|,)\s*websocket\s*(?:,|$)/i.test(u);
}

// --- codec errors -------------------------------------------------------------------------

/** The local reply Envoy's HTTP/1 codec sends for a request Node's parser refused. */
export interface CodecError {
  readonly status: number;
  readonly details: string;
}

/**
 * The answer to a `clientError` of Node's HTTP/1 server, or undefined when it is no codec error
 * (a transport error such as ECONNRESET: nothing to answer). Header blocks over the limit get 431
 * (`http1.headers_too_large`), every other parse error 400 (`http1.codec_error`); both carry the
 * `DPE` flag.
 */
export function codecError(err: Error & { code?: string }): CodecError | undefined {
  const code = err.code ?? '';
  if (!code.startsWith('HPE_')) return undefined;
  // Bytes after a `Connection: close` request are not a request: Envoy drops them too.
  if (code === 'HPE_CLOSED_CONNECTION') return undefined;
  if (code === 'HPE_HEADER_OVERFLOW') return { status: 431, details: 'http1.headers_too_large' };
  return { status: 400, details: 'http1.codec_error' };
}
