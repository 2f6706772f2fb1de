/**
 * The load generator speaks every protocol it offers, through a real waypoint over HBONE (mTLS,
 * CONNECT with the service authority) and to a plain TCP target: HTTP/1.1, h2c and gRPC unary
 * calls inside the tunnels, each request checked (status, body size, gRPC status), and a broken
 * path reported before any load. Addresses: 127.0.173.x.
 */
import { afterAll, beforeAll, expect, test } from 'vitest';
import { LoadProbeError, resolveSettings, runLoad, runLoadtest, tcpTransport, type LoadPlan, type Transport } from '../../src/loadtest/index.ts';
import { identityFrom, spiffe } from '../helpers/identity.ts';
import { PEER_WINDOW_HEADER, PEER_WINDOW_MARKER } from '../../bench/e2e/backend-wire.ts';
import { hboneInto, meshWithBackends, vips } from './helpers.ts';

const NET = 173;
const WAYPOINT = `127.0.${NET}.1:15008`;
let topo: Awaited<ReturnType<typeof meshWithBackends>>;

beforeAll(async () => {
  topo = await meshWithBackends(NET);
});
afterAll(async () => {
  await topo?.stopBackends();
  await topo?.close();
});

function plan(transport: Transport, p: Partial<LoadPlan> & Pick<LoadPlan, 'protocol'>): LoadPlan {
  return {
    transport,
    connections: 2,
    streams: 1,
    rate: null,
    requests: 60,
    durationMs: null,
    warmupMs: 0,
    spec: { method: 'GET', path: '/bytes/1024', authority: 'bench', headers: {}, body: Buffer.alloc(0), grpcMethod: '/bench.Echo/Unary', expectBytes: 1024 },
    timeoutMs: 5_000,
    intervalMs: 200,
    ...p,
  };
}

test('HTTP/1.1 inside HBONE tunnels through the waypoint: every request answered 200 with its body', async () => {
  const r = await runLoad(plan(await hboneInto(topo.caDir, WAYPOINT, vips(NET).h1, NET), { protocol: 'http1', connections: 3 }));
  expect(Object.fromEntries(r.recorder.codes)).toEqual({ '200': 60 });
  expect(r.recorder.ok).toBe(60);
  expect(r.connectionsOpened).toBe(3);
});

test('h2c inside HBONE: many streams per tunnel, HTTP/2 terminated by the waypoint (L7)', async () => {
  const r = await runLoad(plan(await hboneInto(topo.caDir, WAYPOINT, vips(NET).h2c, NET), { protocol: 'h2c', connections: 1, streams: 8, http2Window: PEER_WINDOW_MARKER }));
  expect(r.recorder.ok).toBe(60);
  expect(r.maxInFlight).toBeGreaterThan(1);
  // The backend saw another HTTP/2 peer than us: the waypoint terminated h2c and opened its own.
  expect(Number(r.probeHeaders[PEER_WINDOW_HEADER])).not.toBe(PEER_WINDOW_MARKER);
});

test('gRPC unary inside HBONE: grpc-status OK and the echoed message checked', async () => {
  const body = Buffer.alloc(300, 7);
  const r = await runLoad(plan(await hboneInto(topo.caDir, WAYPOINT, vips(NET).grpc, NET), { protocol: 'grpc', streams: 4, spec: { method: 'POST', path: '/', authority: 'bench', headers: {}, body, grpcMethod: '/bench.Echo/Unary', expectBytes: 300 } }));
  expect(Object.fromEntries(r.recorder.codes)).toEqual({ OK: 60 });
});

test('gRPC errors are counted by status: an unknown method is UNIMPLEMENTED', async () => {
  const p = plan(await hboneInto(topo.caDir, WAYPOINT, vips(NET).grpc, NET), { protocol: 'grpc', spec: { method: 'POST', path: '/', authority: 'bench', headers: {}, body: Buffer.alloc(0), grpcMethod: '/bench.Echo/Nope' } });
  const err = await runLoad(p).catch((e: unknown) => e);
  expect(err).toBeInstanceOf(LoadProbeError);
  expect((err as LoadProbeError).outcome?.kind).toBe('grpc_UNIMPLEMENTED');
});

test('plain TCP target (no HBONE): the same requests straight to the pod', async () => {
  const r = await runLoad(plan(tcpTransport({ host: `127.0.${NET}.11`, port: 8081 }, 2_000), { protocol: 'http1' }));
  expect(r.recorder.ok).toBe(60);
  const h2 = await runLoad(plan(tcpTransport({ host: `127.0.${NET}.11`, port: 8082 }, 2_000), { protocol: 'h2c', streams: 4, http2Window: PEER_WINDOW_MARKER }));
  expect(h2.recorder.ok).toBe(60);
  // Nothing in between: the backend saw our own HTTP/2 session.
  expect(Number(h2.probeHeaders[PEER_WINDOW_HEADER])).toBe(PEER_WINDOW_MARKER);
});

test('a body of the wrong size is an error of kind bad_body, not a success', async () => {
  const r = await runLoad(plan(tcpTransport({ host: `127.0.${NET}.11`, port: 8081 }, 2_000), { protocol: 'http1', spec: { method: 'GET', path: '/bytes/1024', authority: 'bench', headers: {}, body: Buffer.alloc(0), grpcMethod: '/a/b', expectBytes: 1023 } })).catch((e: unknown) => e);
  expect((r as LoadProbeError).outcome?.kind).toBe('bad_body');
});

test('a CONNECT the waypoint refuses fails the probe with the answer, before any load', async () => {
  // No Service has this address: the waypoint answers the CONNECT with an error status.
  const err = await runLoad(plan(await hboneInto(topo.caDir, WAYPOINT, `127.0.${NET}.199:80`, NET), { protocol: 'http1' })).catch((e: unknown) => e);
  expect(err).toBeInstanceOf(LoadProbeError);
  expect((err as Error).message).toMatch(/cannot open a connection through HBONE 127\.0\.173\.1:15008 → 127\.0\.173\.199:80: .*answered [45]\d\d/);
});

test("--admin and --stats-url: the waypoint's CPU and RSS over time from its admin port, its istio_requests_total before and after", async () => {
  const admin = topo.waypoint!.addresses.admin;
  const url = `http://${admin.address}:${admin.port}`;
  const id = await identityFrom(topo.caDir, spiffe('demo', 'client'));
  const report = await runLoadtest({
    settings: resolveSettings({ waypoint: WAYPOINT, authority: vips(NET).h1, path: '/bytes/13', rate: 200, duration: '1500ms', interval: '500ms' }),
    identity: { material: () => id, trustDomain: 'cluster.local' },
    admin: url,
    statsUrls: [`${url}/stats/prometheus`],
    version: 'test',
  });
  const w = report.loadtest.waypoint!;
  expect(w.source).toBe(`${url}/stats/prometheus`);
  expect(w.series.length).toBeGreaterThanOrEqual(3);
  expect(w.rssPeakMiB).toBeGreaterThan(10);
  expect(w.cpuSeconds).toBeGreaterThan(0);
  const moved = report.loadtest.prometheus[0].diff!.counters.filter((c) => c.series.startsWith('istio_requests_total{'));
  expect(moved.reduce((n, c) => n + c.delta, 0)).toBeGreaterThanOrEqual(300);
});
