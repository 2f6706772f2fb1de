/**
 * Bench fixture process (forked by run.ts with an IPC channel): for each topology of config.ts,
 * the `tunnel` role, the `inbound` role and the echo backend, via startTopology with
 * `startWaypoint: false` (the waypoints run in their own processes, started by the orchestrator).
 * For the scenarios, each topology also gets the bench backends (backends.ts) on its pod IPs, one
 * extra Service per backend in its mesh (port name `http`/`http2`/`grpc`, or `tcp…` in the L4
 * topology) and one more `tunnel` role per Service.
 *
 * argv: <work dir> [<topology keys, comma-separated; default all>]. Sends `{ type: 'ready', topologies: { http: { meshFile, caDir }, tcp: ... } }`
 * once listening; stops on `{ type: 'stop' }`, SIGTERM/SIGINT or when the parent goes away.
 */
import fs from 'node:fs';
import path from 'node:path';
import { startTopology } from '../../src/demo/topology.ts';
import { LocalCa } from '../../src/identity/ca.ts';
import { WorkloadCertificate } from '../../src/identity/workload-certificate.ts';
import { TunnelRole } from '../../src/ztunnel/tunnel.ts';
import { formatHostPort } from '../../src/state/ip.ts';
import { MeshStore } from '../../src/state/store.ts';
import { BACKEND_KINDS, BACKEND_PORTS, TOPOLOGIES, type TopologySpec } from './config.ts';
import { startBenchBackends } from './backends.ts';

const dir = process.argv[2];
const only = process.argv[3] ? new Set(process.argv[3].split(',')) : undefined;
if (!dir || !process.send) {
  process.stderr.write('usage: forked by bench/e2e/run.ts with a work directory\n');
  process.exit(2);
}

/** HBONE connections each tunnel role spreads its CONNECTs over (the orchestrator's BENCH_HBONE_CONNECTIONS). */
const hboneConnections = Math.max(1, Number(process.env.BENCH_HBONE_CONNECTIONS ?? 1) || 1);

const closers: (() => Promise<unknown> | unknown)[] = [];
let stopping = false;

async function stop(code: number): Promise<never> {
  if (!stopping) {
    stopping = true;
    const t = setTimeout(() => process.exit(code), 3_000);
    t.unref();
    for (const c of closers.reverse()) await Promise.resolve(c()).catch(() => {});
  }
  process.exit(code);
}

process.on('message', (m: { type?: string }) => {
  if (m?.type === 'stop') void stop(0);
});
process.on('disconnect', () => void stop(0));
process.on('SIGTERM', () => void stop(0));
process.on('SIGINT', () => void stop(0));

/** The scenarios' Services, appended to the topology's mesh (same pods: selector `app: echo`). */
function benchServicesYaml(spec: TopologySpec): string {
  return BACKEND_KINDS.map((kind) => {
    const b = spec.bench[kind];
    return `---
apiVersion: v1
kind: Service
metadata: { name: ${b.name}, namespace: demo }
spec:
  clusterIP: "${b.vip}"
  selector: { app: echo }
  ports: [{ name: ${b.portName}, port: 80, targetPort: ${BACKEND_PORTS[kind]} }]
`;
  }).join('');
}

/** Bench backends on the pod IPs, the extra Services, and a tunnel role in front of each. */
async function startScenarioParts(spec: TopologySpec, meshFile: string, caDir: string): Promise<void> {
  for (const ip of spec.options.podIps) closers.push(await startBenchBackends(ip));
  fs.appendFileSync(meshFile, `# bench scenarios (bench/e2e/fixture.ts)\n${benchServicesYaml(spec)}`);
  const td = spec.options.trustDomain ?? 'cluster.local';
  const { ca } = await LocalCa.ensure(caDir, td);
  const mesh = await MeshStore.open({ meshFile, watch: false });
  closers.push(() => mesh.close());
  const cert = await WorkloadCertificate.start(ca, `spiffe://${td}/ns/demo/sa/client`, 24 * 3600_000);
  closers.push(() => cert.close());
  const o = spec.options;
  for (const kind of BACKEND_KINDS) {
    const tunnel = await TunnelRole.start({
      listen: spec.bench[kind].tunnelListen,
      to: formatHostPort(o.waypointIp, o.waypointPort ?? o.hbonePort ?? 15008),
      authority: formatHostPort(spec.bench[kind].vip, 80),
      certificate: cert,
      expectSan: `spiffe://${td}/ns/demo/sa/waypoint`,
      bind: o.clientIp,
      mesh,
      connections: hboneConnections,
    });
    closers.push(() => tunnel.close());
  }
}

try {
  const info: Record<string, { meshFile: string; caDir: string }> = {};
  for (const spec of TOPOLOGIES) {
    if (only && !only.has(spec.key)) continue;
    const topo = await startTopology({ ...spec.options, dir: path.join(dir, spec.key), tunnelConnections: hboneConnections });
    closers.push(() => topo.close());
    await startScenarioParts(spec, topo.meshFile, topo.caDir);
    info[spec.key] = { meshFile: topo.meshFile, caDir: topo.caDir };
  }
  process.send({ type: 'ready', topologies: info, pid: process.pid });
} catch (err) {
  process.send({ type: 'error', message: (err as Error).stack ?? String(err) });
  await stop(1);
}
