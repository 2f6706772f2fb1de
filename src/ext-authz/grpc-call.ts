/**
 * One unary gRPC call over an {@link H2Upstream} (h2c sessions over streams from `dial`, so it runs
 * inside HBONE tunnels as well as over plain TCP). gRPC over HTTP/2 framing as in
 * grpc/grpc `doc/PROTOCOL-HTTP2.md`: `POST <path>`, `content-type: application/grpc`,
 * `te: trailers`, `grpc-timeout`, one length-prefixed message each way (no compression), status
 * in `grpc-status` / `grpc-message` (trailers, or headers for a trailers-only answer). A
 * non-gRPC HTTP answer maps to a gRPC code as gRPC clients do (`doc/http-grpc-status-mapping.md`).
 *
 * @grpc/grpc-js cannot run a client channel over a stream we supply, hence this small client; the
 * tests' ext_authz server is a real grpc-js server.
 */
import type { H2Upstream, UpstreamHandler } from '../upstream/index.ts';

/** gRPC status codes used here. */
export const GRPC = Object.freeze({ OK: 0, CANCELLED: 1, UNKNOWN: 2, DEADLINE_EXCEEDED: 4, UNIMPLEMENTED: 12, INTERNAL: 13, UNAVAILABLE: 14, UNAUTHENTICATED: 16, PERMISSION_DENIED: 7 });

export type UnaryResult =
  | { readonly ok: true; readonly message: Uint8Array }
  | { readonly ok: false; readonly code: number; readonly message: string };

/** Map a non-gRPC HTTP status to a gRPC code (gRPC's http-grpc-status-mapping). */
function codeForHttpStatus(status: number): number {
  switch (status) {
    case 400:
      return GRPC.INTERNAL;
    case 401:
      return GRPC.UNAUTHENTICATED;
    case 403:
      return GRPC.PERMISSION_DENIED;
    case 404:
      return GRPC.UNIMPLEMENTED;
    case 429:
    case 502:
    case 503:
    case 504:
      return GRPC.UNAVAILABLE;
    default:
      return GRPC.UNKNOWN;
  }
}

function headerValue(flat: readonly (Buffer | string)[] | null, name: string): string | undefined {
  if (!flat) return undefined;
  for (let i = 0; i < flat.length; i += 2) if (String(flat[i]).toLowerCase() === name) return String(flat[i + 1]);
  return undefined;
}

function decodeGrpcMessage(text: string | undefined): string {
  if (!text) return '';
  try {
    return decodeURIComponent(text);
  } catch {
    return text;
  }
}

/** One length-prefixed message (uncompressed). */
export function frameMessage(message: Uint8Array): Buffer {
  const out = Buffer.allocUnsafe(5 + message.length);
  out[0] = 0;
  out.writeUInt32BE(message.length, 1);
  out.set(message, 5);
  return out;
}

/**
 * The single message of a unary response body.
 * @throws Error when the body is not exactly one uncompressed length-prefixed message.
 */
export function unframeMessage(body: Buffer): Uint8Array {
  if (body.length < 5) throw new Error(`response body of ${body.length} bytes holds no gRPC message`);
  if (body[0] !== 0) throw new Error('compressed gRPC response message (no grpc-encoding was offered)');
  const len = body.readUInt32BE(1);
  if (body.length !== 5 + len) throw new Error(`gRPC response framing: ${body.length - 5} bytes for a message of ${len}`);
  return body.subarray(5);
}

/**
 * Call `path` with `request` (serialized message) on `upstream`; `authority` is the `:authority`.
 * Never rejects: transport failures come back as `UNAVAILABLE`, the deadline as
 * `DEADLINE_EXCEEDED` (the stream is cancelled), a bad response as `INTERNAL`.
 */
export function unaryCall(upstream: H2Upstream, authority: string, path: string, request: Uint8Array, timeoutMs: number): Promise<UnaryResult> {
  return new Promise<UnaryResult>((resolve) => {
    let settled = false;
    let timer: NodeJS.Timeout | undefined;
    let abort: ((err?: Error) => void) | undefined;
    let timedOut = false;
    let httpStatus = 0;
    let headers: (Buffer | string)[] | null = null;
    const chunks: Buffer[] = [];
    const finish = (r: UnaryResult) => {
      if (settled) return;
      settled = true;
      if (timer) clearTimeout(timer);
      resolve(r);
    };
    const handler: UpstreamHandler = {
      onConnect(a) {
        abort = a;
        if (settled) a();
      },
      onHeaders(status, raw) {
        httpStatus = status;
        headers = raw;
        return true;
      },
      onData(chunk) {
        chunks.push(chunk);
        return true;
      },
      onComplete(trailers) {
        const statusText = headerValue(trailers, 'grpc-status') ?? headerValue(headers, 'grpc-status');
        const message = decodeGrpcMessage(headerValue(trailers, 'grpc-message') ?? headerValue(headers, 'grpc-message'));
        const contentType = headerValue(headers, 'content-type') ?? '';
        if (httpStatus !== 200) {
          finish({ ok: false, code: codeForHttpStatus(httpStatus), message: `HTTP ${httpStatus} from the gRPC server` });
          return;
        }
        if (!contentType.startsWith('application/grpc')) {
          finish({ ok: false, code: GRPC.UNKNOWN, message: `not a gRPC response (content-type ${JSON.stringify(contentType)})` });
          return;
        }
        if (statusText === undefined) {
          finish({ ok: false, code: GRPC.INTERNAL, message: 'gRPC response without grpc-status' });
          return;
        }
        const code = Number(statusText);
        if (code !== GRPC.OK) {
          finish({ ok: false, code: Number.isInteger(code) ? code : GRPC.UNKNOWN, message });
          return;
        }
        try {
          finish({ ok: true, message: unframeMessage(Buffer.concat(chunks)) });
        } catch (err) {
          finish({ ok: false, code: GRPC.INTERNAL, message: (err as Error).message });
        }
      },
      onError(err) {
        if (timedOut) finish({ ok: false, code: GRPC.DEADLINE_EXCEEDED, message: `no answer within ${timeoutMs} ms` });
        else finish({ ok: false, code: GRPC.UNAVAILABLE, message: err.message });
      },
    };
    timer = setTimeout(() => {
      timedOut = true;
      if (abort) abort(new Error('deadline exceeded'));
      finish({ ok: false, code: GRPC.DEADLINE_EXCEEDED, message: `no answer within ${timeoutMs} ms` });
    }, timeoutMs);
    timer.unref();
    upstream.dispatch(
      {
        method: 'POST',
        path,
        authority,
        headers: ['content-type', 'application/grpc', 'te', 'trailers', 'grpc-timeout', `${Math.max(1, Math.min(timeoutMs, 99_999_999))}m`],
        body: frameMessage(request),
      },
      handler,
    );
  });
}
