/**
 * Composition root of `waypoint run`: mesh state, identity, the HBONE listener, the filter chain,
 * the upstream, and the admin/readiness servers, wired together. The mesh store and certificate
 * come from the mode's sources (file-sources.ts: a mesh file and a local CA; cluster-sources.ts:
 * istiod and the Kubernetes API); the rest is one path for both. {@link Waypoint.start} returns a
 * handle with the bound addresses and a graceful {@link Waypoint.shutdown}.
 */
import os from 'node:os';
import path from 'node:path';
import v8 from 'node:v8';
import type { AddressInfo, Socket } from 'node:net';
import type { Registry } from 'prom-client';
import { routingConfigDump, AdminServer } from './admin/index.ts';
import type { BootstrapConfig } from './config/index.ts';
import { RequestAuthn } from './authn/index.ts';
import { AUTHZ, requestPathNormalizer } from './authz/index.ts';
import { PEER_AUTHENTICATION } from './ztunnel/index.ts';
import { EXT_AUTHZ_PROVIDERS, ExtAuthzClient, createExtAuthzHook } from './ext-authz/index.ts';
import { ConfigError, log, settleWithin } from './util/index.ts';
import { HboneSessionPool, HboneServer } from './hbone/index.ts';
import { type CertificateIssuer, parseTtl, type WorkloadCertificate } from './identity/index.ts';
import { InnerHttpServer } from './inner-http/index.ts';
import { refuseDownstreamPeer, waypointConnectHandler } from './listener/index.ts';
import { FilterChain, type Filter, type FilterEnv, type FilterFactory, FilterRegistry, OverloadManager, type OverloadSettings } from './pipeline/index.ts';
import { extensionSlots, extensionsFor, runRouteFilters, WaypointExtensions, withExtensionSlots } from './extensions/index.ts';
import { NETWORK_POLICIES } from './netpol/index.ts';
import { routerFactory, TcpProxy } from './router/index.ts';
import { compileDestinationRules, DESTINATION_RULES, destinationRulesFor, ROUTES, type LbAlgorithm } from './routing/index.ts';
import type { MeshPart, MeshStore } from './state/index.ts';
import { AccessLogFilter, AccessLogSinks, createMetricsRegistry, registerOverloadMetrics } from './telemetry/index.ts';
import { TELEMETRY, TracingRuntime } from './tracing/index.ts';
import { ClusterManager, ClusterTable, SidecarTransport } from './upstream/index.ts';
import { waypointSelf } from './peer/index.ts';
import { attachableFilters, registerBuiltinFilters } from '../filters/index.ts';
import { AUTHZ_FILTER_NAME } from '../filters/authz/index.ts';
import type { ClusterSettings } from './cluster-env.ts';
import { openFileSources } from './file-sources.ts';
import { refuseIdentityChange, type SourceContext, type SourceOrigin, type WaypointSources } from './sources.ts';

export { checkCaTrustDomain, meshCa } from './file-sources.ts';
export { clusterSettingsFromEnv, DEFAULT_ROOT_CERT_FILE, DEFAULT_TOKEN_FILE, type ClusterFlags, type ClusterSettings } from './cluster-env.ts';
export type { SourceOrigin } from './sources.ts';

/**
 * Inputs of {@link Waypoint.start}: the bootstrap config plus where mesh state and the certificate
 * come from: `meshFile` (standalone, with a local CA) or `cluster` (istiod and the Kubernetes API).
 */
export interface WaypointOptions {
  readonly bootstrap: BootstrapConfig;
  /** Standalone: mesh YAML (Kubernetes + Istio objects). Watched for changes. */
  readonly meshFile?: string;
  /** Standalone: MeshConfig YAML; overrides the `istio` ConfigMap of the mesh file. */
  readonly meshConfigFile?: string;
  /** Standalone: `namespace/name` of the waypoint Gateway when the mesh file has several. */
  readonly gateway?: string;
  /** Standalone: CA directory (root-cert.pem, root-key.pem). Default: `<state dir>/ca`, created on first use. */
  readonly caDir?: string;
  /** Standalone: watch the mesh file (default true). */
  readonly watch?: boolean;
  /** In a cluster: istiod, the Kubernetes API and the pod's identity (see cluster-env.ts). */
  readonly cluster?: ClusterSettings;
  /** Aborts the wait for the sources (a shutdown before the waypoint was ready). */
  readonly signal?: AbortSignal;
  /** The bootstrap file the config came from, for error messages. */
  readonly configFile?: string;
  /** Extra filter factories to register (embedding and tests), usable by name in `bootstrap.filters`. */
  readonly extraFilters?: readonly FilterFactory<unknown>[];
  /**
   * Issue the waypoint's certificate from this instead of the CA in `caDir` (src/workers: a worker
   * takes the certificate its primary holds, pushed as PEM).
   */
  readonly issuer?: CertificateIssuer & { readonly trustDomain: string };
  /** src/workers: the primary owns the HBONE listener at `address`; `serve` gets the function its connections go to (false: draining). */
  readonly handedOverHbone?: { readonly address: AddressInfo; serve(accept: (socket: Socket) => boolean): void; onPeerThrottled(ip: string, forMs: number): void };
}

/** Addresses actually bound (port 0 in the config becomes the chosen port here). */
export interface WaypointAddresses {
  readonly hbone: AddressInfo;
  readonly admin: AddressInfo;
  readonly readiness: AddressInfo | undefined;
}

/** A running waypoint. Create with {@link Waypoint.start}; stop with {@link Waypoint.shutdown}. */
export class Waypoint {
  readonly addresses: WaypointAddresses;
  readonly mesh: MeshStore;
  readonly certificate: WorkloadCertificate;
  /** Where the mesh state and the certificate come from. */
  readonly origin: SourceOrigin;
  readonly metrics: Registry;
  private readonly sources: WaypointSources;
  private readonly hbone: HboneServer;
  private readonly admin: AdminServer;
  private readonly readiness: AdminServer | undefined;
  private readonly sessions: HboneSessionPool;
  private readonly clusters: ClusterManager;
  private readonly extAuthz: ExtAuthzClient;
  private readonly inner: InnerHttpServer;
  private readonly accessLog: AccessLogSinks;
  private readonly tracing: TracingRuntime;
  private readonly bootstrap: BootstrapConfig;
  private readonly extensions: WaypointExtensions;
  /** The buffered-bytes budget (read-only outside: tests and `/stats/prometheus`). */
  readonly overload: OverloadManager;
  private draining = false;
  private stopped: Promise<void> | undefined;

  private constructor(parts: {
    addresses: WaypointAddresses;
    sources: WaypointSources;
    metrics: Registry;
    hbone: HboneServer;
    admin: AdminServer;
    readiness: AdminServer | undefined;
    sessions: HboneSessionPool;
    clusters: ClusterManager;
    extAuthz: ExtAuthzClient;
    inner: InnerHttpServer;
    accessLog: AccessLogSinks;
    tracing: TracingRuntime;
    bootstrap: BootstrapConfig;
    overload: OverloadManager;
    extensions: WaypointExtensions;
  }) {
    this.addresses = parts.addresses;
    this.sources = parts.sources;
    this.mesh = parts.sources.mesh;
    this.certificate = parts.sources.certificate;
    this.origin = parts.sources.origin;
    this.metrics = parts.metrics;
    this.hbone = parts.hbone;
    this.admin = parts.admin;
    this.readiness = parts.readiness;
    this.sessions = parts.sessions;
    this.clusters = parts.clusters;
    this.extAuthz = parts.extAuthz;
    this.inner = parts.inner;
    this.accessLog = parts.accessLog;
    this.tracing = parts.tracing;
    this.bootstrap = parts.bootstrap;
    this.overload = parts.overload;
    this.extensions = parts.extensions;
  }

  /**
   * Listen on the admin and readiness servers (not ready yet), open the mode's sources (the mesh
   * file and a local CA, or istiod and the Kubernetes API: {@link WaypointOptions.cluster}), then
   * build the data path on their mesh store and certificate and listen for HBONE; ready from then
   * on. Throws {@link ConfigError} for invalid input (including a CA whose trust domain differs
   * from the mesh's), the listen error (e.g. EADDRINUSE) when an address is taken, or the
   * signal's reason when it aborts the wait for the sources; nothing is left running then.
   */
  static async start(opts: WaypointOptions): Promise<Waypoint> {
    const cfg = opts.bootstrap;
    if ((opts.meshFile === undefined) === (opts.cluster === undefined)) throw new Error('Waypoint.start: give exactly one of meshFile (standalone) and cluster (in a cluster)');
    if (cfg.networkPolicy.enforceOnOriginalIdentity && !cfg.filters.some((f) => f.name === AUTHZ_FILTER_NAME)) {
      // The mode is enforced by istio.authz: without it NetworkPolicies would silently not apply.
      throw new ConfigError(`networkPolicy.enforceOnOriginalIdentity needs the ${AUTHZ_FILTER_NAME} filter in filters (it enforces the NetworkPolicies)`, {
        file: opts.configFile,
        field: 'networkPolicy.enforceOnOriginalIdentity',
      });
    }
    // Long-lived state the mesh's compiled parts are bound to: the JWKS cache of RequestAuthentication
    // and the DestinationRule-shaped clusters (their counts, ejections and stats outlive snapshots).
    const metrics = createMetricsRegistry();
    const authn = new RequestAuthn();
    const clusterTable = new ClusterTable({ metrics, clusters: (s) => destinationRulesFor(s).clusters });
    // The span collectors the Telemetry API names, reconciled as each snapshot is published.
    const tracing = new TracingRuntime({ metrics });
    // WaypointFilters: their modules are loaded and their filters created as each snapshot compiles;
    // module paths are relative to the mesh file's directory (in a cluster: the working directory).
    const extensions = new WaypointExtensions({
      filters: [...attachableFilters(), ...(opts.extraFilters ?? [])],
      metrics,
      phaseTimeoutMs: cfg.extensions.phaseTimeoutMs,
      baseDir: opts.meshFile ? path.dirname(path.resolve(opts.meshFile)) : process.cwd(),
    });
    const cleanup: (() => unknown)[] = [() => clusterTable.close(), () => tracing.close()];
    let self: Waypoint | undefined;
    let waitingFor = (): string => 'starting';
    const ready = () => self !== undefined && !self.draining;
    const notReady = () => (self ? 'draining' : `waiting for ${waitingFor()}`);
    try {
      // Probes are answered (not ready) while the sources are awaited: a control plane that is
      // away shows as readiness false, never as a process that does not answer.
      const admin = new AdminServer({ ready, notReady, metrics, configDump: () => self?.configDump() });
      const readiness = cfg.listeners.readiness ? new AdminServer({ ready, notReady }) : undefined;
      const adminAddr = await admin.listen(cfg.listeners.admin);
      cleanup.push(() => admin.close());
      const readinessAddr = readiness ? await readiness.listen(cfg.listeners.readiness) : undefined;
      if (readiness) cleanup.push(() => readiness.close());

      const ctx: SourceContext = {
        metrics,
        parts: waypointParts(authn, clusterTable, cfg.upstream.loadBalancer, tracing.part, extensions.part),
        accept: refuseIdentityChange,
        certTtlMs: parseTtl(cfg.identity.certTtl),
        signal: opts.signal,
        waiting: (why) => (waitingFor = why),
      };
      // Loaded only in a cluster: the Kubernetes client and istiod's gRPC stack cost a standalone start ~1 s.
      const sources = opts.cluster
        ? await (await import('./cluster-sources.ts')).openClusterSources(opts.cluster, ctx)
        : await openFileSources({ ...opts, meshFile: opts.meshFile! }, ctx);
      cleanup.push(() => sources.close());
      const { mesh, certificate } = sources;
      extensions.bind(mesh);
      const snap = mesh.current;

      const sessions = new HboneSessionPool({
        material: () => certificate.current,
        http2: cfg.http2,
        trustDomain: () => mesh.current.meshConfig.trustDomain,
        connectTimeoutMs: cfg.upstream.connectTimeoutMs,
        connectResponseTimeoutMs: cfg.upstream.connectResponseTimeoutMs,
        idleTimeoutMs: cfg.upstream.idleTimeoutMs,
        maxStreamsPerConnection: cfg.upstream.maxStreamsPerConnection,
      });
      cleanup.push(() => sessions.destroy());
      // Toward sidecar workloads: the same certificate, and the waypoint's own peer for istio-peer-exchange.
      const podName = os.hostname();
      const sidecar = new SidecarTransport({
        material: () => certificate.current,
        local: (ip) => waypointSelf(mesh.current, { pod: podName, ip: ip || '127.0.0.1' }),
        connectTimeoutMs: cfg.upstream.connectTimeoutMs,
      });
      const clusters = new ClusterManager({
        sessions,
        sidecar,
        hbonePort: cfg.upstream.hbonePort,
        loadBalancer: cfg.upstream.loadBalancer,
        connectTimeoutMs: cfg.upstream.connectTimeoutMs,
        connectTimeoutEjectionMs: cfg.upstream.connectTimeoutEjectionMs,
        httpKeepAliveMs: cfg.upstream.httpKeepAliveMs,
        maxResponseHeadersBytes: cfg.http.maxRequestHeadersBytes,
        http2: cfg.http2,
        clusters: clusterTable,
      });
      cleanup.push(() => clusters.destroy());
      const overload = new OverloadManager(overloadSettings(cfg));
      cleanup.push(() => overload.stop());
      registerOverloadMetrics(metrics, overload);

      // CUSTOM authorization (ext_authz providers reached through the cluster manager, as Envoy's
      // ext_authz clusters) and RequestAuthentication (JWKS cached across mesh snapshots).
      const extAuthzClient = new ExtAuthzClient({ dial: (ep, use) => clusters.openTcp(ep, use) });
      cleanup.push(() => extAuthzClient.close());

      const registry = registerBuiltinFilters(new FilterRegistry(), {
        authz: { extAuthz: createExtAuthzHook(extAuthzClient, mesh), authn, networkPolicy: cfg.networkPolicy.enforceOnOriginalIdentity },
        tracing,
      }).register(
        routerFactory(clusters, {
          requestTimeoutMs: cfg.http.requestTimeoutMs,
          appendForwardedFor: cfg.http.appendForwardedFor,
          retry: cfg.http.retry,
        }, overload, { onRoute: runRouteFilters }),
      );
      for (const f of opts.extraFilters ?? []) registry.register(f);
      // The access logger is first in every chain: its completion hooks run last (reverse order).
      const accessLog = new AccessLogSinks(log);
      cleanup.push(() => accessLog.close());
      const core = [new AccessLogFilter({ override: cfg.accessLog, mesh, sinks: accessLog, log })];
      // WaypointFilters run in four slots of the chain, one per phase (src/extensions/slots.ts).
      const base = buildChain(registry, cfg, { mesh, log, metrics }, opts.configFile, core);
      const chain: { current: FilterChain } = { current: new FilterChain(withExtensionSlots(base.filters, extensionSlots(mesh))) };
      const inner = new InnerHttpServer({
        maxHeaderSize: cfg.http.maxRequestHeadersBytes,
        idleTimeoutMs: cfg.http.idleTimeoutMs,
        streamIdleTimeoutMs: cfg.http.streamIdleTimeoutMs,
        http2: cfg.http2,
        rejectHttp10: cfg.http.rejectHttp10,
        // Envoy's HCM normalizes `:path` before any filter, per MeshConfig `pathNormalization`.
        normalizePath: requestPathNormalizer(mesh),
      });

      const hbone = new HboneServer({
        name: 'waypoint',
        material: certificate.current,
        http2: cfg.http2,
        tlsHandshakeTimeoutMs: cfg.limits.tlsHandshakeTimeoutMs,
        peerLimits: cfg.limits,
        onPeerThrottled: opts.handedOverHbone?.onPeerThrottled,
        metrics,
        verifyPeer: (peer) => refuseDownstreamPeer(peer, mesh.current.meshConfig),
        onConnect: waypointConnectHandler({
          mesh,
          chain,
          inner,
          tcp: new TcpProxy(clusters, overload),
          protocolDetectionTimeoutMs: cfg.http.protocolDetectionTimeoutMs,
          overload,
        }),
      });
      certificate.on('rotated', (m) => {
        hbone.updateMaterial(m);
        log.info({ notAfter: m.notAfter.toISOString() }, 'waypoint certificate rotated');
      });
      mesh.subscribe((next) => {
        clusters.prune(next);
        extAuthzClient.prune(next);
      });

      const hboneAddr = opts.handedOverHbone ? hbone.serveHandedOver(opts.handedOverHbone.address) : await hbone.listen(cfg.listeners.hbone);
      opts.handedOverHbone?.serve((socket) => hbone.accept(socket));
      cleanup.push(() => hbone.drain(0));

      self = new Waypoint({
        addresses: { hbone: hboneAddr, admin: adminAddr, readiness: readinessAddr },
        sources,
        metrics,
        hbone,
        admin,
        readiness,
        sessions,
        clusters,
        extAuthz: extAuthzClient,
        inner,
        accessLog,
        tracing,
        bootstrap: cfg,
        overload,
        extensions,
      });
      log.info({ hbone: addr(hboneAddr), admin: addr(adminAddr), identity: snap.waypoint.identity }, 'waypoint ready');
      return self;
    } catch (err) {
      for (const c of cleanup.reverse()) await Promise.resolve(c()).catch(() => {});
      throw err;
    }
  }

  /**
   * Live per-connection bookkeeping, read-only (tests and leak checks): downstream HBONE sessions
   * and accepted sockets, HTTP tunnels being served, pooled upstream HBONE connections.
   */
  get liveCounts(): { hboneSessions: number; hboneSockets: number; httpTunnels: number; upstreamConnections: number } {
    return {
      hboneSessions: this.hbone.sessionCount,
      hboneSockets: this.hbone.socketCount,
      httpTunnels: this.inner.tunnels.size,
      upstreamConnections: this.sessions.connectionCount,
    };
  }

  /**
   * SIGHUP: read the mesh file again (a no-op when unchanged), and compile it even unchanged when
   * the code of a WaypointFilter module changed on disk, so the new code is imported.
   */
  async reload(): Promise<void> {
    const force = await this.extensions.codeChanged(this.mesh.current);
    await this.mesh.reload({ force });
  }

  /** The current state as JSON (`/config_dump`). */
  configDump(): unknown {
    return {
      bootstrap: this.bootstrap,
      mesh: this.mesh.current.toJSON(),
      certificate: { identity: this.mesh.current.waypoint.identity, notAfter: this.certificate.current.notAfter.toISOString() },
      sources: this.origin,
      upstream: { hboneConnections: this.sessions.connectionCount },
      // The budget in force (its default is derived from the heap limit) and what is held now.
      overload: { ...this.overload.settings, bufferedBytes: this.overload.bufferedBytes },
      routing: routingConfigDump(this.mesh.current, this.clusters),
      extensions: { waypointFilters: extensionsFor(this.mesh.current).filters },
      listeners: { hbone: addr(this.addresses.hbone), admin: addr(this.addresses.admin), readiness: this.addresses.readiness && addr(this.addresses.readiness) },
    };
  }

  /**
   * Graceful stop (SIGTERM): readiness turns 503 at once; new tunnels are still accepted for
   * `drain.delayMs` (ztunnels keep sending to an endpoint until they learn it is gone); then the
   * listener stops accepting and sends GOAWAY, in-flight requests finish within
   * `drain.timeoutMs`, and everything is closed. Idempotent.
   */
  shutdown(): Promise<void> {
    this.stopped ??= (async () => {
      this.draining = true;
      const { delayMs, timeoutMs } = this.bootstrap.drain;
      log.info({ delayMs, timeoutMs }, 'draining');
      if (delayMs > 0) await new Promise((r) => setTimeout(r, delayMs));
      this.inner.drain();
      await this.hbone.drain(timeoutMs, () => this.inner.cutting());
      // Downstreams are gone: upstream requests still open have no one to answer; a moment to close, then destroyed.
      await settleWithin(Promise.all([this.extAuthz.close(), this.clusters.close()]), 1000);
      await this.clusters.destroy();
      this.sessions.destroy();
      this.overload.stop();
      await this.sources.close();
      await Promise.all([this.admin.close(), this.readiness?.close(), this.accessLog.close(), this.tracing.close()]);
      log.info('waypoint stopped');
    })();
    return this.stopped;
  }
}

/**
 * The compiled parts of the waypoint's mesh snapshots, in compile order (the cluster table reads
 * the DestinationRules): `authn` and `clusters` bind theirs to their long-lived state; `fallback`
 * is the balancer a DestinationRule without `loadBalancer.simple` gets (the bootstrap's);
 * `telemetry` is the Telemetry API part (the tracing runtime's binding publishes its collectors);
 * `extensions` is the WaypointFilter part (`WaypointExtensions.part`), when the waypoint runs them.
 */
export function waypointParts(
  authn: RequestAuthn,
  clusters: ClusterTable,
  fallback: LbAlgorithm,
  telemetry: MeshPart<unknown> = TELEMETRY,
  extensions?: MeshPart<unknown>,
): MeshPart<unknown>[] {
  return [
    AUTHZ,
    authn.part,
    NETWORK_POLICIES,
    PEER_AUTHENTICATION,
    ROUTES,
    DESTINATION_RULES.with({ compile: (s) => compileDestinationRules(s, fallback) }),
    clusters.part,
    EXT_AUTHZ_PROVIDERS,
    telemetry,
    // After ROUTES: WaypointFilters attach to route rules.
    ...(extensions ? [extensions] : []),
  ];
}

/** The overload manager's settings; the budget defaults to a quarter of V8's heap limit (see config/bootstrap.ts). */
function overloadSettings(cfg: BootstrapConfig): OverloadSettings {
  const o = cfg.overload;
  return { ...o, maxBufferedBytes: o.maxBufferedBytes ?? Math.floor(v8.getHeapStatistics().heap_size_limit / 4) };
}

/** Build the filter chain (`core` filters first); configuration errors name the bootstrap file. */
function buildChain(registry: FilterRegistry, cfg: BootstrapConfig, env: FilterEnv, file: string | undefined, core: readonly Filter[]): FilterChain {
  try {
    return registry.build(cfg.filters, env, core);
  } catch (err) {
    if (err instanceof ConfigError && file) throw new ConfigError(err.message, { ...err.location, file });
    throw err;
  }
}



/** `ip:port` / `[v6]:port` of a bound address. */
export function addr(a: AddressInfo): string {
  return a.family === 'IPv6' ? `[${a.address}]:${a.port}` : `${a.address}:${a.port}`;
}
