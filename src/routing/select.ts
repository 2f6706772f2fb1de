/**
 * Data-path route selection: which table applies to the client, the first match of it, and the
 * weighted backend of the matched rule. Nothing here parses configuration.
 */
import { firstMatch, type MatchInput } from './match.ts';
import type { CompiledMatch, CompiledRule, RouteTable, ServicePortRoutes, WeightedBackend } from './types.ts';

/**
 * The table that applies to a client: its own namespace's consumer routes when it has some (and
 * is not in the service's namespace, where routes are producer routes), else the producer routes;
 * undefined when neither applies (the default route).
 */
export function tableFor(routes: ServicePortRoutes, clientNamespace: string, serviceNamespace: string): RouteTable | undefined {
  if (clientNamespace && clientNamespace !== serviceNamespace) {
    const own = routes.consumers.get(clientNamespace);
    if (own) return own;
  }
  return routes.producer;
}

/** The first match of `table` the request satisfies (tables are sorted by precedence), or undefined. */
export function selectMatch(table: RouteTable, req: MatchInput): CompiledMatch | undefined {
  return firstMatch(table.matches, req);
}

/**
 * Choose a backend of `rule` in proportion to the weights (`random` in [0, 1)). Undefined when the
 * rule has no backend with a weight (every request answers 500).
 */
export function pickBackend(rule: CompiledRule, random: number = Math.random()): WeightedBackend | undefined {
  const list = rule.backends;
  if (list.length <= 1) return list[0];
  let x = random * rule.totalWeight;
  for (let i = 0; i < list.length; i++) {
    x -= list[i].weight;
    if (x < 0) return list[i];
  }
  return list[list.length - 1];
}
