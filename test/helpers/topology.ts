/**
 * Test wrapper around the demo topology: a temp directory, quiet logs, and cleanup. Each test
 * file passes its own 127.0.N.x range (a wildcard bind on 15008 would block every 127.x:15008).
 * Also: more plain-TCP entries (tunnel roles) toward other authorities, and mesh edits applied
 * to the running waypoint.
 */
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { startTopology, type Topology, type TopologyOptions } from '../../src/demo/topology.ts';
import { TunnelRole } from '../../src/ztunnel/tunnel.ts';
import { spiffe, TestCa } from './identity.ts';
import { meshText, service, type Doc, type ServicePortSpec } from './mesh.ts';

export interface TestTopology extends Topology {
  readonly dir: string;
  /** `host:port` of the tunnel's plain TCP entry (throws when the topology has no tunnel role). */
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
  }).catch((err: unknown) => {
    fs.rmSync(dir, { recursive: true, force: true });
    throw err;
  });
  const close = async () => {
    await topo.close();
    fs.rmSync(dir, { recursive: true, force: true });
  };
  const tunnel = topo.tunnel;
  return {
    ...topo,
    dir,
    close,
    get entry() {
      if (!tunnel) throw new Error('this topology was started without a tunnel role');
      return { host: tunnel.address.address, port: tunnel.address.port };
    },
  };
}

/** A plain TCP connection to the topology's entry (the tunnel role), once connected. */
export async function openEntry(topo: TestTopology): Promise<net.Socket> {
  const socket = net.connect(topo.entry.port, topo.entry.host);
  await new Promise((r) => socket.once('connect', r));
  return socket;
}

/** Where an {@link addEntry} tunnel comes from. */
export interface EntryOptions {
  /** The client's identity (default `demo/client`). */
  readonly principal?: string;
  /** The client pod IP it binds and listens on (default the topology's `127.0.<net>.50`). */
  readonly clientIp?: string;
}

/**
 * Another plain-TCP entry into the topology's waypoint (a source ztunnel stand-in) whose
 * CONNECTs carry `authority`. Closed by the returned close().
 */
export async function addEntry(topo: TestTopology, authority: string, o: EntryOptions = {}): Promise<{ host: string; port: number; close(): Promise<void> }> {
  const hbone = topo.waypoint!.addresses.hbone;
  const clientIp = o.clientIp ?? hbone.address.replace(/\.\d+$/, '.50');
  const ca = await TestCa.load(topo.caDir);
  const cert = await ca.workloadCertificate(o.principal ?? spiffe('demo', 'client'));
  const tunnel = await TunnelRole.start({
    listen: `${clientIp}:0`,
    to: `${hbone.address}:${hbone.port}`,
    authority,
    certificate: cert,
    expectSan: topo.waypoint!.mesh.current.waypoint.identity,
    bind: clientIp,
    mesh: topo.waypoint!.mesh,
  }).catch((err: unknown) => {
    cert.close();
    throw err;
  });
  return {
    host: tunnel.address.address,
    port: tunnel.address.port,
    close: async () => {
      await tunnel.close();
      cert.close();
    },
  };
}

/** Append documents (objects, or YAML text as written) to the topology's mesh file and make the waypoint and the roles apply them now. */
export async function addToMesh(topo: TestTopology, ...docs: (Doc | string)[]): Promise<void> {
  const text = fs.readFileSync(topo.meshFile, 'utf8');
  fs.writeFileSync(topo.meshFile, `${text}---\n${meshText(...docs)}`);
  await topo.waypoint!.mesh.reload();
  await topo.roleMesh.reload();
}

/** Another Service in namespace `demo` selecting the topology's echo pods (`app: echo`). */
export function echoService(name: string, vip: string, ...ports: ServicePortSpec[]): Doc {
  return service({ name, namespace: 'demo', vip, selector: { app: 'echo' }, ports });
}
