/**
 * The TCP proxy (a TCP service port) against a client that resets its CONNECT early: a CONNECT
 * reset before the upstream is dialed opens no upstream tunnel (a rapid-reset flood must not
 * make the waypoint dial), and a tunnel whose client goes away while the dial is pending gives
 * its circuit-breaker slot back at once. The destination is a fake HBONE endpoint counting the
 * CONNECTs it receives. Addresses: 127.0.238.x.
 */
import http2, { type ServerHttp2Stream } from 'node:http2';
import { afterAll, beforeAll, expect, test } from 'vitest';
import { HboneServer } from '../../src/hbone/server.ts';
import { DEFAULT_HTTP2 } from '../../src/hbone/settings.ts';
import { connect, hboneSession, type ClientIdentity } from '../helpers/hbone-client.ts';
import { identityFrom, spiffe } from '../helpers/identity.ts';
import { sleep, within } from '../helpers/servers.ts';
import { addToMesh, startTestTopology, type TestTopology } from '../helpers/topology.ts';

const POD = '127.0.238.11';
/** The fake destination's HBONE port (the waypoint's upstream.hbonePort). */
const DEST_PORT = 15011;

let topo: TestTopology;
let client: ClientIdentity;
let dest: HboneServer;
/** CONNECTs the fake destination received (one per upstream dial). */
let dials = 0;
/** `hold`: leave CONNECTs unanswered (a pending dial); `echo`: answer 200 and echo the bytes. */
let mode: 'echo' | 'hold' = 'echo';
const held: ServerHttp2Stream[] = [];

beforeAll(async () => {
  topo = await startTestTopology(238, { portName: 'tcp', backends: false, podIps: [POD], bootstrap: { upstream: { hbonePort: DEST_PORT } } });
  client = await identityFrom(topo.caDir);
  dest = new HboneServer({
    name: 'fake-destination',
    material: await identityFrom(topo.caDir, spiffe('demo', 'echo')),
    http2: DEFAULT_HTTP2,
    verifyPeer: () => undefined,
    onConnect: (stream) => {
      dials++;
      if (mode === 'hold') return void held.push(stream);
      stream.respond({ ':status': 200 });
      stream.on('data', (c: Buffer) => stream.write(c));
      stream.once('end', () => stream.end());
    },
  });
  await dest.listen(`${POD}:${DEST_PORT}`);
});

afterAll(async () => {
  await dest?.drain(0);
  await topo?.close();
});

/** A CONNECT to the TCP service, answered 200, that echoes `text`. */
async function echoThrough(session: http2.ClientHttp2Session, text: string): Promise<string> {
  const { status, stream } = await within(connect(session, '127.0.238.100:80'), 10_000, 'CONNECT');
  expect(status).toBe(200);
  stream.end(text);
  let got = '';
  stream.on('data', (c: Buffer) => (got += c.toString()));
  await within(new Promise((r) => stream.once('end', r)), 10_000, 'echo');
  return got;
}

test('CONNECTs reset by the client in the same write as their HEADERS never dial upstream', async () => {
  const session = await hboneSession('127.0.238.1', topo.waypoint!.addresses.hbone.port, client);
  try {
    dials = 0;
    for (let i = 0; i < 30; i++) {
      const s = session.request({ ':method': 'CONNECT', ':authority': '127.0.238.100:80' }, { endStream: false });
      s.on('error', () => {});
      // Queued before Node flushes: HEADERS and RST_STREAM leave in one write.
      s.close(http2.constants.NGHTTP2_CANCEL);
    }
    // A CONNECT after them still works (it dials once); any dial of the reset ones went out before it.
    expect(await echoThrough(session, 'ping')).toBe('ping');
    await sleep(200);
    expect(dials).toBe(1);
  } finally {
    session.close();
  }
});

test('a client that resets while the dial is pending gives its maxConnections slot back at once', async () => {
  await addToMesh(
    topo,
    `apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: { name: echo, namespace: demo }
spec:
  host: echo
  trafficPolicy:
    connectionPool: { tcp: { maxConnections: 1, connectTimeout: 30s } }
`,
  );
  const session = await hboneSession('127.0.238.1', topo.waypoint!.addresses.hbone.port, client);
  try {
    dials = 0;
    mode = 'hold';
    const first = session.request({ ':method': 'CONNECT', ':authority': '127.0.238.100:80' }, { endStream: false });
    first.on('error', () => {});
    // The dial is under way (the destination holds it unanswered), then the client gives up.
    for (let i = 0; dials === 0 && i < 500; i++) await sleep(10);
    expect(dials).toBe(1);
    first.close(http2.constants.NGHTTP2_CANCEL);
    await within(new Promise((r) => first.once('close', r)), 10_000, 'reset');
    mode = 'echo';
    // The only connection slot is free again: the next tunnel is served, not refused 503 `UO`.
    expect(await echoThrough(session, 'again')).toBe('again');
    // The held dial, answered late, is closed by the waypoint rather than relayed.
    const late = held.shift()!;
    const closed = new Promise((r) => late.once('close', r));
    late.respond({ ':status': 200 });
    await within(closed, 10_000, 'late upstream tunnel closed');
  } finally {
    session.close();
  }
});
