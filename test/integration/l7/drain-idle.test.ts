/**
 * Drain and `Connection: close` with HTTP/1 tunnels whose client keeps its side open (Envoy closes
 * idle HTTP/1 connections when draining, and closes the connection after `Connection: close`):
 * the waypoint ends the CONNECT stream and resets it with NO_ERROR, so neither the tunnel nor the
 * shutdown waits for the client or for `drain.timeoutMs`. Addresses: 127.0.143.x.
 */
import { afterAll, beforeAll, expect, test } from 'vitest';
import type { ClientHttp2Stream } from 'node:http2';
import { connect, exchange, hboneSession } from '../../helpers/hbone-client.ts';
import { identityFrom } from '../../helpers/identity.ts';
import { startTestTopology, type TestTopology } from '../../helpers/topology.ts';

const NET = 143;
const DRAIN_MS = 20_000;
let topo: TestTopology;

beforeAll(async () => {
  topo = await startTestTopology(NET, { bootstrap: { drain: { timeoutMs: DRAIN_MS } } });
});

afterAll(async () => {
  await topo?.close();
});

/** Resolves with the stream's RST code once it is closed (the client never ends its side). */
const closed = (s: ClientHttp2Stream) => new Promise<number>((resolve) => s.once('close', () => resolve(s.rstCode ?? -1)));

async function tunnel() {
  const session = await hboneSession(`127.0.${NET}.1`, topo.waypoint!.addresses.hbone.port, await identityFrom(topo.caDir));
  const { status, stream } = await connect(session, `127.0.${NET}.100:80`);
  expect(status).toBe(200);
  return { session, stream };
}

test('Connection: close: after the answer the tunnel is closed both ways although the client keeps its side open', async () => {
  const { session, stream } = await tunnel();
  try {
    const ended = new Promise<void>((r) => stream.once('end', r));
    stream.resume();
    stream.write(`GET /close HTTP/1.1\r\nhost: echo\r\nconnection: close\r\n\r\n`);
    await ended;
    expect(await closed(stream)).toBe(0); // NGHTTP2_NO_ERROR
  } finally {
    session.destroy();
  }
});

test('drain: an idle keep-alive tunnel is closed at once and shutdown does not wait for drain.timeoutMs', async () => {
  const { stream } = await tunnel();
  const r = await exchange(stream, '/idle');
  expect(r.status).toBe(200);
  const streamClosed = closed(stream);
  const started = Date.now();
  await topo.waypoint!.shutdown();
  // Without the close, shutdown waits the whole drain timeout for the idle tunnel.
  expect(Date.now() - started).toBeLessThan(DRAIN_MS / 2);
  expect(await streamClosed).toBe(0);
}, DRAIN_MS + 10_000);
