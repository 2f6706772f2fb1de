/**
 * RequestAuthentication for this waypoint: which resources attach, and one
 * {@link RequestAuthenticator} per target, compiled once per mesh snapshot.
 *
 * Attachment is the AuthorizationPolicy one (istio/istio
 * `pilot/pkg/model/policyattachment.go`): `targetRefs` to this waypoint's Gateway (from its
 * namespace) or to the `istio-waypoint` GatewayClass (from the root namespace) cover all its
 * traffic; a `Service` / `ServiceEntry` reference (from the service's namespace) covers traffic
 * addressed to that service. Selector and namespace-wide resources are ztunnel's / sidecars' and are
 * ignored (debug line). A target's rules are those of every attached resource, sorted by issuer.
 */
import { serviceKey, WAYPOINT_GATEWAY_CLASS } from '../authz/index.ts';
import type { KeptResource, MeshSnapshot, Service, Target } from '../state/index.ts';
import { log } from '../util/index.ts';
import { RequestAuthenticator } from './authenticator.ts';
import type { JwksCache } from './jwks.ts';
import { parseRequestAuthentication, type JwtRule, type RequestAuthentication } from './request-authentication.ts';

/** All RequestAuthentication state of one snapshot. */
export interface CompiledAuthn {
  readonly version: number;
  /** Every RequestAuthentication of the mesh, validated (also those this waypoint does not apply). */
  readonly policies: readonly RequestAuthentication[];
  /** Every rule some target uses. */
  readonly rules: readonly JwtRule[];
  /** The authenticator of a target; undefined when no RequestAuthentication applies (skip the step). */
  forTarget(target: Target): RequestAuthenticator | undefined;
}

/** Parse and validate every RequestAuthentication of `snapshot`. @throws ConfigError on the first invalid one. */
export function parseRequestAuthentications(snapshot: MeshSnapshot): RequestAuthentication[] {
  return snapshot
    .resources('RequestAuthentication')
    .filter((r: KeptResource) => r.apiVersion.startsWith('security.istio.io/'))
    .map(parseRequestAuthentication);
}

/**
 * Compile the RequestAuthentications of `snapshot` for the waypoint it describes.
 * @throws ConfigError naming the resource and field of the first invalid one.
 */
export function compileAuthn(snapshot: MeshSnapshot, jwks: JwksCache, opts: { clockSkewSeconds?: number } = {}): CompiledAuthn {
  const { waypoint, meshConfig } = snapshot;
  const policies = parseRequestAuthentications(snapshot);
  const served = new Map<string, Service>();
  for (const s of snapshot.services) if (s.servedByThisWaypoint) served.set(serviceKey(s), s);

  const wide: JwtRule[] = [];
  const byService = new Map<string, JwtRule[]>();
  for (const ra of policies) {
    if (ra.targetRefs.length === 0) {
      log.debug({ policy: ra.ref }, 'authn: ignoring RequestAuthentication without targetRefs (selector and namespace-wide ones are not the waypoint\'s)');
      continue;
    }
    let toWaypoint = false;
    const services = new Set<string>();
    for (const ref of ra.targetRefs) {
      if (ref.kind === 'Gateway' && ref.name === waypoint.name && ra.namespace === waypoint.namespace) toWaypoint = true;
      else if (ref.kind === 'GatewayClass' && ref.name === WAYPOINT_GATEWAY_CLASS && ra.namespace === meshConfig.rootNamespace) toWaypoint = true;
      else if (ref.kind === 'Service' || ref.kind === 'ServiceEntry') {
        const key = serviceKey({ kind: ref.kind, namespace: ra.namespace, name: ref.name });
        if (served.has(key)) services.add(key);
      }
    }
    if (toWaypoint) wide.push(...ra.rules);
    for (const key of services) {
      let list = byService.get(key);
      if (!list) byService.set(key, (list = []));
      list.push(...ra.rules);
    }
  }

  const shared = wide.length ? new RequestAuthenticator(wide, jwks, opts) : undefined;
  const perService = new Map<Service, RequestAuthenticator>();
  for (const [key, own] of byService) perService.set(served.get(key)!, new RequestAuthenticator([...wide, ...own], jwks, opts));
  const rules = [...new Set([...wide, ...[...byService.values()].flat()])];
  return Object.freeze({
    version: snapshot.version,
    policies: Object.freeze(policies),
    rules: Object.freeze(rules),
    forTarget: (target: Target) => (target.kind === 'service' ? (perService.get(target.service) ?? shared) : shared),
  });
}
