/**
 * Buffered bytes under clients that stop reading (HBONE clients whose HTTP/2 window stays at zero):
 *  - per stream, the waypoint holds about one stream window (256 KiB), on the overload manager's
 *    gauge and in the process's memory after a forced GC; all of it is given back once they close;
 *  - past the budget's first threshold new CONNECTs and requests get 503 (`OM`, `envoy overloaded`);
 *    past the budget the streams holding the most are reset (flag `OM`) and a well-behaved client
 *    is served again; HTTP requests and TCP tunnels alike.
 * The whole path (clients, waypoint, inbound role, apps) is this process.
 * Addresses: 127.0.205.x (bound), 127.0.206.x (budget, HTTP), 127.0.207.x (budget, TCP).
 */
import type { ClientHttp2Stream } from 'node:http2';
import v8 from 'node:v8';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { connect, exchange, type ClientIdentity } from '../helpers/hbone-client.ts';
import { openEntry, startTestTopology, type TestTopology } from '../helpers/topology.ts';
import { Apps, BOUND, hog, identity, KiB, liveMemory, metric, MiB, resetStreams, settled, stallingSession, until } from './overload-rig.ts';

describe('stalled downloads: about one window each, all given back at close', () => {
  const N = 20;
  let topo: TestTopology;
  const apps = new Apps();
  let id: ClientIdentity;
  beforeAll(async () => {
    await apps.start(['127.0.205.11', '127.0.205.12']);
    topo = await startTestTopology(205, { backends: false, bootstrap: { overload: { refreshIntervalMs: 50 } } });
    id = await identity(topo);
  });
  afterAll(async () => {
    await topo?.close();
    apps.close();
  });

  test('the budget in force is on /config_dump: by default a quarter of the V8 heap limit', async () => {
    const a = topo.waypoint!.addresses.admin;
    const dump = (await (await fetch(`http://${a.address}:${a.port}/config_dump`)).json()) as { overload: Record<string, number> };
    expect(dump.overload).toMatchObject({ maxBufferedBytes: Math.floor(v8.getHeapStatistics().heap_size_limit / 4), stopAcceptingRequests: 0.9, resetHighMemoryStreams: 1 });
  });

  test(`${N} clients that never read: the gauge and the process's Buffer memory grow by at most ${BOUND / KiB} KiB each; back to the baseline after they close`, async () => {
    // Warm the pools and the code paths, so that the baseline has them.
    const warm = await openEntry(topo);
    expect((await exchange(warm, '/warm')).status).toBe(200);
    warm.destroy();
    const base = await liveMemory();
    const session = await stallingSession(topo, 205, id);
    for (let i = 0; i < N; i++) await hog(session, 205, 'GET /endless HTTP/1.1\r\nhost: echo\r\n\r\n');
    const gauge = await settled(topo);
    const grown = await liveMemory();
    console.log(`buffered: gauge ${(gauge / KiB / N).toFixed(0)} KiB per stream; Buffer memory +${((grown.arrayBuffers - base.arrayBuffers) / KiB / N).toFixed(0)} KiB, RSS +${((grown.rss - base.rss) / KiB / N).toFixed(0)} KiB per stream`);
    // The accounting sees every stalled stream, and none holds more than about one window.
    expect(gauge).toBeGreaterThan(N * 128 * KiB);
    expect(gauge).toBeLessThanOrEqual(N * BOUND);
    // The process holds what the waypoint does, plus the inbound role's and the clients' own
    // windows' worth (64 KiB each): with 4 MiB stream windows it grew by 4.3 MiB per stream.
    expect(grown.arrayBuffers - base.arrayBuffers).toBeLessThan(N * (BOUND + 256 * KiB));
    session.destroy();
    await until(async () => (await metric(topo, 'envoy_overload_buffered_bytes')) === 0, 10_000, 'the gauge back at 0');
    await until(() => topo.waypoint!.overload.accountCount === 0, 10_000, 'no accounts left');
    const after = await liveMemory();
    console.log(`after close: Buffer memory ${((after.arrayBuffers - base.arrayBuffers) / KiB).toFixed(0)} KiB, RSS ${((after.rss - base.rss) / MiB).toFixed(1)} MiB over the baseline`);
    expect(after.arrayBuffers - base.arrayBuffers).toBeLessThan(2 * MiB);
  });
});

describe('past the budget: new requests refused, then the largest streams reset, and service resumes', () => {
  const HOGS = 20;
  let topo: TestTopology;
  const apps = new Apps();
  let id: ClientIdentity;
  beforeAll(async () => {
    await apps.start(['127.0.206.11', '127.0.206.12']);
    topo = await startTestTopology(206, {
      backends: false,
      // The first threshold at 0.9 MiB, the budget 3 MiB: a handful of stalled streams pass the first, all 20 the second.
      bootstrap: { overload: { maxBufferedBytes: 3 * MiB, stopAcceptingRequests: 0.3, resetHighMemoryStreams: 1, refreshIntervalMs: 50 } },
    });
    id = await identity(topo);
  });
  afterAll(async () => {
    await topo?.close();
    apps.close();
  });

  test('HTTP: 503 OM for new CONNECTs and requests past 0.3 of the budget; past the budget the hogs are reset (OM) and a probe is served', async () => {
    const session = await stallingSession(topo, 206, id);
    const hogs: ClientHttp2Stream[] = [];
    for (let i = 0; i < HOGS; i++) hogs.push(await hog(session, 206, `GET /hold/${i} HTTP/1.1\r\nhost: echo\r\n\r\n`));
    // A keep-alive tunnel opened while the waypoint accepts, used again once it does not.
    const tunnel = await openEntry(topo);
    tunnel.on('error', () => {});
    expect(await exchange(tunnel, '/before')).toEqual({ status: 200, body: 'ok' });

    // Six hogs stream and stall: past the first threshold, under the budget.
    for (let i = 0; i < 6; i++) apps.release(String(i));
    await until(async () => (await metric(topo, 'envoy_overload_envoy_overload_actions_stop_accepting_requests_active')) === 1, 10_000, 'stop_accepting_requests');
    expect(await metric(topo, 'envoy_envoy_overload_actions_reset_high_memory_stream_count')).toBe(0);
    // A new request on the open tunnel: Envoy's local reply under stop_accepting_requests.
    expect(await exchange(tunnel, '/during')).toEqual({ status: 503, body: 'envoy overloaded' });
    // A new tunnel: its CONNECT is refused.
    const fresh = await stallingSession(topo, 206, id);
    expect((await connect(fresh, '127.0.206.100:80')).status).toBe(503);
    fresh.destroy();
    expect(await metric(topo, 'envoy_http_downstream_rq_overload_close', { envoy_http_conn_manager_prefix: 'main_internal' })).toBe(1);
    expect(await metric(topo, 'envoy_http_downstream_rq_overload_close', { envoy_http_conn_manager_prefix: 'connect_terminate' })).toBe(1);
    expect(await metric(topo, 'istio_requests_total', { response_code: '503', response_flags: 'OM' })).toBe(1);

    // All of them stream: past the budget, the largest are reset until under the first threshold.
    for (let i = 6; i < HOGS; i++) apps.release(String(i));
    await until(async () => (await metric(topo, 'envoy_envoy_overload_actions_reset_high_memory_stream_count')) > 0, 10_000, 'resets');
    await until(async () => (await metric(topo, 'envoy_overload_envoy_overload_actions_stop_accepting_requests_active')) === 0, 10_000, 'accepting again');
    const resets = await metric(topo, 'envoy_envoy_overload_actions_reset_high_memory_stream_count');
    expect(resets).toBeGreaterThanOrEqual(HOGS - Math.ceil((0.9 * MiB) / (128 * KiB)));
    // The reset hogs got RST_STREAM (a paused stream is closed, not yet destroyed); the requests were counted with flag OM.
    await until(() => resetStreams(hogs) === resets, 5000, 'the reset hogs closed');
    await until(async () => (await metric(topo, 'istio_requests_total', { response_flags: 'OM', response_code: '200' })) === resets, 5000, 'OM in istio_requests_total');

    // A well-behaved client is served again, on a new tunnel.
    const probe = await openEntry(topo);
    expect(await exchange(probe, '/after')).toEqual({ status: 200, body: 'ok' });
    probe.destroy();
    tunnel.destroy();
    session.destroy();
    await until(async () => (await metric(topo, 'envoy_overload_buffered_bytes')) === 0, 10_000, 'the gauge back at 0');
  });
});

describe('past the budget: TCP tunnels too', () => {
  const HOGS = 20;
  let topo: TestTopology;
  const apps = new Apps();
  let id: ClientIdentity;
  beforeAll(async () => {
    await apps.start(['127.0.207.11', '127.0.207.12']);
    // A TCP port: the waypoint relays bytes (the app speaks HTTP all the same).
    topo = await startTestTopology(207, {
      backends: false,
      portName: 'tcp',
      bootstrap: { overload: { maxBufferedBytes: 3 * MiB, stopAcceptingRequests: 0.3, resetHighMemoryStreams: 1, refreshIntervalMs: 50 } },
    });
    id = await identity(topo);
  });
  afterAll(async () => {
    await topo?.close();
    apps.close();
  });

  test('stalled tunnels are reset largest first with flag OM (istio_tcp_connections_closed_total), and a new tunnel works afterwards', async () => {
    const session = await stallingSession(topo, 207, id);
    const hogs: ClientHttp2Stream[] = [];
    for (let i = 0; i < HOGS; i++) hogs.push(await hog(session, 207, `GET /hold/${i} HTTP/1.1\r\nhost: echo\r\n\r\n`));
    for (let i = 0; i < HOGS; i++) apps.release(String(i));
    await until(async () => (await metric(topo, 'envoy_envoy_overload_actions_reset_high_memory_stream_count')) > 0, 10_000, 'resets');
    await until(async () => (await metric(topo, 'envoy_overload_envoy_overload_actions_stop_accepting_requests_active')) === 0, 10_000, 'accepting again');
    const resets = await metric(topo, 'envoy_envoy_overload_actions_reset_high_memory_stream_count');
    expect(resets).toBeGreaterThanOrEqual(HOGS - Math.ceil((0.9 * MiB) / (128 * KiB)));
    await until(() => resetStreams(hogs) === resets, 5000, 'the reset tunnels closed');
    // The tunnels were counted at close with the flag they closed with.
    await until(async () => (await metric(topo, 'istio_tcp_connections_closed_total', { response_flags: 'OM' })) === resets, 5000, 'OM in istio_tcp_connections_closed_total');
    const probe = await openEntry(topo);
    probe.on('error', () => {});
    expect(await exchange(probe, '/after')).toEqual({ status: 200, body: 'ok' });
    probe.destroy();
    session.destroy();
    await until(async () => (await metric(topo, 'envoy_overload_buffered_bytes')) === 0, 10_000, 'the gauge back at 0');
  });
});
