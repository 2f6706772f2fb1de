/**
 * A loopback topology for cancelled-download checks (test/integration/cancelled-downloads.test.ts
 * and its soak version): apps on the pod IPs answering 8 MiB bodies, a filter keeping weak
 * references to what each request held at the waypoint (request, HTTP/1 tunnel, h2c session),
 * forced GC, and the ways a download gets cancelled.
 */
import http, { type IncomingMessage } from 'node:http';
import http2 from 'node:http2';
import net from 'node:net';
import type { Duplex } from 'node:stream';
import v8 from 'node:v8';
import vm from 'node:vm';
import { FilterStatus, type FilterFactory, type Http2DownstreamRequest, type StreamContext } from '../../src/pipeline/index.ts';
import { connect, hboneSession, type ClientIdentity } from '../helpers/hbone-client.ts';
import { identityFrom } from '../helpers/identity.ts';
import { recorder } from '../helpers/recorder.ts';
import { sleep } from '../helpers/servers.ts';
import { startTestTopology, type TestTopology } from '../helpers/topology.ts';

v8.setFlagsFromString('--expose-gc');
const gc = vm.runInNewContext('gc') as () => void;

export const BODY = Buffer.alloc(8 * 1024 * 1024, 0x78);

/** How a download is cancelled. */
export type CancelKind =
  /** A raw HBONE client: END_STREAM after a keep-alive request, then no more reading (session kept). */
  | 'fin-no-read'
  /** A raw HBONE client: RST_STREAM(CANCEL) on the CONNECT mid-response (session kept). */
  | 'connect-reset'
  /** A plain client through the tunnel role: its socket destroyed mid-response. */
  | 'socket-destroy'
  /** The app resets its connection mid-response (the waypoint resets the downstream). */
  | 'upstream-cut'
  /** An h2c client through the tunnel role: its connection dropped mid-download. */
  | 'h2c-drop';

export interface Rig {
  readonly topo: TestTopology;
  /** Responses the apps are still sending. */
  readonly sending: Set<http.ServerResponse>;
  readonly rec: ReturnType<typeof recorder>;
  /** Weak references to what each request held at the waypoint. */
  readonly held: { stream: WeakRef<object>[]; tunnel: WeakRef<object>[]; session: WeakRef<object>[] };
  /** Cancel one download of `path` the given way; resolves once the client side is done. */
  cancel(kind: CancelKind, path: string): Promise<void>;
  /** Run GC a few times (with pauses for pending callbacks). */
  collect(): Promise<void>;
  /** Close the HBONE client sessions kept open by the raw-HBONE cancellations. */
  releaseClients(): void;
  close(): Promise<void>;
}

export function alive(refs: WeakRef<object>[]): number {
  return refs.filter((r) => r.deref() !== undefined).length;
}

/** Read from `s` until `bytes` arrived, then stop reading. */
function readSome(s: Duplex, bytes: number): Promise<void> {
  return new Promise((resolve, reject) => {
    let got = 0;
    const onData = (c: Buffer) => {
      got += c.length;
      if (got < bytes) return;
      s.off('data', onData);
      s.pause();
      resolve();
    };
    s.on('data', onData);
    s.once('error', reject);
  });
}

export async function startRig(net4: number): Promise<Rig> {
  const sending = new Set<http.ServerResponse>();
  const rec = recorder();
  const held = { stream: [] as WeakRef<object>[], tunnel: [] as WeakRef<object>[], session: [] as WeakRef<object>[] };
  const weakRefs: FilterFactory<unknown> = {
    name: 'test.weakrefs',
    parseConfig: () => ({}),
    create: () => ({
      name: 'test.weakrefs',
      onRequestHeaders(s: StreamContext) {
        held.stream.push(new WeakRef(s));
        if (s.http2) held.session.push(new WeakRef((s.req as Http2DownstreamRequest).stream.session!));
        else held.tunnel.push(new WeakRef((s.req as IncomingMessage).socket));
        return FilterStatus.Continue;
      },
    }),
  };
  const topo = await startTestTopology(net4, {
    backends: false,
    extraFilters: [weakRefs, rec.factory],
    bootstrap: { filters: [{ name: 'test.weakrefs' }, ...rec.filters] },
  });
  const apps: http.Server[] = [];
  const kept: { destroy(): void }[] = [];
  try {
    for (const ip of [`127.0.${net4}.11`, `127.0.${net4}.12`]) {
      const app = http.createServer((req, res) => {
        sending.add(res);
        res.once('close', () => sending.delete(res));
        res.writeHead(200, { 'content-length': BODY.length });
        // `/cut…`: half the body, then the connection is reset.
        if (req.url?.startsWith('/cut')) {
          res.write(BODY.subarray(0, BODY.length / 2), () => setTimeout(() => res.destroy(), 50));
          return;
        }
        res.end(BODY);
      });
      app.keepAliveTimeout = 0;
      await new Promise<void>((r) => app.listen(8080, ip, r));
      apps.push(app);
    }
  } catch (err) {
    await topo.close();
    throw err;
  }
  const id: ClientIdentity = await identityFrom(topo.caDir);

  const viaHbone = async (path: string, then: (stream: http2.ClientHttp2Stream) => void) => {
    const session = await hboneSession(`127.0.${net4}.1`, topo.waypoint!.addresses.hbone.port, id, { localAddress: `127.0.${net4}.50` });
    kept.push(session);
    const { stream } = await connect(session, `127.0.${net4}.100:80`);
    stream.on('error', () => {});
    stream.write(`GET ${path} HTTP/1.1\r\nHost: echo\r\n\r\n`);
    await readSome(stream, 64 * 1024);
    then(stream);
  };

  const cancel = async (kind: CancelKind, path: string): Promise<void> => {
    switch (kind) {
      case 'fin-no-read':
        return viaHbone(path, (s) => s.end());
      case 'connect-reset':
        return viaHbone(path, (s) => s.close(http2.constants.NGHTTP2_CANCEL));
      case 'socket-destroy':
      case 'upstream-cut': {
        const s = net.connect(topo.entry.port, topo.entry.host, () => s.write(`GET ${kind === 'upstream-cut' ? `/cut${path}` : path} HTTP/1.1\r\nHost: echo\r\n\r\n`));
        s.on('error', () => {});
        if (kind === 'upstream-cut') {
          s.resume();
          await new Promise((r) => s.once('close', r));
          return;
        }
        await readSome(s, 64 * 1024);
        s.destroy();
        return;
      }
      case 'h2c-drop': {
        const c = http2.connect(`http://${topo.entry.host}:${topo.entry.port}`);
        c.on('error', () => {});
        const r = c.request({ ':path': path });
        r.on('error', () => {});
        r.end();
        await readSome(r, 64 * 1024);
        c.destroy();
        return;
      }
    }
  };

  const collect = async () => {
    for (let i = 0; i < 4; i++) {
      await sleep(50);
      gc();
    }
  };

  const releaseClients = () => {
    for (const k of kept.splice(0)) k.destroy();
  };

  const close = async () => {
    releaseClients();
    for (const a of apps) a.closeAllConnections();
    for (const a of apps) a.close();
    await topo.close();
  };
  return { topo, sending, rec, held, cancel, collect, releaseClients, close };
}
