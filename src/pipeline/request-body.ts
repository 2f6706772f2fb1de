/**
 * Reading the start of a request body in a filter, before the router runs, without losing it:
 * Envoy's decoder filters that return `StopIterationAndBuffer` (ext_authz `with_request_body`,
 * envoyproxy/envoy source/extensions/filters/http/ext_authz/ext_authz.cc `decodeData`). The filter calls
 * {@link bufferRequestBody}; the bytes read are kept in `stream.bufferedBody` and the router sends
 * them first, then what is still unread in `stream.req` ({@link bodyAfterBuffer}), so the upstream
 * receives the body untouched.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Readable } from 'node:stream';
import type { BufferedBody, Http2DownstreamRequest, StreamContext } from './context.ts';

export type { BufferedBody };

/** Node's own test for a 100-continue expectation (`_http_server.js` continueExpression). */
const CONTINUE = /(?:^|\W)100-continue(?:$|\W)/i;

/**
 * Whether an HTTP/1.1 downstream asked for `100 Continue`. HTTP/1.0 and HTTP/2 requests never
 * count (Node ignores Expect on 1.0; its h2 layer answers 100 itself).
 */
export function asksForContinue(stream: StreamContext): boolean {
  if (stream.http2 || stream.protocol !== 'HTTP/1.1') return false;
  // As the filters left the headers (one may have removed or added the expectation).
  const e = stream.requestHeaders.get('expect');
  return e !== undefined && CONTINUE.test(e);
}

/**
 * The request body as a stream: the HTTP/1 message itself, or the HTTP/2 server stream (whose
 * readable side is the body).
 */
export function requestBody(stream: StreamContext): Readable {
  return stream.http2 ? (stream.req as Http2DownstreamRequest).stream : (stream.req as IncomingMessage);
}

/**
 * Whether the request carries a body at all: an HTTP/2 request whose HEADERS did not end the
 * stream, an HTTP/1.x request with Transfer-Encoding or a non-zero Content-Length (RFC 9112 §6.3).
 */
export function requestHasBody(stream: StreamContext): boolean {
  const req = stream.req;
  if (stream.http2) {
    const h2 = (req as Http2DownstreamRequest).stream;
    return !h2.endAfterHeaders && !h2.readableEnded;
  }
  if (req.headers['transfer-encoding'] !== undefined) return true;
  const cl = req.headers['content-length'];
  return cl !== undefined && cl !== '0';
}

/**
 * Read `stream.req` until more than `limit` bytes arrived or the body ended, then pause it; the
 * result is also stored in `stream.bufferedBody` for the router. An HTTP/1.1 client waiting for
 * `100 Continue` gets it first (Envoy's connection manager answers 100 itself). Call at most once
 * per request, from a request-header phase, only when {@link requestHasBody}.
 * @returns what was read: at most one chunk past `limit` (so `data.length > limit` tells that the
 *   body is longer than `limit`), `complete` when the request ended.
 * @throws (rejects) when the downstream request is aborted before that.
 */
export function bufferRequestBody(stream: StreamContext, limit: number): Promise<BufferedBody> {
  const req = requestBody(stream);
  if (asksForContinue(stream)) (stream.res as ServerResponse).writeContinue();
  return new Promise<BufferedBody>((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    const finish = (complete: boolean) => {
      req.off('data', onData);
      req.off('end', onEnd);
      req.off('close', onClose);
      const body: BufferedBody = { data: chunks.length === 1 ? chunks[0] : Buffer.concat(chunks, size), complete };
      stream.bufferedBody = body;
      resolve(body);
    };
    const onData = (chunk: Buffer) => {
      chunks.push(chunk);
      size += chunk.length;
      if (size > limit) {
        req.pause();
        finish(false);
      }
    };
    const onEnd = () => finish(true);
    const onClose = () => {
      if (req.readableEnded) return;
      req.off('data', onData);
      req.off('end', onEnd);
      reject(new Error('downstream request aborted while its body was being read'));
    };
    req.on('data', onData);
    req.once('end', onEnd);
    req.once('close', onClose);
  });
}

/**
 * The whole request body for a stream whose start a filter buffered: the buffered bytes, then the
 * rest of `stream.req` (nothing more when the buffer was complete).
 */
export async function* bodyAfterBuffer(stream: StreamContext): AsyncGenerator<Buffer> {
  const pre = stream.bufferedBody;
  if (pre && pre.data.length > 0) yield pre.data;
  if (pre?.complete) return;
  for await (const chunk of requestBody(stream) as AsyncIterable<Buffer>) yield chunk;
}

/**
 * Before a local reply to a request whose body was only partly read: the rest of the upload is
 * not wanted. An HTTP/1.x connection is closed after the reply (as Envoy does when it answers
 * before the request ended); what is still coming is read and dropped so the reply can flow.
 */
export function discardUnreadBody(stream: StreamContext): void {
  const pre = stream.bufferedBody;
  if (!pre || pre.complete) return;
  if (!stream.http2) (stream.res as ServerResponse).shouldKeepAlive = false;
  requestBody(stream).resume();
}
