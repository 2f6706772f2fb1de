/**
 * RST_STREAM budget of an HBONE session (`http2.streamResetBurst` / `streamResetRate`): a
 * long-lived session whose clients end every tunnel with RST_STREAM, as Node's client does
 * (NO_ERROR when done, CANCEL when abandoned), is never sent GOAWAY; a rapid-reset flood
 * (CVE-2023-44487, python3-h2 as the attacker) still is. nghttp2's own budget (1000, 33/s) closed
 * such a session after about a thousand tunnels. A rapid-reset attacker that reconnects is
 * throttled by the per-client limits (`limits.peer*`) while other clients keep being served.
 * Addresses: 127.0.233.x.
 */
import fs from 'node:fs';
import http from 'node:http';
import http2, { type ClientHttp2Session } from 'node:http2';
import path from 'node:path';
import { afterAll, beforeAll, expect, test } from 'vitest';
import { LocalCa } from '../../../src/identity/ca.ts';
import { hboneSession, type ClientIdentity } from '../../helpers/hbone-client.ts';
import { parsePrometheus } from '../../helpers/prometheus.ts';
import { startTestTopology, type TestTopology } from '../../helpers/topology.ts';
import { h2peer } from './h2-peer.ts';
import { openLoop } from './open-loop.ts';

const NET = 233;
const VIP = `127.0.${NET}.100:80`;
let topo: TestTopology;
let client: ClientIdentity;
const apps: http.Server[] = [];

beforeAll(async () => {
  topo = await startTestTopology(NET, { backends: false });
  for (const ip of [`127.0.${NET}.11`, `127.0.${NET}.12`]) {
    // A response large enough that an abandoned stream is abandoned mid-body.
    const app = http.createServer((_req, res) => res.end(Buffer.alloc(64 * 1024, 'r')));
    await new Promise<void>((r) => app.listen(8080, ip, r));
    apps.push(app);
  }
  const ca = await LocalCa.load(topo.caDir);
  const leaf = await ca.issue('spiffe://cluster.local/ns/demo/sa/client', 3600_000);
  client = { certPem: leaf.certPem, keyPem: leaf.keyPem, caPem: ca.rootCertPem };
  fs.writeFileSync(path.join(topo.dir, 'py-cert.pem'), leaf.certPem);
  fs.writeFileSync(path.join(topo.dir, 'py-key.pem'), leaf.keyPem);
});
afterAll(async () => {
  for (const a of apps) {
    a.closeAllConnections();
    a.close();
  }
  await topo?.close();
});

/** One tunnel with one request; every 10th is abandoned (RST CANCEL) mid-response, the others closed (RST NO_ERROR) once read. */
function tunnel(session: ClientHttp2Session, i: number): Promise<'done' | 'cancelled' | 'failed'> {
  return new Promise((resolve) => {
    const st = session.request({ ':method': 'CONNECT', ':authority': VIP }, { endStream: false });
    let outcome: 'done' | 'cancelled' | 'failed' = 'failed';
    st.on('error', () => {});
    st.once('close', () => resolve(outcome));
    st.once('response', (h) => {
      if (h[':status'] !== 200) return st.close();
      st.write('GET / HTTP/1.1\r\nhost: echo\r\n\r\n');
      let got = 0;
      st.on('data', (c: Buffer) => {
        got += c.length;
        if (i % 10 === 0 && got > 1000) {
          outcome = 'cancelled';
          st.close(http2.constants.NGHTTP2_CANCEL);
        } else if (got >= 64 * 1024) {
          outcome = 'done';
          st.close();
        }
      });
    });
  });
}

test('a session whose 2000 tunnels all end with RST_STREAM (10% abandoned mid-response) is never sent GOAWAY', { timeout: 120_000 }, async () => {
  const session = await hboneSession(`127.0.${NET}.1`, topo.waypoint!.addresses.hbone.port, client);
  let goaway: number | undefined;
  session.on('goaway', (code: number) => (goaway = code));
  session.on('error', () => {});
  const outcomes = { done: 0, cancelled: 0, failed: 0 };
  let next = 0;
  await Promise.all(
    Array.from({ length: 20 }, async () => {
      while (next < 2000 && goaway === undefined && !session.closed) outcomes[await tunnel(session, next++)]++;
    }),
  );
  expect(goaway).toBeUndefined();
  expect(outcomes).toEqual({ done: 1800, cancelled: 200, failed: 0 });
  session.close();
});

test('a rapid-reset flood (streams opened and reset at once) still gets its session closed', { timeout: 60_000 }, async () => {
  const r = (await h2peer(topo.dir, [`127.0.${NET}.1`, topo.waypoint!.addresses.hbone.port], VIP, 'rapid-reset', 40_000)) as {
    sent: number;
    goaway: { code: number } | null;
    eof: boolean;
  };
  // GOAWAY (INTERNAL_ERROR, nghttp2's reaction) or the connection closed before the flood ended.
  expect(r.goaway !== null || r.eof).toBe(true);
  expect(r.sent).toBeLessThan(40_000);
  if (r.goaway) expect(r.goaway.code).not.toBe(0);
  // A new session of the same client is served.
  const session = await hboneSession(`127.0.${NET}.1`, topo.waypoint!.addresses.hbone.port, client);
  expect(await tunnel(session, 1)).toBe('done');
  session.close();
});

test('a rapid-reset attacker that reconnects is throttled (streams refused, reconnections refused); another client is served throughout', { timeout: 60_000 }, async () => {
  const hbone: [string, number] = [`127.0.${NET}.1`, topo.waypoint!.addresses.hbone.port];
  const other = await hboneSession(hbone[0], hbone[1], client, { localAddress: `127.0.${NET}.60` });
  try {
    const attack = h2peer(topo.dir, hbone, VIP, 'rapid-reset-loop', 3000) as Promise<{ connections: number; refused: number; sent: number }>;
    const served = await openLoop(other, VIP, 3000);
    const attacker = await attack;
    // Every request of the other client was answered (how fast is the soak test's business).
    expect(served.failed).toBe(0);
    expect(served.latencies.length).toBeGreaterThan(0);
    // The attacker's reconnections were refused before TLS once its stream budget ran out.
    expect(attacker.refused).toBeGreaterThan(0);
    const res = await fetch(`http://${hbone[0]}:${topo.waypoint!.addresses.admin.port}/stats/prometheus`);
    const samples = parsePrometheus(await res.text());
    const count = (name: string, reason: string) => samples.find((x) => x.name === name && x.labels.reason === reason)?.value ?? 0;
    expect(count('waypoint_hbone_streams_rejected_total', 'peer_stream_rate')).toBeGreaterThan(0);
    expect(count('waypoint_hbone_connections_refused_total', 'peer_stream_rate')).toBeGreaterThan(0);
  } finally {
    other.close();
  }
});
