/**
 * The attachment table of one mesh snapshot (the {@link EXTENSIONS} part): which filters of which
 * WaypointFilters run for each served service port, for the waypoint as a whole, and for each
 * route rule, already ordered by phase and priority. Built once per snapshot; the data path does
 * one or two Map lookups.
 *
 * Attachment (as Istio's WasmPlugin `targetRefs`, istio/api extensions/v1alpha1/wasm.proto):
 * - a Gateway targetRef naming this waypoint's Gateway: every tunnel and request of the waypoint;
 * - a Service (or ServiceEntry) targetRef: traffic to that service when this waypoint serves it;
 * - an HTTPRoute/GRPCRoute targetRef: requests the route's rules are chosen for (only the rule whose
 *   `name` is the `sectionName`, when given), run by the router once the rule is chosen;
 * - an HTTPRoute/GRPCRoute rule's `ExtensionRef` filter naming a WaypointFilter of the route's
 *   namespace: that rule (a name that does not exist makes the rule answer 500, as Gateway API
 *   requires of a filter that cannot be resolved).
 * Targets are in the WaypointFilter's namespace. A target that does not exist, another waypoint's
 * Gateway, or a service this waypoint does not serve attaches nothing (logged). `match` (ports,
 * mode) narrows Gateway and Service attachments by service port.
 *
 * Order within a phase (Istio's): higher `priority` first, then namespace/name.
 */
import { log } from '../util/index.ts';
import { definePart, type MeshSnapshot, type Service, type Target } from '../state/index.ts';
import { FilterStatus, ResponseFlag, sendLocalReply, type StreamContext } from '../pipeline/index.ts';
import { routesFor, type CompiledRule } from '../routing/index.ts';
import { AttachedList, EMPTY_LIST, type Attached } from './run.ts';
import { isWaypointFilter, matchesPort, parseWaypointFilter, PHASES, type WaypointFilterSpec } from './schema.ts';

/** One list per phase, in chain order (AUTHN, AUTHZ, STATS, unspecified). */
export type AttachedSet = readonly AttachedList[];

/** The compiled attachments of one snapshot. */
export interface CompiledExtensions {
  readonly version: number;
  /** Every WaypointFilter of the snapshot (`WaypointFilter/<ns>/<name>`), attached or not. */
  readonly filters: readonly string[];
  /** Nothing is attached anywhere (no target, route rule or Gateway has a filter): the phase slots are dormant. */
  readonly empty: boolean;
  /** The filters for a tunnel's target, by phase (never undefined: nothing attached is all empty). */
  forTarget(target: Target): AttachedSet;
  /** The filters of a route rule, or undefined when none. */
  forRule(rule: CompiledRule): AttachedList | undefined;
}

/** What the compile needs of its owner (extensions.ts): filters made ready, per attachment. */
export interface ExtensionContext {
  /**
   * Check the resource's filter and config now (throws ConfigError naming its field); returns the
   * filter of one attachment (`attachment` names it; the same one may be asked for again).
   */
  prepare(spec: WaypointFilterSpec, snapshot: MeshSnapshot): (attachment: string) => Attached;
}

interface Entry {
  readonly spec: WaypointFilterSpec;
  readonly attached: Attached;
}

const EMPTY_SET: AttachedSet = Object.freeze(PHASES.map(() => EMPTY_LIST));

/**
 * Compile the WaypointFilters of `snapshot` (after its ROUTES part).
 * @throws ConfigError for an invalid WaypointFilter, filter or config (the snapshot is refused).
 */
export function compileExtensions(snapshot: MeshSnapshot, ctx: ExtensionContext): CompiledExtensions {
  const specs = snapshot.resources('WaypointFilter').filter(isWaypointFilter).map(parseWaypointFilter);
  const routes = routesFor(snapshot);
  const gateway: Entry[] = [];
  const byService = new Map<Service, Entry[]>();
  const byRule = new Map<CompiledRule, Entry[]>();
  const byName = new Map<string, { spec: WaypointFilterSpec; instance: (attachment: string) => Attached }>();
  const { waypoint } = snapshot;

  for (const spec of specs) {
    const instance = ctx.prepare(spec, snapshot);
    byName.set(`${spec.namespace}/${spec.name}`, { spec, instance });
    for (const t of spec.targetRefs) {
      if (t.kind === 'Gateway') {
        if (t.name === waypoint.name && spec.namespace === waypoint.namespace) gateway.push({ spec, attached: instance('gateway') });
        else log.debug({ filter: spec.ref, gateway: `${spec.namespace}/${t.name}` }, 'extensions: targets another Gateway, not this waypoint');
      } else if (t.kind === 'Service' || t.kind === 'ServiceEntry') {
        const services = snapshot.services.filter((s) => s.kind === t.kind && s.name === t.name && s.namespace === spec.namespace);
        if (services.length === 0) log.warn({ filter: spec.ref, target: `${t.kind}/${spec.namespace}/${t.name}` }, 'extensions: target not found; attached to nothing');
        for (const s of services) {
          if (!s.servedByThisWaypoint) continue;
          getOrAdd(byService, s).push({ spec, attached: instance(`${t.kind}/${s.namespace}/${s.name}`) });
        }
      } else {
        const route = `${t.kind}/${spec.namespace}/${t.name}`;
        const rules = routes.rulesOf(route);
        if (!rules) {
          log.warn({ filter: spec.ref, target: route }, 'extensions: route not found (or not accepted); attached to nothing');
          continue;
        }
        const chosen = t.sectionName === undefined ? rules : rules.filter((r) => r.name === t.sectionName);
        if (chosen.length === 0) log.warn({ filter: spec.ref, target: route, sectionName: t.sectionName }, 'extensions: the route has no rule of that name; attached to nothing');
        if (!spec.match.length || spec.match.some((m) => m.server)) {
          const attached = instance(t.sectionName === undefined ? route : `${route}#${t.sectionName}`);
          for (const r of chosen) getOrAdd(byRule, r).push({ spec, attached });
        }
      }
    }
  }

  for (const route of routes.routes) {
    const namespace = route.split('/')[1];
    for (const rule of routes.rulesOf(route) ?? []) {
      for (const name of rule.extensionRefs) {
        const found = byName.get(`${namespace}/${name}`);
        if (found) getOrAdd(byRule, rule).push({ spec: found.spec, attached: found.instance(`${route}#rules[${rule.index}]`) });
        else {
          log.warn({ route, rule: rule.index, filter: `WaypointFilter/${namespace}/${name}` }, 'extensions: ExtensionRef names a WaypointFilter that does not exist; requests matching the rule answer 500');
          getOrAdd(byRule, rule).push(missing(namespace, name));
        }
      }
    }
  }

  // Ports that some Gateway-attached filter's match names get their own set; other ports share one.
  const gatewayPorts = new Map<number, AttachedSet>();
  for (const e of gateway) for (const m of e.spec.match) for (const p of m.ports) if (!gatewayPorts.has(p)) gatewayPorts.set(p, setOf(gateway, p));
  const gatewayDefault = setOf(gateway, -1);
  const services = new Map<Service, Map<number, AttachedSet>>();
  for (const [service, entries] of byService) {
    const perPort = new Map<number, AttachedSet>();
    for (const p of service.ports) perPort.set(p.port, setOf([...gateway, ...entries], p.port));
    services.set(service, perPort);
  }
  const rules = new Map<CompiledRule, AttachedList>();
  for (const [rule, entries] of byRule) rules.set(rule, new AttachedList(entries.sort(order).map((e) => e.attached)));

  return Object.freeze({
    version: snapshot.version,
    filters: Object.freeze(specs.map((s) => s.ref)),
    empty: gateway.length === 0 && byService.size === 0 && byRule.size === 0,
    forTarget: (target: Target): AttachedSet => {
      const port = target.kind === 'service' ? target.port.port : target.port;
      if (target.kind === 'service') {
        const set = services.get(target.service)?.get(port);
        if (set) return set;
      }
      return gatewayPorts.get(port) ?? gatewayDefault;
    },
    forRule: (rule: CompiledRule) => rules.get(rule),
  });
}

/** The attachments of `entries` that apply on `port`, by phase, ordered. */
function setOf(entries: readonly Entry[], port: number): AttachedSet {
  const chosen = entries.filter((e) => matchesPort(e.spec, port)).sort(order);
  if (chosen.length === 0) return EMPTY_SET;
  return Object.freeze(
    PHASES.map((_, phase) => {
      const list = chosen.filter((e) => e.spec.phase === phase).map((e) => e.attached);
      return list.length ? new AttachedList(list) : EMPTY_LIST;
    }),
  );
}

/** Phase, then higher priority first, then namespace/name (WasmPlugin's order). */
function order(a: Entry, b: Entry): number {
  if (a.spec.phase !== b.spec.phase) return a.spec.phase - b.spec.phase;
  if (a.spec.priority !== b.spec.priority) return b.spec.priority - a.spec.priority;
  const ka = `${a.spec.namespace}/${a.spec.name}`;
  const kb = `${b.spec.namespace}/${b.spec.name}`;
  return ka < kb ? -1 : ka > kb ? 1 : 0;
}

function getOrAdd<K, V>(map: Map<K, V[]>, key: K): V[] {
  let list = map.get(key);
  if (!list) map.set(key, (list = []));
  return list;
}

/** A rule's ExtensionRef names no WaypointFilter: its requests answer 500 (Gateway API's rule for unresolvable filters). */
function missing(namespace: string, name: string): Entry {
  const ref = `WaypointFilter/${namespace}/${name}`;
  const filter = {
    name: ref,
    onRequestHeaders(stream: StreamContext) {
      sendLocalReply(stream, 500, '', ResponseFlag.None, `route_filter_not_found{${ref}}`);
      return FilterStatus.StopAndReply;
    },
  };
  const spec = { namespace, name, phase: PHASES.length - 1, priority: 0, match: [] } as unknown as WaypointFilterSpec;
  return { spec, attached: { filter, ref, deadlineMs: 0 } };
}

/**
 * The WaypointFilter attachments as a compiled part of every mesh snapshot; its owner
 * (`WaypointExtensions`, extensions.ts) binds it to the module loader and the filter registry.
 */
export const EXTENSIONS = definePart<CompiledExtensions>('extensions', { refusal: 'invalid WaypointFilter' });

/** The compiled extensions of `snapshot` (its {@link EXTENSIONS} part): a lookup. */
export function extensionsFor(snapshot: MeshSnapshot): CompiledExtensions {
  return snapshot.part(EXTENSIONS);
}
