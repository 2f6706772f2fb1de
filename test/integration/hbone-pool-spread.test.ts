/**
 * The HBONE client pool's `connections` option: CONNECTs spread over that many connections per
 * destination (what lets a waypoint running workers, which node:cluster balances by connection,
 * share the load of one source), while the default keeps ztunnel's packing (up to
 * `maxStreamsPerConnection` streams on one connection). Addresses: 127.0.7.x.
 */
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import type { ClientHttp2Stream } from 'node:http2';
import { afterAll, beforeAll, expect, test } from 'vitest';
import { log } from '../../src/util/index.ts';
import { HboneSessionPool } from '../../src/hbone/pool.ts';
import { DEFAULT_HTTP2 } from '../../src/hbone/settings.ts';
import { LocalCa } from '../../src/identity/ca.ts';
import { WorkloadCertificate } from '../../src/identity/workload-certificate.ts';
import { InboundRole } from '../../src/ztunnel/inbound.ts';
import { closeServer, listen, track } from '../helpers/servers.ts';

log.level = 'silent';

const POD = '127.0.7.11';
const dst = { ip: POD, port: 15008, identity: 'spiffe://cluster.local/ns/demo/sa/echo' };

let dir: string;
let inbound: InboundRole;
let echo: net.Server;
let echoSockets: Set<net.Socket>;
const certs: WorkloadCertificate[] = [];
let clientCert: WorkloadCertificate;

beforeAll(async () => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'wp-pool-spread-'));
  const ca = await LocalCa.init(dir, 'cluster.local');
  const podCert = await WorkloadCertificate.start(ca, dst.identity, 3_600_000);
  clientCert = await WorkloadCertificate.start(ca, 'spiffe://cluster.local/ns/demo/sa/client', 3_600_000);
  certs.push(podCert, clientCert);
  echo = net.createServer((s) => {
    s.on('error', () => {}); // reset when a pool is torn down
    s.pipe(s);
  });
  echoSockets = track(echo);
  await listen(echo, POD, 9000);
  inbound = await InboundRole.start({ listen: `${POD}:15008`, certificate: podCert });
});

afterAll(async () => {
  await inbound?.close(10);
  await closeServer(echo, echoSockets);
  for (const c of certs) c.close();
  fs.rmSync(dir, { recursive: true, force: true });
});

function pool(connections?: number): HboneSessionPool {
  return new HboneSessionPool({
    material: () => clientCert.current,
    http2: DEFAULT_HTTP2,
    trustDomain: () => 'cluster.local',
    connectTimeoutMs: 5_000,
    idleTimeoutMs: 10_000,
    maxStreamsPerConnection: 100,
    ...(connections === undefined ? {} : { connections }),
  });
}

/** Open `n` CONNECTs at once and check each tunnel carries bytes. */
async function openTunnels(p: HboneSessionPool, n: number): Promise<ClientHttp2Stream[]> {
  const streams = await Promise.all(Array.from({ length: n }, () => p.connect(dst, `${POD}:9000`).then((r) => r.stream)));
  await Promise.all(
    streams.map(
      (s, i) =>
        new Promise<void>((resolve, reject) => {
          s.once('data', (d: Buffer) => (d.toString() === `ping ${i}` ? resolve() : reject(new Error(`tunnel ${i} echoed ${d.toString()}`))));
          s.write(`ping ${i}`);
        }),
    ),
  );
  return streams;
}

test('by default the CONNECTs to one destination share one HBONE connection', { timeout: 20_000 }, async () => {
  const p = pool();
  try {
    await openTunnels(p, 6);
    expect(p.connectionCount).toBe(1);
  } finally {
    p.destroy();
  }
});

test('with `connections: 3` the CONNECTs spread over exactly three HBONE connections', { timeout: 20_000 }, async () => {
  const p = pool(3);
  try {
    const first = await openTunnels(p, 6);
    expect(p.connectionCount).toBe(3);
    // More streams reuse the three connections (the least busy ones), none is opened beyond them.
    await openTunnels(p, 6);
    expect(p.connectionCount).toBe(3);
    for (const s of first) s.destroy();
  } finally {
    p.destroy();
  }
});
