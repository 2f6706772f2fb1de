/**
 * One HTTP request to an HTTP authorization server, over streams from `dial` (HBONE tunnels or
 * plain TCP): HTTP/1.1 through an undici Pool whose connections are dialed streams, or h2c through
 * an {@link H2Upstream} when the service port is declared HTTP/2 or gRPC (Istio's cluster protocol).
 * The response body is read up to {@link MAX_ANSWER_BYTES}.
 */
import type net from 'node:net';
import { Pool } from 'undici';
import { joinWritev } from '../hbone/index.ts';
import type { H2Upstream } from '../upstream/index.ts';
import type { HttpCheckAnswer } from './check-response.ts';
import type { HttpCheckRequest } from './http-request.ts';
import type { Dial } from './types.ts';
import type { Endpoint } from '../state/index.ts';

/** Largest authorization-server response body read (bytes); more is an error. */
export const MAX_ANSWER_BYTES = 1024 * 1024;

/** An HTTP/1.1 pool to one endpoint whose connections come from `dial`. */
export function http1Pool(ep: Endpoint, dial: Dial, idleTimeoutMs: number): Pool {
  return new Pool(`http://${ep.authority}`, {
    keepAliveTimeout: idleTimeoutMs,
    keepAliveMaxTimeout: idleTimeoutMs,
    headersTimeout: 0,
    bodyTimeout: 0,
    pipelining: 1,
    connect: (_opts, callback) => {
      dial(ep, 'http/1.1').then(
        (stream) => callback(null, joinWritev(stream) as unknown as net.Socket),
        (err: Error) => callback(err, null),
      );
    },
  });
}

/** Send `req` on an HTTP/1.1 pool; rejects on transport failure or when `signal` aborts. */
export async function http1Call(pool: Pool, req: HttpCheckRequest, signal: AbortSignal): Promise<HttpCheckAnswer> {
  const headers: string[] = ['host', req.authority];
  for (const [n, v] of req.headers) headers.push(n, v);
  const res = await pool.request({ method: req.method, path: req.path, headers, body: req.body.length ? req.body : null, signal });
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of res.body as AsyncIterable<Buffer>) {
    size += chunk.length;
    if (size > MAX_ANSWER_BYTES) {
      res.body.destroy();
      throw new Error(`authorization server answer larger than ${MAX_ANSWER_BYTES} bytes`);
    }
    chunks.push(chunk);
  }
  const flat: [string, string][] = [];
  for (const [name, value] of Object.entries(res.headers)) {
    if (value === undefined) continue;
    for (const v of Array.isArray(value) ? value : [value]) flat.push([name.toLowerCase(), v]);
  }
  return { status: res.statusCode, headers: flat, body: Buffer.concat(chunks) };
}

/** Send `req` over h2c; rejects on transport failure or when `signal` aborts. */
export function h2Call(upstream: H2Upstream, req: HttpCheckRequest, signal: AbortSignal): Promise<HttpCheckAnswer> {
  return new Promise<HttpCheckAnswer>((resolve, reject) => {
    let status = 0;
    const headers: [string, string][] = [];
    const chunks: Buffer[] = [];
    let size = 0;
    let abort: ((err?: Error) => void) | undefined;
    const onAbort = () => {
      abort?.(new Error('aborted'));
      reject(signal.reason instanceof Error ? signal.reason : new Error('aborted'));
    };
    if (signal.aborted) return onAbort();
    signal.addEventListener('abort', onAbort, { once: true });
    const done = () => signal.removeEventListener('abort', onAbort);
    upstream.dispatch(
      { method: req.method, path: req.path, authority: req.authority, headers: req.headers.flat(), body: req.body.length ? req.body : null },
      {
        onConnect(a) {
          abort = a;
          if (signal.aborted) a();
        },
        onHeaders(s, raw) {
          status = s;
          for (let i = 0; i + 1 < raw.length; i += 2) headers.push([String(raw[i]).toLowerCase(), String(raw[i + 1])]);
          return true;
        },
        onData(chunk) {
          size += chunk.length;
          if (size > MAX_ANSWER_BYTES) {
            abort?.(new Error('too large'));
            return false;
          }
          chunks.push(chunk);
          return true;
        },
        onComplete() {
          done();
          resolve({ status, headers, body: Buffer.concat(chunks) });
        },
        onError(err) {
          done();
          reject(err);
        },
      },
    );
  });
}
