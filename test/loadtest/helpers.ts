/**
 * What the load-test tests share: a loopback mesh whose pods also run the bench's h1/h2c/gRPC
 * backends (bench/e2e/backends.ts) behind Services named for their protocol, a waypoint in its own
 * process (so a test can SIGSTOP it and read its /proc), the client identity, and the CLI.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { stringify } from 'yaml';
import { startTopology, topologyBootstrap, type Topology, type TopologyOptions } from '../../src/demo/topology.ts';
import { hboneTransport, type Transport } from '../../src/loadtest/index.ts';
import { startBenchBackends } from '../../bench/e2e/backends.ts';
import { identityFrom, spiffe } from '../helpers/identity.ts';
import { echoService, addToMesh, startTestTopology, type TestTopology } from '../helpers/topology.ts';
import { servicePort } from '../helpers/mesh.ts';
import { sleep } from '../helpers/servers.ts';

export const BIN = path.resolve(import.meta.dirname, '../../bin/waypoint.js');

/** Service VIPs of the bench backends in a topology of 127.0.<net>.x (port 80 each). */
export const vips = (net: number) => ({ h1: `127.0.${net}.102:80`, h2c: `127.0.${net}.103:80`, grpc: `127.0.${net}.104:80` });

/** A topology (in-process waypoint) whose pod .11 also runs the bench backends, with a Service per protocol. */
export async function meshWithBackends(net: number): Promise<TestTopology & { stopBackends(): Promise<void> }> {
  const topo = await startTestTopology(net, { podIps: [`127.0.${net}.11`] });
  const stopBackends = await startBenchBackends(`127.0.${net}.11`);
  await addToMesh(
    topo,
    echoService('bench-h1', `127.0.${net}.102`, servicePort('http', 80, 8081)),
    echoService('bench-h2', `127.0.${net}.103`, servicePort('http2', 80, 8082)),
    echoService('bench-grpc', `127.0.${net}.104`, servicePort('grpc', 80, 8083)),
  );
  return Object.assign(topo, { stopBackends });
}

/** An HBONE transport into the topology's waypoint as `demo/client`, CONNECTing to `authority`. */
export async function hboneInto(caDir: string, waypoint: string, authority: string, net: number): Promise<Transport> {
  const id = await identityFrom(caDir, spiffe('demo', 'client'));
  const [host, port] = waypoint.split(':');
  return hboneTransport({
    waypoint: { host, port: Number(port) },
    authority,
    material: () => id,
    trustDomain: 'cluster.local',
    expectSan: spiffe('demo', 'waypoint'),
    bind: `127.0.${net}.50`,
    tunnelsPerConnection: 100,
    connectTimeoutMs: 5_000,
  });
}

/** A topology whose waypoint is a `waypoint run` child process (admin on 127.0.<net>.1:15920). */
export interface ChildWaypoint {
  readonly topo: Topology;
  readonly dir: string;
  readonly proc: ChildProcess;
  readonly pid: number;
  readonly admin: string;
  close(): Promise<void>;
}

export async function childWaypoint(net: number): Promise<ChildWaypoint> {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), `wp-loadtest-${net}-`));
  const base = `127.0.${net}`;
  const opts: TopologyOptions = {
    dir,
    waypointIp: `${base}.1`,
    vip: `${base}.100`,
    podIps: [`${base}.11`],
    clientIp: `${base}.50`,
    tunnelListen: '',
    tunnel: false,
    admin: `${base}.1:15920`,
    startWaypoint: false,
    bootstrap: { drain: { timeoutMs: 300 } },
  };
  const topo = await startTopology(opts);
  const cfg = path.join(dir, 'waypoint.yaml');
  fs.writeFileSync(cfg, stringify(topologyBootstrap(opts)));
  const log = fs.openSync(path.join(dir, 'waypoint.log'), 'a');
  const proc = spawn(process.execPath, [BIN, '--log-level', 'warn', 'run', '--mesh', topo.meshFile, '--ca-dir', topo.caDir, '--config', cfg], { stdio: ['ignore', log, log] });
  const close = async () => {
    if (proc.exitCode === null && proc.signalCode === null) {
      proc.kill('SIGCONT');
      proc.kill('SIGKILL');
      await new Promise((r) => proc.once('exit', r));
    }
    fs.closeSync(log);
    await topo.close();
    fs.rmSync(dir, { recursive: true, force: true });
  };
  const admin = `http://${base}.1:15920`;
  const deadline = Date.now() + 20_000;
  for (;;) {
    try {
      if ((await fetch(`${admin}/healthz/ready`, { signal: AbortSignal.timeout(1_000) })).status === 200) break;
    } catch {
      // not listening yet
    }
    if (proc.exitCode !== null || Date.now() > deadline) {
      const text = fs.readFileSync(path.join(dir, 'waypoint.log'), 'utf8');
      await close();
      throw new Error(`the child waypoint did not become ready: ${text.slice(-2000)}`);
    }
    await sleep(100);
  }
  return { topo, dir, proc, pid: proc.pid!, admin, close };
}

/** `waypoint <args>` as a child process: exit code, stdout, stderr (bounded by `timeoutMs`); `started` gets the process (to signal it). */
export function cli(args: readonly string[], timeoutMs = 30_000, started?: (p: ChildProcess) => void): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve, reject) => {
    const p = spawn(process.execPath, [BIN, ...args], { env: { ...process.env, WAYPOINT_LOG_LEVEL: 'error' } });
    started?.(p);
    let stdout = '';
    let stderr = '';
    p.stdout.on('data', (c: Buffer) => (stdout += c));
    p.stderr.on('data', (c: Buffer) => (stderr += c));
    const timer = setTimeout(() => {
      p.kill('SIGKILL');
      reject(new Error(`waypoint ${args.join(' ')}: no exit within ${timeoutMs} ms\n${stderr}`));
    }, timeoutMs);
    // 'close', not 'exit': the output is complete then.
    p.once('close', (code) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderr });
    });
  });
}
