/**
 * Where WaypointFilters run in the waypoint's filter chain: four slot filters, one per WasmPlugin
 * phase, placed once in the chain built from the bootstrap `filters` (istio/api
 * extensions/v1alpha1/wasm.proto `PluginPhase`): `AUTHN` and `AUTHZ` just before `istio.authz`
 * (which does Istio's authentication and authorization both), `STATS` just before `istio.stats`,
 * unset just before the router. Each tunnel and request looks its target's filters up once in the
 * current snapshot's attachment table (compile.ts) and each slot runs its phase's share, so
 * changing WaypointFilters never rebuilds the chain, and a target with none costs a lookup. While
 * the mesh has no attachment at all the slots are dormant (pipeline/filter.ts `dormant`): new
 * requests run the chain without them.
 *
 * Route rules: the router runs a chosen rule's filters (`runRouteFilters`) after it chose the rule
 * and before it builds the upstream request, since the rule is known only then (Envoy resolves the
 * route before its filters and reads per-route config from it; here the route is matched after
 * the request phases, so it sees their header edits). Their later hooks (upstream request,
 * response headers, completion) run with the last slot's.
 */
import { defineSlot, FilterStatus, type ConnectionContext, type Filter, type FilterEnv, type HeaderList, type PhaseResult, type StreamContext } from '../pipeline/index.ts';
import type { MeshSnapshot } from '../state/index.ts';
import type { CompiledRule } from '../routing/index.ts';
import { extensionsFor, type AttachedSet } from './compile.ts';
import { runConnection, runObservers, runRequest, runUpstreamRequest, type AttachedList } from './run.ts';

/** The slot filters' names, in phase order (AUTHN, AUTHZ, STATS, unset). */
export const EXTENSION_SLOTS = ['waypoint.extensions.authn', 'waypoint.extensions.authz', 'waypoint.extensions.stats', 'waypoint.extensions'] as const;

const CONN_SET = defineSlot<AttachedSet>('waypoint.extensions', 'connection');
const STREAM_SET = defineSlot<AttachedSet>('waypoint.extensions', 'stream');
const ROUTE_LIST = defineSlot<AttachedList>('waypoint.extensions.route', 'stream');

/** The tunnel's filters: its target's in the snapshot it was admitted under. */
function connectionSet(conn: ConnectionContext): AttachedSet {
  let set = conn.get(CONN_SET);
  if (!set) conn.set(CONN_SET, (set = extensionsFor(conn.mesh).forTarget(conn.target)));
  return set;
}

/** A request's filters: its target's in the current snapshot (a tunnel outlives mesh updates; its new requests follow them). */
function streamSet(stream: StreamContext, mesh: FilterEnv['mesh']): AttachedSet {
  let set = stream.get(STREAM_SET);
  if (set) return set;
  const now = mesh.current;
  const conn = stream.conn;
  const target = now === conn.mesh ? conn.target : now.resolveTarget(conn.info.targetIp, conn.info.targetPort);
  set = extensionsFor(now).forTarget(target ?? conn.target);
  stream.set(STREAM_SET, set);
  return set;
}

class ExtensionSlot implements Filter {
  readonly name: string;
  private readonly phase: number;
  /** The unset phase's slot, last before the router: also runs the chosen route rule's later hooks. */
  private readonly last: boolean;
  private readonly mesh: FilterEnv['mesh'];

  constructor(phase: number, mesh: FilterEnv['mesh']) {
    this.name = EXTENSION_SLOTS[phase];
    this.phase = phase;
    this.last = phase === EXTENSION_SLOTS.length - 1;
    this.mesh = mesh;
  }

  /** Dormant while the current snapshot attaches no WaypointFilter at all (a lookup of its compiled part). */
  dormant(): boolean {
    return extensionsFor(this.mesh.current).empty;
  }

  onConnection(conn: ConnectionContext): PhaseResult {
    const list = connectionSet(conn)[this.phase].connection;
    return list.length === 0 ? FilterStatus.Continue : runConnection(list, conn, 0);
  }

  onUpstreamConnected(conn: ConnectionContext): void {
    const set = conn.get(CONN_SET);
    if (set) runObservers(set[this.phase].upstreamConnected, 'onUpstreamConnected', conn);
  }

  onConnectionComplete(conn: ConnectionContext): void {
    const set = conn.get(CONN_SET);
    if (set) runObservers(set[this.phase].connectionComplete, 'onConnectionComplete', conn);
  }

  onRequestHeaders(stream: StreamContext): PhaseResult {
    const list = streamSet(stream, this.mesh)[this.phase].request;
    return list.length === 0 ? FilterStatus.Continue : runRequest(list, stream, 0);
  }

  onUpstreamRequest(stream: StreamContext, headers: HeaderList): void {
    runUpstreamRequest(streamSet(stream, this.mesh)[this.phase].upstreamRequest, stream, headers);
    const route = this.last ? stream.get(ROUTE_LIST) : undefined;
    // A filter that failed here answered already: the route's filters do not run after it.
    if (route && stream.responseCode === 0) runUpstreamRequest(route.upstreamRequest, stream, headers);
  }

  onResponseHeaders(stream: StreamContext, headers: HeaderList): void {
    const route = this.last ? stream.get(ROUTE_LIST) : undefined;
    if (route) runObservers(route.response, 'onResponseHeaders', stream, headers);
    runObservers(streamSet(stream, this.mesh)[this.phase].response, 'onResponseHeaders', stream, headers);
  }

  onStreamComplete(stream: StreamContext): void {
    const route = this.last ? stream.get(ROUTE_LIST) : undefined;
    if (route) runObservers(route.complete, 'onStreamComplete', stream);
    runObservers(streamSet(stream, this.mesh)[this.phase].complete, 'onStreamComplete', stream);
  }
}

/** The slot filters, in phase order, reading the current snapshot from `mesh` (place them with {@link withExtensionSlots}). */
export function extensionSlots(mesh: FilterEnv['mesh']): Filter[] {
  return EXTENSION_SLOTS.map((_, phase) => new ExtensionSlot(phase, mesh));
}

/**
 * `filters` (a chain's, router last) with the `slots` inserted where their phase runs: AUTHN and
 * AUTHZ before `istio.authz` (else where STATS goes), STATS before `istio.stats` (else before
 * the router), unset before the router.
 */
export function withExtensionSlots(filters: readonly Filter[], slots: readonly Filter[]): Filter[] {
  const out = [...filters];
  const indexOf = (name: string) => out.findIndex((f) => f.name === name);
  const routerAt = () => Math.max(0, out.length - 1);
  const statsAt = () => (indexOf('istio.stats') >= 0 ? indexOf('istio.stats') : routerAt());
  const authzAt = () => (indexOf('istio.authz') >= 0 ? indexOf('istio.authz') : statsAt());
  out.splice(authzAt(), 0, slots[0]);
  out.splice(authzAt(), 0, slots[1]);
  out.splice(Math.max(statsAt(), out.indexOf(slots[1]) + 1), 0, slots[2]);
  out.splice(routerAt(), 0, slots[3]);
  return out;
}

/**
 * The router's hook for a chosen route rule: run the rule's filters' request phase (guarded as
 * the slots' are); their later hooks run with the last slot. Continue when the rule has none, or
 * when the request runs without the slots (they were dormant as it started: the rule's filters
 * were attached since, and their later hooks would not run).
 */
export function runRouteFilters(stream: StreamContext, rule: CompiledRule, mesh: MeshSnapshot): PhaseResult {
  if (stream.get(STREAM_SET) === undefined) return FilterStatus.Continue;
  const list = extensionsFor(mesh).forRule(rule);
  if (!list) return FilterStatus.Continue;
  stream.set(ROUTE_LIST, list);
  return list.request.length === 0 ? FilterStatus.Continue : runRequest(list.request, stream, 0);
}
