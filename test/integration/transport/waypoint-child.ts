/**
 * A waypoint in a process of its own, for leak checks: run with `node --expose-gc` through
 * `child_process.fork`, so its memory and file descriptors are only its own. Arguments: the mesh
 * file, the CA directory and a JSON bootstrap patch. It sends `{ ready: hbonePort }`, answers each
 * `'measure'` message with a {@link ChildMeasure} taken after forced garbage collections, and on
 * SIGTERM shuts down gracefully and exits.
 */
import dc from 'node:diagnostics_channel';
import fs from 'node:fs';
import type http from 'node:http';
import type http2 from 'node:http2';
import type net from 'node:net';
import { Waypoint } from '../../../src/app.ts';
import { defaultBootstrap, overrideBootstrap } from '../../../src/config/bootstrap.ts';

export type CensusKind = 'hboneSessions' | 'hboneStreams' | 'acceptedSockets' | 'httpRequests' | 'httpResponses' | 'upstreamSessions' | 'upstreamStreams' | 'connectedSockets';

/** What the child reports for `'measure'` (bytes, except the counts). */
export interface ChildMeasure {
  readonly rss: number;
  /** Anonymous memory (/proc/self/smaps_rollup): RSS without the pages of files (code, mostly). */
  readonly anon: number;
  /**
   * RSS of glibc malloc's main heap (the `[heap]` mapping; with MALLOC_ARENA_MAX=1 every thread
   * allocates there): chunks freed below its top stay resident until malloc_trim(3).
   */
  readonly brkHeap: number;
  readonly heapUsed: number;
  readonly heapTotal: number;
  /** Memory of objects outside the JS heap, every Buffer included. */
  readonly external: number;
  readonly arrayBuffers: number;
  readonly fds: number;
  /** The waypoint's own bookkeeping. */
  readonly live: { hboneSessions: number; hboneSockets: number; httpTunnels: number; upstreamConnections: number };
  /** Objects Node made for connections and requests that are still alive after GC, per kind (see {@link census}). */
  readonly alive: Record<CensusKind, number>;
}

const [meshFile, caDir, patch] = process.argv.slice(2);
const gc = (globalThis as { gc?: () => void }).gc;
if (!gc || !process.send) throw new Error('run with --expose-gc through child_process.fork');

const alive = census();
// No drain delay unless the patch asks for one: nothing here follows the waypoint's readiness.
const bootstrap = overrideBootstrap(overrideBootstrap(defaultBootstrap(), { drain: { delayMs: 0 } }), JSON.parse(patch));
const wp = await Waypoint.start({ bootstrap, meshFile, caDir, watch: false });
process.send({ ready: wp.addresses.hbone.port });

process.on('message', async (m) => {
  if (m !== 'measure') return;
  // Two collections with a turn of the event loop between them, so finalizers of the first run;
  // FinalizationRegistry callbacks run in a task of their own after the second.
  gc();
  await new Promise((r) => setImmediate(r));
  gc();
  await new Promise((r) => setTimeout(r, 20));
  const mem = process.memoryUsage();
  const measure: ChildMeasure = {
    rss: mem.rss,
    ...mallocHeap(),
    heapUsed: mem.heapUsed,
    heapTotal: mem.heapTotal,
    external: mem.external,
    arrayBuffers: mem.arrayBuffers,
    fds: fs.readdirSync('/proc/self/fd').length,
    live: wp.liveCounts,
    alive: { ...alive },
  };
  process.send!(measure);
});
process.once('SIGTERM', () => {
  void wp.shutdown().then(() => process.exit(0));
});

/** Anonymous RSS, and the RSS of the `[heap]` mapping (0 before glibc first grows it). */
function mallocHeap(): { anon: number; brkHeap: number } {
  const field = (text: string, name: string) => Number(new RegExp(`^${name}:\\s+(\\d+) kB`, 'm').exec(text)![1]) * 1024;
  const smaps = fs.readFileSync('/proc/self/smaps', 'utf8');
  const at = smaps.indexOf('[heap]');
  return { anon: field(fs.readFileSync('/proc/self/smaps_rollup', 'utf8'), 'Anonymous'), brkHeap: at < 0 ? 0 : field(smaps.slice(at), 'Rss') };
}

/**
 * Counts, per kind, the objects Node makes for each connection and request (published on its
 * diagnostics channels) that the garbage collector has not reclaimed: a FinalizationRegistry takes
 * back what a creation added. Unlike a heap query, it leaves the child as fast as it was, so it
 * can count all along (after one v8.queryObjects call, a 16 MiB download through the child took
 * 12 s instead of 1). HBONE sessions are seen through their streams, accepted TLS connections
 * through their TCP sockets.
 */
function census(): Record<CensusKind, number> {
  const counts: Record<CensusKind, number> = { hboneSessions: 0, hboneStreams: 0, acceptedSockets: 0, httpRequests: 0, httpResponses: 0, upstreamSessions: 0, upstreamStreams: 0, connectedSockets: 0 };
  const seen = new WeakSet<object>();
  const gone = new FinalizationRegistry<CensusKind>((kind) => counts[kind]--);
  const track = (kind: CensusKind, o: object) => {
    if (seen.has(o)) return;
    seen.add(o);
    counts[kind]++;
    gone.register(o, kind);
  };
  dc.subscribe('http2.server.stream.created', (m) => {
    const { stream } = m as { stream: http2.ServerHttp2Stream };
    track('hboneStreams', stream);
    track('hboneSessions', stream.session!);
  });
  dc.subscribe('http2.client.stream.created', (m) => {
    const { stream } = m as { stream: http2.ClientHttp2Stream };
    track('upstreamStreams', stream);
    track('upstreamSessions', stream.session!);
  });
  dc.subscribe('net.server.socket', (m) => track('acceptedSockets', (m as { socket: net.Socket }).socket));
  dc.subscribe('net.client.socket', (m) => track('connectedSockets', (m as { socket: net.Socket }).socket));
  dc.subscribe('http.server.request.start', (m) => {
    const { request, response } = m as { request: http.IncomingMessage; response: http.ServerResponse };
    track('httpRequests', request);
    track('httpResponses', response);
  });
  return counts;
}
