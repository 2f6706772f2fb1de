/**
 * The scenarios' bench-only backends, started by the fixture on every pod IP (config.ts
 * BACKEND_PORTS) next to the demo's echo backend:
 *
 *  - h1:   HTTP/1.1, `GET /bytes/<n>` answers n bytes (any other request: its body echoed back);
 *  - h2:   h2c (HTTP/2 over plain TCP, prior knowledge), the same `GET /bytes/<n>`, plus the
 *          `x-bench-peer-window` response header (see backend-wire.ts);
 *  - grpc: grpc-js, `bench.Echo/Unary` echoes its payload; a call carrying `x-bench-probe`
 *          metadata gets `x-bench-peer-window` response metadata.
 */
import dc from 'node:diagnostics_channel';
import http from 'node:http';
import http2, { type IncomingHttpHeaders, type ServerHttp2Stream } from 'node:http2';
import type { Socket } from 'node:net';
import grpc from '@grpc/grpc-js';
import { formatHostPort } from '../../src/state/ip.ts';
import { BACKEND_PORTS } from './config.ts';
import { ECHO_SERVICE, PEER_WINDOW_HEADER, PROBE_HEADER } from './backend-wire.ts';

/** Largest body `/bytes/<n>` serves (bytes). */
const MAX_BYTES = 16 * 1024 * 1024;

const bodies = new Map<number, Buffer>();

/** The body of `/bytes/<n>` (cached per size), or undefined when the path is something else. */
function bytesFor(path: string | undefined): Buffer | undefined {
  if (!path || !path.startsWith('/bytes/')) return undefined;
  const n = Number(path.slice('/bytes/'.length));
  if (!Number.isSafeInteger(n) || n < 0 || n > MAX_BYTES) return undefined;
  let b = bodies.get(n);
  if (!b) {
    b = n === 13 ? Buffer.from('Hello, world!') : Buffer.alloc(n, 0x78);
    bodies.set(n, b);
  }
  return b;
}

function startH1(host: string, port: number): Promise<() => Promise<void>> {
  const server = http.createServer((req, res) => {
    const body = req.method === 'GET' ? bytesFor(req.url) : undefined;
    if (body) {
      req.resume();
      res.writeHead(200, { 'content-type': 'application/octet-stream', 'content-length': body.length });
      res.end(body);
      return;
    }
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const b = Buffer.concat(chunks);
      res.writeHead(req.method === 'GET' ? 404 : 200, { 'content-type': 'application/octet-stream', 'content-length': b.length });
      res.end(b);
    });
  });
  server.keepAliveTimeout = 60_000;
  return listen(server, host, port, () => {
    server.closeAllConnections();
  });
}

function startH2(host: string, port: number): Promise<() => Promise<void>> {
  // Node's http2 server leaves Nagle on (http.Server turns it off); so do the other bench servers.
  const server = http2.createServer({ noDelay: true, settings: { maxConcurrentStreams: 1000 } } as http2.ServerOptions);
  server.on('stream', (stream: ServerHttp2Stream, headers: IncomingHttpHeaders) => {
    stream.on('error', () => {});
    const window = String(stream.session?.remoteSettings.initialWindowSize ?? '');
    const body = headers[':method'] === 'GET' ? bytesFor(headers[':path']) : undefined;
    if (body) {
      stream.resume();
      stream.respond({ ':status': 200, 'content-type': 'application/octet-stream', 'content-length': body.length, [PEER_WINDOW_HEADER]: window });
      stream.end(body);
      return;
    }
    const chunks: Buffer[] = [];
    stream.on('data', (c: Buffer) => chunks.push(c));
    stream.on('end', () => {
      const b = Buffer.concat(chunks);
      stream.respond({ ':status': headers[':method'] === 'GET' ? 404 : 200, 'content-type': 'application/octet-stream', 'content-length': b.length, [PEER_WINDOW_HEADER]: window });
      stream.end(b);
    });
  });
  const sessions = new Set<http2.ServerHttp2Session>();
  server.on('session', (s) => {
    sessions.add(s);
    s.on('error', () => {});
    s.once('close', () => sessions.delete(s));
  });
  return listen(server, host, port, () => {
    for (const s of sessions) s.destroy();
  });
}

/**
 * Peer SETTINGS_INITIAL_WINDOW_SIZE of each probe call's HTTP/2 stream (by its `x-bench-probe`),
 * seen on Node's `http2.server.stream.start` diagnostics channel: grpc-js does not show a handler
 * its stream. Only probe calls are recorded (one per run); entries are dropped once answered.
 */
const probeWindows = new Map<string, number>();
let probeChannel = false;

function watchProbes(): void {
  if (probeChannel) return;
  probeChannel = true;
  // grpc-js's server leaves Nagle on its accepted sockets, as Node's http2 server does; every other
  // server of the bench turns it off (else loopback latency is delayed-ACK bound). Only the gRPC
  // backend port is touched.
  dc.subscribe('net.server.socket', (message) => {
    const { socket } = message as { socket: Socket };
    if (socket.localPort === BACKEND_PORTS.grpc) socket.setNoDelay(true);
  });
  dc.subscribe('http2.server.stream.start', (message) => {
    const { stream, headers } = message as { stream: ServerHttp2Stream; headers: IncomingHttpHeaders };
    const id = headers[PROBE_HEADER];
    if (typeof id === 'string' && probeWindows.size < 1000) probeWindows.set(id, stream.session?.remoteSettings.initialWindowSize ?? NaN);
  });
}

async function startGrpc(host: string, port: number): Promise<() => Promise<void>> {
  watchProbes();
  const server = new grpc.Server({ 'grpc.max_concurrent_streams': 1000 });
  server.addService(ECHO_SERVICE, {
    Unary: (call: grpc.ServerUnaryCall<Buffer, Buffer>, callback: grpc.sendUnaryData<Buffer>) => {
      const probe = call.metadata.get(PROBE_HEADER)[0];
      if (probe !== undefined) {
        const md = new grpc.Metadata();
        md.set(PEER_WINDOW_HEADER, String(probeWindows.get(String(probe)) ?? 'unknown'));
        probeWindows.delete(String(probe));
        call.sendMetadata(md);
      }
      callback(null, call.request);
    },
  });
  await new Promise<void>((resolve, reject) => {
    server.bindAsync(formatHostPort(host, port), grpc.ServerCredentials.createInsecure(), (err) => (err ? reject(err) : resolve()));
  });
  return () => {
    server.forceShutdown();
    return Promise.resolve();
  };
}

function listen(server: http.Server | http2.Http2Server, host: string, port: number, kill: () => void): Promise<() => Promise<void>> {
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => {
      server.off('error', reject);
      resolve(
        () =>
          new Promise<void>((r) => {
            server.close(() => r());
            kill();
          }),
      );
    });
  });
}

/** Start the three bench backends on `host`; the result stops them all. */
export async function startBenchBackends(host: string): Promise<() => Promise<void>> {
  const closers: (() => Promise<void>)[] = [];
  const closeAll = async () => {
    for (const c of closers.reverse()) await c().catch(() => {});
  };
  try {
    closers.push(await startH1(host, BACKEND_PORTS.h1));
    closers.push(await startH2(host, BACKEND_PORTS.h2));
    closers.push(await startGrpc(host, BACKEND_PORTS.grpc));
  } catch (err) {
    await closeAll();
    throw err;
  }
  return closeAll;
}
