/**
 * The lean h2c request/response the inner server serves streams with (src/inner-http/h2-exchange.ts),
 * over a real HTTP/2 session on an in-memory duplex: what a client receives for each way the
 * router, filters and local replies write a response.
 */
import http2 from 'node:http2';
import { duplexPair } from 'node:stream';
import { afterEach, expect, test } from 'vitest';
import { H2Request, H2Response } from '../../../src/inner-http/index.ts';

interface Seen {
  status: number;
  headers: http2.IncomingHttpHeaders;
  /** The response HEADERS frame ended the stream. */
  endAfterHeaders: boolean;
  body: string;
  trailers: http2.IncomingHttpHeaders | undefined;
  informational: number[];
  rstCode: number;
}

const cleanups: (() => void)[] = [];
afterEach(() => {
  for (const c of cleanups.splice(0)) c();
});

/** One request answered by `answer` with our request/response pair; resolves with what the client saw. */
async function exchange(answer: (req: H2Request, res: H2Response) => void, headers: http2.OutgoingHttpHeaders = {}, body?: string): Promise<{ seen: Seen; req: H2Request }> {
  const [clientSide, serverSide] = duplexPair();
  const server = http2.createServer();
  let req: H2Request | undefined;
  server.on('stream', (stream, h, _flags, raw: string[]) => {
    stream.on('error', () => {});
    req = new H2Request(stream, h, raw);
    answer(req, new H2Response(stream));
  });
  server.emit('connection', serverSide);
  const client = http2.connect('http://exchange.test', { createConnection: () => clientSide });
  client.on('error', () => {});
  cleanups.push(() => (client.destroy(), server.close(), clientSide.destroy(), serverSide.destroy()));
  const call = client.request({ ':method': body === undefined ? 'GET' : 'POST', ':path': '/p?q=1', ...headers }, { endStream: body === undefined });
  if (body !== undefined) call.end(body);
  const seen: Seen = { status: 0, headers: {}, endAfterHeaders: false, body: '', trailers: undefined, informational: [], rstCode: 0 };
  call.on('headers', (h) => seen.informational.push(Number(h[':status'])));
  call.on('response', (h, flags: number) => {
    seen.status = Number(h[':status']);
    seen.headers = h;
    seen.endAfterHeaders = (flags & http2.constants.NGHTTP2_FLAG_END_STREAM) !== 0;
  });
  call.setEncoding('utf8');
  call.on('data', (c: string) => (seen.body += c));
  call.on('trailers', (t) => (seen.trailers = t));
  call.on('error', () => {});
  await new Promise<void>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error('no answer')), 5000);
    call.on('close', () => {
      clearTimeout(timer);
      seen.rstCode = call.rstCode ?? 0;
      resolve();
    });
  });
  return { seen, req: req! };
}

test('the request head as received; the stream is the body', async () => {
  let got = '';
  const { seen, req } = await exchange(
    (rq, res) => {
      rq.stream.setEncoding('utf8');
      rq.stream.on('data', (c: string) => (got += c));
      rq.stream.on('end', () => {
        res.writeHead(200, ['content-type', 'text/plain']);
        res.end(`got ${got}`);
      });
    },
    { 'x-one': 'a' },
    'hello',
  );
  expect([req.httpVersion, req.method, req.url, req.headers['x-one']]).toEqual(['2.0', 'POST', '/p?q=1', 'a']);
  expect(req.rawHeaders).toContain('x-one');
  expect([seen.status, seen.body, seen.rstCode]).toEqual([200, 'got hello', 0]);
});

test('header names go out lower-cased; pseudo-headers and connection-specific headers are dropped, not refused', async () => {
  const { seen } = await exchange((_rq, res) => {
    res.writeHead(201, ['X-Custom', 'v', 'Connection', 'close', 'Keep-Alive', 'timeout=5', 'transfer-encoding', 'chunked', 'Upgrade', 'h2c', 'proxy-connection', 'x', 'te', 'gzip', ':status', '500']);
    res.end('body');
  });
  expect(seen.status).toBe(201);
  expect(seen.headers['x-custom']).toBe('v');
  for (const n of ['connection', 'keep-alive', 'transfer-encoding', 'upgrade', 'proxy-connection', 'te']) expect(seen.headers[n]).toBeUndefined();
  expect(seen.headers.date).toBeDefined();
  expect([seen.body, seen.rstCode]).toEqual(['body', 0]);
});

test('a header block Node refuses resets the stream instead of throwing into the caller', async () => {
  let threw: unknown;
  const { seen } = await exchange((_rq, res) => {
    try {
      res.writeHead(200, ['bad name', 'v']);
      res.end('x');
    } catch (err) {
      threw = err;
    }
  });
  expect(threw).toBeUndefined();
  expect(seen.status).toBe(0);
  expect(seen.rstCode).toBeGreaterThan(0);
});

test('trailers added before the end follow the body', async () => {
  const { seen } = await exchange((_rq, res) => {
    res.writeHead(200, ['content-type', 'application/grpc']);
    res.write(Buffer.from('abc'));
    res.addTrailers({ 'grpc-status': '0' });
    res.addTrailers({ 'grpc-message': 'ok' });
    res.end();
  });
  expect([seen.status, seen.body, seen.endAfterHeaders]).toEqual([200, 'abc', false]);
  expect(seen.trailers?.['grpc-status']).toBe('0');
  expect(seen.trailers?.['grpc-message']).toBe('ok');
});

test('end() with nothing written: one HEADERS frame that ends the stream (unless trailers wait)', async () => {
  const bare = await exchange((_rq, res) => res.end());
  expect([bare.seen.status, bare.seen.endAfterHeaders, bare.seen.body, bare.seen.rstCode]).toEqual([200, true, '', 0]);
  const withTrailers = await exchange((_rq, res) => {
    res.addTrailers({ 'grpc-status': '7' });
    res.end();
  });
  expect([withTrailers.seen.endAfterHeaders, withTrailers.seen.trailers?.['grpc-status']]).toEqual([false, '7']);
});

test('writeContinue sends a 100 before the final answer; state reads follow the stream', async () => {
  const states: unknown[] = [];
  const { seen } = await exchange((_rq, res) => {
    res.writeContinue();
    states.push(res.headersSent, res.writableEnded);
    res.writeHead(204);
    res.end();
    states.push(res.headersSent, res.writableEnded);
    res.end('ignored');
  });
  expect(seen.informational).toContain(100);
  expect(seen.status).toBe(204);
  expect(states).toEqual([false, false, true, true]);
});

test('a body written to a response that has none (HEAD, 204) is dropped, the stream is not reset', async () => {
  let wrote: boolean | undefined;
  const head = await exchange(
    (_rq, res) => {
      res.writeHead(200, ['content-length', '5']);
      // true: a writer waiting for 'drain' would wait for ever.
      wrote = res.write('hello');
      res.end('hello');
    },
    { ':method': 'HEAD' },
  );
  expect([head.seen.status, head.seen.body, head.seen.rstCode, wrote]).toEqual([200, '', 0, true]);
  const noContent = await exchange((_rq, res) => {
    res.writeHead(204);
    res.end('x');
  });
  expect([noContent.seen.status, noContent.seen.body, noContent.seen.rstCode]).toEqual([204, '', 0]);
});
