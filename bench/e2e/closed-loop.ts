/**
 * Closed-loop load for the scenarios (runs in the load process, load.ts): `connections` ×
 * `streams` workers, each sending its next request as soon as the previous one completed, for a
 * warm-up and then a measured window (marks `start`/`end` around it, so the orchestrator reads
 * /proc exactly there). Latency is request start to last response byte, in an HDR histogram at
 * 1 µs resolution. Bounded: every run stops after `warmupS + durationS`, in-flight requests get at
 * most 10 s more, then every connection is destroyed.
 *
 * One probe request goes first on the first connection; if it fails the run is not started and
 * the result carries `probeError` (how the report says "skipped: …").
 */
import http2, { type ClientHttp2Session } from 'node:http2';
import net from 'node:net';
import { randomUUID } from 'node:crypto';
import grpc from '@grpc/grpc-js';
import { build } from 'hdr-histogram-js';
import { Client, type Dispatcher } from 'undici';
import { ECHO_SERVICE, PEER_WINDOW_HEADER, PEER_WINDOW_MARKER, PROBE_HEADER } from './backend-wire.ts';
import type { ClosedCommand, ClosedResult } from './protocol.ts';

type Done = (err: Error | undefined, ok: boolean, detail: string) => void;

/** One client connection (an HTTP/1.1 connection, an h2c session or a gRPC channel). */
interface Conn {
  /** Start one request; `done` is called exactly once. */
  fire(done: Done): void;
  /** One request that also reports the peer window the backend saw (h2/grpc), else null. */
  probe(): Promise<number | null>;
  close(): void;
}

const REQUEST_TIMEOUT_MS = 10_000;
const CONNECT_TIMEOUT_MS = 10_000;

function withTimeout<T>(p: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  return Promise.race([
    p,
    new Promise<T>((_, reject) => {
      timer = setTimeout(() => reject(new Error(`${what}: no answer within ${ms} ms`)), ms);
    }),
  ]).finally(() => clearTimeout(timer));
}

function probeOnce(conn: Conn): Promise<number | null> {
  return withTimeout(conn.probe(), REQUEST_TIMEOUT_MS, 'probe request');
}

// ---------------------------------------------------------------------------------------------
// HTTP/1.1: one undici Client per connection, one request in flight (no pipelining).

/** undici handler of one request (legacy interface: cheap, no body stream). */
class H1Request implements Dispatcher.DispatchHandler {
  private status = 0;
  private bytes = 0;
  private readonly expect: number;
  private readonly done: Done;
  constructor(expect: number, done: Done) {
    this.expect = expect;
    this.done = done;
  }
  onConnect(): void {}
  onHeaders(statusCode: number): boolean {
    if (statusCode >= 200) this.status = statusCode;
    return true;
  }
  onData(chunk: Buffer): boolean {
    this.bytes += chunk.length;
    return true;
  }
  onComplete(): void {
    const ok = this.status === 200 && this.bytes === this.expect;
    this.done(undefined, ok, ok ? '' : `status ${this.status}, ${this.bytes} bytes (expected 200, ${this.expect})`);
  }
  onError(err: Error): void {
    this.done(err, false, '');
  }
}

function h1Conn(cmd: ClosedCommand): Conn {
  const client = new Client(`http://${cmd.host}:${cmd.port}`, {
    pipelining: 1,
    keepAliveTimeout: 60_000,
    keepAliveMaxTimeout: 60_000,
    headersTimeout: REQUEST_TIMEOUT_MS,
    bodyTimeout: REQUEST_TIMEOUT_MS,
    connectTimeout: CONNECT_TIMEOUT_MS,
  });
  const opts: Dispatcher.DispatchOptions = { method: 'GET', path: cmd.path, headers: { host: 'bench' } };
  const conn: Conn = {
    fire: (done) => {
      client.dispatch(opts, new H1Request(cmd.expectBytes, done));
    },
    probe: () =>
      new Promise((resolve, reject) => {
        conn.fire((err, ok, detail) => (err ? reject(err) : ok ? resolve(null) : reject(new Error(detail))));
      }),
    close: () => {
      void client.destroy().catch(() => {});
    },
  };
  return conn;
}

// ---------------------------------------------------------------------------------------------
// h2c: one Node http2 session per connection (prior knowledge over the plain-TCP entry).

async function h2Conn(cmd: ClosedCommand): Promise<Conn> {
  const session: ClientHttp2Session = http2.connect(`http://${cmd.host}:${cmd.port}`, {
    settings: { initialWindowSize: PEER_WINDOW_MARKER, enablePush: false },
    maxSessionMemory: 64,
    // Nagle off, as grpc-js and undici do.
    createConnection: () => net.connect({ host: cmd.host, port: cmd.port, noDelay: true }),
  });
  session.on('error', () => {});
  await withTimeout(
    new Promise<void>((resolve, reject) => {
      session.once('connect', () => resolve());
      session.once('error', reject);
      session.once('close', () => reject(new Error('h2c session closed before it was established')));
    }),
    CONNECT_TIMEOUT_MS,
    'h2c connect',
  );
  session.setLocalWindowSize(16 * 1024 * 1024);
  const headers = { ':method': 'GET', ':path': cmd.path, ':authority': 'bench' };
  const request = (done: Done, onHeaders?: (h: http2.IncomingHttpHeaders) => void) => {
    let status = 0;
    let bytes = 0;
    let error: Error | undefined;
    let req: http2.ClientHttp2Stream;
    try {
      req = session.request(headers, { endStream: true });
    } catch (err) {
      done(err as Error, false, '');
      return;
    }
    req.setTimeout(REQUEST_TIMEOUT_MS, () => {
      error = new Error('request timed out');
      req.close(http2.constants.NGHTTP2_CANCEL);
    });
    req.on('response', (h) => {
      status = Number(h[':status']);
      onHeaders?.(h);
    });
    req.on('data', (c: Buffer) => {
      bytes += c.length;
    });
    req.on('error', (err: Error) => {
      error ??= err;
    });
    req.once('close', () => {
      if (!error && req.rstCode !== 0 && status === 0) error = new Error(`stream reset (code ${req.rstCode})`);
      const ok = !error && status === 200 && bytes === cmd.expectBytes;
      done(error, ok, ok ? '' : `status ${status}, ${bytes} bytes (expected 200, ${cmd.expectBytes})`);
    });
  };
  return {
    fire: (done) => request(done),
    probe: () =>
      new Promise((resolve, reject) => {
        let window: number | null = null;
        request(
          (err, ok, detail) => (err ? reject(err) : ok ? resolve(window) : reject(new Error(detail))),
          (h) => {
            const v = Number(h[PEER_WINDOW_HEADER]);
            window = Number.isFinite(v) && h[PEER_WINDOW_HEADER] !== undefined ? v : null;
          },
        );
      }),
    close: () => session.destroy(),
  };
}

// ---------------------------------------------------------------------------------------------
// gRPC: one grpc-js channel per connection (its own subchannel pool, so its own TCP connection).

const EchoClient = grpc.makeGenericClientConstructor(ECHO_SERVICE, 'Echo');

type UnaryMethod = (arg: Buffer, md: grpc.Metadata, opts: grpc.CallOptions, cb: (err: grpc.ServiceError | null, res?: Buffer) => void) => grpc.ClientUnaryCall;

async function grpcConn(cmd: ClosedCommand): Promise<Conn> {
  const client = new EchoClient(`${cmd.host}:${cmd.port}`, grpc.credentials.createInsecure(), {
    'grpc.use_local_subchannel_pool': 1,
    // The marker as the HTTP/2 window (grpc-js passes it as SETTINGS_INITIAL_WINDOW_SIZE).
    'grpc-node.flow_control_window': PEER_WINDOW_MARKER,
    'grpc.max_receive_message_length': 64 * 1024 * 1024,
  });
  await withTimeout(
    new Promise<void>((resolve, reject) => client.waitForReady(Date.now() + CONNECT_TIMEOUT_MS, (err) => (err ? reject(err) : resolve()))),
    CONNECT_TIMEOUT_MS + 1_000,
    'gRPC channel',
  );
  const unary = (client as unknown as { Unary: UnaryMethod }).Unary.bind(client);
  const payload = Buffer.alloc(cmd.bodyBytes, 0x67);
  const call = (md: grpc.Metadata, done: Done): grpc.ClientUnaryCall =>
    unary(payload, md, { deadline: Date.now() + REQUEST_TIMEOUT_MS }, (err, res) => {
      if (err) return done(new Error(`${grpc.status[err.code] ?? err.code}: ${err.details || err.message}`), false, '');
      const ok = res !== undefined && res.length === payload.length;
      done(undefined, ok, ok ? '' : `response of ${res?.length ?? 0} bytes (expected ${payload.length})`);
    });
  return {
    fire: (done) => {
      call(new grpc.Metadata(), done);
    },
    probe: () =>
      new Promise((resolve, reject) => {
        const md = new grpc.Metadata();
        md.set(PROBE_HEADER, randomUUID());
        let window: number | null = null;
        const c = call(md, (err, ok, detail) => (err ? reject(err) : ok ? resolve(window) : reject(new Error(detail))));
        c.on('metadata', (m: grpc.Metadata) => {
          const v = Number(m.get(PEER_WINDOW_HEADER)[0]);
          window = Number.isFinite(v) ? v : null;
        });
      }),
    close: () => client.close(),
  };
}

// ---------------------------------------------------------------------------------------------

function openConn(cmd: ClosedCommand): Promise<Conn> {
  switch (cmd.proto) {
    case 'h1':
      return Promise.resolve(h1Conn(cmd));
    case 'h2':
      return h2Conn(cmd);
    case 'grpc':
      return grpcConn(cmd);
  }
}

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

function message(err: unknown): string {
  const e = err as Error & { code?: string };
  return `${e.code ? `${e.code}: ` : ''}${e.message ?? String(err)}`;
}

export async function closedLoop(cmd: ClosedCommand, mark: (name: 'start' | 'end') => void): Promise<ClosedResult> {
  if (cmd.proto === 'h1' && cmd.streams !== 1) throw new Error('h1: one request in flight per connection (no pipelining)');
  const conns: Conn[] = [];
  const empty = (probeError: string): ClosedResult => ({
    probeError,
    requests: 0,
    durationS: 0,
    reqPerSec: 0,
    errors: 0,
    badResponses: 0,
    errorSamples: [],
    latencyUs: { p50: 0, p90: 0, p99: 0, max: 0, mean: 0 },
    inFlight: 0,
    connectionsUsed: 0,
    peerWindow: null,
  });
  try {
    // Probe on the first connection: is this path usable at all?
    let peerWindow: number | null;
    try {
      conns.push(await openConn(cmd));
      peerWindow = await probeOnce(conns[0]);
    } catch (err) {
      return empty(message(err));
    }
    // The other connections (opened a few at a time, as clients would).
    try {
      while (conns.length < cmd.connections) {
        const batch = Math.min(16, cmd.connections - conns.length);
        conns.push(...(await Promise.all(Array.from({ length: batch }, () => openConn(cmd)))));
      }
    } catch (err) {
      return empty(`opening connection ${conns.length + 1} of ${cmd.connections}: ${message(err)}`);
    }

    const hist = build({ lowestDiscernibleValue: 1, highestTrackableValue: 60_000_000, numberOfSignificantValueDigits: 3 });
    let phase: 'warm' | 'measure' | 'stop' = 'warm';
    let requests = 0;
    let errors = 0;
    let bad = 0;
    const errorSamples: string[] = [];
    const used = new Set<number>();
    let running = 0;
    let drained: (() => void) | undefined;

    /** A worker is done once the run stopped: the last one out resolves the drain wait. */
    const retire = () => {
      if (--running === 0) drained?.();
    };
    const start = (ci: number) => {
      if (phase === 'stop') return retire();
      const conn = conns[ci];
      const t0 = performance.now();
      const onDone: Done = (err, ok, detail) => {
        if (phase === 'measure') {
          requests++;
          used.add(ci);
          if (err) {
            errors++;
            if (errorSamples.length < 5) errorSamples.push(message(err));
          } else if (!ok) {
            bad++;
            if (errorSamples.length < 5) errorSamples.push(detail);
          } else hist.recordValue(Math.max(1, Math.round((performance.now() - t0) * 1000)));
        }
        if (phase === 'stop') return retire();
        // A failing path must not become a busy loop.
        if (err || !ok) setTimeout(() => start(ci), 5);
        else start(ci);
      };
      try {
        conn.fire(onDone);
      } catch (err) {
        onDone(err as Error, false, '');
      }
    };
    for (let ci = 0; ci < conns.length; ci++) {
      for (let k = 0; k < cmd.streams; k++) {
        running++;
        start(ci);
      }
    }
    await sleep(cmd.warmupS * 1000);
    phase = 'measure';
    mark('start');
    const t0 = performance.now();
    await sleep(cmd.durationS * 1000);
    mark('end');
    const wallS = (performance.now() - t0) / 1000;
    phase = 'stop';
    const inFlight = running;
    if (running > 0) {
      await Promise.race([new Promise<void>((r) => (drained = r)), sleep(REQUEST_TIMEOUT_MS)]);
    }
    const result: ClosedResult = {
      probeError: null,
      requests,
      durationS: Math.round(wallS * 1000) / 1000,
      reqPerSec: Math.round(requests / wallS),
      errors,
      badResponses: bad,
      errorSamples,
      latencyUs: {
        p50: hist.getValueAtPercentile(50),
        p90: hist.getValueAtPercentile(90),
        p99: hist.getValueAtPercentile(99),
        max: hist.maxValue,
        mean: Math.round(hist.mean),
      },
      inFlight,
      connectionsUsed: used.size,
      peerWindow,
    };
    hist.destroy();
    return result;
  } finally {
    for (const c of conns) c.close();
  }
}
