/**
 * Bench load generator process (forked by run.ts): runs one command at a time from the
 * orchestrator (see protocol.ts) so the load never shares an event loop with the fixture or the
 * waypoint.
 *
 *  - `saturate`: autocannon, a warm-up run then the measured run (1 ms latency resolution only).
 *  - `rate`: an open-loop generator at a fixed rate over undici Clients (round-robin onto an idle
 *    connection), 1 KiB POST bodies echoed back, latency from dispatch to the last response byte
 *    in an HDR histogram at 1 µs resolution.
 *  - `warm`: a few GETs to prime a path (TLS sessions, pools, JIT).
 *  - `idle-open` / `idle-close`: N raw keep-alive TCP connections, one GET each, then left idle.
 *  - `closed`: the scenarios' closed-loop runs over HTTP/1.1, h2c or gRPC (closed-loop.ts).
 */
import net from 'node:net';
import autocannon from 'autocannon';
import { build } from 'hdr-histogram-js';
import { Client, Pool } from 'undici';
import { closedLoop } from './closed-loop.ts';
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

function closed(cmd: ClosedCommand): Promise<ClosedResult> {
  return closedLoop(cmd, (name) => send({ type: 'mark', id: cmd.id, name }));
}

// ---------------------------------------------------------------------------------------------
// Saturation (autocannon)

async function saturate(cmd: SaturateCommand): Promise<SaturateResult> {
  const opts = { url: `${cmd.url}/saturate`, connections: cmd.connections, timeout: 10 };
  if (cmd.warmupS > 0) await autocannon({ ...opts, duration: cmd.warmupS });
  send({ type: 'mark', id: cmd.id, name: 'start' });
  const r = await autocannon({ ...opts, duration: cmd.durationS });
  send({ type: 'mark', id: cmd.id, name: 'end' });
  const statusCodes: Record<string, number> = {};
  for (const [code, s] of Object.entries(r.statusCodeStats ?? {})) statusCodes[code] = s.count;
  const requests = r.requests.total;
  return {
    requests,
    durationS: r.duration,
    reqPerSec: Math.round(requests / r.duration),
    errors: r.errors,
    timeouts: r.timeouts,
    non2xx: r.non2xx,
    resets: r.resets,
    statusCodes,
    latencyMs: { p50: r.latency.p50, p99: r.latency.p99, max: r.latency.max },
  };
}

// ---------------------------------------------------------------------------------------------
// Fixed rate with a µs histogram

async function rate(cmd: RateCommand): Promise<RateResult> {
  const clients: Client[] = [];
  for (let i = 0; i < cmd.connections; i++) {
    clients.push(new Client(cmd.url, { pipelining: 1, keepAliveTimeout: 60_000, keepAliveMaxTimeout: 60_000, headersTimeout: 10_000, bodyTimeout: 10_000 }));
  }
  const body = Buffer.alloc(cmd.bodyBytes, 0x61);
  const headers = { 'content-type': 'application/octet-stream' };
  const inFlight = new Array<number>(clients.length).fill(0);
  const used = new Set<number>();
  let rr = 0;
  let total = 0;
  let maxInFlight = 0;

  /** The next connection with nothing in flight (round-robin), else the least loaded. */
  const pick = (): number => {
    let best = rr;
    for (let k = 0; k < clients.length; k++) {
      const i = (rr + k) % clients.length;
      if (inFlight[i] === 0) {
        best = i;
        break;
      }
      if (inFlight[i] < inFlight[best]) best = i;
    }
    rr = (best + 1) % clients.length;
    return best;
  };

  const runPhase = async (durationS: number, record: boolean) => {
    const hist = build({ lowestDiscernibleValue: 1, highestTrackableValue: 60_000_000, numberOfSignificantValueDigits: 3 });
    const target = Math.round(cmd.rate * durationS);
    let sent = 0;
    let completed = 0;
    let errors = 0;
    let bad = 0;
    let over1ms = 0;
    let over10ms = 0;
    const errorSamples: string[] = [];
    const pendingAll = new Set<Promise<void>>();

    const fire = () => {
      const i = pick();
      inFlight[i]++;
      total++;
      if (total > maxInFlight) maxInFlight = total;
      if (record) used.add(i);
      const t0 = performance.now();
      const p = clients[i]
        .request({ method: 'POST', path: '/rate', headers, body })
        .then(async (res) => {
          let n = 0;
          for await (const chunk of res.body) n += (chunk as Buffer).length;
          const us = (performance.now() - t0) * 1000;
          completed++;
          if (res.statusCode !== 200 || n !== body.length) {
            bad++;
            if (errorSamples.length < 5) errorSamples.push(`status ${res.statusCode}, ${n} bytes`);
            return;
          }
          hist.recordValue(Math.max(1, Math.round(us)));
          if (us > 1_000) over1ms++;
          if (us > 10_000) over10ms++;
        })
        .catch((err: Error & { code?: string }) => {
          errors++;
          if (errorSamples.length < 5) errorSamples.push(`${err.code ?? err.name}: ${err.message}`);
        })
        .finally(() => {
          inFlight[i]--;
          total--;
          pendingAll.delete(p);
        });
      pendingAll.add(p);
    };

    if (record) send({ type: 'mark', id: cmd.id, name: 'start' });
    const start = performance.now();
    await new Promise<void>((resolve) => {
      const tick = () => {
        const due = Math.min(target, Math.floor(((performance.now() - start) * cmd.rate) / 1000) + 1);
        while (sent < due) {
          fire();
          sent++;
        }
        if (sent >= target) return resolve();
        setTimeout(tick, 1);
      };
      tick();
    });
    // Let the last requests finish (bounded).
    await Promise.race([Promise.allSettled([...pendingAll]), new Promise((r) => setTimeout(r, 10_000))]);
    const wallS = (performance.now() - start) / 1000;
    if (record) send({ type: 'mark', id: cmd.id, name: 'end' });
    return { hist, sent, completed, errors, bad, errorSamples, wallS, over1ms, over10ms };
  };

  try {
    if (cmd.warmupS > 0) {
      const w = await runPhase(cmd.warmupS, false);
      w.hist.destroy();
    }
    const m = await runPhase(cmd.durationS, true);
    const h = m.hist;
    const result: RateResult = {
      targetRps: cmd.rate,
      sent: m.sent,
      completed: m.completed,
      achievedRps: Math.round(m.completed / m.wallS),
      durationS: Math.round(m.wallS * 1000) / 1000,
      errors: m.errors,
      badResponses: m.bad,
      errorSamples: m.errorSamples,
      latencyUs: {
        p50: h.getValueAtPercentile(50),
        p90: h.getValueAtPercentile(90),
        p95: h.getValueAtPercentile(95),
        p99: h.getValueAtPercentile(99),
        p999: h.getValueAtPercentile(99.9),
        max: h.maxValue,
        mean: Math.round(h.mean),
      },
      over1ms: m.over1ms,
      over10ms: m.over10ms,
      connectionsUsed: used.size,
      maxInFlight,
    };
    h.destroy();
    return result;
  } finally {
    await Promise.allSettled(clients.map((c) => c.destroy()));
  }
}

// ---------------------------------------------------------------------------------------------
// Warm-up

async function warm(cmd: WarmCommand): Promise<WarmResult> {
  const pool = new Pool(cmd.url, { connections: cmd.concurrency, pipelining: 1, headersTimeout: 10_000, bodyTimeout: 10_000 });
  let next = 0;
  let ok = 0;
  let failed = 0;
  const errorSamples: string[] = [];
  const worker = async () => {
    while (next < cmd.requests) {
      next++;
      try {
        const res = await pool.request({ method: 'GET', path: '/warm' });
        await res.body.dump();
        if (res.statusCode === 200) ok++;
        else {
          failed++;
          if (errorSamples.length < 5) errorSamples.push(`status ${res.statusCode}`);
        }
      } catch (err) {
        failed++;
        if (errorSamples.length < 5) errorSamples.push((err as Error).message);
      }
    }
  };
  try {
    await Promise.all(Array.from({ length: cmd.concurrency }, worker));
  } finally {
    await pool.destroy();
  }
  return { ok, failed, errorSamples };
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
