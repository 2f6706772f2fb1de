/**
 * The bench's paths and topologies (bench/e2e/config.ts): which flags add which path, where each
 * path's load goes, and that no two topologies share an address (each has its own waypoint
 * process, pod and tunnel roles, and they all run in one fixture).
 */
import { afterEach, expect, test } from 'vitest';
import { TOPOLOGIES, WAYPOINT_STAND_INS, loadSettings, pathTarget, scenarioTarget, topologyOf } from '../../../bench/e2e/config.ts';

const saved = { BENCH_FLOOR: process.env.BENCH_FLOOR, BENCH_PATHS: process.env.BENCH_PATHS };
afterEach(() => {
  for (const [k, v] of Object.entries(saved)) {
    if (v === undefined) delete process.env[k];
    else process.env[k] = v;
  }
});

test('--floor and BENCH_FLOOR=1 add the floor path, after the others', () => {
  delete process.env.BENCH_FLOOR;
  delete process.env.BENCH_PATHS;
  expect(loadSettings([]).paths).toEqual(['direct', 'l4-relay', 'waypoint']);
  expect(loadSettings(['--floor']).paths).toEqual(['direct', 'l4-relay', 'waypoint', 'floor']);
  expect(loadSettings(['--floor', '--stats', '--workers']).paths).toEqual(['direct', 'l4-relay', 'waypoint', 'waypoint-stats', 'waypoint-workers', 'floor']);
  process.env.BENCH_FLOOR = '1';
  expect(loadSettings([]).paths).toEqual(['direct', 'l4-relay', 'waypoint', 'floor']);
  process.env.BENCH_PATHS = 'l4-relay,floor';
  expect(loadSettings([]).paths).toEqual(['l4-relay', 'floor']);
});

test('the floor path runs the floor relay in a topology of its own', () => {
  const t = pathTarget('floor');
  expect(t.topology).toBe('http-floor');
  expect(topologyOf('floor')).toBe('http-floor');
  expect(WAYPOINT_STAND_INS['http-floor']).toBe('bench/micro/floor-relay.ts');
  // The waypoint topology keeps bin/waypoint.js (no stand-in).
  expect(WAYPOINT_STAND_INS.http).toBeUndefined();
  const spec = TOPOLOGIES.find((s) => s.key === 'http-floor')!;
  expect(`${t.host}:${t.port}`).toBe(spec.options.tunnelListen);
  // Its Services' ports are named as the waypoint topology's: the fixture meshes them alike.
  const http = TOPOLOGIES.find((s) => s.key === 'http')!;
  expect(spec.options.portName).toBe(http.options.portName);
  for (const kind of ['h1', 'h2', 'grpc'] as const) {
    expect(spec.bench[kind].portName).toBe(http.bench[kind].portName);
    expect(scenarioTarget('floor', kind).topology).toBe('http-floor');
  }
});

test('no two topologies share an address', () => {
  const seen = new Map<string, string>();
  for (const t of TOPOLOGIES) {
    const o = t.options;
    const addrs = [o.waypointIp, o.vip, ...o.podIps, o.clientIp, o.tunnelListen, o.admin, ...Object.values(t.bench).flatMap((b) => [b.vip, b.tunnelListen])];
    for (const a of addrs) {
      expect(seen.get(a), `${a} of ${t.key}`).toBeUndefined();
      seen.set(a, t.key);
    }
  }
});
