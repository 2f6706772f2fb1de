/**
 * CPU per request of the waypoint's HTTP/2 upstream (src/upstream/h2-upstream.ts) alone: requests
 * through an `H2Upstream` to an h2c server in the same process, over plain TCP, closed loop.
 *
 *   node bench/micro/h2-upstream.ts [get|grpc] [concurrency=64] [requests=20000] [rounds=5] [--against OTHER/h2-upstream.ts]
 *
 * `--against` loads a second copy of the module (another worktree's) and alternates rounds between
 * the two (ABBA), each on its own session to the same server, so that load from outside hits both alike;
 * it prints both medians and the median of the per-pair ratios.
 *
 * The figure (process CPU µs per request, median of the rounds) includes the server's share, which
 * does not change between two versions of h2-upstream.ts: compare runs, not absolutes. `get` is a
 * 1 KiB GET; `grpc` a 1 KiB POST streamed from a Readable and answered with trailers. Binds 127.0.239.3.
 */
import http2, { type IncomingHttpHeaders, type ServerHttp2Stream } from 'node:http2';
import net from 'node:net';
import { Readable } from 'node:stream';
import { DEFAULT_HTTP2 } from '../../src/hbone/index.ts';
import { H2Upstream, type UpstreamHandler } from '../../src/upstream/h2-upstream.ts';

type Module = { H2Upstream: typeof H2Upstream };

const mode = (process.argv[2] ?? 'get') as 'get' | 'grpc';
const concurrency = Number(process.argv[3] ?? 64);
const total = Number(process.argv[4] ?? 20_000);
const rounds = Number(process.argv[5] ?? 5);
const HOST = '127.0.239.3';
const PORT = 18243;
const body = Buffer.alloc(1024, 'x');

const server = http2.createServer({ settings: { maxConcurrentStreams: 1000 } });
server.on('stream', (st: ServerHttp2Stream, h: IncomingHttpHeaders) => {
  st.on('error', () => {});
  if (h[':method'] === 'GET') {
    st.respond({ ':status': 200, 'content-type': 'application/octet-stream', 'content-length': body.length });
    st.end(body);
    return;
  }
  const chunks: Buffer[] = [];
  st.on('data', (c: Buffer) => chunks.push(c));
  st.on('end', () => {
    st.respond({ ':status': 200, 'content-type': 'application/grpc' }, { waitForTrailers: true });
    st.once('wantTrailers', () => st.sendTrailers({ 'grpc-status': '0' }));
    st.end(Buffer.concat(chunks));
  });
});
await new Promise<void>((r) => server.listen(PORT, HOST, r));

const against = process.argv.indexOf('--against');
const modules: { name: string; mod: Module }[] = [{ name: 'this', mod: { H2Upstream } }];
if (against > 0) modules.push({ name: process.argv[against + 1], mod: (await import(process.argv[against + 1])) as Module });

function pool(mod: Module): H2Upstream {
  return new mod.H2Upstream({
    authority: `${HOST}:${PORT}`,
    open: () =>
      new Promise((resolve, reject) => {
        const s = net.connect(PORT, HOST, () => resolve(s));
        s.once('error', reject);
      }),
    http2: DEFAULT_HTTP2,
    idleTimeoutMs: 60_000,
    maxStreamsPerSession: 1000,
  });
}

const headers = mode === 'get' ? ['user-agent', 'bench', 'x-request-id', '0f8a1b3c-6a3e-4c55-9e0d-7c1d2b3a4f5e'] : ['content-type', 'application/grpc', 'te', 'trailers', 'x-request-id', '0f8a1b3c-6a3e-4c55-9e0d-7c1d2b3a4f5e'];

/** One request; resolves when its response completed (rejects on error). */
function one(upstream: H2Upstream): Promise<void> {
  return new Promise((resolve, reject) => {
    const handler: UpstreamHandler = {
      onConnect() {},
      onHeaders(_status, _raw, _resume) {
        return true;
      },
      onData() {
        return true;
      },
      onComplete() {
        resolve();
      },
      onError(err) {
        reject(err);
      },
    };
    upstream.dispatch(
      { method: mode === 'get' ? 'GET' : 'POST', path: mode === 'get' ? '/bytes/1024' : '/bench.Echo/Unary', authority: 'bench-h2.demo:80', headers, body: mode === 'get' ? null : Readable.from([body], { objectMode: false }) },
      handler,
    );
  });
}

async function round(upstream: H2Upstream, n: number): Promise<number> {
  let started = 0;
  const worker = async () => {
    while (started < n) {
      started++;
      await one(upstream);
    }
  };
  const t0 = process.cpuUsage();
  await Promise.all(Array.from({ length: concurrency }, worker));
  const d = process.cpuUsage(t0);
  return (d.user + d.system) / n;
}

const pools = modules.map((m) => pool(m.mod));
for (const u of pools) await round(u, Math.min(5000, total)); // warm-up: JIT, the pooled session
const results: number[][] = pools.map(() => []);
// ABBA: which copy runs first alternates (the second of a pair pays more of the first's garbage).
for (let i = 0; i < rounds; i++) {
  for (let k = 0; k < pools.length; k++) {
    const j = i % 2 === 0 ? k : pools.length - 1 - k;
    results[j].push(await round(pools[j], total));
  }
}
const median = (a: number[]) => [...a].sort((x, y) => x - y)[Math.floor(a.length / 2)];
for (let j = 0; j < pools.length; j++) {
  process.stdout.write(`h2-upstream ${mode}, ${concurrency} in flight, ${modules[j].name}: ${median(results[j]).toFixed(1)} µs CPU per request (median of ${rounds} × ${total}; all: ${results[j].map((r) => r.toFixed(1)).join(' ')})\n`);
}
if (pools.length === 2) process.stdout.write(`ratio this / other, median of pairs: ${median(results[0].map((r, i) => r / results[1][i])).toFixed(3)}\n`);
for (const u of pools) await u.destroy();
server.close();
