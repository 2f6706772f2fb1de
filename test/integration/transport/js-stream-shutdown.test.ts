/**
 * h2c inside a CONNECT stream runs on Node's JS stream wrapper (lib/internal/js_stream_socket.js);
 * on Node 24.21 the wrapper throws ERR_INTERNAL_ASSERTION from `doShutdown` (`assert(handle !==
 * null)`), uncaught, when the tunnel is closed with END_STREAM then RST_STREAM (Node's
 * `close(CANCEL)`) while one of the session's writes is still in flight on the tunnel and the
 * session has reset one of its streams meanwhile (hbone/js-stream-guard.ts has the whole path).
 * Driven step by step with hand-written frames: against plain Node (an inner h2c server, and an
 * inner h2c client as the waypoint's h2c upstreams), then against the waypoint (an upstream that
 * fails mid-response while the tunnel's flow-control window is full). Each fails (uncaught
 * assertion) without the guard. Addresses: 127.0.212.x.
 */
import dc from 'node:diagnostics_channel';
import http from 'node:http';
import http2, { type ServerHttp2Session, type ServerHttp2Stream } from 'node:http2';
import net from 'node:net';
import type { Duplex } from 'node:stream';
import tls from 'node:tls';
import { afterAll, afterEach, beforeAll, beforeEach, expect, test, vi } from 'vitest';
import { guardJsStreamShutdown } from '../../../src/hbone/index.ts';
import { connect, hboneSession, type ClientIdentity } from '../../helpers/hbone-client.ts';
import { identityFrom } from '../../helpers/identity.ts';
import { startTestTopology, type TestTopology } from '../../helpers/topology.ts';
import { ACK, END_HEADERS, FrameReader, FrameType, PREFACE, frame, headerBlock, headers, rstStream, settings, windowUpdate } from './raw-h2.ts';

const NET = 212;
const VIP = `127.0.${NET}.100:80`;
const { NGHTTP2_CANCEL, NGHTTP2_INTERNAL_ERROR } = http2.constants;

// The assertion is thrown from a setImmediate: uncaught. Recorded, so that the test itself fails.
const uncaught: Error[] = [];
const record = (err: Error) => void uncaught.push(err);
beforeEach(() => {
  uncaught.length = 0;
  process.on('uncaughtException', record);
});
afterEach(() => void process.off('uncaughtException', record));

const get = (id: number, path: string) =>
  headers(
    id,
    [
      [':method', 'GET'],
      [':scheme', 'http'],
      [':path', path],
      [':authority', 'echo'],
    ],
    true,
  );

/** Open CONNECT stream 1 to `authority` on a fresh outer connection and start the h2c session inside it. */
async function openTunnel(socket: Duplex, authority: string, innerSettings: Buffer = Buffer.alloc(0)): Promise<FrameReader> {
  const rd = new FrameReader(socket);
  socket.write(Buffer.concat([PREFACE, frame(FrameType.Settings, 0, 0), headers(1, [[':method', 'CONNECT'], [':authority', authority]], false)]));
  const response = await rd.until((f) => f.type === FrameType.Headers && f.streamId === 1);
  expect(response.flags & 0x1).toBe(0);
  socket.write(Buffer.concat([frame(FrameType.Settings, ACK, 0), frame(FrameType.Data, 0, 1, Buffer.concat([PREFACE, frame(FrameType.Settings, 0, 0, innerSettings)]))]));
  // The inner server's SETTINGS, on the tunnel.
  await rd.until((f) => f.type === FrameType.Data && f.streamId === 1 && f.payload.length > 0);
  return rd;
}

/** Node's `close(CANCEL)` of the CONNECT stream in one write: END_STREAM, then RST_STREAM. */
const cancelTunnel = (after: Buffer = Buffer.alloc(0)) => Buffer.concat([frame(FrameType.Data, 0, 1, after), frame(FrameType.Data, 0x1, 1), rstStream(1, NGHTTP2_CANCEL)]);

test('plain Node: the inner session answers one request and resets another while its SETTINGS ack is still on the tunnel, and the tunnel is cancelled', async () => {
  const inner = http2.createServer();
  const sessions: ServerHttp2Session[] = [];
  inner.on('session', (s: ServerHttp2Session) => {
    s.on('error', () => {});
    sessions.push(guardJsStreamShutdown(s));
  });
  inner.on('stream', (st: ServerHttp2Stream, h) => {
    st.on('error', () => {});
    if (h[':path'] === '/reset') return st.close(NGHTTP2_INTERNAL_ERROR);
    st.respond({ ':status': 200 });
    st.end('ok');
  });
  const outer = http2.createServer();
  outer.on('session', (s) => s.on('error', () => {}));
  outer.on('stream', (st) => {
    st.on('error', () => {});
    st.respond({ ':status': 200 });
    inner.emit('connection', st);
  });
  await new Promise<void>((r) => outer.listen(0, `127.0.${NET}.2`, r));
  const socket = net.connect((outer.address() as net.AddressInfo).port, `127.0.${NET}.2`);
  socket.on('error', () => {});
  try {
    await openTunnel(socket, 'x:80');
    // One read for the server: the inner SETTINGS (its ack becomes the session's write in flight,
    // which the reset in the same read cancels), a request answered and one reset from the
    // 'stream' events (the reset waits for that write: pending), then the tunnel's END_STREAM and RST_STREAM.
    socket.write(cancelTunnel(Buffer.concat([frame(FrameType.Settings, 0, 0), get(1, '/ok'), get(3, '/reset')])));
    // The inner session ends with its tunnel.
    await vi.waitFor(() => expect(sessions[0]?.closed && sessions[0].destroyed).toBe(true), { timeout: 5000 });
    await new Promise((r) => setTimeout(r, 50));
    expect(uncaught.map((e) => e.stack)).toEqual([]);
  } finally {
    socket.destroy();
    outer.close();
  }
});

test('plain Node, client side: an inner h2c client resets one request and starts another while its SETTINGS ack is on the tunnel, and the peer cancels the tunnel', async () => {
  // The peer: a hand-written HTTP/2 server on plain TCP.
  let peer: net.Socket | undefined;
  const server = net.createServer((s) => {
    s.on('error', () => {});
    peer = s;
  });
  await new Promise<void>((r) => server.listen(0, `127.0.${NET}.3`, r));
  const outer = http2.connect(`http://127.0.${NET}.3:${(server.address() as net.AddressInfo).port}`);
  outer.on('error', () => {});
  try {
    await vi.waitFor(() => expect(peer).toBeDefined(), { timeout: 5000 });
    const rd = new FrameReader(peer!, 'server');
    const tunnel = outer.request({ ':method': 'CONNECT', ':authority': 'x:80' });
    tunnel.on('error', () => {});
    await rd.until((f) => f.type === FrameType.Headers && f.streamId === 1);
    const status = frame(FrameType.Headers, END_HEADERS, 1, headerBlock([[':status', '200']]));
    peer!.write(Buffer.concat([frame(FrameType.Settings, 0, 0), frame(FrameType.Settings, ACK, 0), status, frame(FrameType.Data, 0, 1, frame(FrameType.Settings, 0, 0))]));
    await new Promise((r) => tunnel.once('response', r));
    // As the waypoint's h2c upstreams (src/upstream/h2-upstream.ts) run on HBONE CONNECT streams.
    const session = guardJsStreamShutdown(http2.connect('http://inner', { createConnection: () => tunnel }));
    session.on('error', () => {});
    const a = session.request({ ':path': '/a' });
    a.on('error', () => {});
    // The client's preface, SETTINGS and request, on the tunnel.
    await rd.until((f) => f.type === FrameType.Data && f.streamId === 1 && f.payload.length > PREFACE.length);
    // On /a's response the client resets it (left pending behind the write in flight) and sends another request (queued).
    a.once('response', () => {
      a.close(NGHTTP2_INTERNAL_ERROR);
      session.request({ ':path': '/b' }).on('error', () => {});
    });
    // One read for the client: an inner SETTINGS (its ack becomes the client's write in flight)
    // and /a's response, then the tunnel's END_STREAM and RST_STREAM.
    peer!.write(cancelTunnel(Buffer.concat([frame(FrameType.Settings, 0, 0), frame(FrameType.Headers, END_HEADERS, 1, headerBlock([[':status', '200']]))])));
    await vi.waitFor(() => expect(session.closed && session.destroyed).toBe(true), { timeout: 5000 });
    await new Promise((r) => setTimeout(r, 50));
    expect(uncaught.map((e) => e.stack)).toEqual([]);
  } finally {
    outer.destroy();
    peer?.destroy();
    server.close();
  }
});

// --- the waypoint ---

let topo: TestTopology;
let client: ClientIdentity;
const apps: http.Server[] = [];
/** The upstream's `/cut` requests: answered when `release` is called, then cut mid-body. */
let cutArrived: () => void;
let release: () => void;
let cutP: Promise<void>;
let releaseP: Promise<void>;

beforeAll(async () => {
  for (const ip of [`127.0.${NET}.11`, `127.0.${NET}.12`]) {
    const app = http.createServer((req, res) => {
      if (req.url === '/big') return void res.end(Buffer.alloc(256 * 1024, 'b'));
      if (req.url !== '/cut') return void res.end('ok');
      cutArrived();
      void releaseP.then(() => {
        res.writeHead(200, { 'content-length': '1000' });
        // Headers and a first chunk, then the connection lost: the waypoint resets the stream.
        res.write('x'.repeat(10), () => res.socket?.destroy());
      });
    });
    await new Promise<void>((r) => app.listen(8080, ip, r));
    apps.push(app);
  }
  topo = await startTestTopology(NET, { backends: false });
  client = await identityFrom(topo.caDir);
});
afterAll(async () => {
  for (const a of apps) {
    a.closeAllConnections();
    a.close();
  }
  await topo?.close();
});

test('waypoint: the tunnel is cancelled while a response waits on its window and an inner stream was reset (upstream lost mid-response)', async () => {
  cutP = new Promise<void>((r) => (cutArrived = r));
  releaseP = new Promise<void>((r) => (release = r));
  // The waypoint's inner h2c streams of `/cut`, to see when it has reset the one it answers.
  const cut: ServerHttp2Stream[] = [];
  const onStart = (m: unknown) => {
    const { stream, headers: h } = m as { stream: ServerHttp2Stream; headers: Record<string, string> };
    if (h[':path'] === '/cut') cut.push(stream);
  };
  dc.subscribe('http2.server.stream.start', onStart);
  const socket = tls.connect({ host: `127.0.${NET}.1`, port: topo.waypoint!.addresses.hbone.port, cert: client.certPem, key: client.keyPem, ca: client.caPem, ALPNProtocols: ['h2'], checkServerIdentity: () => undefined });
  socket.on('error', () => {});
  try {
    await new Promise((r) => socket.once('secureConnect', r));
    // The inner windows are opened wide: only the tunnel's (65535 bytes, never updated) holds the response back.
    const rd = await openTunnel(socket, VIP, settings([[0x4, 1 << 20]]));
    socket.write(frame(FrameType.Data, 0, 1, Buffer.concat([windowUpdate(0, 1 << 20), frame(FrameType.Settings, ACK, 0), get(1, '/cut')])));
    await cutP;
    socket.write(frame(FrameType.Data, 0, 1, get(3, '/big')));
    // The tunnel's window is full: the rest of /big is a write of the inner session waiting on it.
    const onTunnel = () => rd.frames.filter((f) => f.type === FrameType.Data && f.streamId === 1).reduce((n, f) => n + f.payload.length, 0);
    await vi.waitFor(() => expect(onTunnel()).toBe(65535), { timeout: 5000 });
    // /cut's upstream fails after its headers: the waypoint resets the inner stream (RST_STREAM
    // INTERNAL_ERROR, left pending by Node behind the write in flight).
    release();
    await vi.waitFor(() => expect(cut[0]?.rstCode).toBe(NGHTTP2_INTERNAL_ERROR), { timeout: 5000 });
    socket.write(cancelTunnel());
    // The tunnel and its inner session are gone, and the waypoint still serves.
    await vi.waitFor(() => expect(topo.waypoint!.liveCounts.httpTunnels).toBe(0), { timeout: 5000 });
    const session = await hboneSession(`127.0.${NET}.1`, topo.waypoint!.addresses.hbone.port, client);
    try {
      const t = await connect(session, VIP);
      expect(t.status).toBe(200);
      t.stream.close();
    } finally {
      session.close();
    }
    expect(uncaught.map((e) => e.stack)).toEqual([]);
  } finally {
    dc.unsubscribe('http2.server.stream.start', onStart);
    socket.destroy();
  }
});
