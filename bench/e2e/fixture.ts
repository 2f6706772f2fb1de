/**
 * Bench fixture process (forked by run.ts with an IPC channel): for each topology of config.ts,
 * the `tunnel` role, the `inbound` role and the echo backend, via startTopology with
 * `startWaypoint: false` (the waypoints run in their own processes, started by the orchestrator).
 *
 * argv: <work dir>. Sends `{ type: 'ready', topologies: { http: { meshFile, caDir }, tcp: ... } }`
 * once listening; stops on `{ type: 'stop' }`, SIGTERM/SIGINT or when the parent goes away.
 */
import path from 'node:path';
import { startTopology, type Topology } from '../../src/demo/topology.ts';
import { TOPOLOGIES } from './config.ts';

const dir = process.argv[2];
if (!dir || !process.send) {
  process.stderr.write('usage: forked by bench/e2e/run.ts with a work directory\n');
  process.exit(2);
}

const started: Topology[] = [];
let stopping = false;

async function stop(code: number): Promise<never> {
  if (!stopping) {
    stopping = true;
    const t = setTimeout(() => process.exit(code), 3_000);
    t.unref();
    for (const topo of started) await topo.close().catch(() => {});
  }
  process.exit(code);
}

process.on('message', (m: { type?: string }) => {
  if (m?.type === 'stop') void stop(0);
});
process.on('disconnect', () => void stop(0));
process.on('SIGTERM', () => void stop(0));
process.on('SIGINT', () => void stop(0));

try {
  const info: Record<string, { meshFile: string; caDir: string }> = {};
  for (const spec of TOPOLOGIES) {
    const topo = await startTopology({ ...spec.options, dir: path.join(dir, spec.key) });
    started.push(topo);
    info[spec.key] = { meshFile: topo.meshFile, caDir: topo.caDir };
  }
  process.send({ type: 'ready', topologies: info, pid: process.pid });
} catch (err) {
  process.send({ type: 'error', message: (err as Error).stack ?? String(err) });
  await stop(1);
}
