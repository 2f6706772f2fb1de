/**
 * The routing and traffic-policy parts of `/config_dump` (Envoy's admin `/config_dump` shows the
 * routes and clusters it runs; these are this waypoint's equivalents), per mesh snapshot:
 * - `routes`: per served service port, the Envoy cluster it balances over, and the Gateway API
 *   routes attached to it (producer routes, and consumer routes per client namespace) with the
 *   number of rules in each table; `rejectedRoutes`: routes not accepted, with the reason
 *   (istiod's `Accepted=False` condition);
 * - `destinationRules`: every DestinationRule, and the policy each cluster gets (the source rule,
 *   load balancer, connection-pool limits, outlier detection);
 * - `clusters`: the runtime state of DestinationRule-shaped clusters (requests active and pending,
 *   retries, connections, ejected hosts with the time they return), from the cluster manager.
 */
import { dumpDestinationRules, routesFor, type RouteTable } from '../routing/index.ts';
import { isHttpProtocol, type MeshSnapshot, type Target, clusterName } from '../state/index.ts';
import type { ClusterManager } from '../upstream/index.ts';

interface TableDump {
  readonly routes: readonly string[];
  readonly rules: number;
}

function table(t: RouteTable): TableDump {
  return { routes: t.routes, rules: new Set(t.matches.map((m) => m.rule)).size };
}

/** Routing and DestinationRule state of `snapshot` (its compiled parts), and the clusters' runtime state. */
export function routingConfigDump(snapshot: MeshSnapshot, clusters: ClusterManager | undefined): unknown {
  const compiled = routesFor(snapshot);
  const routes = [];
  for (const service of snapshot.services) {
    if (!service.servedByThisWaypoint) continue;
    for (const port of service.ports) {
      if (port.protocol === 'UDP') continue;
      const target: Target = { kind: 'service', service, port };
      const attached = compiled.forTarget(target);
      routes.push({
        service: service.hostname,
        port: port.port,
        cluster: clusterName(target, isHttpProtocol(port.protocol) ? 'http' : 'tcp'),
        producer: attached?.producer ? table(attached.producer) : null,
        consumers: Object.fromEntries([...(attached?.consumers ?? [])].map(([ns, t]) => [ns, table(t)])),
      });
    }
  }
  return {
    version: snapshot.version,
    acceptedRoutes: compiled.routes,
    rejectedRoutes: compiled.rejected,
    routes,
    destinationRules: dumpDestinationRules(snapshot),
    clusters: clusters?.dumpClusters() ?? [],
  };
}
