/**
 * The keep-alive idle timeout of HTTP/1 tunnels (`http.idleTimeoutMs`, Envoy's HCM `idle_timeout`)
 * next to the stream idle timeout (`http.streamIdleTimeoutMs`): a tunnel idle after its last
 * response stays open past several stream idle periods and is closed once the keep-alive time is
 * over; a tunnel whose first request never completes is closed after the stream idle timeout. Real HBONE
 * tunnels; timings only bound hangs or are far apart. Addresses: 127.0.213.x.
 */
import { afterAll, beforeAll, expect, test } from 'vitest';
import type { ClientHttp2Stream } from 'node:http2';
import { connect, exchange, hboneSession } from '../../helpers/hbone-client.ts';
import { identityFrom } from '../../helpers/identity.ts';
import { startTestTopology, type TestTopology } from '../../helpers/topology.ts';

const NET = 213;
const STREAM_IDLE_MS = 300;
const KEEPALIVE_MS = 3_000;
let topo: TestTopology;

beforeAll(async () => {
  topo = await startTestTopology(NET, { bootstrap: { http: { streamIdleTimeoutMs: STREAM_IDLE_MS, idleTimeoutMs: KEEPALIVE_MS } } });
});

afterAll(async () => {
  await topo?.close();
});

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

async function tunnel(): Promise<ClientHttp2Stream> {
  const session = await hboneSession(`127.0.${NET}.1`, topo.waypoint!.addresses.hbone.port, await identityFrom(topo.caDir));
  const { status, stream } = await connect(session, `127.0.${NET}.100:80`);
  expect(status).toBe(200);
  stream.once('close', () => session.destroy());
  return stream;
}

test('after a response the tunnel outlives several stream idle periods, serves the next request, and closes once idle for the keep-alive time', async () => {
  const stream = await tunnel();
  expect((await exchange(stream, '/one')).status).toBe(200);
  await sleep(STREAM_IDLE_MS * 4);
  expect(stream.closed).toBe(false);
  // A request in between starts the keep-alive time again.
  expect((await exchange(stream, '/two')).status).toBe(200);
  const idleFrom = Date.now();
  await sleep(STREAM_IDLE_MS * 4);
  expect(stream.closed).toBe(false);
  await new Promise<void>((r) => (stream.closed ? r() : stream.once('close', () => r())));
  expect(Date.now() - idleFrom).toBeGreaterThanOrEqual(KEEPALIVE_MS - 100);
}, 20_000);

test('a tunnel whose first request never completes is closed after the stream idle timeout, not the keep-alive time', async () => {
  const stream = await tunnel();
  stream.resume();
  // The request line makes it HTTP/1; the header block never ends.
  stream.write('GET /never HTTP/1.1\r\nhost: echo\r\n');
  const opened = Date.now();
  await new Promise<void>((r) => stream.once('close', () => r()));
  expect(Date.now() - opened).toBeLessThan(KEEPALIVE_MS);
}, 20_000);
