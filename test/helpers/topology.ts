/**
 * Test wrapper around the demo topology: a temp directory, quiet logs, and cleanup. Each test
 * file passes its own 127.0.N.x range (a wildcard bind on 15008 would block every 127.x:15008).
 * Also: more plain-TCP entries (tunnel roles) toward other authorities, and mesh edits applied
 * to the running waypoint.
 *
 * With WAYPOINT_TEST_CONCURRENCY=N (N > 1; `npm run test:workers`, vitest.workers.config.ts) the
 * waypoint is `waypoint run --concurrency N`'s: a primary in this process (src/workers) and N
 * worker processes sharing the HBONE listener, on the same addresses, mesh file and CA. The test
 * sees it through `topo.waypoint` as through the in-process one: its addresses (the admin server
 * is the primary's, with the workers' metrics summed), its mesh (the primary's store; `reload()`
 * and `subscribe` listeners return or run once every worker applied the change), `reload` and
 * `shutdown` (every worker drains). What lives only inside one waypoint process (its certificate
 * object, metrics registry, overload manager, live counts, config_dump method) throws, naming
 * the member: such a test stays out of the workers set. `extraFilters` work when they have a
 * worker counterpart (worker-filters.ts: the recorder has), else the start throws.
 */
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import type { Waypoint } from '../../src/app.ts';
import { startTopology, type Topology, type TopologyOptions } from '../../src/demo/topology.ts';
import type { MeshSnapshot } from '../../src/state/index.ts';
import type { WaypointWorkers } from '../../src/workers/index.ts';
import { TunnelRole } from '../../src/ztunnel/tunnel.ts';
import { spiffe, TestCa } from './identity.ts';
import { meshText, service, type Doc, type ServicePortSpec } from './mesh.ts';
import { forWorkers } from './worker-filters.ts';

/** Worker processes each topology's waypoint runs in (WAYPOINT_TEST_CONCURRENCY); 1: in this process. */
export const TEST_CONCURRENCY = testConcurrency(process.env.WAYPOINT_TEST_CONCURRENCY);

function testConcurrency(value: string | undefined): number {
  if (value === undefined || value === '') return 1;
  const n = Number(value);
  if (!/^\d+$/.test(value) || n < 1) throw new Error(`WAYPOINT_TEST_CONCURRENCY=${JSON.stringify(value)}: expected a whole number of worker processes, at least 1`);
  return n;
}

export interface TestTopology extends Topology {
  readonly dir: string;
  /** `host:port` of the tunnel's plain TCP entry (throws when the topology has no tunnel role). */
  readonly entry: { host: string; port: number };
}

/**
 * Start a topology in the range `127.0.<net>.x`: waypoint .1, VIP .100, pods .11/.12, client .50.
 * `concurrency` defaults to {@link TEST_CONCURRENCY} (see the module comment).
 */
export async function startTestTopology(net: number, extra: Partial<TopologyOptions> = {}): Promise<TestTopology> {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), `wp-test-${net}-`));
  const base = `127.0.${net}`;
  let options: TopologyOptions = {
    dir,
    waypointIp: `${base}.1`,
    vip: `${base}.100`,
    podIps: [`${base}.11`, `${base}.12`],
    clientIp: `${base}.50`,
    tunnelListen: `${base}.50:0`,
    admin: `${base}.1:0`,
    ...extra,
    bootstrap: { drain: { timeoutMs: 500 }, ...extra.bootstrap },
  };
  const concurrency = extra.concurrency ?? TEST_CONCURRENCY;
  const inWorkers = concurrency > 1 && (extra.startWaypoint ?? true);
  if (inWorkers) options = withWorkers(options, concurrency);
  const started = startTopology(options).then(async (t) => {
    if (inWorkers) await checkWorkers(t.workers!, concurrency).catch(async (err: unknown) => {
      await t.close();
      throw err;
    });
    return t;
  });
  const topo = await started.catch((err: unknown) => {
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
    waypoint: topo.workers ? workersAsWaypoint(topo.workers) : topo.waypoint,
    dir,
    close,
    get entry() {
      if (!tunnel) throw new Error('this topology was started without a tunnel role');
      return { host: tunnel.address.address, port: tunnel.address.port };
    },
  };
}

/** The options with the waypoint in `concurrency` workers: `extraFilters` swapped for their worker counterparts. */
function withWorkers(o: TopologyOptions, concurrency: number): TopologyOptions {
  const bootstrap = o.bootstrap ?? {};
  const w = forWorkers(o.extraFilters ?? [], bootstrap.filters as { name: string; config?: unknown }[] | undefined);
  return {
    ...o,
    concurrency,
    extraFilters: undefined,
    filterModules: [...w.filterModules, ...(o.filterModules ?? [])],
    bootstrap: w.filters ? { ...bootstrap, filters: w.filters } : bootstrap,
  };
}

/** That the waypoint really is a primary (this process) and `n` ready workers of their own pids, as its `/config_dump` lists them. */
async function checkWorkers(w: WaypointWorkers, n: number): Promise<void> {
  const admin = w.addresses.admin;
  const res = await fetch(`http://${admin.address}:${admin.port}/config_dump`);
  const dump = (await res.json()) as { workers?: { pid: number | null; ready: boolean }[] };
  const pids = new Set((dump.workers ?? []).filter((x) => x.ready && x.pid !== null && x.pid !== process.pid).map((x) => x.pid));
  if (pids.size !== n) throw new Error(`expected the waypoint in ${n} ready worker processes; /config_dump lists ${JSON.stringify(dump.workers)}`);
}

/** Members of Waypoint that exist only inside one waypoint process (see the module comment). */
const IN_PROCESS_ONLY = new Set(['certificate', 'metrics', 'overload', 'liveCounts', 'configDump', 'sources', 'hbone', 'admin', 'readiness', 'sessions', 'clusters', 'extAuthz', 'inner', 'accessLog', 'tracing', 'bootstrap', 'extensions']);

/** `topo.waypoint` when the waypoint runs in workers: what a test may use of a Waypoint, over the primary (see the module comment). */
function workersAsWaypoint(w: WaypointWorkers): Waypoint {
  const mesh = new Proxy(w.mesh, {
    get(store, prop) {
      if (prop === 'reload') return () => w.reload();
      // The primary's own listener (registered first) has sent the change to the workers by now.
      if (prop === 'subscribe') return (fn: (next: MeshSnapshot, prev: MeshSnapshot) => void) => store.subscribe((next, prev) => void w.meshApplied().then(() => fn(next, prev)));
      const v: unknown = Reflect.get(store, prop, store);
      return typeof v === 'function' ? v.bind(store) : v;
    },
  });
  const members: Record<string, () => unknown> = {
    addresses: () => w.addresses,
    mesh: () => mesh,
    origin: () => w.origin,
    reload: () => () => w.reload(),
    shutdown: () => () => w.shutdown(),
  };
  return new Proxy({} as Waypoint, {
    get(_, prop) {
      if (typeof prop === 'string' && prop in members) return members[prop]();
      if (typeof prop === 'string' && IN_PROCESS_ONLY.has(prop)) {
        throw new Error(`topo.waypoint.${prop}: the waypoint runs in worker processes (WAYPOINT_TEST_CONCURRENCY), so what lives inside one waypoint process is not here; leave this test out of vitest.workers.config.ts`);
      }
      return undefined;
    },
  });
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
