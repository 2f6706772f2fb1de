/**
 * Bench load generator process (forked by run.ts): runs one command at a time from the
 * orchestrator (see protocol.ts) so the load never shares an event loop with the fixture or the
 * waypoint. Every run but the idle tunnels is `waypoint loadtest`'s engine (src/loadtest), over
 * plain TCP to the path's entry (the tunnel role, or the backend for `direct`):
 *
 *  - `saturate`: closed loop, GETs over `connections` HTTP/1.1 connections, a warm-up then the
 *    measured run (µs latency).
 *  - `rate`: open loop at a fixed rate, 1 KiB POST bodies echoed back, latency from when each
 *    request was due (corrected for coordinated omission) and from when it was sent.
 *  - `warm`: a few GETs to prime a path (TLS sessions, pools, JIT).
 *  - `idle-open` / `idle-close`: N raw keep-alive TCP connections, one GET each, then left idle.
 *  - `closed`: the scenarios' closed-loop runs over HTTP/1.1, h2c or gRPC.
 *
 * Marks `start` / `end` go to the orchestrator exactly at the measured window's edges (it reads
 * /proc there).
 */
import net from 'node:net';
import { randomUUID } from 'node:crypto';
import {
  LoadProbeError,
  countAbove,
  runLoad,
  summarize,
  tcpTransport,
  type LoadHooks,
  type LoadPlan,
  type LoadResult,
} from '../../src/loadtest/index.ts';
import { PEER_WINDOW_HEADER, PEER_WINDOW_MARKER, PROBE_HEADER } from './backend-wire.ts';
import type {
  ClosedCommand,
  ClosedResult,
  IdleCloseResult,
  IdleOpenCommand,
  IdleOpenResult,
  LoadCommand,
  LoadMessage,
  RateCommand,
  RateResult,
  SaturateCommand,
  SaturateResult,
  WarmCommand,
  WarmResult,
} from './protocol.ts';

if (!process.send) {
  process.stderr.write('load.ts is forked by bench/e2e/run.ts\n');
  process.exit(2);
}

function send(m: LoadMessage): void {
  process.send?.(m);
}

process.on('disconnect', () => process.exit(0));
process.on('SIGTERM', () => process.exit(0));
process.on('SIGINT', () => process.exit(0));

let queue: Promise<void> = Promise.resolve();
process.on('message', (cmd: LoadCommand) => {
  queue = queue.then(async () => {
    try {
      const result = await handle(cmd);
      send({ type: 'result', id: cmd.id, result });
    } catch (err) {
      send({ type: 'error', id: cmd.id, message: (err as Error).stack ?? String(err) });
    }
  });
});
send({ type: 'ready' });

function handle(cmd: LoadCommand): Promise<unknown> {
  switch (cmd.type) {
    case 'saturate':
      return saturate(cmd);
    case 'rate':
      return rate(cmd);
    case 'warm':
      return warm(cmd);
    case 'idle-open':
      return idleOpen(cmd);
    case 'idle-close':
      return Promise.resolve(idleClose());
    case 'closed':
      return closed(cmd);
  }
}

const TIMEOUT_MS = 10_000;

/** `http://host:port` of a command → where the engine connects. */
function target(url: string): { host: string; port: number } {
  const u = new URL(url);
  return { host: u.hostname, port: Number(u.port) };
}

/** The engine's plan with the bench's defaults (HTTP/1.1, one request in flight per connection, 10 s timeout). */
function plan(p: Partial<LoadPlan> & Pick<LoadPlan, 'transport' | 'connections'>): LoadPlan {
  return {
    protocol: 'http1',
    streams: 1,
    rate: null,
    requests: null,
    durationMs: null,
    warmupMs: 0,
    spec: { method: 'GET', path: '/', authority: 'bench', headers: {}, body: Buffer.alloc(0), grpcMethod: '/bench.Echo/Unary' },
    timeoutMs: TIMEOUT_MS,
    intervalMs: 1_000,
    ...p,
  };
}

/** Hooks sending the orchestrator the `start` / `end` marks of the measured window. */
function marks(id: number): LoadHooks {
  return { onMeasureStart: () => send({ type: 'mark', id, name: 'start' }), onMeasureEnd: () => send({ type: 'mark', id, name: 'end' }) };
}

/** A run's errors in the bench's categories (the engine counts them by kind). */
function errorsOf(r: LoadResult): { errors: number; timeouts: number; resets: number; non2xx: number; badBody: number; samples: string[] } {
  const c = { errors: 0, timeouts: 0, resets: 0, non2xx: 0, badBody: 0 };
  for (const [kind, n] of r.recorder.errors) {
    if (kind === 'timeout') c.timeouts += n;
    else if (kind === 'reset') c.resets += n;
    else if (kind === 'bad_body') c.badBody += n;
    else if (kind.startsWith('http_') || kind.startsWith('grpc_')) c.non2xx += n;
    else c.errors += n;
  }
  return { ...c, samples: r.recorder.samples.slice(0, 5) };
}

// ---------------------------------------------------------------------------------------------
// Saturation: closed loop over HTTP/1.1 connections

async function saturate(cmd: SaturateCommand): Promise<SaturateResult> {
  const r = await runLoad(
    plan({ transport: tcpTransport(target(cmd.url), TIMEOUT_MS), connections: cmd.connections, warmupMs: cmd.warmupS * 1000, durationMs: cmd.durationS * 1000, spec: { method: 'GET', path: '/saturate', authority: 'bench', headers: {}, body: Buffer.alloc(0), grpcMethod: '' } }),
    marks(cmd.id),
  );
  const statusCodes: Record<string, number> = {};
  for (const [code, n] of r.recorder.codes) if (code !== '-1') statusCodes[code] = n;
  const e = errorsOf(r);
  const lat = summarize(r.recorder.uncorrected);
  const durationS = r.windowMs / 1000;
  return {
    requests: r.recorder.completed,
    durationS: Math.round(durationS * 1000) / 1000,
    reqPerSec: Math.round(r.recorder.completed / durationS),
    errors: e.errors,
    timeouts: e.timeouts,
    non2xx: e.non2xx,
    resets: e.resets,
    statusCodes,
    latencyMs: { p50: lat.p50 / 1000, p99: lat.p99 / 1000, max: lat.max / 1000 },
    latencyUs: { p50: lat.p50, p90: lat.p90, p99: lat.p99, max: lat.max, mean: lat.mean },
  };
}

// ---------------------------------------------------------------------------------------------
// Fixed rate: open loop, latency corrected and not

async function rate(cmd: RateCommand): Promise<RateResult> {
  const r = await runLoad(
    plan({
      transport: tcpTransport(target(cmd.url), TIMEOUT_MS),
      connections: cmd.connections,
      rate: cmd.rate,
      warmupMs: cmd.warmupS * 1000,
      durationMs: cmd.durationS * 1000,
      spec: { method: 'POST', path: '/rate', authority: 'bench', headers: { 'content-type': 'application/octet-stream' }, body: Buffer.alloc(cmd.bodyBytes, 0x61), grpcMethod: '', expectBytes: cmd.bodyBytes },
    }),
    marks(cmd.id),
  );
  const rec = r.recorder;
  const e = errorsOf(r);
  const pct = (h: typeof rec.corrected) => {
    const s = summarize(h);
    return { p50: s.p50, p90: s.p90, p95: h.totalCount > 0 ? h.getValueAtPercentile(95) : 0, p99: s.p99, p999: s.p999, max: s.max, mean: s.mean };
  };
  return {
    targetRps: cmd.rate,
    sent: r.sent,
    completed: rec.completed,
    achievedRps: Math.round(rec.completed / (r.windowMs / 1000)),
    durationS: Math.round(r.windowMs) / 1000,
    errors: e.errors + e.timeouts + e.resets,
    badResponses: e.non2xx + e.badBody,
    errorSamples: e.samples,
    latencyUs: pct(rec.uncorrected),
    latencyCorrectedUs: pct(rec.corrected),
    over1ms: countAbove(rec.uncorrected, 1_000),
    over10ms: countAbove(rec.uncorrected, 10_000),
    connectionsUsed: r.connectionsOpened,
    maxInFlight: r.maxInFlight,
    maxQueued: r.maxQueued,
  };
}

// ---------------------------------------------------------------------------------------------
// Warm-up

async function warm(cmd: WarmCommand): Promise<WarmResult> {
  try {
    const r = await runLoad(plan({ transport: tcpTransport(target(cmd.url), TIMEOUT_MS), connections: cmd.concurrency, requests: cmd.requests, spec: { method: 'GET', path: '/warm', authority: 'bench', headers: {}, body: Buffer.alloc(0), grpcMethod: '' } }));
    return { ok: r.recorder.ok, failed: r.recorder.errorCount, errorSamples: r.recorder.samples.slice(0, 5) };
  } catch (err) {
    if (err instanceof LoadProbeError) return { ok: 0, failed: cmd.requests, errorSamples: [err.message] };
    throw err;
  }
}

// ---------------------------------------------------------------------------------------------
// The scenarios: closed loop over HTTP/1.1, h2c or gRPC

const PROTOCOL = { h1: 'http1', h2: 'h2c', grpc: 'grpc' } as const;

async function closed(cmd: ClosedCommand): Promise<ClosedResult> {
  if (cmd.proto === 'h1' && cmd.streams !== 1) throw new Error('h1: one request in flight per connection (no pipelining)');
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
  let r: LoadResult;
  try {
    r = await runLoad(
      plan({
        protocol: PROTOCOL[cmd.proto],
        transport: tcpTransport({ host: cmd.host, port: cmd.port }, TIMEOUT_MS),
        connections: cmd.connections,
        streams: cmd.streams,
        warmupMs: cmd.warmupS * 1000,
        durationMs: cmd.durationS * 1000,
        spec: { method: 'GET', path: cmd.path, authority: 'bench', headers: {}, body: Buffer.alloc(cmd.bodyBytes, 0x67), grpcMethod: cmd.path, expectBytes: cmd.expectBytes },
        // An odd HTTP/2 window the backend reports back: relayed bytes or a proxy's own session (backend-wire.ts).
        http2Window: PEER_WINDOW_MARKER,
        probeHeaders: { [PROBE_HEADER]: randomUUID() },
      }),
      marks(cmd.id),
    );
  } catch (err) {
    if (err instanceof LoadProbeError) return empty(err.outcome ? err.outcome.detail || err.outcome.kind : err.message);
    throw err;
  }
  const rec = r.recorder;
  const lat = summarize(rec.uncorrected);
  const window = Number(r.probeHeaders[PEER_WINDOW_HEADER]);
  const e = errorsOf(r);
  return {
    probeError: null,
    requests: rec.completed,
    durationS: Math.round(r.windowMs) / 1000,
    reqPerSec: Math.round(rec.completed / (r.windowMs / 1000)),
    errors: e.errors + e.timeouts + e.resets,
    badResponses: e.non2xx + e.badBody,
    errorSamples: e.samples,
    latencyUs: { p50: lat.p50, p90: lat.p90, p99: lat.p99, max: lat.max, mean: lat.mean },
    inFlight: r.maxInFlight,
    connectionsUsed: r.connectionsOpened,
    peerWindow: r.probeHeaders[PEER_WINDOW_HEADER] !== undefined && Number.isFinite(window) ? window : null,
  };
}

// ---------------------------------------------------------------------------------------------
// Idle keep-alive connections (one tunnel each)

const idle = new Set<net.Socket>();
let closing = false;
let closedEarly = 0;

async function idleOpen(cmd: IdleOpenCommand): Promise<IdleOpenResult> {
  closing = false;
  closedEarly = 0;
  const t0 = performance.now();
  let next = 0;
  let opened = 0;
  let failed = 0;
  const errorSamples: string[] = [];
  const worker = async () => {
    while (next < cmd.count) {
      next++;
      try {
        const s = await openOne(cmd.host, cmd.port);
        idle.add(s);
        opened++;
        s.on('error', () => {});
        s.once('close', () => {
          idle.delete(s);
          if (!closing) closedEarly++;
        });
      } catch (err) {
        failed++;
        if (errorSamples.length < 5) errorSamples.push((err as Error).message);
      }
    }
  };
  await Promise.all(Array.from({ length: cmd.concurrency }, worker));
  return { requested: cmd.count, opened, failed, openMs: Math.round(performance.now() - t0), errorSamples };
}

function idleClose(): IdleCloseResult {
  closing = true;
  const stillOpen = idle.size;
  for (const s of idle) s.destroy();
  idle.clear();
  return { stillOpen, closedEarly };
}

/** Connect, send one GET, read the whole response, and hand back the (idle, keep-alive) socket. */
function openOne(host: string, port: number): Promise<net.Socket> {
  return new Promise((resolve, reject) => {
    const s = net.connect({ host, port, noDelay: true });
    let buf: Buffer = Buffer.alloc(0);
    let done = false;
    const fail = (err: Error) => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      s.destroy();
      reject(err);
    };
    const timer = setTimeout(() => fail(new Error('no response within 15 s')), 15_000);
    s.once('connect', () => s.write('GET /idle HTTP/1.1\r\nhost: bench\r\n\r\n'));
    s.once('error', fail);
    s.once('close', () => fail(new Error('closed before the response completed')));
    const onData = (chunk: Buffer) => {
      buf = buf.length === 0 ? chunk : Buffer.concat([buf, chunk]);
      const he = buf.indexOf('\r\n\r\n');
      if (he < 0) return;
      const head = buf.subarray(0, he).toString('latin1');
      const status = Number(/^HTTP\/1\.1 (\d{3})/.exec(head)?.[1] ?? 0);
      const cl = /\r\ncontent-length:\s*(\d+)/i.exec(head);
      const complete = cl ? buf.length >= he + 4 + Number(cl[1]) : buf.subarray(buf.length - 5).toString('latin1') === '0\r\n\r\n';
      if (!complete) return;
      if (status !== 200) return fail(new Error(`status ${status}`));
      done = true;
      clearTimeout(timer);
      s.off('data', onData);
      resolve(s);
    };
    s.on('data', onData);
  });
}
