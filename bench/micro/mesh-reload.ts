/**
 * Micro benchmark of a mesh reload: the time to compile a generated mesh file (Services × Pods,
 * with the waypoint's compiled parts) and the longest the event loop stalls meanwhile
 * (perf_hooks monitorEventLoopDelay). The store compiles in slices, so the stall must stay near
 * one slice (~10 ms of work plus the odd single step), not the seconds the whole compile takes;
 * `--one-piece` compiles without yielding, for comparison.
 *
 *   node bench/micro/mesh-reload.ts [services=5000] [podsPerService=4] [--one-piece]
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { monitorEventLoopDelay } from 'node:perf_hooks';
import { waypointParts } from '../../src/app.ts';
import { RequestAuthn } from '../../src/authn/index.ts';
import { destinationRulesFor } from '../../src/routing/index.ts';
import { compileMeshStepwise } from '../../src/state/compile.ts';
import { MeshStore } from '../../src/state/store.ts';
import { ClusterTable } from '../../src/upstream/cluster-table.ts';
import { runNow } from '../../src/util/slices.ts';
import { hugeMesh } from '../../test/helpers/huge-mesh.ts';

const args = process.argv.slice(2).filter((a) => !a.startsWith('--'));
const services = Number(args[0] ?? 5000);
const pods = Number(args[1] ?? 4);
const onePiece = process.argv.includes('--one-piece');

const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'wp-bench-reload-'));
const meshFile = path.join(dir, 'mesh.yaml');
fs.writeFileSync(meshFile, hugeMesh(2, 1));
const parts = waypointParts(new RequestAuthn(), new ClusterTable({ clusters: (s) => destinationRulesFor(s).clusters }), 'LEAST_REQUEST');
const store = await MeshStore.open({ meshFile, parts });
const text = hugeMesh(services, pods);
fs.writeFileSync(meshFile, text);

const delay = monitorEventLoopDelay({ resolution: 5 });
delay.enable();
await new Promise((r) => setTimeout(r, 20));
const started = performance.now();
if (onePiece) runNow(compileMeshStepwise({ text, file: meshFile, parts }));
else await store.reload();
const took = performance.now() - started;
await new Promise((r) => setTimeout(r, 20));
delay.disable();
store.close();
fs.rmSync(dir, { recursive: true, force: true });

const ms = (ns: number) => (ns / 1e6).toFixed(1);
process.stdout.write(
  `mesh reload: ${services} services × ${pods} pods (${(text.length / 2 ** 20).toFixed(1)} MiB)${onePiece ? ', in one piece' : ''}\n` +
    `  compile   ${took.toFixed(0)} ms\n` +
    `  stall     max ${ms(delay.max)} ms, p99 ${ms(delay.percentile(99))} ms, mean ${ms(delay.mean)} ms\n`,
);
