/**
 * A waypoint with the `istio.authz` filter on loopback for the authorization tests: a CA, a mesh
 * file the test writes (and rewrites, applied with `reload()`), plain-TCP backends on the pod IPs
 * (Pods labelled `istio.io/dataplane-mode: none`), a recording filter, and clients that CONNECT
 * over HBONE with any SPIFFE identity from any local address.
 */
import fs from 'node:fs';
import http from 'node:http';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import type { ClientHttp2Session, ClientHttp2Stream } from 'node:http2';
import { afterAll, beforeAll } from 'vitest';
import { Waypoint } from '../../../src/app.ts';
import { AUTHZ_RESULT, TCP_AUTHZ_RESULT } from '../../../src/authz/slots.ts';
import type { AuthzResult } from '../../../src/authz/types.ts';
import { defaultBootstrap, overrideBootstrap } from '../../../src/config/bootstrap.ts';
import { LocalCa } from '../../../src/identity/ca.ts';
import { WorkloadCertificate } from '../../../src/identity/workload-certificate.ts';
import { FilterStatus, type FilterFactory } from '../../../src/pipeline/filter.ts';
import { INBOUND_PARTS, InboundRole } from '../../../src/ztunnel/inbound.ts';
import { MeshStore } from '../../../src/state/store.ts';
import { remapWith, type Remap } from '../../helpers/authz-cases.ts';
import { connect, hboneSession, parseHttpResponse, readAll, type ClientIdentity } from '../../helpers/hbone-client.ts';

/** One finished inner request as the chain saw it. */
export interface StreamRecord {
  readonly path: string;
  readonly forwardPath: string | undefined;
  readonly code: number;
  readonly flags: string;
  readonly details: string;
  readonly grpcStatus: string;
  readonly result: AuthzResult | undefined;
}

/** One finished tunnel. */
export interface TunnelRecord {
  readonly authority: string;
  readonly peer: string;
  readonly rejectStatus: number;
  readonly details: string;
  readonly inner: string;
  readonly bytesReceived: number;
  readonly result: AuthzResult | undefined;
}

/** A filter recording what each request and tunnel ended with (listed after `istio.authz`). */
export function recorder() {
  const streams: StreamRecord[] = [];
  const tunnels: TunnelRecord[] = [];
  const factory: FilterFactory<unknown> = {
    name: 'test.authzrec',
    parseConfig: () => ({}),
    create: () => ({
      name: 'test.authzrec',
      onConnection: () => FilterStatus.Continue,
      onStreamComplete(s) {
        streams.push({
          path: s.path,
          forwardPath: s.forwardPath,
          code: s.responseCode,
          flags: s.responseFlags,
          details: s.responseCodeDetails,
          grpcStatus: s.grpcStatus,
          result: s.get(AUTHZ_RESULT),
        });
      },
      onConnectionComplete(c) {
        tunnels.push({
          authority: c.info.authority,
          peer: c.info.peer.uri,
          rejectStatus: c.rejectStatus,
          details: c.rejectDetails,
          inner: c.innerProtocol,
          bytesReceived: c.bytesReceived,
          result: c.get(TCP_AUTHZ_RESULT),
        });
      },
    }),
  };
  return { factory, streams, tunnels };
}

/** Wait until `pick()` returns something (bounded: a hang fails the test, timing decides nothing). */
export async function eventually<T>(pick: () => T | undefined, what: string, timeoutMs = 5000): Promise<T> {
  const end = Date.now() + timeoutMs;
  for (;;) {
    const v = pick();
    if (v !== undefined) return v;
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

/** A plain TCP echo server that counts connections and bytes (an L4 backend). */
export interface TcpBackend {
  readonly connections: number;
  readonly bytes: number;
  readonly open: number;
  close(): Promise<void>;
}

export async function startTcpBackend(ip: string, port: number): Promise<TcpBackend> {
  const sockets = new Set<net.Socket>();
  const state = { connections: 0, bytes: 0 };
  const server = net.createServer((s) => {
    state.connections++;
    sockets.add(s);
    s.on('data', (c: Buffer) => {
      state.bytes += c.length;
      s.write(c);
    });
    s.on('end', () => s.end());
    s.on('error', () => {});
    s.once('close', () => sockets.delete(s));
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, ip, () => resolve());
  });
  return {
    get connections() {
      return state.connections;
    },
    get bytes() {
      return state.bytes;
    },
    get open() {
      return sockets.size;
    },
    close: () => {
      for (const s of sockets) s.destroy();
      return new Promise((r) => server.close(() => r()));
    },
  };
}

/** What an HTTP echo backend received. */
export interface Received {
  readonly method: string;
  readonly url: string;
  readonly headers: http.IncomingHttpHeaders;
  /** The request body (filled once it ended). */
  body: Buffer;
}

/** An HTTP echo backend: every request it received. */
export interface HttpBackend {
  readonly received: Received[];
  close(): Promise<void>;
}

/** An HTTP/1.1 backend answering 200 with a JSON description of the request; keeps every request seen. */
export async function startHttpBackend(ip: string, port: number): Promise<HttpBackend> {
  const received: Received[] = [];
  const server = http.createServer((req, res) => {
    const seen: Received = { method: req.method ?? '', url: req.url ?? '', headers: req.headers, body: Buffer.alloc(0) };
    received.push(seen);
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      seen.body = Buffer.concat(chunks);
      const text = JSON.stringify({ method: req.method, url: req.url });
      res.writeHead(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(text) });
      res.end(text);
    });
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, ip, () => resolve());
  });
  return {
    received,
    close: () => {
      server.closeAllConnections();
      return new Promise((r) => server.close(() => r()));
    },
  };
}

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
  /** The waypoint's IP (HBONE on port 15008... any free port: 0). */
  readonly ip: string;
  /** The initial mesh YAML. */
  readonly mesh: string;
  /** The bootstrap `filters:` (default: istio.authz, the recorder, the router). */
  readonly filters?: readonly { name: string; config?: unknown }[];
  readonly extraFilters?: readonly FilterFactory<unknown>[];
}

/** A running waypoint for the authz tests. */
export class AuthzWaypoint {
  readonly waypoint: Waypoint;
  readonly dir: string;
  readonly meshFile: string;
  readonly ca: LocalCa;
  readonly rec: ReturnType<typeof recorder>;
  private readonly identities = new Map<string, Promise<ClientIdentity>>();
  private readonly sessions = new Map<string, Promise<ClientHttp2Session>>();

  private constructor(parts: { waypoint: Waypoint; dir: string; meshFile: string; ca: LocalCa; rec: ReturnType<typeof recorder> }) {
    this.waypoint = parts.waypoint;
    this.dir = parts.dir;
    this.meshFile = parts.meshFile;
    this.ca = parts.ca;
    this.rec = parts.rec;
  }

  static async start(o: AuthzWaypointOptions): Promise<AuthzWaypoint> {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'wp-authz-'));
    const caDir = path.join(dir, 'ca');
    const { ca } = await LocalCa.ensure(caDir, 'cluster.local');
    const meshFile = path.join(dir, 'mesh.yaml');
    fs.writeFileSync(meshFile, o.mesh);
    const rec = recorder();
    const bootstrap = overrideBootstrap(defaultBootstrap(), {
      listeners: { hbone: `${o.ip}:0`, admin: `${o.ip}:0`, readiness: '' },
      drain: { timeoutMs: 200 },
      filters: o.filters ?? [{ name: 'istio.authz' }, { name: 'test.authzrec' }, { name: 'envoy.filters.http.router' }],
    });
    try {
      const waypoint = await Waypoint.start({ bootstrap, meshFile, caDir, watch: false, extraFilters: [rec.factory, ...(o.extraFilters ?? [])] });
      return new AuthzWaypoint({ waypoint, dir, meshFile, ca, rec });
    } catch (err) {
      fs.rmSync(dir, { recursive: true, force: true });
      throw err;
    }
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
    return eventually(() => this.rec.streams.find((r) => r.path === path), `the record of ${path}`);
  }

  /** The record of the `n`th finished tunnel from `peer` (a SPIFFE URI) to `authority`, once there is one. */
  tunnelRecord(authority: string, peer: string, n = 0): Promise<TunnelRecord> {
    return eventually(() => this.rec.tunnels.filter((t) => t.authority === authority && t.peer === peer)[n], `the tunnel record of ${peer} → ${authority}`);
  }

  /** A client certificate for `principal` (a full `spiffe://` URI) from the mesh CA. */
  identity(principal: string): Promise<ClientIdentity> {
    let id = this.identities.get(principal);
    if (!id) {
      id = this.ca.issue(principal, 3600_000).then((leaf) => ({ certPem: leaf.certPem, keyPem: leaf.keyPem, caPem: this.ca.rootCertPem }));
      this.identities.set(principal, id);
    }
    return id;
  }

  /** An HBONE session to the waypoint as `principal`, from `localAddress` (cached per pair). */
  session(principal: string, localAddress?: string): Promise<ClientHttp2Session> {
    const key = `${principal}|${localAddress ?? ''}`;
    let s = this.sessions.get(key);
    if (!s) {
      const hbone = this.waypoint.addresses.hbone;
      s = this.identity(principal).then((id) => hboneSession(hbone.address, hbone.port, id, { localAddress }));
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
    await this.waypoint.shutdown();
    fs.rmSync(this.dir, { recursive: true, force: true });
  }
}

/** `ns` / `sa` → the SPIFFE id. */
export const spiffe = (ns: string, sa: string): string => `spiffe://cluster.local/ns/${ns}/sa/${sa}`;

/** Starts what a test file needs; all of it is closed in `afterAll`. */
export interface Starter {
  http(ip: string, port: number): Promise<HttpBackend>;
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
      http: async (ip, port) => add(await startHttpBackend(ip, port)),
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
  /** Service ports as YAML flow mappings, e.g. {@link HTTP_PORT}. */
  readonly ports: readonly string[];
  /** The `app` label the Service selects and the Pod carries (default `name`). */
  readonly app?: string;
  /** Default `foo`. */
  readonly namespace?: string;
}

/** Service port 80 (`http`) to the Pod's 8080, where {@link startHttpBackend}s listen. */
export const HTTP_PORT = '{ name: http, port: 80, targetPort: 8080 }';

/**
 * The Service and Pod documents of `app` (Pod `<app>-1`, label `app: <app>`, service account
 * `<app>`, where `<app>` defaults to the name; no Pod without `podIp`).
 */
export function appYaml(app: MeshApp): string {
  const ns = app.namespace ?? 'foo';
  const label = app.app ?? app.name;
  const service = `apiVersion: v1
kind: Service
metadata: { name: ${app.name}, namespace: ${ns} }
spec: { clusterIP: "${app.vip}", selector: { app: ${label} }, ports: [${app.ports.join(', ')}] }
`;
  if (app.podIp === undefined) return service;
  return `${service}---
apiVersion: v1
kind: Pod
metadata: { name: ${label}-1, namespace: ${ns}, labels: { app: ${label} } }
spec: { serviceAccountName: ${label} }
status: { podIP: "${app.podIp}" }
`;
}

/** What {@link meshYaml} writes. */
export interface MeshFile {
  /** The MeshConfig `data.mesh` YAML (no ConfigMap without it). */
  readonly meshConfig?: string;
  /** The namespace using the waypoint, and the apps' default namespace (default `foo`). */
  readonly namespace?: string;
  /** The waypoint Gateway's namespace (default: `namespace`). */
  readonly waypointNamespace?: string;
  readonly apps: readonly MeshApp[];
  /** Policies and anything else, as written. */
  readonly docs?: readonly string[];
}

/**
 * A mesh file: the MeshConfig ConfigMap (when `meshConfig` is given), the waypoint Gateway
 * `<waypointNamespace>/waypoint`, the namespace using it (Pods outside the mesh), the waypoint's
 * namespace when another one, `apps`, then `docs` as written.
 */
export function meshYaml(o: MeshFile): string {
  const ns = o.namespace ?? 'foo';
  const wpNs = o.waypointNamespace ?? ns;
  const parts: string[] = [];
  if (o.meshConfig !== undefined) {
    const body = o.meshConfig.trimEnd().split('\n').map((l) => `    ${l}`).join('\n');
    parts.push(`apiVersion: v1
kind: ConfigMap
metadata: { name: istio, namespace: istio-system }
data:
  mesh: |
${body}
`);
  }
  parts.push(`apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: { name: waypoint, namespace: ${wpNs} }
spec:
  gatewayClassName: istio-waypoint
  listeners: [{ name: mesh, port: 15008, protocol: HBONE }]
`);
  const wpNsLabel = wpNs === ns ? '' : ` istio.io/use-waypoint-namespace: ${wpNs},`;
  parts.push(`apiVersion: v1
kind: Namespace
metadata: { name: ${ns}, labels: { istio.io/use-waypoint: waypoint,${wpNsLabel} istio.io/dataplane-mode: none } }
`);
  if (wpNs !== ns) parts.push(`apiVersion: v1\nkind: Namespace\nmetadata: { name: ${wpNs} }\n`);
  for (const app of o.apps) parts.push(appYaml({ namespace: ns, ...app }));
  for (const d of o.docs ?? []) parts.push(d.endsWith('\n') ? d : `${d}\n`);
  return parts.join('---\n');
}

/**
 * An AuthorizationPolicy `foo/<name>` bound to Service `foo/<service>` (targetRefs); `spec` is the
 * rest of its spec, written at the left margin.
 */
export function servicePolicy(name: string, service: string, spec: string): string {
  const body = spec.trimEnd().split('\n').map((l) => `  ${l}`).join('\n');
  return `apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: { name: ${name}, namespace: foo }
spec:
  targetRefs: [{ kind: Service, group: "", name: ${service} }]
${body}
`;
}

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
  readonly ca: LocalCa;
  private readonly dir: string;
  private readonly meshFile: string;
  private readonly certificate: WorkloadCertificate;
  private readonly sessions: ClientHttp2Session[] = [];

  private constructor(parts: { role: InboundRole; store: MeshStore; ca: LocalCa; dir: string; meshFile: string; certificate: WorkloadCertificate }) {
    this.role = parts.role;
    this.store = parts.store;
    this.ca = parts.ca;
    this.dir = parts.dir;
    this.meshFile = parts.meshFile;
    this.certificate = parts.certificate;
  }

  static async start(o: AuthzInboundOptions): Promise<AuthzInbound> {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'wp-authz-inbound-'));
    try {
      const { ca } = await LocalCa.ensure(path.join(dir, 'ca'), 'cluster.local');
      const meshFile = path.join(dir, 'mesh.yaml');
      fs.writeFileSync(meshFile, o.mesh);
      const store = await MeshStore.open({ meshFile, watch: false, parts: INBOUND_PARTS });
      const own = store.current.workloadByIp(o.ip)?.identity ?? spiffe('default', 'inbound');
      const certificate = await WorkloadCertificate.start(ca, own, 3600_000);
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
    const leaf = await this.ca.issue(principal, 3600_000);
    const { address, port } = this.role.address;
    const session = await hboneSession(address, port, { certPem: leaf.certPem, keyPem: leaf.keyPem, caPem: this.ca.rootCertPem }, { localAddress });
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
  }
}
