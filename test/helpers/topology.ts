/**
 * Test wrapper around the demo topology: a temp directory, quiet logs, and cleanup. Each test
 * file passes its own 127.0.N.x range (a wildcard bind on 15008 would block every 127.x:15008).
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { startTopology, type Topology, type TopologyOptions } from '../../src/demo/topology.ts';

export interface TestTopology extends Topology {
  readonly dir: string;
  /** `host:port` of the tunnel's plain TCP entry. */
  readonly entry: { host: string; port: number };
}

/** Start a topology in the range `127.0.<net>.x`: waypoint .1, VIP .100, pods .11/.12, client .50. */
export async function startTestTopology(net: number, extra: Partial<TopologyOptions> = {}): Promise<TestTopology> {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), `wp-test-${net}-`));
  const base = `127.0.${net}`;
  const topo = await startTopology({
    dir,
    waypointIp: `${base}.1`,
    vip: `${base}.100`,
    podIps: [`${base}.11`, `${base}.12`],
    clientIp: `${base}.50`,
    tunnelListen: `${base}.50:0`,
    admin: `${base}.1:0`,
    ...extra,
    bootstrap: { drain: { timeoutMs: 500 }, ...extra.bootstrap },
  });
  const close = async () => {
    await topo.close();
    fs.rmSync(dir, { recursive: true, force: true });
  };
  return { ...topo, dir, close, entry: { host: topo.tunnel.address.address, port: topo.tunnel.address.port } };
}

/** A plain TCP connection to the topology's entry (the tunnel role), once connected. */
export async function openEntry(topo: TestTopology): Promise<import('node:net').Socket> {
  const { connect } = await import('node:net');
  const socket = connect(topo.entry.port, topo.entry.host);
  await new Promise((r) => socket.once('connect', r));
  return socket;
}
