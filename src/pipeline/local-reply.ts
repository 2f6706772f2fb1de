/**
 * Answering the downstream of a stream: response headers after the response-header phase, local
 * replies (Envoy's `sendLocalReply`, with its gRPC form), and the downstream's state (closed,
 * complete, reset). The one place that writes to a stream's response for filters, the router and
 * the connection manager (src/inner-http); the stream context only records what was sent.
 */
import type { ServerResponse } from 'node:http';
import { LOCAL_REPLY_BODY, LOCAL_REPLY_STATUS, type ResponseFlagName } from './response-flags.ts';
import type { Http2DownstreamResponse, StreamContext } from './context.ts';
import { HeaderList } from './headers.ts';

/**
 * Write response headers downstream after the response-header phases ran (reverse order) and
 * record `status` as the response code. `headers` is a flat header list (see HeaderList).
 * Returns false when the downstream is gone or the response already started.
 */
export function respond(stream: StreamContext, status: number, statusText: string | undefined, headers: HeaderList): boolean {
  const res = stream.res;
  if (res.headersSent || downstreamClosed(stream)) return false;
  stream.responseCode = status;
  stream.chain.runResponseHeaders(stream, headers);
  if (stream.http2) (res as Http2DownstreamResponse).writeHead(status, headers.raw);
  else if (statusText) (res as ServerResponse).writeHead(status, statusText, headers.raw);
  else (res as ServerResponse).writeHead(status, headers.raw);
  return true;
}

/**
 * Answer locally (Envoy's sendLocalReply): `status` (default from the flag's mapping in
 * response-flags.ts, else 500), a text body (default the flag's), a response flag
 * (`-` for none) and the response code details. Response-header filters still run. A gRPC
 * request gets HTTP 200 with the status mapped to `grpc-status` and the text as `grpc-message`.
 * When the response already started, the downstream stream is reset instead.
 */
export function sendLocalReply(stream: StreamContext, status: number | undefined, body: string | undefined, flag: ResponseFlagName, details: string): void {
  stream.addFlag(flag);
  stream.responseCodeDetails = details;
  const code = status ?? LOCAL_REPLY_STATUS[flag] ?? 500;
  const text = body ?? LOCAL_REPLY_BODY[flag] ?? '';
  const res = stream.res;
  if (res.headersSent) {
    resetDownstream(stream);
    return;
  }
  if (stream.isGrpc) {
    // Envoy answers a gRPC request with HTTP 200 and the status mapped to grpc-status
    // (envoyproxy/envoy source/common/grpc/status.cc `httpToGrpcStatus`), the text as grpc-message.
    const grpcStatus = String(httpToGrpcStatus(code));
    if (!respond(stream, 200, undefined, new HeaderList(['content-type', 'application/grpc']))) return;
    stream.grpcStatus = grpcStatus;
    res.addTrailers({ 'grpc-status': grpcStatus, 'grpc-message': grpcMessageEncode(text) });
    res.end();
    return;
  }
  const length = Buffer.byteLength(text);
  if (respond(stream, code, undefined, new HeaderList(['content-length', String(length), 'content-type', 'text/plain']))) {
    stream.bytesSent += length;
    res.end(text);
  }
}

/** Reset the downstream exchange (HTTP/1: close the connection; HTTP/2: RST_STREAM INTERNAL_ERROR). */
export function resetDownstream(stream: StreamContext): void {
  if (stream.http2) (stream.res as Http2DownstreamResponse).stream.close(0x2 /* INTERNAL_ERROR */);
  else (stream.res as ServerResponse).destroy();
}

/** True once the downstream stream or connection is gone (nothing more can be written). */
export function downstreamClosed(stream: StreamContext): boolean {
  return stream.http2 ? (stream.res as Http2DownstreamResponse).stream.destroyed : (stream.res as ServerResponse).destroyed;
}

/**
 * True when the whole response was written and delivered (not cut by a reset). HTTP/2 needs its
 * own test: a stream's writable side reports finished after a client RST_STREAM.
 */
export function responseComplete(stream: StreamContext): boolean {
  if (!stream.http2) return (stream.res as ServerResponse).writableFinished;
  const res = stream.res as Http2DownstreamResponse;
  return res.writableEnded && !(res.stream.rstCode > 0);
}

/**
 * `grpc-message` percent-encoding (gRPC over HTTP/2 spec, Envoy's `Grpc::Utility::PercentEncoding`):
 * only bytes outside printable ASCII (0x20–0x7E) and `%` itself are escaped, so `RBAC: access denied`
 * stays readable (encodeURIComponent would escape the `:` and clients show `%3A`).
 */
export function grpcMessageEncode(text: string): string {
  if (/^[\x20-\x24\x26-\x7e]*$/.test(text)) return text;
  let out = '';
  for (const byte of Buffer.from(text, 'utf8')) {
    out += byte >= 0x20 && byte <= 0x7e && byte !== 0x25 ? String.fromCharCode(byte) : `%${byte.toString(16).toUpperCase().padStart(2, '0')}`;
  }
  return out;
}

/**
 * Envoy's HTTP status → gRPC status mapping for local replies (envoyproxy/envoy
 * source/common/grpc/status.cc).
 */
export function httpToGrpcStatus(http: number): number {
  switch (http) {
    case 400:
      return 13; // INTERNAL
    case 401:
      return 16; // UNAUTHENTICATED
    case 403:
      return 7; // PERMISSION_DENIED
    case 404:
      return 12; // UNIMPLEMENTED
    case 429:
    case 502:
    case 503:
    case 504:
      return 14; // UNAVAILABLE
    default:
      return 2; // UNKNOWN
  }
}
