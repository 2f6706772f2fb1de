/**
 * Nothing truncated is ever reported as whole, against upstreams on a non-Node HTTP/2 stack
 * (Debian's python3-h2: misbehaving_upstream.py), with a python3-h2 client (h2_downstream.py)
 * wherever how a stream ended (END_STREAM or RST_STREAM) must be seen exactly.
 *
 *  - An upstream reset mid-response (RST_STREAM of any code, NO_ERROR and CANCEL included, after
 *    the headers and some DATA; an HTTP/1.1 upstream whose connection closes or is reset mid-body)
 *    reaches the downstream as an abort: HTTP/1.1 without the last chunk and with its connection
 *    closed, h2c RST_STREAM, gRPC without trailers, a TCP tunnel's CONNECT reset; never END_STREAM
 *    first. The access log and `istio_requests_total` carry Envoy's flag (`UR` for an HTTP/2 stream
 *    reset, `UC` for an HTTP/1.1 connection lost, `UPE` for a body shorter than its content-length)
 *    and the bytes. A reset before any response is a local 503, not an empty 200.
 *  - END_STREAM then RST_STREAM(NO_ERROR) (RFC 9113 §8.1: the server asks the client to stop
 *    sending; gRPC servers do it, envoyproxy/envoy#38206): every byte reaches a slow downstream,
 *    then a clean end.
 *  - The other way: a downstream that resets mid-upload reaches the upstream as RST_STREAM, never
 *    as the end of the request body or tunnel.
 *  - Each with a fast reader and a slow one (small window, pauses) where the reader matters.
 *
 * Addresses: 127.0.250.x (h2c upstream: the app behind the topology's inbound role),
 * 127.0.251.x (HTTP/1.1 upstream inside HBONE: python3-h2 as the destination ztunnel on :15010),
 * 127.0.252.x (TCP tunnels, the same destination ztunnel), 127.0.253.x (an undeclared port whose
 * upstream cannot be reached).
 */
import { execFile, spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import type net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, test, vi } from 'vitest';
import { identityFrom, spiffe } from '../helpers/identity.ts';
import { KiB, pattern } from '../helpers/pitfalls.ts';
import { samplesOf, scrape } from '../helpers/prometheus.ts';
import { sleep, within } from '../helpers/servers.ts';
import { openEntry, startTestTopology, type TestTopology } from '../helpers/topology.ts';

const run = promisify(execFile);
// Debian's python3 (which sees python3-h2), not whichever python3 is first on PATH.
const PYTHON = '/usr/bin/python3';
const UPSTREAM = path.join(import.meta.dirname, 'misbehaving_upstream.py');
const CLIENT = path.join(import.meta.dirname, 'h2_downstream.py');

/** What h2_downstream.py saw. */
interface Seen {
  status: number | null;
  bytes: number;
  patternOk: boolean;
  ended: boolean;
  reset: number | null;
  trailers: Record<string, string> | null;
  eof: boolean;
  timedOut: boolean;
  resetSent?: boolean;
  body?: string;
}

/** How the misbehaving upstream saw a request or tunnel end (its `/report` / `report` record). */
interface Fate {
  ended: boolean;
  reset: number | null;
  bytes: number;
}

type Reader = 'fast' | 'slow';
/** A slow reader announces a 4 KiB window and waits 10 ms before returning each frame's credit. */
const READER: Record<Reader, { window: number; delayMs: number }> = { fast: { window: 4 * 1024 * 1024, delayMs: 0 }, slow: { window: 4096, delayMs: 10 } };

async function client(opts: Record<string, unknown>, reader: Reader): Promise<Seen> {
  const { stdout } = await run(PYTHON, [CLIENT, JSON.stringify({ ...READER[reader], ...opts })], { timeout: 30_000 });
  return JSON.parse(stdout.trim().split('\n').pop()!) as Seen;
}

/** Start misbehaving_upstream.py; resolves once it listens. */
async function upstream(args: string[]): Promise<ChildProcess> {
  const child = spawn(PYTHON, [UPSTREAM, ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
  let err = '';
  child.stderr!.on('data', (c: Buffer) => (err += c.toString()));
  await within(
    new Promise<void>((resolve, reject) => {
      child.stdout!.on('data', (c: Buffer) => c.toString().includes('ready') && resolve());
      child.once('exit', (code) => reject(new Error(`misbehaving_upstream.py exited (${code}): ${err}`)));
    }),
    10_000,
    'misbehaving_upstream.py listening',
  );
  return child;
}

function stop(child: ChildProcess | undefined): void {
  if (child && child.exitCode === null) child.kill();
}

/** The one access log JSON line `match` selects, once written. */
async function logLine(file: string, match: (e: Record<string, unknown>) => boolean): Promise<Record<string, unknown>> {
  return vi.waitFor(
    () => {
      const lines = fs.existsSync(file) ? fs.readFileSync(file, 'utf8').split('\n').filter(Boolean) : [];
      const found = lines.map((l) => JSON.parse(l) as Record<string, unknown>).filter(match);
      expect(found.length).toBe(1);
      return found[0];
    },
    { timeout: 10_000, interval: 50 },
  );
}

/** `istio_requests_total` by response_flags, summed over the other labels. */
async function requestsByFlags(topo: TestTopology): Promise<Record<string, number>> {
  const out: Record<string, number> = {};
  for (const s of samplesOf(await scrape(topo.waypoint!.addresses.admin), 'istio_requests_total')) {
    out[s.labels.response_flags] = (out[s.labels.response_flags] ?? 0) + s.value;
  }
  return out;
}

/** An HTTP/1.1 response read off a tunnel entry connection until the connection closed. */
interface H1Seen {
  status: number;
  /** The message was complete: the last chunk, or all of Content-Length. */
  complete: boolean;
  body: Buffer;
  /** The connection closed (not kept open after an incomplete message). */
  closed: boolean;
}

/**
 * Send `request` on a fresh entry connection and read until the connection closes (a slow reader
 * pauses 10 ms after every chunk). A complete keep-alive response is returned without waiting for
 * a close; an incomplete one must be followed by the close.
 */
async function h1(topo: TestTopology, request: string, reader: Reader, keepUploading = false): Promise<H1Seen> {
  const socket: net.Socket = await openEntry(topo);
  socket.on('error', () => {});
  let buf = Buffer.alloc(0);
  let closed = false;
  let uploader: NodeJS.Timeout | undefined;
  const done = new Promise<void>((resolve) => socket.once('close', () => ((closed = true), resolve())));
  socket.on('data', (c: Buffer) => {
    buf = Buffer.concat([buf, c]);
    if (reader === 'slow') {
      socket.pause();
      setTimeout(() => socket.resume(), 10);
    }
  });
  socket.write(request);
  // A request body that never ends (the upstream answers without waiting for it).
  if (keepUploading) uploader = setInterval(() => socket.write('400\r\n' + 'u'.repeat(1024) + '\r\n'), 50);
  try {
    for (;;) {
      const parsed = parseH1(buf);
      if (parsed?.complete || closed) {
        if (parsed && !parsed.complete) await within(done, 10_000, 'the connection closes after an incomplete response');
        return { ...(parsed ?? { status: 0, complete: false, body: Buffer.alloc(0) }), closed };
      }
      await Promise.race([done, sleep(20)]);
    }
  } finally {
    if (uploader) clearInterval(uploader);
    socket.destroy();
  }
}

/** Parse one response from `buf`: undefined until its head is in. */
function parseH1(buf: Buffer): { status: number; complete: boolean; body: Buffer } | undefined {
  const end = buf.indexOf('\r\n\r\n');
  if (end < 0) return undefined;
  const head = buf.subarray(0, end).toString('latin1');
  const status = Number(head.split(' ')[1]);
  let rest = buf.subarray(end + 4);
  const cl = /\r\ncontent-length: *(\d+)/i.exec(head);
  if (cl) {
    const n = Number(cl[1]);
    return { status, complete: rest.length >= n, body: rest.subarray(0, n) };
  }
  if (!/\r\ntransfer-encoding: *chunked/i.test(head)) return { status, complete: false, body: rest };
  const parts: Buffer[] = [];
  for (;;) {
    const eol = rest.indexOf('\r\n');
    if (eol < 0) return { status, complete: false, body: Buffer.concat(parts) };
    const size = parseInt(rest.subarray(0, eol).toString('latin1'), 16);
    // The last chunk, then (no trailers) the empty line.
    if (size === 0) return { status, complete: rest.indexOf('\r\n\r\n', Math.max(0, eol - 2)) >= 0, body: Buffer.concat(parts) };
    if (rest.length < eol + 2 + size + 2) {
      parts.push(rest.subarray(eol + 2, Math.min(rest.length, eol + 2 + size)));
      return { status, complete: false, body: Buffer.concat(parts) };
    }
    parts.push(rest.subarray(eol + 2, eol + 2 + size));
    rest = rest.subarray(eol + 2 + size + 2);
  }
}

const READERS: Reader[] = ['fast', 'slow'];
const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'wp-integrity-'));
afterAll(() => {
  fs.rmSync(dir, { recursive: true, force: true });
});
let seq = 0;
/** A unique request id for a test's path, so its access log line can be found. */
const tag = () => `t${++seq}`;

const RESET_AFTER = `upstream_reset_after_response_started`;

describe('h2c upstream (127.0.250.x)', () => {
  let topo: TestTopology;
  let app: ChildProcess | undefined;
  const log = path.join(dir, 'h2c.log');
  const line = (id: string) => logLine(log, (e) => String(e.path).includes(`id=${id}&`));
  beforeAll(async () => {
    app = await upstream(['h2c', '127.0.250.11', '8080']);
    topo = await startTestTopology(250, { portName: 'http2', backends: false, podIps: ['127.0.250.11'], bootstrap: { accessLog: { file: log, encoding: 'JSON' } } });
  });
  afterAll(async () => {
    await topo?.close();
    stop(app);
  });
  const h2c = (target: string, reader: Reader, extra: Record<string, unknown> = {}) => client({ mode: 'h2c', host: topo.entry.host, port: topo.entry.port, path: target, ...extra }, reader);

  test.each(READERS.flatMap((r) => [0, 8, 2].map((code) => [r, code] as const)))(
    '%s h2c reader: the upstream RST_STREAM(%i) after 256 KiB reaches it as RST_STREAM, never END_STREAM; logged UR with the bytes relayed',
    async (reader, code) => {
      const id = tag();
      const seen = await h2c(`/x?id=${id}&bytes=${256 * KiB}&then=rst&code=${code}`, reader);
      expect(seen).toMatchObject({ status: 200, patternOk: true, ended: false, trailers: null });
      expect(seen.reset).not.toBeNull();
      const e = await line(id);
      expect(e).toMatchObject({ response_code: 200, response_flags: 'UR', response_code_details: `${RESET_AFTER}{remote_reset}` });
      // Every byte that reached the client went through the waypoint's count, which never exceeds what the upstream sent.
      expect(e.bytes_sent).toBeGreaterThanOrEqual(seen.bytes);
      expect(e.bytes_sent).toBeLessThanOrEqual(256 * KiB);
    },
  );

  test.each([0, 8])('the upstream RST_STREAM(%i) once everything before it went out (nothing pending downstream) still reaches the h2c reader as RST_STREAM alone', async (code) => {
    const id = tag();
    const seen = await h2c(`/x?id=${id}&bytes=1000&then=rst&code=${code}&delay=200`, 'fast');
    expect(seen).toMatchObject({ status: 200, bytes: 1000, ended: false });
    expect(seen.reset).not.toBeNull();
    expect(await line(id)).toMatchObject({ response_flags: 'UR' });
  });

  test.each(READERS)('%s HTTP/1.1 reader: the upstream RST_STREAM(NO_ERROR) mid-response leaves the chunked body without its last chunk and the connection closed; istio_requests_total counts UR', async (reader) => {
    const id = tag();
    const before = (await requestsByFlags(topo)).UR ?? 0;
    const seen = await h1(topo, `GET /x?id=${id}&bytes=${256 * KiB}&then=rst&code=0 HTTP/1.1\r\nHost: echo\r\n\r\n`, reader);
    expect(seen.status).toBe(200);
    expect(seen.complete).toBe(false);
    expect(seen.closed).toBe(true);
    expect(seen.body.equals(pattern(256 * KiB).subarray(0, seen.body.length))).toBe(true);
    expect(await line(id)).toMatchObject({ response_flags: 'UR', response_code_details: `${RESET_AFTER}{remote_reset}` });
    await vi.waitFor(async () => expect((await requestsByFlags(topo)).UR).toBe(before + 1));
  });

  test.each(READERS)('%s gRPC reader: the upstream RST_STREAM(NO_ERROR) after a message and before trailers reaches it as RST_STREAM without trailers (the call fails); UR', async (reader) => {
    const id = tag();
    const seen = await h2c(`/x?id=${id}&bytes=${64 * KiB}&grpc=1&then=rst&code=0`, reader, { grpc: true });
    expect(seen).toMatchObject({ status: 200, ended: false, trailers: null });
    expect(seen.reset).not.toBeNull();
    expect(await line(id)).toMatchObject({ response_flags: 'UR' });
  });

  test('a downstream that resets its stream mid-upload: the upstream sees the request end with RST_STREAM, never END_STREAM', async () => {
    const id = tag();
    const seen = await h2c(`/x?id=${id}&bytes=1000&then=hold`, 'fast', { upload: 'forever', resetAfterMs: 300 });
    expect(seen.resetSent).toBe(true);
    const fate = await vi.waitFor(async () => {
      const f = JSON.parse((await h2c(`/report?id=${id}`, 'fast', { keepBody: true })).body!) as Fate;
      expect(f.ended || f.reset !== null).toBe(true);
      return f;
    });
    expect(fate).toMatchObject({ ended: false });
    expect(fate.reset).not.toBeNull();
    expect(fate.bytes).toBeGreaterThan(0);
  });

  test('an HTTP/1.1 downstream whose connection is reset mid-upload: the upstream sees the request end with RST_STREAM, never END_STREAM', async () => {
    const id = tag();
    const socket = await openEntry(topo);
    socket.on('error', () => {});
    socket.write(`POST /x?id=${id}&bytes=1000&then=hold HTTP/1.1\r\nHost: echo\r\nTransfer-Encoding: chunked\r\n\r\n`);
    for (let i = 0; i < 5; i++) {
      socket.write('400\r\n' + 'u'.repeat(1024) + '\r\n');
      await sleep(50);
    }
    socket.resetAndDestroy();
    const fate = await vi.waitFor(async () => {
      const f = JSON.parse((await h2c(`/report?id=${id}`, 'fast', { keepBody: true })).body!) as Fate;
      expect(f.ended || f.reset !== null).toBe(true);
      return f;
    });
    expect(fate).toMatchObject({ ended: false });
    expect(fate.reset).not.toBeNull();
    expect(fate.bytes).toBeGreaterThan(0);
  });

  test.each([0, 8])('the upstream RST_STREAM(%i) before any response is a local 503 UR, never an empty 200', async (code) => {
    const id = tag();
    const seen = await h2c(`/x?id=${id}&then=rst&code=${code}&nohead=1`, 'fast', { keepBody: true });
    expect(seen).toMatchObject({ status: 503, ended: true });
    expect(seen.body).toContain('reset reason: remote reset');
    expect(await line(id)).toMatchObject({ response_code: 503, response_flags: 'UR', response_code_details: 'upstream_reset_before_response_started{remote_reset}' });
  });

  test('a body shorter than its content-length (nghttp2 resets the stream: PROTOCOL_ERROR) is an abort flagged UPE, not a clean end', async () => {
    const id = tag();
    const seen = await h2c(`/x?id=${id}&bytes=${64 * KiB}&cl=${128 * KiB}&then=end`, 'fast');
    expect(seen).toMatchObject({ status: 200, ended: false });
    expect(seen.reset).not.toBeNull();
    expect(await line(id)).toMatchObject({ response_flags: 'UPE', response_code_details: `${RESET_AFTER}{protocol_error}` });
  });

  test.each(READERS)('%s h2c reader still uploading: END_STREAM then RST_STREAM(NO_ERROR) from the upstream delivers all 256 KiB, then END_STREAM; no flag', async (reader) => {
    const id = tag();
    const seen = await h2c(`/x?id=${id}&bytes=${256 * KiB}&then=end-rst`, reader, { upload: 'forever' });
    expect(seen).toMatchObject({ status: 200, bytes: 256 * KiB, patternOk: true, ended: true });
    // RFC 9113 §8.1: a RST_STREAM(NO_ERROR) may follow the complete response (stop sending); nothing else.
    expect([null, 0]).toContain(seen.reset);
    expect(await line(id)).toMatchObject({ response_code: 200, response_flags: '-', bytes_sent: 256 * KiB });
  });

  test.each(READERS)('%s HTTP/1.1 reader still uploading: END_STREAM then RST_STREAM(NO_ERROR) from the upstream delivers the whole chunked body with its last chunk; no flag', async (reader) => {
    const id = tag();
    const seen = await h1(topo, `POST /x?id=${id}&bytes=${256 * KiB}&then=end-rst HTTP/1.1\r\nHost: echo\r\nTransfer-Encoding: chunked\r\n\r\n`, reader, true);
    expect(seen.status).toBe(200);
    expect(seen.complete).toBe(true);
    expect(seen.body.equals(pattern(256 * KiB))).toBe(true);
    expect(await line(id)).toMatchObject({ response_code: 200, response_flags: '-', bytes_sent: 256 * KiB });
  });

  test.each(READERS)('%s gRPC reader still sending: trailers then RST_STREAM(NO_ERROR) from the upstream delivers the message and grpc-status 0', async (reader) => {
    const id = tag();
    const seen = await h2c(`/x?id=${id}&bytes=${64 * KiB}&grpc=1&then=end-rst`, reader, { grpc: true, upload: 'forever' });
    expect(seen).toMatchObject({ status: 200, bytes: 64 * KiB + 5, ended: true, trailers: { 'grpc-status': '0' } });
    expect([null, 0]).toContain(seen.reset);
    expect(await line(id)).toMatchObject({ response_flags: '-' });
  });
});

/** Write the PEM files of `sa`'s certificate (from the topology's CA) under `prefix`. */
async function pemFiles(caDir: string, sa: string, prefix: string): Promise<{ cert: string; key: string; ca: string }> {
  const m = await identityFrom(caDir, spiffe('demo', sa));
  const files = { cert: `${prefix}-cert.pem`, key: `${prefix}-key.pem`, ca: `${prefix}-ca.pem` };
  fs.writeFileSync(files.cert, m.certPem);
  fs.writeFileSync(files.key, m.keyPem);
  fs.writeFileSync(files.ca, m.caPem);
  return files;
}

/** A topology whose waypoint dials its endpoint's HBONE on :15010, where python3-h2 stands in for the destination ztunnel. */
async function hboneTopology(net3: number, portName: string, log: string): Promise<{ topo: TestTopology; ztunnel: ChildProcess }> {
  const pod = `127.0.${net3}.11`;
  const topo = await startTestTopology(net3, { portName, backends: false, podIps: [pod], bootstrap: { upstream: { hbonePort: 15010 }, accessLog: { file: log, encoding: 'JSON' } } });
  try {
    const pem = await pemFiles(topo.caDir, 'echo', path.join(topo.dir, 'ztunnel'));
    return { topo, ztunnel: await upstream(['hbone', pod, '15010', pem.cert, pem.key, pem.ca]) };
  } catch (err) {
    await topo.close();
    throw err;
  }
}

describe('HTTP/1.1 upstream inside HBONE (127.0.251.x)', () => {
  let topo: TestTopology;
  let ztunnel: ChildProcess | undefined;
  const log = path.join(dir, 'h1.log');
  const line = (id: string) => logLine(log, (e) => String(e.path).includes(`id=${id}&`));
  beforeAll(async () => {
    ({ topo, ztunnel } = await hboneTopology(251, 'http', log));
  });
  afterAll(async () => {
    await topo?.close();
    stop(ztunnel);
  });

  const cuts = [
    ['Content-Length body, then END_STREAM on the tunnel (connection closed) mid-body', 'framing=length&send=131072&then=fin'],
    ['chunked body, then END_STREAM on the tunnel mid-body', 'framing=chunked&then=fin'],
    ['Content-Length body, then RST_STREAM(CANCEL) on the tunnel mid-body', 'framing=length&send=131072&then=rst&code=8'],
    ['close-delimited body, then RST_STREAM(NO_ERROR) on the tunnel', 'framing=close&then=rst&code=0'],
    ['close-delimited body, then RST_STREAM(CANCEL) on the tunnel', 'framing=close&then=rst&code=8'],
  ] as const;

  test.each(READERS.flatMap((r) => cuts.map(([what, q]) => [r, what, q] as const)))('%s h2c reader: %s reaches it as RST_STREAM; UC', async (reader, _what, q) => {
    const id = tag();
    const seen = await client({ mode: 'h2c', host: topo.entry.host, port: topo.entry.port, path: `/x?id=${id}&bytes=${256 * KiB}&${q}` }, reader);
    expect(seen).toMatchObject({ status: 200, patternOk: true, ended: false });
    expect(seen.reset).not.toBeNull();
    expect(await line(id)).toMatchObject({ response_flags: 'UC', response_code_details: `${RESET_AFTER}{connection_termination}` });
  });

  test.each([0, 8])('RST_STREAM(%i) on the tunnel once the close-delimited body went out (nothing pending downstream) still reaches the h2c reader as RST_STREAM alone; UC', async (code) => {
    const id = tag();
    const seen = await client({ mode: 'h2c', host: topo.entry.host, port: topo.entry.port, path: `/x?id=${id}&bytes=1000&framing=close&then=rst&code=${code}&delay=200` }, 'fast');
    expect(seen).toMatchObject({ status: 200, bytes: 1000, ended: false });
    expect(seen.reset).not.toBeNull();
    expect(await line(id)).toMatchObject({ response_flags: 'UC' });
  });

  test.each(READERS)('%s HTTP/1.1 reader: a close-delimited body cut by RST_STREAM(NO_ERROR) on the tunnel is not completed (no last chunk, connection closed); UC', async (reader) => {
    const id = tag();
    const seen = await h1(topo, `GET /x?id=${id}&bytes=${256 * KiB}&framing=close&then=rst&code=0 HTTP/1.1\r\nHost: echo\r\n\r\n`, reader);
    expect(seen).toMatchObject({ status: 200, complete: false, closed: true });
    expect(await line(id)).toMatchObject({ response_flags: 'UC' });
  });

  test.each(READERS)('%s h2c reader: a close-delimited body ended by END_STREAM on the tunnel is complete; no flag', async (reader) => {
    const id = tag();
    const seen = await client({ mode: 'h2c', host: topo.entry.host, port: topo.entry.port, path: `/x?id=${id}&bytes=${256 * KiB}&framing=close&then=end` }, reader);
    expect(seen).toMatchObject({ status: 200, bytes: 256 * KiB, patternOk: true, ended: true, reset: null });
    expect(await line(id)).toMatchObject({ response_flags: '-', bytes_sent: 256 * KiB });
  });
});

describe('TCP tunnels (127.0.252.x)', () => {
  let topo: TestTopology;
  let ztunnel: ChildProcess | undefined;
  let pem: { cert: string; key: string; ca: string };
  const log = path.join(dir, 'tcp.log');
  const lines = () => (fs.existsSync(log) ? fs.readFileSync(log, 'utf8').split('\n').filter(Boolean) : []);
  beforeAll(async () => {
    ({ topo, ztunnel } = await hboneTopology(252, 'tcp', log));
    pem = await pemFiles(topo.caDir, 'client', path.join(topo.dir, 'client'));
  });
  afterAll(async () => {
    await topo?.close();
    stop(ztunnel);
  });

  /** One tunnel: `command` goes to the destination; resolves with what the client saw and the tunnel's access log line. */
  async function tunnel(command: string, reader: Reader, halfClose = false): Promise<{ seen: Seen; entry: Record<string, unknown> }> {
    const before = lines().length;
    const seen = await client({ mode: 'hbone', host: '127.0.252.1', port: topo.waypoint!.addresses.hbone.port, ...pem, authority: '127.0.252.100:80', line: command, halfClose }, reader);
    const entry = await vi.waitFor(() => {
      const l = lines();
      expect(l.length).toBe(before + 1);
      return JSON.parse(l[before]) as Record<string, unknown>;
    });
    return { seen, entry };
  }

  test.each(READERS.flatMap((r) => [0, 8].flatMap((code) => [false, true].map((half) => [r, code, half] as const))))(
    '%s reader: the destination RST_STREAM(%i) after 256 KiB (client half-closed: %s) resets the client CONNECT, never ends it; UR',
    async (reader, code, half) => {
      const { seen, entry } = await tunnel(`send ${256 * KiB} then=rst code=${code}`, reader, half);
      expect(seen).toMatchObject({ status: 200, patternOk: true, ended: false });
      expect(seen.reset).not.toBeNull();
      expect(entry.response_flags).toBe('UR');
      expect(entry.bytes_sent).toBeGreaterThanOrEqual(seen.bytes);
    },
  );

  /** `istio_tcp_connections_closed_total` summed over the series with response flags `flags`. */
  async function tcpClosed(flags: string): Promise<number> {
    const samples = samplesOf(await scrape(topo.waypoint!.addresses.admin), 'istio_tcp_connections_closed_total');
    return samples.filter((x) => x.labels.response_flags === flags).reduce((n, x) => n + x.value, 0);
  }

  test.each([0, 8])('the destination RST_STREAM(%i) once its bytes went out (nothing pending downstream) resets the client CONNECT with RST_STREAM alone, no END_STREAM first; UR', async (code) => {
    const closedBefore = await tcpClosed('UR');
    const { seen, entry } = await tunnel(`send 1000 then=rst code=${code} delay=200`, 'fast');
    expect(seen).toMatchObject({ status: 200, bytes: 1000, patternOk: true, ended: false });
    expect(seen.reset).not.toBeNull();
    expect(entry.response_flags).toBe('UR');
    // The flag the tunnel got at close is the one istio_tcp_connections_closed_total counts it under.
    expect(await tcpClosed('UR')).toBe(closedBefore + 1);
  });

  test('a client that resets its CONNECT mid-upload: the destination sees the tunnel end with RST_STREAM, never END_STREAM', async () => {
    const id = tag();
    const hbone = { mode: 'hbone', host: '127.0.252.1', port: topo.waypoint!.addresses.hbone.port, ...pem, authority: '127.0.252.100:80' };
    const seen = await client({ ...hbone, line: `hold id=${id}`, upload: 'forever', resetAfterMs: 300 }, 'fast');
    expect(seen.resetSent).toBe(true);
    const fate = await vi.waitFor(async () => {
      const f = JSON.parse((await client({ ...hbone, line: `report id=${id}`, keepBody: true }, 'fast')).body!) as Fate;
      expect(f.ended || f.reset !== null).toBe(true);
      return f;
    });
    expect(fate).toMatchObject({ ended: false });
    expect(fate.reset).not.toBeNull();
    expect(fate.bytes).toBeGreaterThan(0);
  });

  test.each(READERS)('%s reader: END_STREAM then RST_STREAM(NO_ERROR) from the destination delivers all 256 KiB, then END_STREAM; no flag', async (reader) => {
    const { seen, entry } = await tunnel(`send ${256 * KiB} then=end-rst`, reader);
    expect(seen).toMatchObject({ status: 200, bytes: 256 * KiB, patternOk: true, ended: true });
    expect([null, 0]).toContain(seen.reset);
    expect(entry).toMatchObject({ response_flags: '-', bytes_sent: 256 * KiB });
  });

  test.each(READERS)('%s reader: END_STREAM from the destination ends the client CONNECT with all 256 KiB', async (reader) => {
    const { seen, entry } = await tunnel(`send ${256 * KiB} then=end`, reader);
    expect(seen).toMatchObject({ status: 200, bytes: 256 * KiB, patternOk: true, ended: true, reset: null });
    expect(entry).toMatchObject({ response_flags: '-', bytes_sent: 256 * KiB });
  });
});

describe('an undeclared port whose upstream cannot be reached (127.0.253.x)', () => {
  let topo: TestTopology;
  let pem: { cert: string; key: string; ca: string };
  beforeAll(async () => {
    // Port name `other`: protocol sniffed, so the CONNECT is answered 200 before the upstream is dialed; nothing listens on :15011.
    topo = await startTestTopology(253, { portName: 'other', backends: false, podIps: ['127.0.253.11'], bootstrap: { upstream: { hbonePort: 15011 } } });
    pem = await pemFiles(topo.caDir, 'client', path.join(topo.dir, 'client'));
  });
  afterAll(async () => {
    await topo?.close();
  });

  test('TCP bytes on an answered CONNECT whose upstream connect fails: RST_STREAM(CONNECT_ERROR) alone, never END_STREAM', async () => {
    const seen = await client({ mode: 'hbone', host: '127.0.253.1', port: topo.waypoint!.addresses.hbone.port, ...pem, authority: '127.0.253.100:80', line: 'send 10 then=end' }, 'fast');
    expect(seen).toMatchObject({ status: 200, bytes: 0, ended: false, reset: 10 });
  });
});
