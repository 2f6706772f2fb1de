/**
 * The compiled traffic policy of a cluster, as the upstream applies it: defined with the
 * DestinationRules that make it (src/routing/traffic-policy.ts), re-exported for the upstream.
 */
export {
  defaultTrafficPolicy,
  poolSignature,
  UNLIMITED_POOL,
  type ClusterTrafficPolicy,
  type ConnectionPoolPolicy,
  type ConsistentHashPolicy,
  type HashKey,
  type LbAlgorithm,
  type LoadBalancerSettings,
  type OutlierDetectionPolicy,
} from '../routing/index.ts';
