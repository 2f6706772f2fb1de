/**
 * Internal shapes of the mesh state (the standalone equivalent of what istiod serves over WDS).
 *
 * They follow `istio.workload.Workload` / `istio.workload.Service` (ztunnel proto/workload.proto)
 * closely enough that a reader of ztunnel's `state.rs` recognises every field, but they are plain,
 * deep-frozen objects built once per snapshot. Nothing on the data path parses YAML or walks
 * Kubernetes objects: it only reads the indexes of a {@link MeshSnapshot}.
 */
import type { ConfigLocation } from '../util/index.ts';
import type { MeshTelemetryConfig } from './telemetry-config.ts';
import type { FieldPath } from './yaml-locate.ts';

/**
 * Application protocol of a service port, as Istio derives it (istio/istio
 * pkg/config/kube/conversion.go).
 */
export type PortProtocol =
  | 'HTTP'
  | 'HTTP2'
  | 'GRPC'
  | 'GRPC-Web'
  | 'HTTPS'
  | 'TCP'
  | 'TLS'
  | 'Mongo'
  | 'Redis'
  | 'MySQL'
  | 'UDP'
  | 'UNKNOWN';

/**
 * How the waypoint reaches an endpoint:
 * - `HBONE`: an HBONE CONNECT to `ip:15008` (ambient workloads; ztunnel's `TunnelProtocol::HBONE`);
 * - `NONE`: plain TCP to `ip:targetPort` (`istio.io/dataplane-mode: none`; ztunnel's `NONE`);
 * - `SIDECAR`: mutual TLS to `ip:targetPort` with Istio's ALPN, and the `istio-peer-exchange`
 *   metadata exchange on TCP ports: the workload runs an Istio sidecar (Pod annotated
 *   `sidecar.istio.io/status`). ztunnel's proto has no value for this; it is what an Envoy cluster
 *   does for endpoints matched by its `tlsMode-istio` transport socket (ISTIO_MUTUAL).
 */
export type TunnelProtocol = 'HBONE' | 'NONE' | 'SIDECAR';

/** WDS WorkloadType, lower-case as ztunnel writes it into baggage keys (`k8s.<type>.name`). */
export type WorkloadType = 'deployment' | 'cronjob' | 'pod' | 'job';

/** A workload: a Pod or a WorkloadEntry (istio/ztunnel src/state/workload.rs `Workload`). */
export interface Workload {
  /** `<cluster>//Pod/<ns>/<name>` or `<cluster>/networking.istio.io/WorkloadEntry/<ns>/<name>`. */
  readonly uid: string;
  readonly kind: 'Pod' | 'WorkloadEntry';
  readonly name: string;
  readonly namespace: string;
  /** Normalised IP strings (IPv4 dotted, IPv6 compressed, IPv4-mapped IPv6 unwrapped). */
  readonly addresses: readonly string[];
  readonly serviceAccount: string;
  readonly trustDomain: string;
  /** `spiffe://<trustDomain>/ns/<namespace>/sa/<serviceAccount>`. */
  readonly identity: string;
  readonly labels: Readonly<Record<string, string>>;
  readonly annotations: Readonly<Record<string, string>>;
  /** Owner name with the pod-template hash stripped (Deployment name), else the pod name. */
  readonly workloadName: string;
  readonly workloadType: WorkloadType;
  /** `service.istio.io/canonical-name` → `app.kubernetes.io/name` → `app` → workloadName. */
  readonly canonicalName: string;
  /** `service.istio.io/canonical-revision` → `app.kubernetes.io/version` → `version` → `latest`. */
  readonly canonicalRevision: string;
  readonly clusterId: string;
  readonly network: string;
  readonly node: string;
  readonly region: string;
  readonly zone: string;
  readonly tunnelProtocol: TunnelProtocol;
  /** Ready condition (a Pod without conditions counts as ready; WorkloadEntry: always). */
  readonly healthy: boolean;
  /** Named container ports, for resolving a Service's named `targetPort` (name → port). */
  readonly namedPorts: Readonly<Record<string, number>>;
  /** True when `istio.io/use-waypoint` (on the workload or its namespace) names this waypoint
   *  and the waypoint's `istio.io/waypoint-for` is `workload` or `all`. */
  readonly servedByThisWaypoint: boolean;
}

/** One port of a service (Service.spec.ports[] / ServiceEntry.spec.ports[]). */
export interface ServicePort {
  readonly name: string;
  readonly port: number;
  /** Numeric target port, or a container port name to resolve per endpoint; 0 when unknown. */
  readonly targetPort: number | string;
  readonly appProtocol: string;
  readonly protocol: PortProtocol;
}

/** A selected endpoint of one service port. */
export interface Endpoint {
  readonly workload: Workload;
  /** IP the endpoint is dialed at (the workload's first address of a matching family). */
  readonly address: string;
  /** Resolved target port on the workload (the `:authority` port of the upstream CONNECT). */
  readonly targetPort: number;
  readonly tunnel: TunnelProtocol;
  /**
   * Precomputed `address:targetPort` (`[v6]:port` for IPv6): the host the endpoint is known by
   * (load balancing, outlier detection, retries' previous hosts, `%UPSTREAM_HOST%`) and, unless
   * {@link connectAuthority} says otherwise, the upstream CONNECT `:authority`.
   */
  readonly authority: string;
  /**
   * The CONNECT `:authority` when it is not {@link authority}: the backend service's `VIP:port`,
   * for an endpoint that is another waypoint in front of that service (chained waypoints, see
   * {@link ServiceWaypoint}). The waypoint resolves it as its own target, as ztunnel's
   * `hbone_target_destination` (istio/ztunnel src/proxy/outbound.rs `build_request`) and Istio's tunnel
   * metadata `local` (istio/istio pilot/pkg/xds/endpoints/endpoint_builder.go `buildEnvoyLbEndpoint`).
   */
  readonly connectAuthority?: string;
}

/**
 * The other waypoint a service uses (its `istio.io/use-waypoint`, resolved as istiod resolves it:
 * src/state/service-waypoints.ts): a route of this waypoint that sends a request to the service
 * sends it through that waypoint, which applies the service's own policies and routes.
 */
export interface ServiceWaypoint {
  /** The waypoint's Gateway. */
  readonly namespace: string;
  readonly name: string;
  /**
   * Per service port: the waypoint's healthy instances as endpoints (dialed over HBONE on
   * port 15008, `:authority` the service's `VIP:port`, identity the instance's
   * workload identity). Empty lists when the waypoint has no healthy instance: requests fail
   * (503 `UH`) rather than skip the service's waypoint.
   */
  readonly endpoints: ReadonlyMap<number, readonly Endpoint[]>;
}

/** A waypoint Gateway named by `istio.io/use-waypoint` (+ `istio.io/use-waypoint-namespace`). */
export interface WaypointRef {
  readonly namespace: string;
  readonly name: string;
}

/** A service: a Kubernetes Service or an Istio ServiceEntry. */
export interface Service {
  readonly kind: 'Service' | 'ServiceEntry';
  readonly name: string;
  readonly namespace: string;
  /** FQDN: `<name>.<ns>.svc.<domain>` for Services, `spec.hosts[0]` for ServiceEntries. */
  readonly hostname: string;
  /** VIPs (clusterIP(s) / ServiceEntry addresses), normalised. Empty for headless. */
  readonly addresses: readonly string[];
  readonly ports: readonly ServicePort[];
  /** Healthy endpoints per service port number. */
  readonly endpoints: ReadonlyMap<number, readonly Endpoint[]>;
  /** True when `istio.io/use-waypoint` (service, else namespace) names this waypoint. */
  readonly servedByThisWaypoint: boolean;
  /** The waypoint `istio.io/use-waypoint` (service, else namespace) names; undefined for none (or `none`). */
  readonly useWaypoint: WaypointRef | undefined;
  /**
   * The other waypoint requests routed to this service go through (chained waypoints); undefined
   * when this waypoint serves the service, when it uses none, or when the waypoint it names is
   * not a waypoint of the mesh that handles service traffic (it is then reached directly, as
   * ztunnel does when istiod reports no waypoint).
   */
  readonly viaWaypoint: ServiceWaypoint | undefined;
}

/**
 * What a CONNECT `:authority` resolves to on this waypoint (istio/istio
 * pilot/pkg/networking/core/listener_waypoint.go `buildWaypointInternal`).
 */
export type Target =
  | { readonly kind: 'service'; readonly service: Service; readonly port: ServicePort }
  | { readonly kind: 'workload'; readonly workload: Workload; readonly port: number };

/** This waypoint: the `Gateway` of class `istio-waypoint` it runs as. */
export interface WaypointIdentity {
  readonly namespace: string;
  readonly name: string;
  /** Istio's generated waypoints run as a service account named after the Gateway. */
  readonly serviceAccount: string;
  /** `spiffe://<td>/ns/<ns>/sa/<serviceAccount>`. */
  readonly identity: string;
  /** `istio.io/waypoint-for` label: `service` (default), `workload`, `all` or `none`. */
  readonly waypointFor: 'service' | 'workload' | 'all' | 'none';
}

/** MeshConfig `AccessLogEncoding` (istio/api mesh/v1alpha1/config.proto). */
export type AccessLogEncoding = 'TEXT' | 'JSON';

/** The parts of Istio's MeshConfig (istio/api mesh/v1alpha1/config.proto) this project reads. */
export interface MeshConfig {
  readonly trustDomain: string;
  readonly trustDomainAliases: readonly string[];
  readonly rootNamespace: string;
  /** `accessLogFile`: where the access log goes (`/dev/stdout` is Istio's usual value); '' = off, the default. */
  readonly accessLogFile: string;
  /** `accessLogEncoding`: `TEXT` (Istio's default line) or `JSON`; default `TEXT`. */
  readonly accessLogEncoding: AccessLogEncoding;
  /** `extensionProviders` (telemetry kinds), `defaultProviders`, `enableTracing`, `defaultConfig.tracing`: telemetry-config.ts. */
  readonly telemetry: MeshTelemetryConfig;
  /** The whole parsed MeshConfig, for the fields engines read themselves (`extensionProviders`, ...). */
  readonly raw: Readonly<Record<string, unknown>>;
}

/**
 * A Kubernetes object kept as-is for the engines that compile it (AuthorizationPolicy, HTTPRoute,
 * ...).
 */
export interface KeptResource {
  readonly apiVersion: string;
  readonly kind: string;
  readonly name: string;
  readonly namespace: string;
  readonly object: Readonly<Record<string, unknown>>;
  /**
   * Where a field of the object is in the mesh file (`[]` = the object itself): file, line,
   * document, object, field. Absent for resources not read from a file.
   */
  readonly locate?: (path: FieldPath) => ConfigLocation;
}

/**
 * One immutable, compiled view of the mesh. Replaced whole on every change; the data path reads
 * `store.current` once per tunnel or request and never sees a half-applied update.
 */
export interface MeshSnapshot {
  /** Monotonic version, starting at 1. */
  readonly version: number;
  readonly meshConfig: MeshConfig;
  readonly waypoint: WaypointIdentity;
  readonly services: readonly Service[];
  readonly workloads: readonly Workload[];
  /** Namespace labels, by namespace name. */
  readonly namespaces: ReadonlyMap<string, Readonly<Record<string, string>>>;
  /**
   * Resolve a CONNECT target. `ip` must be normalised (see `normalizeIp`).
   * Served service VIP:port first, then the address of a workload this waypoint serves.
   * Returns undefined when this waypoint serves nothing there.
   */
  resolveTarget(ip: string, port: number): Target | undefined;
  /** Workload owning an address (any workload of the mesh, served or not). */
  workloadByIp(ip: string): Workload | undefined;
  /** Service by `namespace/hostname`. */
  serviceByHost(namespace: string, hostname: string): Service | undefined;
  /** Kept resources of one kind (e.g. `AuthorizationPolicy`), in file order. */
  resources(kind: string): readonly KeptResource[];
  /** The kinds of the kept resources (e.g. to report a mistyped kind). */
  kinds(): readonly string[];
  /**
   * The compiled `part` of this snapshot (AuthorizationPolicy evaluators, route tables, ...), as
   * compiled before the snapshot was published: a lookup, never a compile.
   * @throws Error when the snapshot was not compiled with that part (a programming error: the
   *   store or `compileMesh` was not given it).
   */
  part<T>(part: MeshPart<T>): T;
  /** A JSON-able dump for `/config_dump`. */
  toJSON(): unknown;
}

/**
 * One compiled part of a mesh snapshot: what an engine makes of it (see parts.ts). Engines define
 * their parts with `definePart`; readers pass the part to {@link MeshSnapshot.part}.
 */
export interface MeshPart<T> {
  /** For messages (`authz`, `routes`, ...). */
  readonly name: string;
  /** What {@link MeshSnapshot.part} looks up: shared by every binding of the part (`with`). */
  readonly key: object;
  /**
   * Compile the part for `snapshot` (parts listed before it are readable with `snapshot.part`).
   * Throwing refuses the whole snapshot; a ConfigError names the file, line, object and field.
   * Undefined for a part that must be bound (`with`) before it is given to the store.
   */
  readonly compile: ((snapshot: MeshSnapshot) => T) | undefined;
  /**
   * Asynchronous work the compile needs first (importing the modules WaypointFilters name): called
   * just before `compile` with the same snapshot; undefined when there is nothing to wait for. A
   * rejection refuses the snapshot like a throwing `compile`. Only stores that compile in slices
   * (`MeshStore.open`) can wait; a synchronous compile refuses a part that returns a promise.
   */
  readonly load: ((snapshot: MeshSnapshot) => Promise<void> | undefined) | undefined;
  /**
   * Bring runtime state in line with the part of a snapshot just published (before the store's
   * subscribers are told): circuit breakers, outlier detectors, caches kept across snapshots.
   */
  publish?(value: T, snapshot: MeshSnapshot): void;
  /** What an error of this part refuses a reload as (`invalid authorization policy`); undefined: the error alone. */
  readonly refusal: string | undefined;
  /** The same part (same key for readers) compiled, and optionally published, another way. */
  with(how: PartBinding<T>): MeshPart<T>;
}

/** How a part's owner compiles (and publishes) it: see {@link MeshPart.with}. */
export interface PartBinding<T> {
  load?(snapshot: MeshSnapshot): Promise<void> | undefined;
  compile(snapshot: MeshSnapshot): T;
  publish?(value: T, snapshot: MeshSnapshot): void;
}

/**
 * Workloads and services learned from a discovery service (istiod's WDS in `--cluster` mode),
 * compiled in place of the Pods, Services, ServiceEntries and WorkloadEntries of the mesh
 * objects. `resolve` is called once per compile, after the waypoint Gateway is known, and must
 * return new model objects (the compile freezes them); it never does I/O. A service's
 * `viaWaypoint` is the source's to fill (WDS gives each service's waypoint address): the compile
 * resolves chained waypoints only for services it builds from objects.
 */
export interface DiscoveredMesh {
  resolve(ctx: DiscoveryContext): { readonly workloads: readonly Workload[]; readonly services: readonly Service[] };
}

/** What {@link DiscoveredMesh.resolve} needs from the compile. */
export interface DiscoveryContext {
  /** This waypoint (from its Gateway object); decides `servedByThisWaypoint`. */
  readonly waypoint: WaypointIdentity;
  readonly trustDomain: string;
  /** Cluster DNS suffix (`cluster.local`). */
  readonly domainSuffix: string;
  readonly clusterId: string;
  readonly namespaceLabels: (namespace: string) => Readonly<Record<string, string>>;
}
