/**
 * Where an attempt goes: the endpoint of a request's next attempt, picked and leased (the load
 * balancer's or a DestinationRule's policy, NetworkPolicy admission, retries avoiding hosts already
 * tried), and what a consistent hash reads of the request.
 */
import { STREAM_ADMISSION } from '../netpol/index.ts';
import { originalClient } from '../peer/index.ts';
import type { HashKey } from '../routing/index.ts';
import type { Target } from '../state/index.ts';
import { defineSlot, type Slot, type StreamContext } from '../pipeline/index.ts';
import { type ClusterManager, type HashRequest, leaseEndpoint, requestHash, type UpstreamLease } from '../upstream/index.ts';

/** The `Set-Cookie` value a DestinationRule's consistent hash generated for a request (added to the response). */
export const GENERATED_COOKIE: Slot<string> = defineSlot<string>('envoy.lb.hash_cookie', 'stream');

/**
 * Pick the endpoint for a request's next attempt (avoiding `tried` authorities when another
 * exists), record it on the stream (endpoint, upstream host, attempt count) and lease it.
 * Undefined when the target has no healthy endpoint (or none the NetworkPolicy mode admits).
 */
export function startAttempt(clusters: ClusterManager, target: Target, s: StreamContext, tried: readonly string[] | undefined): UpstreamLease | undefined {
  const lease = leaseEndpoint(clusters, target, s.conn.info.targetIp, { admit: s.get(STREAM_ADMISSION)?.admit, avoid: tried, hash: (key: HashKey) => requestHash(key, hashRequestOf(s)) });
  if (!lease) return undefined;
  s.endpoint = lease.ep;
  s.upstreamHost = lease.ep.authority;
  s.attempts++;
  return lease;
}

/** What a DestinationRule's consistent hash reads from `s` (see upstream/hash-policy.ts). */
export function hashRequestOf(s: StreamContext): HashRequest {
  return {
    sourceIp: originalClient(s.conn.info),
    authority: s.authority,
    method: s.method,
    path: s.path,
    forwardPath: s.forwardPath ?? s.path,
    header: (name) => {
      const v = s.requestHeaders.getAll(name);
      return v.length === 0 ? undefined : v;
    },
    connection: s.conn.info,
    setCookie: (cookie) => s.set(GENERATED_COOKIE, cookie),
  };
}
