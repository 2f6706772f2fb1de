/**
 * Clients that fail the HBONE listener's TLS handshake or identity check: each is closed, counted
 * under Envoy's listener TLS stat names on /stats/prometheus, and warned about with its address
 * and the reason, at most once per reason per interval however many come. Clients over their
 * per-address connection limits are refused before the handshake. Addresses: 127.0.232.x.
 */
import net from 'node:net';
import tls from 'node:tls';
import { afterAll, afterEach, beforeAll, expect, test, vi } from 'vitest';
import { LocalCa } from '../../../src/identity/ca.ts';
import { log } from '../../../src/util/log.ts';
import { hboneSession, type ClientIdentity } from '../../helpers/hbone-client.ts';
import { parsePrometheus } from '../../helpers/prometheus.ts';
import { startTestTopology, type TestTopology } from '../../helpers/topology.ts';
import { issueOddLeaf } from './certs.ts';

const NET = 232;
const HOST = `127.0.${NET}.1`;
const CLIENT_IP = `127.0.${NET}.60`;
let topo: TestTopology;
let port: number;
let good: ClientIdentity;
let warn: ReturnType<typeof vi.spyOn>;

beforeAll(async () => {
  topo = await startTestTopology(NET, {
    bootstrap: { limits: { tlsHandshakeTimeoutMs: 300, maxConnectionsPerPeer: 3, peerConnectionBurst: 10, peerConnectionRate: 1 } },
  });
  port = topo.waypoint!.addresses.hbone.port;
  const ca = await LocalCa.load(topo.caDir);
  const leaf = await ca.issue('spiffe://cluster.local/ns/demo/sa/client', 3600_000);
  good = { certPem: leaf.certPem, keyPem: leaf.keyPem, caPem: ca.rootCertPem };
});
afterAll(async () => {
  await topo?.close();
});
afterEach(() => {
  warn?.mockRestore();
});

/** Counter `envoy_listener_<stat>` of the HBONE listener. */
async function stat(name: string): Promise<number> {
  const res = await fetch(`http://${HOST}:${topo.waypoint!.addresses.admin.port}/stats/prometheus`);
  const s = parsePrometheus(await res.text()).find((x) => x.name === name && x.labels.envoy_listener_address === `${HOST}_${port}`);
  return s?.value ?? NaN;
}

/** Warnings logged since the spy was installed, as [fields, message]. */
function warnings(): [Record<string, unknown>, string][] {
  return warn.mock.calls.map((c: unknown[]) => [c[0] as Record<string, unknown>, c[1] as string]);
}

/** A TLS client from CLIENT_IP; resolves once the waypoint closed the connection. */
function tlsClient(opts: tls.ConnectionOptions): Promise<void> {
  return new Promise((resolve) => {
    const tcp = net.connect({ host: HOST, port, localAddress: CLIENT_IP });
    const c = tls.connect({ socket: tcp, ca: good.caPem, ALPNProtocols: ['h2'], checkServerIdentity: () => undefined, ...opts });
    c.on('error', () => {});
    // TLS 1.3: the client may think it is connected before the server checked its certificate.
    c.on('data', () => {});
    c.once('close', () => resolve());
  });
}

function spyWarn() {
  warn = vi.spyOn(log, 'warn');
}

test('a client certificate from another CA: fail_verify_error, and a warning naming the client address and reason', async () => {
  const { ca: other } = await LocalCa.ensure(`${topo.dir}/other-ca`, 'cluster.local');
  const foreign = await other.issue('spiffe://cluster.local/ns/demo/sa/client', 3600_000);
  const before = await stat('envoy_listener_ssl_fail_verify_error');
  spyWarn();
  await tlsClient({ cert: foreign.certPem, key: foreign.keyPem });
  await expect.poll(() => stat('envoy_listener_ssl_fail_verify_error')).toBe(before + 1);
  const w = warnings().find(([f]) => f.reason === 'fail_verify_error');
  expect(w?.[1]).toBe('HBONE TLS handshake failed');
  expect(w?.[0].remote).toMatch(new RegExp(`^${CLIENT_IP.replace(/\./g, '\\.')}:\\d+$`));
  expect(String(w?.[0].detail)).toMatch(/client certificate: /);
});

test('no client certificate: fail_verify_no_cert', async () => {
  const before = await stat('envoy_listener_ssl_fail_verify_no_cert');
  await tlsClient({});
  await expect.poll(() => stat('envoy_listener_ssl_fail_verify_no_cert')).toBe(before + 1);
});

test('a plaintext client: connection_error; 20 of them warn once, all counted', async () => {
  const before = await stat('envoy_listener_ssl_connection_error');
  spyWarn();
  for (let i = 0; i < 20; i++) {
    await new Promise<void>((resolve) => {
      // From a different address each time: this is not about the per-address connection rate.
      const c = net.connect({ host: HOST, port, localAddress: `127.0.${NET}.${100 + i}` }, () => c.write('GET / HTTP/1.1\r\nhost: x\r\n\r\n'));
      c.on('error', () => {});
      c.on('data', () => {});
      c.once('close', () => resolve());
    });
  }
  await expect.poll(() => stat('envoy_listener_ssl_connection_error')).toBe(before + 20);
  const lines = warnings().filter(([f]) => f.reason === 'connection_error');
  // At most one line per reason per 10 s (an earlier test may have used this interval's).
  expect(lines.length).toBeLessThanOrEqual(1);
  if (lines[0]) expect(String(lines[0][0].detail)).toContain('ERR_SSL_HTTP_REQUEST');
});

test('a client that never completes its handshake is closed after limits.tlsHandshakeTimeoutMs and counted', async () => {
  const before = await stat('envoy_listener_downstream_cx_transport_socket_connect_timeout');
  const closed = await new Promise<boolean>((resolve) => {
    const c = net.connect({ host: HOST, port, localAddress: CLIENT_IP });
    c.on('error', () => {});
    c.once('close', () => resolve(true));
    // Bounds a hang only (the setting is 300 ms; Node's default would be 120 s).
    setTimeout(() => resolve(false), 5000).unref();
  });
  expect(closed).toBe(true);
  await expect.poll(() => stat('envoy_listener_downstream_cx_transport_socket_connect_timeout')).toBe(before + 1);
});

test('a certificate with two URI SANs is refused (SPIFFE: exactly one): fail_verify_san and a warning', async () => {
  const two = await issueOddLeaf(topo.caDir, ['spiffe://cluster.local/ns/demo/sa/client', 'spiffe://cluster.local/ns/istio-system/sa/istiod']);
  const before = await stat('envoy_listener_ssl_fail_verify_san');
  spyWarn();
  // The handshake itself succeeds (the chain is the mesh's); the waypoint then closes the connection.
  const session = await hboneSession(HOST, port, two, { localAddress: CLIENT_IP }).catch(() => undefined);
  if (session && !session.closed) await Promise.race([new Promise((r) => session.once('close', r)), new Promise((r) => setTimeout(r, 5000))]);
  expect(session?.closed ?? true).toBe(true);
  await expect.poll(() => stat('envoy_listener_ssl_fail_verify_san')).toBe(before + 1);
  const w = warnings().find(([f]) => f.reason === 'fail_verify_san');
  expect(w?.[1]).toBe('HBONE client refused');
  expect(w?.[0].detail).toBe('the certificate has 2 URI SANs; a SPIFFE certificate has exactly one');
});

test('a good client completes its handshake and is counted', async () => {
  const before = await stat('envoy_listener_ssl_handshake');
  const s = await hboneSession(HOST, port, good, { localAddress: CLIENT_IP });
  s.close();
  expect(await stat('envoy_listener_ssl_handshake')).toBe(before + 1);
});

async function refusals(reason: string): Promise<number> {
  const res = await fetch(`http://${HOST}:${topo.waypoint!.addresses.admin.port}/stats/prometheus`);
  return parsePrometheus(await res.text()).find((x) => x.name === 'waypoint_hbone_connections_refused_total' && x.labels.reason === reason)?.value ?? 0;
}

test('limits.maxConnectionsPerPeer: a client address with 3 connections gets its 4th refused before TLS; another address is served', async () => {
  const before = await refusals('peer_connections');
  const open = [];
  for (let i = 0; i < 3; i++) open.push(await hboneSession(HOST, port, good, { localAddress: `127.0.${NET}.70` }));
  await expect(hboneSession(HOST, port, good, { localAddress: `127.0.${NET}.70` })).rejects.toThrow();
  expect(await refusals('peer_connections')).toBe(before + 1);
  const other = await hboneSession(HOST, port, good, { localAddress: `127.0.${NET}.71` });
  other.close();
  for (const s of open) s.close();
});

test('limits.peerConnectionRate: a client address reconnecting faster than its rate is refused once its burst is spent', async () => {
  const before = await refusals('peer_connection_rate');
  let refused = 0;
  // Burst 10, then 1 per second.
  for (let i = 0; i < 12; i++) {
    const s = await hboneSession(HOST, port, good, { localAddress: `127.0.${NET}.72` }).catch(() => undefined);
    if (!s) refused++;
    s?.close();
  }
  expect(refused).toBeGreaterThanOrEqual(1);
  expect(await refusals('peer_connection_rate')).toBe(before + refused);
});
