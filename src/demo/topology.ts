/**
 * A whole ambient path on loopback, in one process: client → `tunnel` role (source ztunnel) →
 * waypoint → `inbound` roles (destination ztunnels) → echo backends. Used by `waypoint demo`, the
 * end-to-end tests and the bench; with `concurrency` the waypoint is a primary here and its workers
 * (src/workers) other processes. Every address is a 127.x address chosen by the caller, so
 * several topologies can run side by side (a wildcard bind on 15008 would block them all).
 */
import fs from 'node:fs';
import path from 'node:path';
import type http from 'node:http';
import { Waypoint } from '../app.ts';
import { WaypointWorkers } from '../workers/index.ts';
import { defaultBootstrap, overrideBootstrap, type BootstrapConfig } from '../config/index.ts';
import { LocalCa, WorkloadCertificate } from '../identity/index.ts';
import type { Http2Params } from '../hbone/index.ts';
import type { FilterFactory } from '../pipeline/index.ts';
import { INBOUND_PARTS, InboundRole, TunnelRole } from '../ztunnel/index.ts';
import { formatHostPort, MeshStore } from '../state/index.ts';

/** Addresses and knobs of one loopback topology. Ports default to 15008 (HBONE), 80 (service) and 8080 (pods). */
export interface TopologyOptions {
  /** Directory for the CA, certificates and the generated mesh.yaml. */
  readonly dir: string;
  readonly trustDomain?: string;
  /** Waypoint IP; it listens on `<ip>:<hbonePort>`. */
  readonly waypointIp: string;
  /** HBONE port of the waypoint and of every inbound role (default 15008). */
  readonly hbonePort?: number;
  /** The waypoint's own HBONE port when it must differ from the endpoints' (several roles on one IP, e.g. `::1`). */
  readonly waypointPort?: number;
  /** Service VIP (only ever used as a CONNECT authority, never dialed). */
  readonly vip: string;
  readonly servicePort?: number;
  /** Pod IPs of the echo endpoints. */
  readonly podIps: readonly string[];
  readonly targetPort?: number;
  /** Client pod IP (the tunnel binds it) and the tunnel's plain TCP listen address. */
  readonly clientIp: string;
  readonly tunnelListen: string;
  readonly admin: string;
  readonly readiness?: string;
  /** Extra bootstrap settings. */
  readonly bootstrap?: Record<string, unknown>;
  /** Start the echo backends (default true). */
  readonly backends?: boolean;
  /** Start the waypoint in this process (default true). When false, run `waypoint run --mesh <meshFile> --ca-dir <caDir>` yourself with {@link topologyBootstrap}. */
  readonly startWaypoint?: boolean;
  /** Service port name, which sets its protocol (default `http`; `tcp` makes the waypoint an L4 relay). */
  readonly portName?: string;
  /** Extra filter factories for the in-process waypoint (tests). */
  readonly extraFilters?: readonly FilterFactory<unknown>[];
  /**
   * Run the waypoint as a primary (in this process) with this many worker processes (src/workers,
   * `waypoint run --concurrency N`) instead of in this process; `extraFilters` then cannot be used:
   * each worker imports `filterModules` instead. Default 1: in this process.
   */
  readonly concurrency?: number;
  /** With `concurrency` > 1: modules each worker imports filter factories from (WorkersOptions.filterModules). */
  readonly filterModules?: readonly string[];
  /** HTTP/2 settings of the tunnel and inbound roles (default ztunnel's); the waypoint's come from `bootstrap.http2`. */
  readonly roleHttp2?: Http2Params;
  /** MeshConfig `accessLogFile` of the generated mesh (default: none, the access log is off, as in Istio). */
  readonly accessLogFile?: string;
  /** The whole mesh file, instead of the generated one (for workloads of the caller's own). */
  readonly meshText?: string;
  /** Start the tunnel role (default true). */
  readonly tunnel?: boolean;
  /** HBONE connections the tunnel role spreads its CONNECTs over (default 1). */
  readonly tunnelConnections?: number;
  /** Watch the mesh file (default true); without it, edits apply on `waypoint.mesh.reload()` (and `roleMesh.reload()`) only. */
  readonly watch?: boolean;
}

/** Handles of a started topology; `close()` stops everything it started, in reverse order. */
export interface Topology {
  /** Undefined when `startWaypoint` was false or the waypoint runs in workers. */
  readonly waypoint: Waypoint | undefined;
  /** The primary, when `concurrency` > 1. */
  readonly workers: WaypointWorkers | undefined;
  readonly inbounds: InboundRole[];
  readonly backends: http.Server[];
  /** Undefined when `tunnel` was false. */
  readonly tunnel: TunnelRole | undefined;
  /** The mesh store the inbound roles and the tunnel read (compiled with the inbound role's parts). */
  readonly roleMesh: MeshStore;
  readonly meshFile: string;
  readonly caDir: string;
  close(): Promise<void>;
}

/** The mesh YAML of a topology (namespace `demo`, Service `echo`, pods, client, waypoint Gateway). */
export function topologyMesh(o: TopologyOptions): string {
  const servicePort = o.servicePort ?? 80;
  const targetPort = o.targetPort ?? 8080;
  const pods = o.podIps
    .map(
      (ip, i) => `---
apiVersion: v1
kind: Pod
metadata:
  name: echo-${i + 1}
  namespace: demo
  labels: { app: echo, version: v1 }
spec:
  serviceAccountName: echo
  containers:
  - name: echo
    ports: [{ name: http, containerPort: ${targetPort} }]
status:
  podIP: "${ip}"
`,
    )
    .join('');
  return `# Generated by node-waypoint's demo topology. Edit and save: the waypoint applies changes live.
apiVersion: v1
kind: ConfigMap
metadata: { name: istio, namespace: istio-system }
data:
  mesh: |
    trustDomain: ${o.trustDomain ?? 'cluster.local'}
${o.accessLogFile ? `    accessLogFile: ${o.accessLogFile}\n` : ''}---
apiVersion: v1
kind: Namespace
metadata:
  name: demo
  labels: { istio.io/use-waypoint: waypoint }
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: { name: waypoint, namespace: demo }
spec:
  gatewayClassName: istio-waypoint
  listeners: [{ name: mesh, port: 15008, protocol: HBONE }]
---
apiVersion: v1
kind: Service
metadata: { name: echo, namespace: demo }
spec:
  clusterIP: "${o.vip}"
  selector: { app: echo }
  ports: [{ name: ${o.portName ?? 'http'}, port: ${servicePort}, targetPort: http }]
${pods}---
apiVersion: v1
kind: Pod
metadata:
  name: client
  namespace: demo
  labels: { app: client }
spec: { serviceAccountName: client }
status: { podIP: "${o.clientIp}" }
`;
}

/** The waypoint's bootstrap config for a topology. */
export function topologyBootstrap(o: TopologyOptions): BootstrapConfig {
  const hbonePort = o.hbonePort ?? 15008;
  const bootstrap = overrideBootstrap(defaultBootstrap(), {
    listeners: { hbone: formatHostPort(o.waypointIp, o.waypointPort ?? hbonePort), admin: o.admin, readiness: o.readiness ?? '' },
    upstream: { hbonePort },
    // Nothing follows the demo's readiness: on Ctrl-C it drains at once.
    drain: { delayMs: 0 },
  });
  return o.bootstrap ? overrideBootstrap(bootstrap, o.bootstrap) : bootstrap;
}

/** Start everything; on failure nothing is left running. */
export async function startTopology(o: TopologyOptions): Promise<Topology> {
  const td = o.trustDomain ?? 'cluster.local';
  const hbonePort = o.hbonePort ?? 15008;
  const targetPort = o.targetPort ?? 8080;
  fs.mkdirSync(o.dir, { recursive: true });
  const caDir = path.join(o.dir, 'ca');
  const { ca } = await LocalCa.ensure(caDir, td);
  const meshFile = path.join(o.dir, 'mesh.yaml');
  const closers: (() => Promise<unknown> | unknown)[] = [];
  const close = async () => {
    for (const c of closers.reverse()) await Promise.resolve(c()).catch(() => {});
  };
  try {
    const backends: http.Server[] = [];
    if (o.backends ?? true) {
      const { startEchoBackend } = await import('./echo-backend.ts');
      for (const [i, ip] of o.podIps.entries()) {
        const b = await startEchoBackend(ip, targetPort, `echo-${i + 1}`);
        backends.push(b);
        closers.push(() => new Promise((r) => { b.closeAllConnections(); b.close(r); }));
      }
    }
    const inbounds: InboundRole[] = [];
    // The inbound roles answer with the pod's `baggage` from the mesh state, known once the
    // waypoint (or our own store) has read the mesh file below.
    let mesh: MeshStore | undefined;
    const meshView = { get current() { return mesh?.current; } };
    if (o.podIps.length > 0) {
      const echoCert = await WorkloadCertificate.start(ca, `spiffe://${td}/ns/demo/sa/echo`, 24 * 3600_000);
      closers.push(() => echoCert.close());
      for (const ip of o.podIps) {
        const r = await InboundRole.start({ listen: formatHostPort(ip, hbonePort), certificate: echoCert, http2: o.roleHttp2, mesh: meshView });
        inbounds.push(r);
        closers.push(() => r.close(100));
      }
    }
    // Written only once every address above is bound, so a second demo that fails on a busy
    // address leaves a running demo's (possibly edited) mesh.yaml alone.
    fs.writeFileSync(meshFile, o.meshText ?? topologyMesh(o));
    let waypoint: Waypoint | undefined;
    let workers: WaypointWorkers | undefined;
    const concurrency = o.concurrency ?? 1;
    if ((o.startWaypoint ?? true) && concurrency > 1) {
      if (o.extraFilters?.length) throw new Error('extraFilters are filter objects of this process: with workers (concurrency > 1) give filterModules instead');
      const wk = await WaypointWorkers.start({ concurrency, bootstrap: topologyBootstrap(o), meshFile, caDir, watch: o.watch, filterModules: o.filterModules });
      closers.push(() => wk.shutdown());
      workers = wk;
    } else if (o.startWaypoint ?? true) {
      const wp = await Waypoint.start({ bootstrap: topologyBootstrap(o), meshFile, caDir, watch: o.watch, extraFilters: o.extraFilters });
      closers.push(() => wp.shutdown());
      waypoint = wp;
    }
    const served = waypoint ?? workers;
    // The inbound roles read their own store (compiled with their parts: PeerAuthentication and
    // ztunnel's AuthorizationPolicies), watched like the waypoint's; the tunnel describes the client
    // workload in `baggage` from it.
    // Quiet beside the waypoint's own store: its loads and reloads are logged once, by that store.
    const own = await MeshStore.open({ meshFile, watch: served !== undefined && (o.watch ?? true), parts: INBOUND_PARTS, quiet: served !== undefined });
    closers.push(() => own.close());
    mesh = own;
    let tunnel: TunnelRole | undefined;
    if (o.tunnel ?? true) {
      const clientCert = await WorkloadCertificate.start(ca, `spiffe://${td}/ns/demo/sa/client`, 24 * 3600_000);
      closers.push(() => clientCert.close());
      const t = await TunnelRole.start({
        listen: o.tunnelListen,
        to: formatHostPort(o.waypointIp, served?.addresses.hbone.port ?? o.waypointPort ?? hbonePort),
        authority: formatHostPort(o.vip, o.servicePort ?? 80),
        certificate: clientCert,
        expectSan: `spiffe://${td}/ns/demo/sa/waypoint`,
        bind: o.clientIp,
        mesh,
        http2: o.roleHttp2,
        connections: o.tunnelConnections,
      });
      closers.push(() => t.close());
      tunnel = t;
    }
    return { waypoint, workers, inbounds, backends, tunnel, roleMesh: own, meshFile, caDir, close };
  } catch (err) {
    await close();
    throw err;
  }
}
