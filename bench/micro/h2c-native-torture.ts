/**
 * Torture for inner h2c sessions inside CONNECT tunnels: a tunnel server (outer HTTP/2, CONNECT
 * answered 200, an inner h2c server on the stream) and clients (an inner h2c client on the CONNECT
 * stream) that reset, close and destroy the outer and inner streams and sessions in every order,
 * at random moments, with requests in flight; GOAWAYs both ways; abrupt socket destroys; python-h2
 * peers (Debian's python3-h2) doing the same from raw frames, garbage included.
 *
 *   node bench/micro/h2c-native-torture.ts [tunnels=3000] [wrapper|native] [--tls]
 *
 * `wrapper`: Node's own way (its JS stream wrapper under each inner session), the waypoint's, with
 * the waypoint's guard on every inner session (src/hbone/js-stream-guard.ts; `TORTURE_UNGUARDED=1`
 * leaves Node's wrapper as it is). Without the guard, Node 24.21 dies from a client alone: with
 * `TORTURE_PATHS=/big,/reset TORTURE_CLIENT_CHAOS=0 TORTURE_PYTHON=0 TORTURE_SERVER_CHAOS=0
 * TORTURE_UNGUARDED=1 ... 1500 wrapper --tls` the server's wrapper throws ERR_INTERNAL_ASSERTION
 * (lib/internal/js_stream_socket.js `doShutdown`, `assert(handle !== null)`) within a second or
 * two. The path (test/integration/transport/js-stream-shutdown.test.ts drives it step by step): the
 * client's requests, then its `close(CANCEL)` (END_STREAM, then RST_STREAM) reach the server in
 * one read; the inner session's SETTINGS ack is its write in flight on the tunnel, the END_STREAM
 * leaves a shutdown pending behind it, /reset's RST_STREAM is left pending by Node behind it, and
 * /big's response is queued; the wrapper's close cancels the write, the pending RST_STREAM makes
 * the session write /big at once (kept as the wrapper's current write, the shutdown re-queued
 * behind it), and the cancelled write's own late callback completes that write and runs the
 * shutdown on the closed handle.
 * `native`: both ends on the CONNECT stream's native handle (h2c-native.ts); on Node 24.21 this
 * aborts the process within a few thousand tunnels (exit code 134, `Http2Stream::ReadStop`
 * `CHECK(!this->is_destroyed())`). Passes when the process is alive at the end and no inner
 * session outlives its tunnel (tunnels left open are counted apart: some outer sessions stay up).
 * Binds 127.0.239.1:18239-18240.
 */
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import http2, { type ClientHttp2Session, type ClientHttp2Stream, type Http2Session, type IncomingHttpHeaders, type ServerHttp2Session, type ServerHttp2Stream } from 'node:http2';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import tls from 'node:tls';
import { guardJsStreamShutdown } from '../../src/hbone/index.ts';
import { LocalCa } from '../../src/identity/ca.ts';
import { attachNative, connectNative } from './h2c-native.ts';

const ITER = Number(process.argv[2] ?? 3000);
const MODE = (process.argv[3] ?? 'native') as 'native' | 'wrapper';
const TLS = process.argv.includes('--tls');
const HOST = '127.0.239.1';
const PORT = 18239;
const CONCURRENCY = 40;

const rnd = (n: number) => Math.floor(Math.random() * n);
const pick = <T>(a: readonly T[]): T => a[rnd(a.length)];
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const quiet = (e: { on(ev: 'error', f: () => void): unknown }) => e.on('error', () => {});

// --- the tunnel server ---

const stats = { clientNative: 0, outerOpen: 0, tunnelsOpen: 0, tunnels: 0, innerOpen: 0, innerOpened: 0, serverChaos: 0, requests: 0, native: 0 };
const inner = http2.createServer({ settings: { maxConcurrentStreams: 200 } });
const GUARD = MODE === 'wrapper' && process.env.TORTURE_UNGUARDED !== '1';
inner.on('session', (s: ServerHttp2Session) => {
  if (GUARD) guardJsStreamShutdown(s);
  stats.innerOpen++;
  stats.innerOpened++;
  quiet(s);
  s.once('close', () => stats.innerOpen--);
});
const big = Buffer.alloc(256 * 1024, 'b');
inner.on('stream', (st: ServerHttp2Stream, h: IncomingHttpHeaders) => {
  quiet(st);
  stats.requests++;
  // A stream reset before its 'stream' event (a client's RST_STREAM in the same read) cannot be answered.
  if (st.destroyed || st.closed) return;
  const p = String(h[':path']);
  const session = st.session;
  if (p === '/small') return void (st.respond({ ':status': 200 }), st.end(big.subarray(0, 1024)));
  if (p === '/big') return void (st.respond({ ':status': 200 }), st.end(big));
  if (p === '/echo') return void (st.respond({ ':status': 200 }), st.pipe(st));
  if (p === '/trailers') {
    st.respond({ ':status': 200, 'content-type': 'application/grpc' }, { waitForTrailers: true });
    st.once('wantTrailers', () => st.sendTrailers({ 'grpc-status': '0' }));
    return void st.end(big.subarray(0, 5000));
  }
  if (p === '/slow') {
    st.respond({ ':status': 200 });
    let n = 0;
    const t = setInterval(() => {
      if (st.destroyed || n++ > 20) return void (clearInterval(t), st.destroyed || st.end());
      st.write(big.subarray(0, 4096));
    }, 1 + rnd(3));
    return;
  }
  if (p === '/reset') return void st.close(http2.constants.NGHTTP2_INTERNAL_ERROR);
  if (p === '/goaway') {
    st.respond({ ':status': 200 });
    st.end('bye');
    return void session?.goaway();
  }
  if (p === '/close-session') return void session?.close();
  if (p === '/destroy-session') return void session?.destroy();
  // '/hang': never answered
});

function serve(outer: ServerHttp2Stream, h: IncomingHttpHeaders): void {
  quiet(outer);
  if (h[':method'] !== 'CONNECT') return void outer.respond({ ':status': 404 }, { endStream: true });
  outer.respond({ ':status': 200 });
  stats.tunnels++;
  stats.tunnelsOpen++;
  outer.once('close', () => stats.tunnelsOpen--);
  let session: Http2Session | undefined;
  if (MODE === 'native') {
    session = attachNative(inner, outer);
    if (session) stats.native++;
  }
  if (!session) inner.emit('connection', outer);
  // Server-side chaos on some tunnels (TORTURE_SERVER_CHAOS=0: clients only).
  if (process.env.TORTURE_SERVER_CHAOS !== '0' && Math.random() < 0.3) {
    setTimeout(
      () => {
        stats.serverChaos++;
        const outerSession = outer.session;
        switch (rnd(7)) {
          case 0:
            return outer.destroy();
          case 1:
            return outer.close(http2.constants.NGHTTP2_CANCEL);
          case 2:
            return outerSession?.destroy();
          case 3:
            return outerSession?.close();
          case 4:
            return session?.destroy();
          case 5:
            return session?.close();
          default:
            return outerSession?.goaway(http2.constants.NGHTTP2_NO_ERROR);
        }
      },
      rnd(30),
    );
  }
}

async function startServer(): Promise<{ close(): void; caPem: string }> {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'h2c-native-'));
  const ca = await LocalCa.ensure(dir, 'cluster.local');
  const leaf = await ca.ca.issue('spiffe://cluster.local/ns/demo/sa/waypoint', 3600_000);
  const caPem = ca.ca.rootCertPem;
  const outer = TLS
    ? http2.createSecureServer({ cert: leaf.certPem, key: leaf.keyPem, ca: caPem, ALPNProtocols: ['h2'] })
    : http2.createServer();
  const track = (s: Http2Session) => {
    quiet(s);
    stats.outerOpen++;
    s.once('close', () => stats.outerOpen--);
  };
  outer.on('session', track);
  outer.on('stream', serve);
  // python peers always speak plain h2c
  const plain = http2.createServer();
  plain.on('session', track);
  plain.on('stream', serve);
  await new Promise<void>((r) => outer.listen(PORT, HOST, r));
  await new Promise<void>((r) => plain.listen(PORT + 1, HOST, r));
  return {
    caPem,
    close: () => {
      outer.close();
      plain.close();
      fs.rmSync(dir, { recursive: true, force: true });
    },
  };
}

// --- Node clients ---

const PATHS = process.env.TORTURE_PATHS?.split(',') ?? ['/small', '/small', '/big', '/echo', '/trailers', '/slow', '/reset', '/hang', '/goaway', '/close-session', '/destroy-session'];

function outerSession(caPem: string): { session: ClientHttp2Session; socket: net.Socket } {
  let socket!: net.Socket;
  const session = http2.connect(`${TLS ? 'https' : 'http'}://${HOST}:${PORT}`, {
    createConnection: () => {
      socket = TLS ? tls.connect({ host: HOST, port: PORT, ca: caPem, ALPNProtocols: ['h2'], checkServerIdentity: () => undefined }) : net.connect(PORT, HOST);
      return socket;
    },
  });
  quiet(session);
  return { session, socket };
}

async function tunnelIteration(caPem: string, shared: { session: ClientHttp2Session; socket: net.Socket } | undefined): Promise<void> {
  const own = shared ?? outerSession(caPem);
  try {
    await tunnel(own, shared !== undefined);
  } finally {
    if (!shared) own.session.destroy();
  }
}

async function tunnel(own: { session: ClientHttp2Session; socket: net.Socket }, isShared: boolean): Promise<void> {
  const shared = isShared ? own : undefined;
  const o = own.session;
  if (o.closed || o.destroyed) return;
  let connect: ClientHttp2Stream;
  try {
    connect = o.request({ ':method': 'CONNECT', ':authority': '10.0.0.1:80' });
  } catch {
    return;
  }
  quiet(connect);
  const ok = await new Promise<boolean>((r) => {
    connect.once('response', (h) => r(h[':status'] === 200));
    connect.once('close', () => r(false));
  });
  if (!ok) {
    if (!shared) o.destroy();
    return;
  }
  // Both ends on native handles in native mode: the clients' inner sessions too.
  const innerSession = (MODE === 'native' && connectNative(connect, 'http://inner')) || http2.connect('http://inner', { createConnection: () => connect });
  if (GUARD) guardJsStreamShutdown(innerSession);
  quiet(innerSession);
  const reqs: ClientHttp2Stream[] = [];
  const n = 1 + rnd(6);
  for (let i = 0; i < n; i++) {
    try {
      const p = pick(PATHS);
      const r = innerSession.request({ ':method': p === '/echo' ? 'POST' : 'GET', ':path': p }, { endStream: p !== '/echo' });
      quiet(r);
      r.resume();
      if (p === '/echo') {
        r.write(big.subarray(0, rnd(64 * 1024)));
        if (Math.random() < 0.7) r.end();
      }
      reqs.push(r);
    } catch {
      break;
    }
  }
  const done = Promise.all(reqs.map((r) => new Promise((res) => r.once('close', res))));
  // Client-side chaos at a random moment (or none).
  await Promise.race([done, sleep(rnd(40))]);
  switch (process.env.TORTURE_CLIENT_CHAOS ? Number(process.env.TORTURE_CLIENT_CHAOS) : rnd(12)) {
    case 0:
      connect.close(http2.constants.NGHTTP2_CANCEL);
      break;
    case 1:
      connect.destroy();
      break;
    case 2:
      if (!shared) o.destroy();
      break;
    case 3:
      if (!shared) own.socket.destroy();
      break;
    case 4:
      if (!shared) own.socket.resetAndDestroy?.();
      break;
    case 5:
      innerSession.close();
      break;
    case 6:
      innerSession.destroy();
      break;
    case 7:
      innerSession.goaway(http2.constants.NGHTTP2_NO_ERROR);
      break;
    case 8:
      for (const r of reqs) r.close(pick([http2.constants.NGHTTP2_CANCEL, http2.constants.NGHTTP2_INTERNAL_ERROR, http2.constants.NGHTTP2_NO_ERROR]));
      break;
    case 9:
      connect.end();
      break;
    default:
      break;
  }
  await Promise.race([done, sleep(200)]);
  innerSession.destroy();
  connect.destroy();
  if (!shared) o.destroy();
}

// --- python-h2 peers ---

const PY = String.raw`
import random, socket, sys, time
import h2.connection, h2.config, h2.events
HOST, PORT, N = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
def run_one():
    s = socket.create_connection((HOST, PORT)); s.settimeout(0.02)
    outer = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True, validate_outbound_headers=False, validate_inbound_headers=False))
    outer.initiate_connection()
    sid = outer.get_next_available_stream_id()
    outer.send_headers(sid, [(':method', 'CONNECT'), (':authority', '10.0.0.1:80')])
    s.sendall(outer.data_to_send())
    inner = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
    inner.initiate_connection()
    started = False; chaos_at = random.randint(0, 6); step = 0
    try:
        while step < 12:
            step += 1
            try:
                data = s.recv(65536)
            except socket.timeout:
                data = b''
            if data == b'' and step > 1 and not started:
                break
            for ev in outer.receive_data(data) if data else []:
                if isinstance(ev, h2.events.ResponseReceived) and ev.stream_id == sid:
                    started = True
                    for i in range(random.randint(1, 4)):
                        isid = inner.get_next_available_stream_id()
                        inner.send_headers(isid, [(':method', 'GET'), (':path', random.choice(['/small', '/big', '/slow', '/hang', '/trailers', '/goaway'])), (':scheme', 'http'), (':authority', 'x')], end_stream=True)
                elif isinstance(ev, h2.events.DataReceived) and ev.stream_id == sid:
                    outer.acknowledge_received_data(ev.flow_controlled_length, sid)
                    try:
                        for iev in inner.receive_data(ev.data):
                            if isinstance(iev, h2.events.DataReceived):
                                inner.acknowledge_received_data(iev.flow_controlled_length, iev.stream_id)
                    except Exception:
                        pass
            if started:
                out = inner.data_to_send()
                if out:
                    try: outer.send_data(sid, out)
                    except Exception: pass
            if step == chaos_at:
                c = random.randint(0, 9)
                if c == 0: outer.reset_stream(sid, random.choice([0, 1, 2, 8]))
                elif c == 1: outer.close_connection()
                elif c == 2:
                    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b'\x01\x00\x00\x00\x00\x00\x00\x00'); s.close(); return
                elif c == 3 and started:
                    try: outer.send_data(sid, bytes(random.getrandbits(8) for _ in range(random.randint(1, 300))))
                    except Exception: pass
                elif c == 4 and started:
                    inner.close_connection()
                    try: outer.send_data(sid, inner.data_to_send())
                    except Exception: pass
                elif c == 5 and started:
                    try: outer.end_stream(sid)
                    except Exception: pass
                elif c == 6 and started:
                    for isid in list(inner.streams.keys()):
                        try: inner.reset_stream(isid, random.choice([0, 8]))
                        except Exception: pass
                elif c == 7:
                    s.close(); return
            out = outer.data_to_send()
            if out: s.sendall(out)
    except (OSError, Exception):
        pass
    try: s.close()
    except Exception: pass
for i in range(N):
    run_one()
print('python done', N)
`;

function pythonPeers(n: number, iterations: number): Promise<void>[] {
  const script = path.join(os.tmpdir(), `h2c-native-peer-${process.pid}.py`);
  fs.writeFileSync(script, PY);
  return Array.from({ length: n }, () =>
    new Promise<void>((resolve) => {
      const p = spawn('/usr/bin/python3', [script, HOST, String(PORT + 1), String(iterations)], { stdio: ['ignore', 'inherit', 'inherit'] });
      p.once('exit', () => resolve());
    }),
  );
}

async function main(): Promise<void> {
  const server = await startServer();
  const t0 = Date.now();
  const pyDone = process.env.TORTURE_PYTHON === '0' ? [] : pythonPeers(4, Math.ceil(ITER / 8));
  const shared = Array.from({ length: 4 }, () => outerSession(server.caPem));
  let started = 0;
  const worker = async () => {
    while (started < ITER) {
      if (++started % 500 === 0) process.stderr.write(`  ${started} tunnels started, inner sessions open ${stats.innerOpen}\n`);
      // Some tunnels share an outer session with others (a shared session is never destroyed by the client).
      const s = Math.random() < 0.3 ? pick(shared) : undefined;
      await tunnelIteration(server.caPem, s && !s.session.destroyed && !s.session.closed ? s : undefined).catch(() => {});
    }
  };
  await Promise.all(Array.from({ length: CONCURRENCY }, worker));
  await Promise.all(pyDone);
  for (const s of shared) s.session.destroy();
  // Let every session close.
  for (let i = 0; i < 50 && stats.innerOpen > 0; i++) await sleep(100);
  const ms = Date.now() - t0;
  process.stdout.write(`${MODE}${TLS ? ' (TLS)' : ''}${MODE === 'wrapper' ? (GUARD ? ' guarded' : ' unguarded') : ''}: ${stats.tunnels} tunnels (${stats.native} on native handles), ${stats.requests} inner requests, ${stats.serverChaos} server-side chaos actions in ${ms} ms; inner sessions still open: ${stats.innerOpen} of ${stats.innerOpened} (tunnels open ${stats.tunnelsOpen}, outer sessions open ${stats.outerOpen})\n`);
  server.close();
  process.exitCode = stats.innerOpen <= stats.tunnelsOpen ? 0 : 1;
  setTimeout(() => process.exit(), 200).unref();
}

await main();
