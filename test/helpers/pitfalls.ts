/**
 * Shared pieces of the pitfall suite (test/integration/pitfalls): a raw HTTP/1.x response reader
 * that keeps header case and framing, scriptable backends, a TCP middlebox in front of an HBONE
 * server (to make a pooled connection go silent or answer RST), and a memory sampler.
 */
import http from 'node:http';
import net from 'node:net';
import type { Duplex } from 'node:stream';
import v8 from 'node:v8';
import vm from 'node:vm';
import { closeServer, listen } from './servers.ts';

export const KiB = 1024;
export const MiB = 1024 * 1024;

/** A response read off the wire, header spelling and framing kept. */
export interface RawResponse {
  readonly version: string;
  readonly status: number;
  /** Header lines in order, names as sent. */
  readonly rawHeaders: readonly [string, string][];
  /** Lower-case names; repeated headers joined with ', '. */
  readonly headers: Readonly<Record<string, string>>;
  readonly body: Buffer;
  readonly framing: 'length' | 'chunked' | 'close' | 'none';
}

/**
 * Reads HTTP/1.x responses one after another from a duplex (Content-Length, chunked, or
 * close-delimited bodies). `next()` rejects when the stream ends or fails mid-response.
 */
export class HttpReader {
  private buf: Buffer = Buffer.alloc(0);
  private done = false;
  private failure: Error | undefined;
  private wake: (() => void) | undefined;
  /** Resolves when the stream's readable side ended cleanly (FIN / END_STREAM). */
  readonly ended: Promise<void>;
  endedCleanly = false;

  constructor(stream: Duplex) {
    let onEnd: () => void = () => {};
    this.ended = new Promise<void>((r) => (onEnd = r));
    stream.on('data', (c: Buffer) => {
      this.buf = this.buf.length === 0 ? c : Buffer.concat([this.buf, c]);
      this.poke();
    });
    stream.once('end', () => {
      this.endedCleanly = true;
      this.done = true;
      onEnd();
      this.poke();
    });
    stream.once('error', (err: Error) => {
      this.failure ??= err;
      this.poke();
    });
    stream.once('close', () => {
      this.done = true;
      this.poke();
    });
  }

  /** Bytes received and not yet consumed by a parsed response. */
  get pending(): Buffer {
    return this.buf;
  }

  private poke(): void {
    const w = this.wake;
    this.wake = undefined;
    w?.();
  }

  private async more(what: string): Promise<void> {
    if (this.done || this.failure) {
      throw new Error(`stream ${this.failure ? `failed (${this.failure.message})` : 'ended'} while reading ${what}; have ${this.buf.length} bytes: ${JSON.stringify(this.buf.subarray(0, 120).toString('latin1'))}`);
    }
    await new Promise<void>((r) => (this.wake = r));
  }

  /** Read the next response. `noBody`: the request was HEAD. */
  async next(noBody = false): Promise<RawResponse> {
    let end: number;
    while ((end = this.buf.indexOf('\r\n\r\n')) < 0) await this.more('a response head');
    const lines = this.buf.subarray(0, end).toString('latin1').split('\r\n');
    let rest = this.buf.subarray(end + 4);
    const [version, code] = lines[0].split(' ');
    const status = Number(code);
    const rawHeaders: [string, string][] = [];
    const headers: Record<string, string> = {};
    for (const l of lines.slice(1)) {
      const i = l.indexOf(':');
      const name = l.slice(0, i);
      const value = l.slice(i + 1).trim();
      rawHeaders.push([name, value]);
      const k = name.toLowerCase();
      headers[k] = headers[k] === undefined ? value : `${headers[k]}, ${value}`;
    }
    this.buf = rest;
    const te = headers['transfer-encoding'];
    if (noBody || status < 200 || status === 204 || status === 304) {
      return { version, status, rawHeaders, headers, body: Buffer.alloc(0), framing: 'none' };
    }
    if (te !== undefined && /chunked/i.test(te)) {
      const parts: Buffer[] = [];
      for (;;) {
        let eol: number;
        while ((eol = this.buf.indexOf('\r\n')) < 0) await this.more('a chunk size');
        const size = parseInt(this.buf.subarray(0, eol).toString('latin1'), 16);
        if (size === 0) {
          // Trailers (none expected) up to the empty line.
          let fin: number;
          while ((fin = this.buf.indexOf('\r\n\r\n', eol - 2 < 0 ? 0 : eol - 2)) < 0) await this.more('the last chunk');
          this.buf = this.buf.subarray(fin + 4);
          return { version, status, rawHeaders, headers, body: Buffer.concat(parts), framing: 'chunked' };
        }
        while (this.buf.length < eol + 2 + size + 2) await this.more('a chunk');
        parts.push(Buffer.from(this.buf.subarray(eol + 2, eol + 2 + size)));
        this.buf = this.buf.subarray(eol + 2 + size + 2);
      }
    }
    const cl = headers['content-length'];
    if (cl !== undefined) {
      const n = Number(cl);
      while (this.buf.length < n) await this.more(`a ${n}-byte body`);
      const body = Buffer.from(this.buf.subarray(0, n));
      this.buf = this.buf.subarray(n);
      return { version, status, rawHeaders, headers, body, framing: 'length' };
    }
    // Close-delimited.
    while (!this.done) {
      if (this.failure) throw new Error(`stream failed during a close-delimited body: ${this.failure.message}`);
      await new Promise<void>((r) => (this.wake = r));
    }
    if (!this.endedCleanly) throw new Error('stream reset during a close-delimited body');
    const body = this.buf;
    this.buf = Buffer.alloc(0);
    return { version, status, rawHeaders, headers, body, framing: 'close' };
  }
}

/**
 * A backend on `ip:port` that looks at the request line of each new connection's first request:
 * `raw(path)` may claim the connection (it gets the socket with the bytes read so far pushed back);
 * everything else goes to `app`, a Node HTTP server (header limit raised to 1 MiB so our hops, not
 * the app, set the limits under test). Tracks every accepted socket.
 */
export async function dispatchBackend(
  ip: string,
  port: number,
  app: http.RequestListener,
  raw?: (path: string) => ((socket: net.Socket) => void) | undefined,
): Promise<{ server: net.Server; http: http.Server; sockets: Set<net.Socket>; close(): Promise<void> }> {
  const httpServer = http.createServer({ maxHeaderSize: MiB }, app);
  httpServer.keepAliveTimeout = 60_000;
  httpServer.maxHeadersCount = 0;
  const sockets = new Set<net.Socket>();
  const server = net.createServer({ allowHalfOpen: true }, (socket) => {
    sockets.add(socket);
    socket.once('close', () => sockets.delete(socket));
    socket.on('error', () => {});
    let head = Buffer.alloc(0);
    const onData = (c: Buffer) => {
      head = Buffer.concat([head, c]);
      const eol = head.indexOf('\r\n');
      if (eol < 0) return;
      socket.off('data', onData);
      socket.pause();
      socket.unshift(head);
      const path = head.subarray(0, eol).toString('latin1').split(' ')[1] ?? '';
      const handler = raw?.(path);
      if (handler) handler(socket);
      else httpServer.emit('connection', socket);
      socket.resume();
    };
    socket.on('data', onData);
  });
  await listen(server, ip, port);
  return {
    server,
    http: httpServer,
    sockets,
    close: async () => {
      httpServer.closeAllConnections();
      await closeServer(server, sockets);
    },
  };
}

/** Read from a raw socket until the end of the request head; resolves with the head text. */
export function readHead(socket: net.Socket): Promise<string> {
  return new Promise((resolve) => {
    let acc = Buffer.alloc(0);
    const onData = (c: Buffer) => {
      acc = Buffer.concat([acc, c]);
      const end = acc.indexOf('\r\n\r\n');
      if (end < 0) return;
      socket.off('data', onData);
      socket.pause();
      const rest = acc.subarray(end + 4);
      if (rest.length > 0) socket.unshift(rest);
      resolve(acc.subarray(0, end).toString('latin1'));
    };
    socket.on('data', onData);
  });
}

/** One connection through a {@link TcpMiddlebox}. */
export interface MiddleboxConn {
  readonly client: net.Socket;
  readonly upstream: net.Socket;
  /** `pass` forwards both ways; `silent` swallows everything and never closes (a vanished peer); `rst` answers the next client byte with a TCP RST. */
  mode: 'pass' | 'silent' | 'rst';
  /** Resolves when the client side (the waypoint) closed this connection (FIN or reset). */
  readonly clientClosed: Promise<void>;
  clientClosedAt: number;
}

/**
 * A TCP middlebox on `listenIp:port` in front of `targetIp:targetPort` (an HBONE server), so a test
 * can make one pooled upstream connection go silent or answer RST, the way a vanished pod or a
 * reused pod IP does.
 */
export async function tcpMiddlebox(listenIp: string, port: number, targetIp: string, targetPort: number) {
  const conns: MiddleboxConn[] = [];
  const server = net.createServer({ allowHalfOpen: true }, (client) => {
    const upstream = net.connect({ host: targetIp, port: targetPort, allowHalfOpen: true });
    let closed!: () => void;
    const c: MiddleboxConn = {
      client,
      upstream,
      mode: 'pass',
      clientClosed: new Promise<void>((r) => (closed = r)),
      clientClosedAt: 0,
    };
    conns.push(c);
    client.on('error', () => {});
    upstream.on('error', () => {});
    client.on('data', (d: Buffer) => {
      if (c.mode === 'pass') upstream.write(d);
      else if (c.mode === 'rst') {
        client.resetAndDestroy();
        upstream.destroy();
      }
    });
    upstream.on('data', (d: Buffer) => {
      if (c.mode === 'pass') client.write(d);
    });
    const markClosed = () => {
      if (c.clientClosedAt !== 0) return;
      c.clientClosedAt = performance.now();
      closed();
    };
    client.on('end', () => {
      // FIN from the waypoint: it closed this connection (we are half-open, so 'close' may never come).
      markClosed();
      if (c.mode === 'pass') upstream.end();
    });
    upstream.on('end', () => {
      if (c.mode === 'pass') client.end();
    });
    client.once('close', () => {
      markClosed();
      if (c.mode === 'pass') upstream.destroy();
    });
    upstream.once('close', () => {
      if (c.mode === 'pass') client.destroy();
    });
  });
  await listen(server, listenIp, port);
  return {
    conns,
    /** Connections whose client side is still open. */
    open: () => conns.filter((c) => c.clientClosedAt === 0),
    close: async () => {
      for (const c of conns) {
        c.client.destroy();
        c.upstream.destroy();
      }
      await new Promise<void>((r) => server.close(() => r()));
    },
  };
}

// A collector we can call: retained buffers are what bounded buffering is about, not garbage.
v8.setFlagsFromString('--expose-gc');
const v8gc = vm.runInNewContext('gc') as (opts?: { type: 'major'; execution: 'sync'; flavor: 'last-resort' }) => void;
/**
 * A full, synchronous GC that also finishes sweeping ArrayBuffers: a plain `gc()` leaves dead
 * Buffers to a concurrent sweeper, and under CPU contention `arrayBuffers` then still counts
 * megabytes of garbage (seen: 12 MiB), which would read as buffering.
 */
export const gc = (): void => v8gc({ type: 'major', execution: 'sync', flavor: 'last-resort' });

/** Memory after a full GC (bytes): `buffers` (Buffer/ArrayBuffer bytes, where relayed data sits), `live` (JS heap + buffers) and RSS. */
export function liveMemory(): { buffers: number; live: number; rss: number } {
  gc();
  const m = process.memoryUsage();
  return { buffers: m.arrayBuffers, live: m.heapUsed + m.arrayBuffers, rss: m.rss };
}

/** Peak growth of {@link liveMemory} (bytes) while `fn` runs, sampled after a GC every `everyMs`. */
export async function peakMemoryGrowth(fn: () => Promise<void>, everyMs = 150): Promise<{ buffers: number; live: number; rss: number }> {
  const base = liveMemory();
  let peak = { ...base };
  const timer = setInterval(() => {
    const m = liveMemory();
    peak = { buffers: Math.max(peak.buffers, m.buffers), live: Math.max(peak.live, m.live), rss: Math.max(peak.rss, m.rss) };
  }, everyMs);
  try {
    await fn();
  } finally {
    clearInterval(timer);
  }
  return { buffers: peak.buffers - base.buffers, live: peak.live - base.live, rss: peak.rss - base.rss };
}

/** Deterministic test bytes: byte i is (i * 31 + seed) & 0xff, so any loss or reorder shows. */
export function pattern(size: number, seed = 7): Buffer {
  const b = Buffer.allocUnsafe(size);
  for (let i = 0; i < size; i++) b[i] = (i * 31 + seed) & 0xff;
  return b;
}
