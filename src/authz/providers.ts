/**
 * ext_authz providers for CUSTOM policies: MeshConfig `extensionProviders` entries with
 * `envoyExtAuthzGrpc` or `envoyExtAuthzHttp` (istio/api mesh/v1alpha1/config.proto). The engine only
 * needs to know whether a provider is usable and of which kind; calling it is the filter's job.
 *
 * A provider is unusable, so the requests its CUSTOM rules match are denied, when it is not
 * declared, not an ext_authz provider, or badly configured: port outside 1–65535, empty service,
 * service not found in the mesh ({@link lookupProviderService}), bad `statusOnError`, `pathPrefix` not starting with `/` (istio/istio
 * `pilot/pkg/security/authz/builder/extauthz.go` `processExtensionProvider`, `getExtAuthz`).
 * Each provider is judged on its own.
 */
import type { MeshSnapshot, Service } from '../state/index.ts';

/** A declared extension provider, as far as authorization is concerned. */
export interface ExtAuthzProvider {
  readonly name: string;
  /** `grpc` (`envoyExtAuthzGrpc`, also usable on TCP) or `http` (`envoyExtAuthzHttp`, HTTP only). */
  readonly kind: 'grpc' | 'http';
  /** Why the provider cannot be used; undefined when it can. */
  readonly error?: string;
  /** The provider's settings as written (service, port, timeout, failOpen, ...). */
  readonly config: Readonly<Record<string, unknown>>;
}

const isRecord = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);

/**
 * Resolve an ext_authz provider's `service` (`[<Namespace>/]<Hostname>`, istio/api mesh/v1alpha1
 * `EnvoyExternalAuthorizationGrpcProvider.service`) among the mesh's Services and ServiceEntries,
 * as istiod's `extensionproviders.LookupCluster` does: the name is always a full hostname
 * (`ext-authz.foo.svc.cluster.local`, a ServiceEntry host), never a Service's short name; with a
 * `<Namespace>/` prefix only that namespace's service of that hostname counts; without one the
 * hostname must be defined in exactly one namespace.
 * @returns the Service, or Istio's error text when there is none (or it is ambiguous).
 */
export function lookupProviderService(snapshot: MeshSnapshot, service: string): Service | string {
  if (service === '') return 'service must not be empty';
  const parts = service.split('/');
  if (parts.length === 2) {
    const found = snapshot.serviceByHost(parts[0], parts[1]);
    if (found) return found;
  } else {
    const matches = snapshot.services.filter((s) => s.hostname === service);
    const namespaces = [...new Set(matches.map((s) => s.namespace))];
    if (namespaces.length === 1) return matches[0];
    if (namespaces.length > 1) {
      return `found ${service} in multiple namespaces [${namespaces.sort().join(' ')}], specify the namespace explicitly in the format of <Namespace>/<Hostname>`;
    }
  }
  return `could not find service ${service} in Istio service registry`;
}

function checkProvider(snapshot: MeshSnapshot, settings: Record<string, unknown>, kind: 'grpc' | 'http'): string | undefined {
  const port = settings.port;
  if (typeof port !== 'number' || !Number.isInteger(port) || port < 1 || port > 65535) return `port must be in the range [1, 65535], found: ${JSON.stringify(port)}`;
  const service = settings.service;
  if (typeof service !== 'string' || service === '') return 'service must not be empty';
  const found = lookupProviderService(snapshot, service);
  if (typeof found === 'string') return found;
  const status = settings.statusOnError;
  if (status !== undefined && status !== '' && !/^[1-5]\d\d$/.test(String(status))) return `invalid statusOnError ${JSON.stringify(status)}`;
  if (kind === 'http' && settings.pathPrefix !== undefined && !String(settings.pathPrefix).startsWith('/')) {
    return `pathPrefix must begin with \`/\`, found: ${JSON.stringify(settings.pathPrefix)}`;
  }
  return undefined;
}

/**
 * Read `meshConfig.raw.extensionProviders` of `snapshot`. Providers that are not ext_authz ones
 * (tracing, logging, ...) are listed with an error saying so; a duplicate name makes both unusable.
 */
export function extAuthzProviders(snapshot: MeshSnapshot): ReadonlyMap<string, ExtAuthzProvider> {
  const out = new Map<string, ExtAuthzProvider>();
  const list = snapshot.meshConfig.raw.extensionProviders;
  if (!Array.isArray(list)) return out;
  for (const entry of list) {
    if (!isRecord(entry) || typeof entry.name !== 'string' || entry.name === '') continue;
    const grpc = entry.envoyExtAuthzGrpc;
    const http = entry.envoyExtAuthzHttp;
    const kind = isRecord(grpc) ? 'grpc' : 'http';
    const settings = isRecord(grpc) ? grpc : isRecord(http) ? http : undefined;
    let error = settings ? checkProvider(snapshot, settings, kind) : `extension provider ${entry.name} is not an ext_authz provider`;
    if (out.has(entry.name)) error = `extension provider name must be unique, found duplicate: ${entry.name}`;
    out.set(entry.name, { name: entry.name, kind, ...(error ? { error } : {}), config: settings ?? {} });
  }
  return out;
}
