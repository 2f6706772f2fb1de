/**
 * Micro benchmark of the filter chain's own overhead (src/pipeline/chain.ts + FilterRegistry):
 * one tunnel with one request through every phase, with 0, 4 and 16 no-op filters in front of a
 * terminal filter that does nothing, plus 4 filters of which one answers with a promise.
 * Each no-op filter implements every phase and touches a slot, as a real filter would.
 *
 *   node bench/micro/chain.ts            (BENCH_MICRO_ITERATIONS, default 300000 per case)
 *
 * Then WaypointFilters: the chain with its four phase slots (src/extensions) and nothing attached,
 * and with one no-op user filter module (every phase) attached to the target's Service by a
 * WaypointFilter, loaded and compiled as the waypoint does it.
 *
 * No I/O: the figure is the chain's CPU cost per request, to set against the waypoint's
 * ≈70–110 µs per request end to end.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Registry } from 'prom-client';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { extensionSlots, WaypointExtensions, withExtensionSlots } from '../../src/extensions/index.ts';
import { ROUTES } from '../../src/routing/index.ts';
import { MeshStore } from '../../src/state/store.ts';
import { meshText, namespace, service, usesWaypoint, waypointFilter, waypointGateway, type Doc } from '../../test/helpers/mesh.ts';
import { log } from '../../src/util/log.ts';
import { FilterChain } from '../../src/pipeline/chain.ts';
import { ConnectionContext, StreamContext, type ConnectInfo } from '../../src/pipeline/context.ts';
import { FilterStatus, type Filter, type FilterFactory, type PhaseResult, type TerminalFilter } from '../../src/pipeline/filter.ts';
import { HeaderList } from '../../src/pipeline/headers.ts';
import { FilterRegistry } from '../../src/pipeline/registry.ts';
import { defineSlot } from '../../src/pipeline/slots.ts';
import type { MeshSnapshot, Target } from '../../src/state/types.ts';

const ITERATIONS = Number(process.env.BENCH_MICRO_ITERATIONS ?? 300_000);
const streamSlot = defineSlot<number>('bench.micro.stream', 'stream');
const connSlot = defineSlot<number>('bench.micro.connection', 'connection');

class NoopFilter implements Filter {
  readonly name: string;
  private readonly async: boolean;
  constructor(name: string, async: boolean) {
    this.name = name;
    this.async = async;
  }
  onConnection(conn: ConnectionContext): PhaseResult {
    conn.set(connSlot, (conn.get(connSlot) ?? 0) + 1);
    return FilterStatus.Continue;
  }
  onRequestHeaders(stream: StreamContext): PhaseResult {
    stream.set(streamSlot, (stream.get(streamSlot) ?? 0) + 1);
    return this.async ? Promise.resolve(FilterStatus.Continue) : FilterStatus.Continue;
  }
  onUpstreamRequest(stream: StreamContext, headers: HeaderList): void {
    if (stream.get(streamSlot) === -1) headers.append('x-never', '1');
  }
  onResponseHeaders(stream: StreamContext, headers: HeaderList): void {
    if (stream.get(streamSlot) === -1) headers.append('x-never', '1');
  }
  onStreamComplete(stream: StreamContext): void {
    stream.set(streamSlot, 0);
  }
  onConnectionComplete(conn: ConnectionContext): void {
    conn.set(connSlot, 0);
  }
}

class NullRouter implements TerminalFilter {
  readonly name = 'bench.terminal';
  forwarded = 0;
  forward(): void {
    this.forwarded++;
  }
}

function buildChain(n: number, asyncIndex: number): FilterChain {
  const registry = new FilterRegistry();
  const entries: { name: string }[] = [];
  for (let i = 0; i < n; i++) {
    const name = `bench.noop.${i}`;
    const factory: FilterFactory<undefined> = { name, parseConfig: () => undefined, create: () => new NoopFilter(name, i === asyncIndex) };
    registry.register(factory);
    entries.push({ name });
  }
  registry.register({ name: 'bench.terminal', parseConfig: () => undefined, create: () => new NullRouter() });
  entries.push({ name: 'bench.terminal' });
  return registry.build(entries, { mesh: { current: undefined as unknown as MeshSnapshot }, log, metrics: new Registry() });
}

const info: ConnectInfo = {
  peer: { uri: 'spiffe://cluster.local/ns/demo/sa/client', trustDomain: 'cluster.local', namespace: 'demo', serviceAccount: 'client' } as unknown as ConnectInfo['peer'],
  downstreamAddress: '10.0.0.1',
  downstreamPort: 40000,
  authority: '10.96.0.10:80',
  targetIp: '10.96.0.10',
  targetPort: 80,
  forwarded: '',
  baggage: '',
  traceparent: '',
};
const mesh = undefined as unknown as MeshSnapshot;
const target = { kind: 'service' } as unknown as Target;
const req = { headers: {} } as unknown as IncomingMessage;
const res = { headersSent: false, destroyed: false } as unknown as ServerResponse;

/** One tunnel carrying one request through every phase. Returns a promise only when a phase did. */
function once(chain: FilterChain, at: { mesh: MeshSnapshot; target: Target } = { mesh, target }): void | Promise<void> {
  const conn = new ConnectionContext(info, at.mesh, at.target, 'HTTP');
  const r1 = chain.runConnection(conn);
  // The connection manager builds one header list per request (src/inner-http/conn-manager.ts).
  const head = { protocol: 'HTTP/1.1', method: 'GET', path: '/', authority: 'echo', headers: new HeaderList(['host', 'echo', 'user-agent', 'bench', 'accept', '*/*']) };
  // Each request runs the chain without its dormant filters while they are (src/inner-http/server.ts).
  const sc = chain.forStream();
  const stream = new StreamContext(conn, sc, req, res, head);
  const finish = () => {
    sc.terminal.forward(stream);
    const up = new HeaderList(['host', 'echo', 'user-agent', 'bench', 'content-type', 'application/json']);
    sc.runUpstreamRequest(stream, up);
    const down = new HeaderList(['content-type', 'application/json', 'content-length', '2']);
    sc.runResponseHeaders(stream, down);
    sc.completeStream(stream);
    chain.completeConnection(conn);
  };
  if (typeof r1 !== 'number') throw new Error('onConnection is sync here');
  const r2 = sc.runRequestHeaders(stream);
  if (typeof r2 === 'number') return finish();
  return r2.then(finish);
}

async function measure(label: string, chain: FilterChain, at?: { mesh: MeshSnapshot; target: Target }): Promise<number> {
  // Warm-up, then the timed loop.
  for (let i = 0; i < 20_000; i++) {
    const p = once(chain, at);
    if (p) await p;
  }
  const t0 = process.hrtime.bigint();
  for (let i = 0; i < ITERATIONS; i++) {
    const p = once(chain, at);
    if (p) await p;
  }
  const ns = Number(process.hrtime.bigint() - t0) / ITERATIONS;
  process.stdout.write(`  ${label.padEnd(36)} ${ns.toFixed(0).padStart(7)} ns per tunnel+request\n`);
  return ns;
}

process.stdout.write(`filter chain overhead (${ITERATIONS.toLocaleString('en-US')} iterations per case, Node ${process.versions.node})\n`);
const base = await measure('0 filters (terminal only)', buildChain(0, -1));
const four = await measure('4 no-op filters', buildChain(4, -1));
const sixteen = await measure('16 no-op filters', buildChain(16, -1));
const fourAsync = await measure('4 no-op filters, 1 async', buildChain(4, 1));
process.stdout.write(
  `\n  per filter: ${((four - base) / 4).toFixed(0)} ns (4), ${((sixteen - base) / 16).toFixed(0)} ns (16); ` +
    `one promise-returning phase: +${(fourAsync - four).toFixed(0)} ns\n`,
);

/** The terminal-only chain with the phase slots, over a mesh whose WaypointFilters are `filters`. */
async function withExtensions(...filters: Doc[]): Promise<{ chain: FilterChain; at: { mesh: MeshSnapshot; target: Target }; close(): void }> {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'bench-chain-'));
  fs.writeFileSync(
    path.join(dir, 'noop.ts'),
    `import { FilterStatus } from 'node-waypoint/filter-api';
export default { create: () => ({ name: 'noop', onConnection: () => FilterStatus.Continue, onRequestHeaders: () => FilterStatus.Continue,
  onUpstreamRequest() {}, onResponseHeaders() {}, onStreamComplete() {}, onConnectionComplete() {} }) };
`,
  );
  fs.writeFileSync(
    path.join(dir, 'mesh.yaml'),
    meshText(waypointGateway('demo'), namespace('demo', usesWaypoint()), service({ name: 'echo', namespace: 'demo', vip: '10.96.0.10', ports: [{ name: 'http', port: 80 }] }), ...filters),
  );
  const extensions = new WaypointExtensions({ filters: [], metrics: new Registry(), phaseTimeoutMs: 10_000 });
  const store = await MeshStore.open({ meshFile: path.join(dir, 'mesh.yaml'), parts: [ROUTES, extensions.part] });
  extensions.bind(store);
  const terminal = new NullRouter();
  const chain = new FilterChain(withExtensionSlots([terminal], extensionSlots(store)));
  const at = { mesh: store.current, target: store.current.resolveTarget('10.96.0.10', 80)! };
  return { chain, at, close: () => (store.close(), fs.rmSync(dir, { recursive: true, force: true })) };
}

const slotsOnly = await withExtensions();
const slots = await measure('4 phase slots, nothing attached', slotsOnly.chain, slotsOnly.at);
slotsOnly.close();
const user = await withExtensions(waypointFilter('noop', { targetRefs: [{ kind: 'Service', name: 'echo' }], module: './noop.ts' }, 'demo'));
const oneUser = await measure('1 no-op user filter (WaypointFilter)', user.chain, user.at);
user.close();
process.stdout.write(`\n  phase slots: +${(slots - base).toFixed(0)} ns; one no-op user filter: +${(oneUser - slots).toFixed(0)} ns over the slots\n`);
