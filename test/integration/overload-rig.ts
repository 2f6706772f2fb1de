/**
 * Shared by test/integration/overload.test.ts and test/soak/overload.soak.test.ts: apps that
 * stream without end (at once, or when released), HBONE clients that never read (their HTTP/2
 * window to the waypoint stays at zero), metric reads and polling.
 */
import http from 'node:http';
import http2, { type ClientHttp2Session, type ClientHttp2Stream } from 'node:http2';
import v8 from 'node:v8';
import vm from 'node:vm';
import { LocalCa } from '../../src/identity/index.ts';
import { connect, type ClientIdentity } from '../helpers/hbone-client.ts';
import { samplesOf, scrape } from '../helpers/prometheus.ts';
import type { TestTopology } from '../helpers/topology.ts';

export const KiB = 1024;
export const MiB = 1024 * KiB;
/** What one stalled stream may hold in the waypoint: its 256 KiB stream window, the 64 KiB writable high-water mark toward the client, and a chunk in between. */
export const BOUND = 256 * KiB + 64 * KiB + 64 * KiB;

v8.setFlagsFromString('--expose-gc');
const gc = vm.runInNewContext('gc') as () => void;
/** Live Buffer bytes and RSS after full GCs (ArrayBuffer memory is released by a sweep after the GC: collect until it settles). */
export async function liveMemory(): Promise<{ arrayBuffers: number; rss: number }> {
  for (let i = 0; i < 3; i++) {
    gc();
    await new Promise((r) => setImmediate(r));
  }
  const m = process.memoryUsage();
  return { arrayBuffers: m.arrayBuffers, rss: m.rss };
}

/**
 * The apps (HTTP/1.1 on :8080 of each pod IP): `/endless` streams forever as fast as it is read;
 * `/hold/<id>` sends its headers, waits until {@link release}(id), then streams forever; anything
 * else answers `ok`.
 */
export class Apps {
  readonly servers: http.Server[] = [];
  private readonly held = new Map<string, () => void>();
  private readonly early = new Set<string>();

  async start(ips: string[]): Promise<void> {
    for (const ip of ips) {
      const s = http.createServer((req, res) => {
        const url = req.url ?? '/';
        if (url === '/endless') return endless(res);
        if (url.startsWith('/hold/')) {
          const id = url.slice(6);
          res.writeHead(200, { 'content-type': 'application/octet-stream' });
          res.flushHeaders();
          if (this.early.delete(id)) return endless(res);
          this.held.set(id, () => endless(res));
          return;
        }
        res.end('ok');
      });
      s.keepAliveTimeout = 60_000;
      await new Promise<void>((r) => s.listen(8080, ip, r));
      this.servers.push(s);
    }
  }

  /** Let `/hold/<id>` stream (now, or as soon as it arrives). */
  release(id: string): void {
    const go = this.held.get(id);
    if (go) {
      this.held.delete(id);
      go();
    } else this.early.add(id);
  }

  close(): void {
    for (const s of this.servers) {
      s.closeAllConnections();
      s.close();
    }
  }
}

const CHUNK = Buffer.alloc(64 * KiB, 'z');
function endless(res: { write(b: Buffer): boolean; destroyed: boolean; once(e: 'drain', f: () => void): unknown }): void {
  const pump = () => {
    while (!res.destroyed && res.write(CHUNK));
    if (!res.destroyed) res.once('drain', pump);
  };
  pump();
}

export async function identity(topo: TestTopology): Promise<ClientIdentity> {
  const ca = await LocalCa.load(topo.caDir);
  const leaf = await ca.issue('spiffe://cluster.local/ns/demo/sa/client', 3600_000);
  return { certPem: leaf.certPem, keyPem: leaf.keyPem, caPem: ca.rootCertPem };
}

/** An HBONE client that never reads: its per-stream window is the minimum, so the waypoint's window toward it closes after 64 KiB. */
export function stallingSession(topo: TestTopology, net: number, id: ClientIdentity): Promise<ClientHttp2Session> {
  return new Promise((resolve, reject) => {
    const s = http2.connect(`https://127.0.${net}.1:${topo.waypoint!.addresses.hbone.port}`, {
      cert: id.certPem,
      key: id.keyPem,
      ca: id.caPem,
      ALPNProtocols: ['h2'],
      checkServerIdentity: () => undefined,
      settings: { initialWindowSize: 65_535 },
    });
    s.once('connect', () => resolve(s));
    s.once('error', reject);
  });
}

/** A CONNECT on `session` to the topology's service, `payload` written into it, never read. */
export async function hog(session: ClientHttp2Session, net: number, payload: string): Promise<ClientHttp2Stream> {
  const { status, stream } = await connect(session, `127.0.${net}.100:80`);
  if (status !== 200) throw new Error(`CONNECT answered ${status}`);
  stream.pause();
  stream.on('error', () => {});
  stream.write(payload);
  return stream;
}

/**
 * Streams the waypoint reset: closed while our side never ended them, so by a RST_STREAM (of any
 * code: Envoy resets with NO_ERROR by default).
 */
export function resetStreams(streams: readonly ClientHttp2Stream[]): number {
  return streams.filter((s) => s.closed).length;
}

/** One metric's value summed over the series whose labels include `labels`. */
export async function metric(topo: TestTopology, name: string, labels: Record<string, string> = {}): Promise<number> {
  const samples = samplesOf(await scrape(topo.waypoint!.addresses.admin), name).filter((s) => s.name === name);
  return samples.filter((s) => Object.entries(labels).every(([k, v]) => s.labels[k] === v)).reduce((n, s) => n + s.value, 0);
}

/** Wait until `f` holds (polling every 100 ms, at most `ms`). */
export async function until(f: () => Promise<boolean> | boolean, ms = 10_000, what = 'condition'): Promise<void> {
  const end = Date.now() + ms;
  while (!(await f())) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

/** Wait until the buffered-bytes gauge stops moving (two readings 300 ms apart within 32 KiB); returns it. */
export async function settled(topo: TestTopology): Promise<number> {
  let prev = -1;
  for (let i = 0; i < 50; i++) {
    const now = await metric(topo, 'envoy_overload_buffered_bytes');
    if (prev >= 0 && Math.abs(now - prev) < 32 * KiB && now > 0) return now;
    prev = now;
    await new Promise((r) => setTimeout(r, 300));
  }
  throw new Error('the buffered-bytes gauge did not settle');
}

