/**
 * Where an ext_authz provider's `service` lives: a Kubernetes Service or a ServiceEntry of the mesh
 * state, named `[<namespace>/]<hostname>` (istio/api mesh/v1alpha1/config.proto; istio/istio
 * `extensionproviders.LookupCluster`: with a namespace, the service of that hostname in that
 * namespace; without, the hostname must exist in exactly one namespace). The provider's `port` is
 * a service port; its healthy endpoints are used round-robin.
 */
import type { Endpoint, MeshSnapshot, Service } from '../state/index.ts';
import { lookupProviderService } from '../authz/index.ts';

/**
 * The service `ref` names, or undefined when there is none or, without a namespace, when the
 * hostname is ambiguous ({@link lookupProviderService}: hostnames only, as istiod).
 */
export function findProviderService(snapshot: MeshSnapshot, ref: string): Service | undefined {
  const found = lookupProviderService(snapshot, ref);
  return typeof found === 'string' ? undefined : found;
}

/** Healthy endpoints of `service` on service port `port` (none when the port is not declared). */
export function providerEndpoints(service: Service, port: number): readonly Endpoint[] {
  return service.endpoints.get(port) ?? [];
}

/** Round-robin over an endpoint list; the cursor lives as long as the list (one snapshot). */
export class RoundRobin {
  private readonly cursors = new WeakMap<readonly Endpoint[], number>();

  pick(list: readonly Endpoint[]): Endpoint | undefined {
    if (list.length === 0) return undefined;
    const i = this.cursors.get(list) ?? 0;
    this.cursors.set(list, (i + 1) % list.length);
    return list[i % list.length];
  }
}

/** Key of the connections to one endpoint (tunnel kind, address, port). */
export function endpointKey(ep: Endpoint): string {
  return `${ep.tunnel}|${ep.authority}|${ep.workload.identity}`;
}
