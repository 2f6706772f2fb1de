/**
 * What a stalled download costs the waypoint: N clients open a download and never read (their
 * HTTP/2 stream window stays at zero), the upstream keeps sending; the process's memory is read
 * after a forced GC before, while they stall, and after they close.
 *
 *   node --expose-gc bench/micro/stalled-streams.ts [N] [http|h2c|tcp]
 *
 * The whole topology (client, waypoint, inbound role, backend) is one process, so the figure
 * per stream is everything the path holds; `waypoint upstream` sums what the waypoint's upstream
 * HBONE streams hold in their buffers, and `overload accounting` what the waypoint's budget counts.
 * Binds 127.0.209.x (apart from the ranges of the overload tests). Before the stream window was
 * cut to 256 KiB, the http case grew by 4.3 MiB of Buffer memory per stalled stream.
 */
import http from 'node:http';
import http2 from 'node:http2';
import net from 'node:net';
import { LocalCa } from '../../src/identity/ca.ts';
import { connect } from '../../test/helpers/hbone-client.ts';
import { startTestTopology } from '../../test/helpers/topology.ts';

const N = Number(process.argv[2] ?? 20);
const mode = (process.argv[3] ?? 'http') as 'http' | 'h2c' | 'tcp';
const gc = (globalThis as { gc?: () => void }).gc;
if (!gc) throw new Error('run with --expose-gc');

const MiB = 1024 * 1024;
const chunk = Buffer.alloc(64 * 1024, 'z');

/** Endless body, as fast as the reader takes it (HTTP/1.1 and h2c on 8080, raw TCP on 8081). */
function endless(res: { write(b: Buffer): boolean; destroyed: boolean; once(e: 'drain', f: () => void): unknown }): void {
  const pump = () => {
    while (!res.destroyed && res.write(chunk));
    if (!res.destroyed) res.once('drain', pump);
  };
  pump();
}

async function main(): Promise<void> {
  const apps: { close(): void }[] = [];
  for (const ip of ['127.0.209.11', '127.0.209.12']) {
    const h1 = http.createServer((_req, res) => endless(res));
    await new Promise<void>((r) => h1.listen(8080, ip, r));
    apps.push({ close: () => (h1.closeAllConnections(), h1.close()) });
  }
  const topo = await startTestTopology(209, { backends: false, portName: mode === 'tcp' ? 'tcp' : 'http' });
  const ca = await LocalCa.load(topo.caDir);
  const leaf = await ca.issue('spiffe://cluster.local/ns/demo/sa/client', 3600_000);
  const id = { certPem: leaf.certPem, keyPem: leaf.keyPem, caPem: ca.rootCertPem };
  const mem = () => {
    gc!();
    const m = process.memoryUsage();
    return { rss: m.rss, heap: m.heapUsed, external: m.external, arrayBuffers: m.arrayBuffers };
  };
  const fmt = (d: Record<string, number>) => Object.entries(d).map(([k, v]) => `${k} ${(v / MiB).toFixed(2)} MiB`).join(', ');
  const diff = (a: Record<string, number>, b: Record<string, number>) => Object.fromEntries(Object.keys(a).map((k) => [k, b[k] - a[k]]));
  const wp = topo.waypoint as unknown as Record<string, unknown>;
  /** Readable and writable bytes of every stream of `sessions` (Node keeps a session's streams in its `[kState].streams` map). */
  const streamBytes = (sessions: Iterable<http2.Http2Session>) => {
    let readable = 0;
    let writable = 0;
    for (const session of sessions) {
      for (const sym of Object.getOwnPropertySymbols(session)) {
        const streams = (session as unknown as Record<symbol, { streams?: { values(): Iterable<http2.Http2Stream> } }>)[sym]?.streams;
        if (streams) for (const st of streams.values()) (readable += st.readableLength), (writable += st.writableLength);
      }
    }
    return `readable ${(readable / MiB).toFixed(2)} MiB, writable ${(writable / MiB).toFixed(2)} MiB`;
  };
  const upstreamSessions = () => [...(wp.sessions as { pools: Map<string, { session: http2.ClientHttp2Session }[]> }).pools.values()].flat().map((p) => p.session);
  const downstreamSessions = () => (wp.hbone as { sessions: Set<http2.ServerHttp2Session> }).sessions;

  const base = mem();
  const clients: http2.ClientHttp2Session[] = [];
  const streams: http2.ClientHttp2Stream[] = [];
  for (let i = 0; i < N; i++) {
    // A client whose receive window is the minimum and who never reads: the waypoint's send window to it is 0.
    const s = await new Promise<http2.ClientHttp2Session>((resolve, reject) => {
      const c = http2.connect(`https://127.0.209.1:${topo.waypoint!.addresses.hbone.port}`, { cert: id.certPem, key: id.keyPem, ca: id.caPem, ALPNProtocols: ['h2'], checkServerIdentity: () => undefined, settings: { initialWindowSize: 65_535 } });
      c.once('connect', () => resolve(c));
      c.once('error', reject);
    });
    clients.push(s);
    const { stream, status } = await connect(s, '127.0.209.100:80');
    if (status !== 200) throw new Error(`CONNECT answered ${status}`);
    stream.pause();
    if (mode === 'h2c') {
      // h2c with prior knowledge inside the tunnel; the inner stream is never read either.
      const inner = http2.connect('http://x', { createConnection: () => stream as unknown as net.Socket, settings: { initialWindowSize: 65_535 } });
      const req = inner.request({ ':path': '/endless', ':authority': 'echo' });
      req.pause();
    } else {
      stream.write('GET /endless HTTP/1.1\r\nhost: echo\r\n\r\n');
    }
    streams.push(stream);
  }
  // Wait until memory stops growing.
  let prev = mem();
  for (let i = 0; i < 60; i++) {
    await new Promise((r) => setTimeout(r, 500));
    const now = mem();
    if (Math.abs(now.arrayBuffers - prev.arrayBuffers) < 256 * 1024 && i > 3) break;
    prev = now;
  }
  const stalled = mem();
  const d = diff(base, stalled);
  console.log(`${mode}: ${N} stalled downloads`);
  console.log(`  growth: ${fmt(d)}`);
  console.log(`  per stream: ${fmt(Object.fromEntries(Object.entries(d).map(([k, v]) => [k, v / N])))}`);
  console.log(`  waypoint upstream HBONE streams: ${streamBytes(upstreamSessions())}`);
  console.log(`  waypoint downstream HBONE streams: ${streamBytes(downstreamSessions())}`);
  const overload = topo.waypoint!.overload;
  overload.refresh();
  console.log(`  overload accounting: ${(overload.bufferedBytes / MiB).toFixed(2)} MiB in ${overload.accountCount} accounts (${(overload.bufferedBytes / N / 1024).toFixed(0)} KiB each)`);
  for (const c of clients) c.destroy();
  // Destroyed client streams keep what they received: let go of them before measuring.
  streams.length = 0;
  clients.length = 0;
  await new Promise((r) => setTimeout(r, 2000));
  overload.refresh();
  console.log(`  after close: ${fmt(diff(base, mem()))}; overload accounting ${overload.bufferedBytes} B in ${overload.accountCount} accounts`);
  await topo.close();
  for (const a of apps) a.close();
}

await main();
