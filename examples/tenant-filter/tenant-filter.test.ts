/**
 * Tests of the example filter, as a filter package would write them: its config schema on its own,
 * then the filter in a real waypoint (`node-waypoint/testing`: a client tunnel, the waypoint and an
 * echo app on loopback, in this process) attached by a WaypointFilter to the echo Service. The
 * addresses are 127.0.42.x (Linux routes all of 127.0.0.0/8 to loopback; pick a range of your own).
 */
import fs from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { startTopology, topologyMesh, type Topology, type TopologyOptions } from 'node-waypoint/testing';
import { configSchema } from './index.ts';

describe('config', () => {
  test('defaults, and what is refused', () => {
    expect(configSchema.parse({ tenants: ['acme'] })).toEqual({ header: 'x-tenant', tenants: ['acme'], status: 403, forwardAs: 'x-tenant-verified' });
    expect(configSchema.safeParse({ tenants: [] }).success).toBe(false);
    expect(configSchema.safeParse({ tenants: ['acme'], header: 'X-Tenant' }).success).toBe(false);
    expect(configSchema.safeParse({ tenants: ['acme'], extra: 1 }).success).toBe(false);
  });
});

describe('in a waypoint', () => {
  const NET = '127.0.42';
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'tenant-filter-'));
  const opts: TopologyOptions = {
    dir,
    waypointIp: `${NET}.1`,
    vip: `${NET}.100`,
    podIps: [`${NET}.11`],
    clientIp: `${NET}.50`,
    tunnelListen: `${NET}.50:0`,
    admin: `${NET}.1:0`,
    bootstrap: { drain: { timeoutMs: 200 } },
  };
  const waypointFilter = `---
apiVersion: extensions.node-waypoint.dev/v1alpha1
kind: WaypointFilter
metadata: { name: tenants, namespace: demo }
spec:
  targetRefs: [{ kind: Service, name: echo }]
  module: ${fileURLToPath(new URL('./index.ts', import.meta.url))}
  phase: AUTHZ
  config: { tenants: [acme, globex] }
`;
  let topo: Topology;
  beforeAll(async () => {
    topo = await startTopology({ ...opts, meshText: topologyMesh(opts) + waypointFilter });
  });
  afterAll(async () => {
    await topo?.close();
    fs.rmSync(dir, { recursive: true, force: true });
  });

  /** GET through the client's tunnel (as the app would call the echo Service). */
  function get(headers: Record<string, string>): Promise<{ status: number; headers: http.IncomingHttpHeaders; body: string }> {
    const entry = topo.tunnel!.address;
    return new Promise((resolve, reject) => {
      const req = http.get({ host: entry.address, port: entry.port, path: '/', headers: { host: 'echo.demo', ...headers }, agent: false }, (res) => {
        let body = '';
        res.setEncoding('utf8');
        res.on('data', (c: string) => (body += c));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body }));
      });
      req.on('error', reject);
    });
  }

  test('an allowed tenant reaches the app, which is told who passed', async () => {
    const r = await get({ 'x-tenant': 'acme' });
    expect(r.status).toBe(200);
    expect(r.headers['x-tenant']).toBe('acme');
    expect(JSON.parse(r.body).headers['x-tenant-verified']).toBe('acme');
  });

  test('any other tenant, or none, is answered 403 by the waypoint', async () => {
    expect(await get({ 'x-tenant': 'initech' })).toMatchObject({ status: 403, body: 'tenant "initech" is not allowed\n' });
    expect((await get({})).status).toBe(403);
  });
});
