/**
 * The upstream's table of DestinationRule-shaped clusters (served service ports a DestinationRule
 * applies to): one {@link ClusterState} per cluster — circuit-breaker counts, outlier detector,
 * round-robin cursor, hash tables — kept across mesh snapshots by cluster key, so counts,
 * ejections and positions carry over a reload.
 *
 * The table is a compiled part of every snapshot ({@link ClusterTable.part}, bound to this table):
 * compiling it plans the clusters (policy, Envoy name, hosts, and the ring-hash / maglev table of
 * each hashing cluster's endpoints) without touching the live states; publishing the snapshot
 * applies the plan (new states, new limits, hosts that left forgotten, states of clusters that are
 * gone closed). The data path only looks a target's cluster up ({@link ClusterTable.clusterFor}).
 */
import type { Registry } from 'prom-client';
import { definePart, isHttpProtocol, upstreamEndpoints, type Endpoint, type MeshPart, type MeshSnapshot, type ServicePort, type Target, serviceClusterName } from '../state/index.ts';
import { ClusterState, hashTableOf, sameHash, type HashTable } from './cluster-state.ts';
import { ClusterStats } from './cluster-stats.ts';
import type { Ejection } from './outlier-detector.ts';
import type { ClusterTrafficPolicy } from '../routing/index.ts';

/** One DestinationRule-shaped cluster of a snapshot, as planned. */
export interface PlannedCluster {
  /** `ns/hostname|port`. */
  readonly key: string;
  /** Envoy's cluster name (`inbound-vip|<port>|<http|tcp>|<hostname>`, `outbound|<port>||<hostname>` for a service this waypoint does not serve). */
  readonly name: string;
  readonly policy: ClusterTrafficPolicy;
  /** The cluster's healthy endpoints in the snapshot (the other waypoint's instances for a service that goes through one). */
  readonly endpoints: readonly Endpoint[];
  /** Their authorities (outlier detection forgets the others). */
  readonly hosts: ReadonlySet<string>;
  /** The hash table of `endpoints`, for a policy with a consistent hash and at least one endpoint. */
  readonly table: HashTable | undefined;
}

/** The clusters of one snapshot: the {@link CLUSTERS} part. */
export interface ClusterPlan {
  readonly version: number;
  /** By cluster key. */
  readonly clusters: ReadonlyMap<string, PlannedCluster>;
  /** Cluster key of every service port of the snapshot; null for ports no DestinationRule shapes. */
  readonly byPort: ReadonlyMap<ServicePort, string | null>;
}

/** The cluster table as a compiled part; bound (`with`) by a {@link ClusterTable}. */
export const CLUSTERS = definePart<ClusterPlan>('clusters');

/** The runtime state of one DestinationRule-shaped cluster, as `/config_dump` shows it. */
export interface ClusterRuntimeDump {
  readonly name: string;
  readonly key: string;
  /** `DestinationRule/<ns>/<name>` whose policy applies. */
  readonly source: string;
  readonly activeRequests: number;
  readonly pendingRequests: number;
  readonly activeRetries: number;
  readonly activeConnections: number;
  readonly hosts: number;
  /** Hosts ejected by outlier detection now (empty without outlier detection). */
  readonly ejectedHosts: readonly Ejection[];
}

/** A service port a DestinationRule shapes, with its compiled policy. */
export interface ClusterSpec {
  readonly target: Extract<Target, { kind: 'service' }>;
  readonly policy: ClusterTrafficPolicy;
}

export interface ClusterTableOptions {
  /**
   * The shaped service ports of a snapshot (the compiled DestinationRules' `clusters`: their part
   * must be compiled before this table's).
   */
  readonly clusters: (snapshot: MeshSnapshot) => readonly ClusterSpec[];
  /** The waypoint's registry: Envoy's `envoy_cluster_*` outlier and circuit-breaker stats go there (see cluster-stats.ts). */
  readonly metrics?: Registry;
}

export class ClusterTable {
  /** The {@link CLUSTERS} part bound to this table: give it to the store after the DestinationRules' part. */
  readonly part: MeshPart<ClusterPlan>;
  private readonly states = new Map<string, ClusterState>();
  /** The published snapshot's service ports → their cluster state (null: none). */
  private byPort: ReadonlyMap<ServicePort, ClusterState | null> = new Map();
  private published: ClusterPlan | undefined;
  private readonly stats: ClusterStats | undefined;
  private readonly shaped: (snapshot: MeshSnapshot) => readonly ClusterSpec[];

  constructor(opts: ClusterTableOptions) {
    this.shaped = opts.clusters;
    this.stats = opts.metrics ? new ClusterStats(opts.metrics) : undefined;
    this.part = CLUSTERS.with({ compile: (snapshot) => this.plan(snapshot), publish: (plan) => this.apply(plan) });
  }

  /**
   * The state of the cluster `target` belongs to when a DestinationRule shapes it; undefined for
   * workload-addressed traffic and clusters without one (the defaults apply). A lookup.
   */
  clusterFor(target: Target): ClusterState | undefined {
    if (target.kind !== 'service') return undefined;
    const state = this.byPort.get(target.port);
    if (state !== undefined) return state ?? undefined;
    // A target of an earlier snapshot (a request that started before a reload): by key.
    return this.states.size === 0 ? undefined : this.states.get(`${target.service.namespace}/${target.service.hostname}|${target.port.port}`);
  }

  /** Each live cluster's pool signature, by key (pools made under other settings are replaced). */
  signatures(): ReadonlyMap<string, string> {
    return new Map([...this.states].map(([key, s]) => [key, s.poolSignature]));
  }

  /** The runtime state of every cluster (`/config_dump`). */
  dump(): ClusterRuntimeDump[] {
    return [...this.states.values()].map((c) => ({
      name: c.name,
      key: c.key,
      source: c.policy.source,
      activeRequests: c.activeRequests,
      pendingRequests: c.pendingRequests,
      activeRetries: c.activeRetries,
      activeConnections: c.activeConnections,
      hosts: c.hostCount,
      ejectedHosts: c.outlier?.ejections() ?? [],
    }));
  }

  /** Stop every cluster's timers and drop its stats series. */
  close(): void {
    for (const c of this.states.values()) c.close();
  }

  /** Plan `snapshot`'s clusters (reads the live table, changes nothing). */
  private plan(snapshot: MeshSnapshot): ClusterPlan {
    const clusters = new Map<string, PlannedCluster>();
    const byPort = new Map<ServicePort, string | null>();
    for (const service of snapshot.services) for (const port of service.ports) byPort.set(port, null);
    for (const { target, policy } of this.shaped(snapshot)) {
      byPort.set(target.port, policy.key);
      if (clusters.has(policy.key)) continue;
      const endpoints = upstreamEndpoints(target.service, target.port.port);
      clusters.set(policy.key, {
        key: policy.key,
        name: serviceClusterName(target, isHttpProtocol(target.port.protocol) ? 'http' : 'tcp'),
        policy,
        endpoints,
        hosts: new Set(endpoints.map((ep) => ep.authority)),
        table: this.tableFor(policy, endpoints),
      });
    }
    return Object.freeze({ version: snapshot.version, clusters, byPort });
  }

  /** The hash table of `endpoints` under `policy`: the published one when the hosts and settings are the same, else a new one. */
  private tableFor(policy: ClusterTrafficPolicy, endpoints: readonly Endpoint[]): HashTable | undefined {
    const ch = policy.loadBalancer.consistentHash;
    if (!ch || endpoints.length === 0) return undefined;
    const before = this.published?.clusters.get(policy.key);
    const same =
      before?.table !== undefined &&
      sameHash(before.policy.loadBalancer.consistentHash, ch) &&
      before.endpoints.length === endpoints.length &&
      before.endpoints.every((ep, i) => ep.authority === endpoints[i].authority);
    return same ? before.table : hashTableOf(endpoints, ch);
  }

  /** Make the live states those of `plan` (a snapshot just published). */
  private apply(plan: ClusterPlan): void {
    for (const [key, state] of this.states) {
      if (plan.clusters.has(key)) continue;
      state.close();
      this.states.delete(key);
    }
    for (const c of plan.clusters.values()) {
      let state = this.states.get(c.key);
      if (!state) this.states.set(c.key, (state = new ClusterState(c.policy, c.name, this.stats)));
      else state.update(c.policy);
      state.hostCount = c.hosts.size;
      state.retain(c.hosts);
      if (c.table) state.adopt(c.endpoints, c.table);
    }
    const byPort = new Map<ServicePort, ClusterState | null>();
    for (const [port, key] of plan.byPort) byPort.set(port, key === null ? null : this.states.get(key)!);
    this.byPort = byPort;
    this.published = plan;
  }
}
