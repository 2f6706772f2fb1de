/**
 * The authorization tests' waypoint: the shared test topology (test/helpers/topology.ts) running
 * a mesh file the test writes (and rewrites, applied with `setMesh()`) with the `istio.authz`
 * filter and the recording filter, no roles of its own (backends are plain-TCP pods labelled
 * `istio.io/dataplane-mode: none` that the test starts), and clients that CONNECT over HBONE with
 * any SPIFFE identity from any local address. Also the mesh files of these tests and the inbound
 * role (destination ztunnel) for the ztunnel-side tests.
 */
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import type { ClientHttp2Session, ClientHttp2Stream } from 'node:http2';
import { afterAll, beforeAll } from 'vitest';
import { parse } from 'yaml';
import type { Waypoint } from '../../../src/app.ts';
import type { WorkloadCertificate } from '../../../src/identity/workload-certificate.ts';
import type { FilterFactory } from '../../../src/pipeline/index.ts';
import { INBOUND_PARTS, InboundRole } from '../../../src/ztunnel/inbound.ts';
import { MeshStore } from '../../../src/state/store.ts';
import { remapWith, type Remap } from '../../helpers/authz-cases.ts';
import { connect, hboneSession, parseHttpResponse, readAll } from '../../helpers/hbone-client.ts';
import { spiffe, TestCa } from '../../helpers/identity.ts';
import {
  authorizationPolicy,
  meshConfig,
  meshText,
  namespace,
  pod,
  service,
  toService,
  usesWaypoint,
  waypointGateway,
  type Doc,
  type ServicePortSpec,
} from '../../helpers/mesh.ts';
import { RECORDER, recorder, startBackend, startTcpBackend, type Backend, type Recorder, type StreamRecord, type TcpBackend, type TunnelRecord } from '../../helpers/recorder.ts';
import { startTestTopology, type TestTopology } from '../../helpers/topology.ts';

/** An HTTP answer read from a tunnel. */
export interface HttpAnswer {
  readonly status: number;
  readonly headers: Record<string, string>;
  readonly body: string;
}

/** A request to send as raw HTTP/1.1 (the target goes on the wire exactly as written). */
export interface RawRequest {
  readonly method?: string;
  readonly path: string;
  readonly authority?: string;
  /** Header lines; a name repeated = the header sent several times. */
  readonly headers?: readonly [string, string][];
  /** Bytes sent right after the head, as they are (add `content-length` or chunked framing yourself). */
  readonly body?: string | Buffer;
}

export interface AuthzWaypointOptions {
  /** The waypoint's IP, `127.0.N.M` (HBONE and admin on any free port). */
  readonly ip: string;
  /** The initial mesh YAML. */
  readonly mesh: string;
  /** The bootstrap `filters:` (default: istio.authz, the recorder, the router). */
  readonly filters?: readonly { name: string; config?: unknown }[];
  readonly extraFilters?: readonly FilterFactory<unknown>[];
  /** More bootstrap settings (access log, network policy mode, ...). */
  readonly bootstrap?: Record<string, unknown>;
}

/** A running waypoint for the authz tests. */
export class AuthzWaypoint {
  readonly topology: TestTopology;
  readonly waypoint: Waypoint;
  readonly meshFile: string;
  readonly ca: TestCa;
  readonly rec: Recorder;
  private readonly sessions = new Map<string, Promise<ClientHttp2Session>>();

  private constructor(topology: TestTopology, ca: TestCa, rec: Recorder) {
    this.topology = topology;
    this.waypoint = topology.waypoint!;
    this.meshFile = topology.meshFile;
    this.ca = ca;
    this.rec = rec;
  }

  static async start(o: AuthzWaypointOptions): Promise<AuthzWaypoint> {
    const rec = recorder();
    const topology = await startTestTopology(Number(o.ip.split('.')[2]), {
      waypointIp: o.ip,
      waypointPort: 0,
      admin: `${o.ip}:0`,
      podIps: [],
      backends: false,
      tunnel: false,
      watch: false,
      meshText: o.mesh,
      extraFilters: [rec.factory, ...(o.extraFilters ?? [])],
      bootstrap: {
        drain: { timeoutMs: 200 },
        filters: o.filters ?? [{ name: 'istio.authz' }, { name: RECORDER }, { name: 'envoy.filters.http.router' }],
        ...o.bootstrap,
      },
    });
    return new AuthzWaypoint(topology, await TestCa.load(topology.caDir), rec);
  }

  /** Rewrite the mesh file and apply it now; resolves with whether a new snapshot was taken. */
  async setMesh(text: string): Promise<boolean> {
    const before = this.waypoint.mesh.current.version;
    fs.writeFileSync(this.meshFile, text);
    await this.waypoint.mesh.reload();
    return this.waypoint.mesh.current.version !== before;
  }

  /** The record of the first finished request to `path` (as sent), once there is one. */
  record(path: string): Promise<StreamRecord> {
    return this.rec.find(path);
  }

  /** The record of the `n`th finished tunnel from `peer` (a SPIFFE URI) to `authority`, once there is one. */
  tunnelRecord(authority: string, peer: string, n = 0): Promise<TunnelRecord> {
    return this.rec.tunnel({ authority, peer }, n);
  }

  /** An HBONE session to the waypoint as `principal`, from `localAddress` (cached per pair). */
  session(principal: string, localAddress?: string): Promise<ClientHttp2Session> {
    const key = `${principal}|${localAddress ?? ''}`;
    let s = this.sessions.get(key);
    if (!s) {
      const hbone = this.waypoint.addresses.hbone;
      s = this.ca.identity(principal).then((id) => hboneSession(hbone.address, hbone.port, id, { localAddress }));
      this.sessions.set(key, s);
    }
    return s;
  }

  /** CONNECT to `authority` as `principal`: the status and the open stream. */
  async connect(principal: string, authority: string, localAddress?: string): Promise<{ status: number; body: string; stream: ClientHttp2Stream }> {
    const session = await this.session(principal, localAddress);
    const r = await connect(session, authority);
    let body = '';
    if (r.status !== 200) body = (await readAll(r.stream)).toString();
    return { status: r.status, body, stream: r.stream };
  }

  /**
   * One HTTP/1.1 request in a tunnel of its own to `authority`, as `principal` from `localAddress`.
   * The tunnel must be accepted (200); the answer is read until the waypoint closes the tunnel.
   */
  async http(principal: string, authority: string, req: RawRequest, localAddress?: string): Promise<HttpAnswer> {
    const t = await this.connect(principal, authority, localAddress);
    if (t.status !== 200) throw new Error(`CONNECT ${authority} answered ${t.status}: ${t.body}`);
    const lines = [`${req.method ?? 'GET'} ${req.path} HTTP/1.1`, `host: ${req.authority ?? authority}`];
    for (const [k, v] of req.headers ?? []) lines.push(`${k}: ${v}`);
    lines.push('connection: close', '', '');
    const answer = readAll(t.stream);
    t.stream.write(lines.join('\r\n'));
    if (req.body !== undefined) t.stream.write(req.body);
    const raw = await answer;
    const r = parseHttpResponse(raw);
    return { status: r.status, headers: r.headers, body: r.body.toString() };
  }

  async close(): Promise<void> {
    for (const s of this.sessions.values()) await s.then((x) => x.destroy(), () => {});
    await this.topology.close();
  }
}

/** Starts what a test file needs; all of it is closed in `afterAll`. */
export interface Starter {
  http(ip: string, port: number): Promise<Backend>;
  tcp(ip: string, port: number): Promise<TcpBackend>;
  waypoint(o: AuthzWaypointOptions): Promise<AuthzWaypoint>;
  /** Anything else to close in `afterAll`. */
  add<T extends { close(): unknown }>(closeable: T): T;
}

/**
 * Runs `start` in `beforeAll`; `afterAll` closes what it started, the last first (the waypoint
 * before the backends started ahead of it), and only what did start.
 */
export function startAll(start: (s: Starter) => Promise<void>): void {
  const started: { close(): unknown }[] = [];
  const add = <T extends { close(): unknown }>(closeable: T): T => {
    started.push(closeable);
    return closeable;
  };
  beforeAll(() =>
    start({
      http: async (ip, port) => add(await startBackend(ip, port)),
      tcp: async (ip, port) => add(await startTcpBackend(ip, port)),
      waypoint: async (o) => add(await AuthzWaypoint.start(o)),
      add,
    }),
  );
  afterAll(async () => {
    for (const c of started.reverse()) await c.close();
  });
}

// ---- mesh files ---------------------------------------------------------------------------------

/** One application of a test mesh: a Service and the Pod behind it (opted out of the mesh: plain TCP). */
export interface MeshApp {
  readonly name: string;
  /** The Service's cluster IP. */
  readonly vip: string;
  /** The Pod's IP; without it no Pod is written (the Service selects another app's Pod, see `app`). */
  readonly podIp?: string;
  /** Service ports, e.g. {@link HTTP_PORT}. */
  readonly ports: readonly ServicePortSpec[];
  /** The `app` label the Service selects and the Pod carries (default `name`). */
  readonly app?: string;
  /** Default `foo`. */
  readonly namespace?: string;
}

/** Service port 80 (`http`) to the Pod's 8080, where the tests' HTTP backends listen. */
export const HTTP_PORT: ServicePortSpec = { name: 'http', port: 80, targetPort: 8080 };

/**
 * The Service and Pod of `app` (Pod `<app>-1`, label `app: <app>`, service account `<app>`, where
 * `<app>` defaults to the name; no Pod without `podIp`).
 */
export function appDocs(app: MeshApp): Doc[] {
  const ns = app.namespace ?? 'foo';
  const label = app.app ?? app.name;
  const docs = [service({ name: app.name, namespace: ns, vip: app.vip, selector: { app: label }, ports: app.ports })];
  if (app.podIp !== undefined) docs.push(pod({ name: `${label}-1`, namespace: ns, labels: { app: label }, sa: label, ip: app.podIp }));
  return docs;
}

/** What {@link meshYaml} writes. */
export interface MeshFile {
  /** The MeshConfig `data.mesh` (no ConfigMap without it): YAML text or an object. */
  readonly meshConfig?: string | object;
  /** The namespace using the waypoint, and the apps' default namespace (default `foo`). */
  readonly namespace?: string;
  /** The waypoint Gateway's namespace (default: `namespace`). */
  readonly waypointNamespace?: string;
  readonly apps: readonly MeshApp[];
  /** Policies and anything else: objects, or text as written. */
  readonly docs?: readonly (Doc | string)[];
}

/**
 * A mesh file: the MeshConfig ConfigMap (when `meshConfig` is given), the waypoint Gateway
 * `<waypointNamespace>/waypoint`, the namespace using it (Pods outside the mesh), the waypoint's
 * namespace when another one, `apps`, then `docs`.
 */
export function meshYaml(o: MeshFile): string {
  const ns = o.namespace ?? 'foo';
  const wpNs = o.waypointNamespace ?? ns;
  return meshText(
    ...(o.meshConfig !== undefined ? [meshConfig(o.meshConfig)] : []),
    waypointGateway(wpNs),
    namespace(ns, usesWaypoint({ waypointNamespace: wpNs === ns ? undefined : wpNs, outOfMesh: true })),
    ...(wpNs !== ns ? [namespace(wpNs)] : []),
    ...o.apps.flatMap((app) => appDocs({ namespace: ns, ...app })),
    ...(o.docs ?? []),
  );
}

/**
 * An AuthorizationPolicy `foo/<name>` bound to Service `foo/<service>` (targetRefs); `spec` is the
 * rest of its spec (YAML text at the left margin, or an object).
 */
export function servicePolicy(name: string, service: string, spec: string | object, opts: { annotations?: Record<string, string> } = {}): Doc {
  const rest = typeof spec === 'string' ? parse(spec) : spec;
  return authorizationPolicy(name, { targetRefs: toService(service), ...rest }, opts);
}

/** A CUSTOM policy `foo/<name>` on Service `foo/<service>` sending the requests `rules` select to ext_authz provider `provider`. */
export const customPolicy = (name: string, service: string, provider: string, rules: object[] = [{}]): Doc =>
  servicePolicy(name, service, { action: 'CUSTOM', provider: { name: provider }, rules });

/** `istio.io/dry-run: "true"`: the policy is evaluated and logged, not enforced. */
export const DRY_RUN = { 'istio.io/dry-run': 'true' };

// ---- fixture addresses ----------------------------------------------------------------------------

const TEN = /^10\.(\d+)\.(\d+)\.(\d+(?:\/\d+)?)$/;

/**
 * Remap the conformance fixtures' 10.x addresses per /24: `nets` maps a fixture prefix (`10.96.0.`)
 * to a test's own loopback prefix (`127.0.160.`), so each source and target is a distinct bindable
 * address of that test's range; any other 10.a.b.c (only ever in policies, never dialed) → 127.a.b.c.
 */
export function remapByNets(nets: Readonly<Record<string, string>>): Remap {
  return remapWith((s) => {
    const m = TEN.exec(s);
    if (!m) return s;
    const net = nets[`10.${m[1]}.${m[2]}.`];
    return net ? `${net}${m[3]}` : `127.${m[1]}.${m[2]}.${m[3]}`;
  });
}

// ---- the inbound role (destination ztunnel) ----------------------------------------------------------

/** Settings of an {@link AuthzInbound}. */
export interface AuthzInboundOptions {
  /** The pod IP: HBONE listener (port 15008) and the plaintext listeners. */
  readonly ip: string;
  /** Where the application listens (the role's `forward`). */
  readonly app: string;
  /** Application ports that get a plaintext listener on `ip`. */
  readonly plaintextPorts: readonly number[];
  /** The initial mesh YAML. */
  readonly mesh: string;
}

/**
 * The `waypoint inbound` role on loopback for the ztunnel-side authorization tests: a CA, a mesh
 * file behind a MeshStore (rewritten and applied with {@link setMesh}, so open connections are
 * re-checked as with `--mesh`), and clients that CONNECT over HBONE with any SPIFFE identity from
 * any local address, or connect in plaintext.
 */
export class AuthzInbound {
  readonly role: InboundRole;
  readonly store: MeshStore;
  readonly ca: TestCa;
  private readonly dir: string;
  private readonly meshFile: string;
  private readonly certificate: WorkloadCertificate;
  private readonly sessions: ClientHttp2Session[] = [];

  private constructor(parts: { role: InboundRole; store: MeshStore; ca: TestCa; dir: string; meshFile: string; certificate: WorkloadCertificate }) {
    this.role = parts.role;
    this.store = parts.store;
    this.ca = parts.ca;
    this.dir = parts.dir;
    this.meshFile = parts.meshFile;
    this.certificate = parts.certificate;
  }

  static async start(o: AuthzInboundOptions): Promise<AuthzInbound> {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'wp-authz-inbound-'));
    const ca = await TestCa.create();
    try {
      const meshFile = path.join(dir, 'mesh.yaml');
      fs.writeFileSync(meshFile, o.mesh);
      const store = await MeshStore.open({ meshFile, watch: false, parts: INBOUND_PARTS });
      const own = store.current.workloadByIp(o.ip)?.identity ?? spiffe('default', 'inbound');
      const certificate = await ca.workloadCertificate(own);
      const role = await InboundRole.start({
        listen: `${o.ip}:15008`,
        certificate,
        forward: o.app,
        mesh: store,
        plaintext: o.plaintextPorts.map((p) => `${o.ip}:${p}`),
      });
      return new AuthzInbound({ role, store, ca, dir, meshFile, certificate });
    } catch (err) {
      fs.rmSync(dir, { recursive: true, force: true });
      ca.close();
      throw err;
    }
  }

  /** Rewrite the mesh file and apply it now; resolves with whether a new snapshot was taken. */
  async setMesh(text: string): Promise<boolean> {
    const before = this.store.current.version;
    fs.writeFileSync(this.meshFile, text);
    await this.store.reload();
    return this.store.current.version !== before;
  }

  /**
   * CONNECT to `authority` over a new HBONE connection as `principal` (a full `spiffe://` URI) from
   * `localAddress`: the status, the error body, and the open stream.
   */
  async connect(principal: string, authority: string, localAddress: string): Promise<{ status: number; body: string; stream: ClientHttp2Stream }> {
    const { address, port } = this.role.address;
    const session = await hboneSession(address, port, await this.ca.fresh(principal), { localAddress });
    this.sessions.push(session);
    const r = await connect(session, authority);
    return { status: r.status, body: r.status === 200 ? '' : (await readAll(r.stream)).toString(), stream: r.stream };
  }

  /**
   * A plaintext connection to the role's `port` listener from `localAddress`: send `data`, then read
   * until the role or the app closes. `echoed` is what came back ('' when refused).
   */
  plain(port: number, localAddress: string, data: string): Promise<{ echoed: string; error?: string }> {
    return new Promise((resolve) => {
      const chunks: Buffer[] = [];
      const s = net.connect({ host: this.role.address.address, port, localAddress, allowHalfOpen: true });
      s.on('connect', () => s.end(data));
      s.on('data', (c: Buffer) => chunks.push(c));
      s.on('error', (e: NodeJS.ErrnoException) => resolve({ echoed: Buffer.concat(chunks).toString(), error: e.code }));
      s.on('close', () => resolve({ echoed: Buffer.concat(chunks).toString() }));
    });
  }

  async close(): Promise<void> {
    for (const s of this.sessions) s.destroy();
    await this.role.close(200);
    this.store.close();
    this.certificate.close();
    fs.rmSync(this.dir, { recursive: true, force: true });
    this.ca.close();
  }
}
