/**
 * CONNECTs whose client ends its side before sending a byte (END_STREAM on the HEADERS, or right
 * after the 200) can carry no request on an HTTP port: the waypoint ends them at once, so they
 * never pile up against the session's stream limit. Addresses: 127.0.231.x.
 */
import type { ClientHttp2Session, ClientHttp2Stream } from 'node:http2';
import { afterAll, beforeAll, expect, test } from 'vitest';
import { LocalCa } from '../../../src/identity/ca.ts';
import { exchange, hboneSession, type ClientIdentity } from '../../helpers/hbone-client.ts';
import { startTestTopology, type TestTopology } from '../../helpers/topology.ts';

const NET = 231;
const VIP = `127.0.${NET}.100:80`;
let topo: TestTopology;
let client: ClientIdentity;
let session: ClientHttp2Session;

beforeAll(async () => {
  topo = await startTestTopology(NET);
  const ca = await LocalCa.load(topo.caDir);
  const leaf = await ca.issue('spiffe://cluster.local/ns/demo/sa/client', 3600_000);
  client = { certPem: leaf.certPem, keyPem: leaf.keyPem, caPem: ca.rootCertPem };
  session = await hboneSession(`127.0.${NET}.1`, topo.waypoint!.addresses.hbone.port, client);
});
afterAll(async () => {
  session?.destroy();
  await topo?.close();
});

/**
 * Open a CONNECT and end our side; resolves when the stream closes with its status, whether the
 * waypoint ended it cleanly and its reset code, or with `open: true` if it is still open after 5 s.
 */
function halfClosed(endOnHeaders: boolean): Promise<{ status: number | undefined; ended: boolean; rstCode: number | undefined; open?: true }> {
  return new Promise((resolve) => {
    const stream: ClientHttp2Stream = session.request({ ':method': 'CONNECT', ':authority': VIP }, { endStream: endOnHeaders });
    let status: number | undefined;
    let ended = false;
    stream.on('error', () => {});
    stream.once('response', (h) => {
      status = Number(h[':status']);
      if (!endOnHeaders) stream.end();
    });
    stream.on('data', () => {});
    stream.once('end', () => (ended = true));
    stream.once('close', () => resolve({ status, ended, rstCode: stream.rstCode }));
    setTimeout(() => resolve({ status, ended, rstCode: undefined, open: true }), 5000).unref();
  });
}

test('a CONNECT with END_STREAM on its HEADERS is answered and ended at once', async () => {
  expect(await halfClosed(true)).toEqual({ status: 200, ended: true, rstCode: 0 });
});

test('a client that ends its side right after the 200, before any byte, gets its tunnel ended', async () => {
  expect(await halfClosed(false)).toEqual({ status: 200, ended: true, rstCode: 0 });
});

test('a full stream limit of half-closed CONNECTs does not stop the session: the next request is served', async () => {
  // The waypoint advertises 100 concurrent streams (http2.maxConcurrentStreams).
  const all = await Promise.all(Array.from({ length: 100 }, (_, i) => halfClosed(i % 2 === 0)));
  expect(all.every((r) => r.status === 200 && r.ended)).toBe(true);
  const stream = session.request({ ':method': 'CONNECT', ':authority': VIP }, { endStream: false });
  await new Promise((r, j) => {
    stream.once('response', r);
    stream.once('error', j);
  });
  expect((await exchange(stream, '/after')).status).toBe(200);
  stream.close();
});
