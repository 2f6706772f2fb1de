/**
 * A fake source ztunnel for tests: a Node http2 client over mutual TLS that opens CONNECT
 * streams and returns the answer, plus helpers to speak raw HTTP/1.1 through a stream.
 */
import http2, { type ClientHttp2Session, type ClientHttp2Stream, type IncomingHttpHeaders } from 'node:http2';
import type { Duplex } from 'node:stream';

export interface ClientIdentity {
  readonly certPem: string;
  readonly keyPem: string;
  readonly caPem: string;
}

/**
 * Connect an HBONE session to `host:port` presenting `id`, from `opts.localAddress` when given (a
 * source pod IP). Rejects on TLS failure.
 */
export function hboneSession(host: string, port: number, id: ClientIdentity, opts: { localAddress?: string } = {}): Promise<ClientHttp2Session> {
  return new Promise((resolve, reject) => {
    const authority = host.includes(':') ? `[${host}]:${port}` : `${host}:${port}`;
    const session = http2.connect(`https://${authority}`, {
      cert: id.certPem,
      key: id.keyPem,
      ca: id.caPem,
      ALPNProtocols: ['h2'],
      checkServerIdentity: () => undefined,
      ...(opts.localAddress ? { localAddress: opts.localAddress } : {}),
    });
    session.once('connect', () => resolve(session));
    session.once('error', reject);
    session.once('close', () => reject(new Error('session closed before connect')));
  });
}

/** Open a CONNECT and wait for the response headers (or the stream's end/reset). */
export function connect(
  session: ClientHttp2Session,
  authority: string,
  headers: Record<string, string> = {},
): Promise<{ status: number; headers: IncomingHttpHeaders; stream: ClientHttp2Stream }> {
  return new Promise((resolve, reject) => {
    const stream = session.request({ ':method': 'CONNECT', ':authority': authority, ...headers }, { endStream: false });
    stream.once('response', (h) => resolve({ status: Number(h[':status']), headers: h, stream }));
    stream.once('error', reject);
    stream.once('close', () => reject(new Error(`stream closed without response (rst ${stream.rstCode})`)));
  });
}

/** Read a duplex until it ends; resolves with everything received. */
export function readAll(s: Duplex): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    s.on('data', (c: Buffer) => chunks.push(c));
    s.once('end', () => resolve(Buffer.concat(chunks)));
    s.once('error', reject);
  });
}

/** Parse one HTTP/1.1 response (status, lower-case headers, body) from raw bytes (Content-Length or close-delimited). */
export function parseHttpResponse(raw: Buffer): { status: number; headers: Record<string, string>; body: Buffer } {
  const end = raw.indexOf('\r\n\r\n');
  if (end < 0) throw new Error(`no HTTP header block in ${JSON.stringify(raw.subarray(0, 200).toString())}`);
  const lines = raw.subarray(0, end).toString('latin1').split('\r\n');
  const status = Number(lines[0].split(' ')[1]);
  const headers: Record<string, string> = {};
  for (const l of lines.slice(1)) {
    const i = l.indexOf(':');
    headers[l.slice(0, i).trim().toLowerCase()] = l.slice(i + 1).trim();
  }
  let body = raw.subarray(end + 4);
  if (headers['content-length'] !== undefined) body = body.subarray(0, Number(headers['content-length']));
  return { status, headers, body };
}

/** One HTTP/1.1 exchange on an open socket (Content-Length framed). */
export function exchange(socket: Duplex, path: string): Promise<{ status: number; body: string }> {
  return new Promise((resolve) => {
    let acc = Buffer.alloc(0);
    const onData = (c: Buffer) => {
      acc = Buffer.concat([acc, c]);
      const head = acc.indexOf('\r\n\r\n');
      if (head < 0) return;
      const len = Number(/content-length: (\d+)/i.exec(acc.subarray(0, head).toString())?.[1] ?? 0);
      if (acc.length < head + 4 + len) return;
      socket.off('data', onData);
      const r = parseHttpResponse(acc);
      resolve({ status: r.status, body: r.body.toString() });
    };
    socket.on('data', onData);
    socket.write(`GET ${path} HTTP/1.1\r\nhost: echo\r\n\r\n`);
  });
}
