/**
 * Assemble a {@link MeshSnapshot} from its compiled data: build every lookup index once,
 * deep-freeze, then compile the engines' parts (parts.ts) into it. The data path only calls the
 * index lookups below; none of them scans a list.
 */
import { deepFreeze, deepFreezeStepwise, runNow, type Stepwise } from '../util/index.ts';
import { parseCidr, type Cidr } from './ip.ts';
import { compilePartsStepwise, missingPart } from './parts.ts';
import type {
  KeptResource,
  MeshConfig,
  MeshPart,
  MeshSnapshot,
  Service,
  ServicePort,
  Target,
  WaypointIdentity,
  Workload,
} from './types.ts';

/** Everything a snapshot holds, before indexing. */
export interface SnapshotData {
  readonly version: number;
  readonly meshConfig: MeshConfig;
  readonly waypoint: WaypointIdentity;
  readonly services: readonly Service[];
  readonly workloads: readonly Workload[];
  readonly namespaces: ReadonlyMap<string, Readonly<Record<string, string>>>;
  readonly kept: readonly KeptResource[];
}

type PortMap = Map<number, Target>;

/** Objects indexed between two pauses of {@link createSnapshotStepwise}. */
const PER_STEP = 512;

/**
 * Build the snapshot. Index rules (istio/istio pilot/pkg/networking/core/listener_waypoint.go
 * `buildWaypointInternal`):
 * - service targets: every VIP of every service this waypoint serves × each non-UDP port; the first
 *   service to claim a VIP:port wins. ServiceEntry CIDR addresses are checked after exact VIPs.
 * - workload targets: every address of every workload this waypoint serves (any port).
 * - `workloadByIp`: every address of every workload; the first workload to claim an address wins.
 * The result and everything reachable from it is frozen; then `compiled` parts are compiled into
 * it, in order (@throws PartCompileError for the first that throws).
 */
export function createSnapshot(data: SnapshotData, compiled: readonly MeshPart<unknown>[] = []): MeshSnapshot {
  return runNow(createSnapshotStepwise(data, compiled));
}

/** {@link createSnapshot}, pausing every few hundred objects and after each part. */
export function* createSnapshotStepwise(data: SnapshotData, compiled: readonly MeshPart<unknown>[] = []): Stepwise<MeshSnapshot> {
  const vipIndex = new Map<string, PortMap>();
  const cidrIndex: { cidr: Cidr; ports: PortMap }[] = [];
  const byHost = new Map<string, Service>();
  let n = 0;
  for (const service of data.services) {
    if (++n % PER_STEP === 0) yield;
    if (!byHost.has(`${service.namespace}/${service.hostname}`)) byHost.set(`${service.namespace}/${service.hostname}`, service);
    if (!service.servedByThisWaypoint) continue;
    const targets: [number, Target][] = service.ports
      .filter((p) => p.protocol !== 'UDP')
      .map((port: ServicePort) => [port.port, deepFreeze({ kind: 'service', service, port } as const)]);
    for (const address of service.addresses) {
      const cidr = parseCidr(address);
      if (cidr) {
        cidrIndex.push({ cidr, ports: new Map(targets) });
        continue;
      }
      let ports = vipIndex.get(address);
      if (!ports) vipIndex.set(address, (ports = new Map()));
      for (const [number, target] of targets) if (!ports.has(number)) ports.set(number, target);
    }
  }

  const servedByIp = new Map<string, Workload>();
  const byIp = new Map<string, Workload>();
  for (const workload of data.workloads) {
    if (++n % PER_STEP === 0) yield;
    for (const address of workload.addresses) {
      if (!byIp.has(address)) byIp.set(address, workload);
      if (workload.servedByThisWaypoint && !servedByIp.has(address)) servedByIp.set(address, workload);
    }
  }

  const resources = new Map<string, KeptResource[]>();
  for (const r of data.kept) {
    let list = resources.get(r.kind);
    if (!list) resources.set(r.kind, (list = []));
    list.push(r);
  }
  const none: readonly KeptResource[] = Object.freeze([]);
  // Filled below, after the snapshot is frozen (parts compile against the finished snapshot);
  // reachable only through `part()`, so nothing can change it once the snapshot is returned.
  const partValues = new Map<object, unknown>();

  const snapshot: MeshSnapshot = {
    version: data.version,
    meshConfig: data.meshConfig,
    waypoint: data.waypoint,
    services: data.services,
    workloads: data.workloads,
    namespaces: data.namespaces,
    resolveTarget(ip: string, port: number): Target | undefined {
      const exact = vipIndex.get(ip)?.get(port);
      if (exact) return exact;
      for (const { cidr, ports } of cidrIndex) {
        const t = ports.get(port);
        if (t && cidr.contains(ip)) return t;
      }
      const workload = servedByIp.get(ip);
      return workload ? { kind: 'workload', workload, port } : undefined;
    },
    workloadByIp: (ip: string) => byIp.get(ip),
    serviceByHost: (namespace: string, hostname: string) => byHost.get(`${namespace}/${hostname}`),
    resources: (kind: string) => resources.get(kind) ?? none,
    kinds: () => [...resources.keys()],
    part<T>(part: MeshPart<T>): T {
      const value = partValues.get(part.key);
      if (value === undefined && !partValues.has(part.key)) throw missingPart(part, data.version);
      return value as T;
    },
    toJSON: () => dump(data, resources),
  };
  yield* deepFreezeStepwise(resources);
  yield* deepFreezeStepwise(snapshot);
  yield* compilePartsStepwise(snapshot, compiled, partValues);
  return snapshot;
}

/** A readable, JSON-able view for `/config_dump` and debugging. */
function dump(data: SnapshotData, resources: ReadonlyMap<string, readonly KeptResource[]>): unknown {
  return {
    version: data.version,
    waypoint: data.waypoint,
    meshConfig: data.meshConfig,
    namespaces: Object.fromEntries(data.namespaces),
    services: data.services.map((s) => ({
      kind: s.kind,
      name: s.name,
      namespace: s.namespace,
      hostname: s.hostname,
      addresses: s.addresses,
      servedByThisWaypoint: s.servedByThisWaypoint,
      useWaypoint: s.useWaypoint ? `${s.useWaypoint.namespace}/${s.useWaypoint.name}` : null,
      // Another waypoint routed requests go through (chained waypoints), with its instances.
      throughWaypoint: s.viaWaypoint
        ? { gateway: `${s.viaWaypoint.namespace}/${s.viaWaypoint.name}`, instances: [...new Set([...s.viaWaypoint.endpoints.values()].flat().map((e) => e.authority))] }
        : null,
      ports: s.ports,
      endpoints: Object.fromEntries(
        [...s.endpoints].map(([port, eps]) => [
          port,
          eps.map((e) => ({ workload: e.workload.uid, address: e.address, targetPort: e.targetPort, tunnel: e.tunnel, authority: e.authority })),
        ]),
      ),
    })),
    workloads: data.workloads,
    resources: Object.fromEntries([...resources].map(([kind, list]) => [kind, list.length])),
  };
}
