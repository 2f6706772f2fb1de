/**
 * The NetworkPolicy mode end to end over real HBONE (bootstrap
 * `networkPolicy.enforceOnOriginalIdentity`): the destination pods' ingress NetworkPolicies are
 * evaluated against the original client (the HBONE source address and its certificate identity)
 * and the endpoint's target port.
 * - TCP service: denied ⇒ CONNECT 401, nothing dialed, flag `DENY` in the access log and the stats;
 *   allowed ⇒ bytes flow. A client using an allowed pod's address with another identity is denied.
 * - HTTP service with two endpoints, one isolated with no rules: every request goes to the other;
 *   none admits ⇒ 403 `NetworkPolicy: access denied` (flag `DENY`), no backend reached.
 * - A reload changes the decision without restart, and closes an open TCP tunnel it now denies.
 * - Mode off: NetworkPolicies are ignored. Mode on without `istio.authz`: refused at start.
 * Addresses: 127.0.103.x (mode on), 127.0.104.x (mode off), 127.0.105.x (start-up refusals).
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import type { ClientHttp2Stream } from 'node:http2';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { Waypoint } from '../../src/app.ts';
import { defaultBootstrap, overrideBootstrap } from '../../src/config/bootstrap.ts';
import { ConfigError } from '../../src/util/errors.ts';
import { spiffe } from '../helpers/identity.ts';
import { namespace, networkPolicy, pod, service, type Doc } from '../helpers/mesh.ts';
import { samplesOf } from '../helpers/prometheus.ts';
import { RECORDER, startBackend, startTcpBackend, type Backend, type TcpBackend } from '../helpers/recorder.ts';
import { eventually } from '../helpers/servers.ts';
import { AuthzWaypoint, meshYaml } from './authz/harness.ts';

const GOOD = spiffe('client', 'good');
const BAD = spiffe('client', 'bad');

/** A Pod (service account = its name); `port`: one named container port. */
const appPod = (name: string, ns: string, labels: Record<string, string>, ip: string, port?: Record<string, number>) => pod({ name, namespace: ns, labels, sa: name, ip, ports: port });

/**
 * The mesh of network `net` (127.0.<net>.x): namespace `foo` served by the waypoint (TCP service
 * `tcp`, HTTP service `web` with pods web-open and web-locked), client pods `good` and `bad` of
 * namespace `client`, then `policies`.
 */
function meshOf(net: string, ...policies: Doc[]): string {
  const tcp = { name: 'tcp', vip: `${net}.100`, podIp: `${net}.11`, ports: [{ name: 'tcp', port: 9000, targetPort: 9000 }] };
  return meshYaml({
    apps: [tcp],
    docs: [
      service({ name: 'web', namespace: 'foo', vip: `${net}.101`, ports: [{ name: 'http', port: 80, targetPort: 'web' }] }),
      appPod('web-open', 'foo', { app: 'web', tier: 'open' }, `${net}.12`, { web: 8080 }),
      appPod('web-locked', 'foo', { app: 'web', tier: 'locked' }, `${net}.13`, { web: 8080 }),
      namespace('client', { team: 'client' }),
      appPod('good', 'client', { role: 'good' }, `${net}.21`),
      appPod('bad', 'client', { role: 'bad' }, `${net}.22`),
      ...policies,
    ],
  });
}

const netpol = (name: string, spec: string) => networkPolicy(name, 'foo', spec);

/** Client pods of namespace `client` with the given role label, on the given named or numbered port. */
const fromRoles = (roles: string[], port: string) => `ingress:
- from:
  - namespaceSelector: { matchLabels: { kubernetes.io/metadata.name: client } }
    podSelector: { matchExpressions: [{ key: role, operator: In, values: [${roles.join(', ')}] }] }
  ports: [{ port: ${port} }]`;

const TCP_GOOD_ONLY = netpol('tcp', `podSelector: { matchLabels: { app: tcp } }\n${fromRoles(['good'], '9000')}`);
const TCP_BAD_ONLY = netpol('tcp', `podSelector: { matchLabels: { app: tcp } }\n${fromRoles(['bad'], '9000')}`);
const WEB_OPEN = netpol('web-open', `podSelector: { matchLabels: { tier: open } }\n${fromRoles(['good'], 'web')}`);
const WEB_LOCKED = netpol('web-locked', 'podSelector: { matchLabels: { tier: locked } }\npolicyTypes: [Ingress]');

/** The authz tests' waypoint with the NetworkPolicy mode on or off, a JSON access log, and the telemetry filters. */
class NetpolWaypoint {
  private readonly logDir = fs.mkdtempSync(path.join(os.tmpdir(), 'wp-netpol-'));
  readonly accessLog = path.join(this.logDir, 'access.log');
  wp!: AuthzWaypoint;

  static async start(ip: string, mesh: string, enforce: boolean): Promise<NetpolWaypoint> {
    const w = new NetpolWaypoint();
    w.wp = await AuthzWaypoint.start({
      ip,
      mesh,
      filters: [{ name: 'istio.peer_metadata' }, { name: 'istio.authz' }, { name: 'istio.stats' }, { name: RECORDER }, { name: 'envoy.filters.http.router' }],
      bootstrap: { accessLog: { file: w.accessLog, encoding: 'JSON' }, networkPolicy: { enforceOnOriginalIdentity: enforce } },
    }).catch((err: unknown) => {
      fs.rmSync(w.logDir, { recursive: true, force: true });
      throw err;
    });
    return w;
  }

  get rec() {
    return this.wp.rec;
  }

  get waypoint() {
    return this.wp.waypoint;
  }

  async setMesh(text: string): Promise<void> {
    if (!(await this.wp.setMesh(text))) throw new Error('the mesh update was refused');
  }

  connect(principal: string, from: string, authority: string): Promise<{ status: number; body: string; stream: ClientHttp2Stream }> {
    return this.wp.connect(principal, authority, from);
  }

  /** One HTTP/1.1 GET in a tunnel of its own. */
  async get(principal: string, from: string, authority: string, p = '/'): Promise<{ status: number; body: string }> {
    const r = await this.wp.http(principal, authority, { path: p, authority: 'web' }, from);
    return { status: r.status, body: r.body };
  }

  /** Access log entries written so far. */
  logEntries(): Record<string, unknown>[] {
    if (!fs.existsSync(this.accessLog)) return [];
    return fs
      .readFileSync(this.accessLog, 'utf8')
      .split('\n')
      .filter(Boolean)
      .map((l) => JSON.parse(l) as Record<string, unknown>);
  }

  async close(): Promise<void> {
    await this.wp?.close();
    fs.rmSync(this.logDir, { recursive: true, force: true });
  }
}

/** Write `data` and wait for as many bytes back (the TCP backend echoes); rejects if the tunnel closes first. */
function echo(stream: ClientHttp2Stream, data: string): Promise<string> {
  const got: Buffer[] = [];
  const done = new Promise<string>((resolve, reject) => {
    const onData = (c: Buffer) => got.push(c) && Buffer.concat(got).length >= data.length && (stream.off('data', onData), resolve(Buffer.concat(got).toString()));
    stream.on('data', onData).once('close', () => reject(new Error('the tunnel closed before the echo')));
  });
  stream.write(data);
  return done;
}

describe('NetworkPolicy mode on', () => {
  const NET = '127.0.103';
  const TCP = `${NET}.100:9000`;
  const WEB = `${NET}.101:80`;
  const GOOD_IP = `${NET}.21`;
  const BAD_IP = `${NET}.22`;
  let wp: NetpolWaypoint;
  let tcp: TcpBackend;
  let open: Backend;
  let locked: Backend;

  beforeAll(async () => {
    tcp = await startTcpBackend(`${NET}.11`, 9000);
    open = await startBackend(`${NET}.12`, 8080);
    locked = await startBackend(`${NET}.13`, 8080);
    wp = await NetpolWaypoint.start(`${NET}.1`, meshOf(NET, TCP_GOOD_ONLY, WEB_OPEN, WEB_LOCKED), true);
  });
  afterAll(async () => {
    await wp?.close();
    for (const b of [tcp, open, locked]) await b?.close();
  });

  test('TCP: the allowed client pod gets its bytes through', async () => {
    const t = await wp.connect(GOOD, GOOD_IP, TCP);
    expect(t.status).toBe(200);
    expect(await echo(t.stream, 'ping')).toBe('ping');
    t.stream.close();
  });

  test('TCP: a denied client gets 401 on the CONNECT, nothing is dialed, DENY is logged and counted', async () => {
    const before = tcp.connections;
    const t = await wp.connect(BAD, BAD_IP, TCP);
    expect(t.status).toBe(401);
    expect(tcp.connections).toBe(before);
    const rec = await eventually(() => wp.rec.tunnels.find((x) => x.peer === BAD && x.authority === TCP), 'the denied tunnel');
    expect(rec).toMatchObject({ rejectStatus: 401, details: 'network_policy_access_denied' });
    const line = await eventually(
      () => wp.logEntries().find((e) => e.downstream_remote_address?.toString().startsWith(`${BAD_IP}:`) && e.connection_termination_details === 'network_policy_access_denied'),
      'the access log line',
    );
    expect(line).toMatchObject({ response_flags: 'DENY', upstream_host: null });
    const closed = samplesOf(await wp.waypoint.metrics.metrics(), 'istio_tcp_connections_closed_total').filter(
      (s) => s.labels.response_flags === 'DENY' && s.labels.source_principal === BAD,
    );
    expect(closed.map((s) => s.value)).toEqual([1]);
  });

  test("TCP: an allowed pod's address presented with another identity is not that pod", async () => {
    const t = await wp.connect(BAD, GOOD_IP, TCP);
    expect(t.status).toBe(401);
  });

  test('HTTP: endpoints whose policies deny are skipped; every request reaches the admitting one', async () => {
    const seenOpen = open.received.length;
    for (let i = 0; i < 8; i++) {
      const r = await wp.get(GOOD, GOOD_IP, WEB, `/r${i}`);
      expect(r.status).toBe(200);
    }
    expect(open.received.length - seenOpen).toBe(8);
    expect(locked.received.length).toBe(0);
  });

  test('HTTP: no endpoint admits ⇒ 403 "NetworkPolicy: access denied", flag DENY, no backend reached', async () => {
    const seen = open.received.length;
    const r = await wp.get(BAD, BAD_IP, WEB, '/denied');
    expect(r).toEqual({ status: 403, body: 'NetworkPolicy: access denied' });
    expect(open.received.length).toBe(seen);
    expect(locked.received.length).toBe(0);
    const rec = await eventually(() => wp.rec.streams.find((s) => s.path === '/denied'), 'the denied request');
    expect(rec).toMatchObject({ code: 403, flags: 'DENY', details: 'network_policy_access_denied' });
    const line = await eventually(() => wp.logEntries().find((e) => e.path === '/denied'), 'the access log line');
    expect(line).toMatchObject({ response_code: 403, response_flags: 'DENY', response_code_details: 'network_policy_access_denied' });
    const requests = samplesOf(await wp.waypoint.metrics.metrics(), 'istio_requests_total').filter(
      (s) => s.labels.response_flags === 'DENY' && s.labels.response_code === '403',
    );
    expect(requests.map((s) => s.value)).toEqual([1]);
  });

  test('a reload changes the decision without restart and closes an open tunnel it now denies', async () => {
    const kept = await wp.connect(GOOD, GOOD_IP, TCP);
    expect(kept.status).toBe(200);
    expect(await echo(kept.stream, 'before')).toBe('before');
    const gone = new Promise<void>((resolve) => (kept.stream.destroyed ? resolve() : kept.stream.once('close', () => resolve())));
    kept.stream.on('error', () => {});

    await wp.setMesh(meshOf(NET, TCP_BAD_ONLY, WEB_OPEN, WEB_LOCKED));
    await gone; // closed by the policy change (a hang fails the test)
    const rec = await eventually(() => wp.rec.tunnels.filter((x) => x.peer === GOOD && x.authority === TCP && x.details === 'network_policy_access_denied')[0], 'the closed tunnel');
    expect(rec.inner).toBe('TCP');
    expect((await wp.connect(GOOD, GOOD_IP, TCP)).status).toBe(401);
    const now = await wp.connect(BAD, BAD_IP, TCP);
    expect(now.status).toBe(200);
    expect(await echo(now.stream, 'after')).toBe('after');
    now.stream.close();

    // No NetworkPolicy left for web: both endpoints serve the bad client again.
    await wp.setMesh(meshOf(NET, TCP_BAD_ONLY));
    const seenLocked = locked.received.length;
    for (let i = 0; i < 12 && locked.received.length === seenLocked; i++) expect((await wp.get(BAD, BAD_IP, WEB)).status).toBe(200);
    expect(locked.received.length).toBeGreaterThan(seenLocked);
  });
});

describe('NetworkPolicy mode off (the default)', () => {
  const NET = '127.0.104';
  let wp: NetpolWaypoint;
  let tcp: TcpBackend;
  let locked: Backend;

  beforeAll(async () => {
    tcp = await startTcpBackend(`${NET}.11`, 9000);
    locked = await startBackend(`${NET}.13`, 8080);
    wp = await NetpolWaypoint.start(`${NET}.1`, meshOf(NET, TCP_GOOD_ONLY, WEB_LOCKED), false);
  });
  afterAll(async () => {
    await wp?.close();
    for (const b of [tcp, locked]) await b?.close();
  });

  test('NetworkPolicies are ignored', async () => {
    expect(defaultBootstrap().networkPolicy.enforceOnOriginalIdentity).toBe(false);
    const t = await wp.connect(BAD, `${NET}.22`, `${NET}.100:9000`);
    expect(t.status).toBe(200);
    expect(await echo(t.stream, 'x')).toBe('x');
    t.stream.close();
    // Only web-locked has a backend here; web-open's address refuses connections (the router retries elsewhere).
    const seen = locked.received.length;
    for (let i = 0; i < 12 && locked.received.length === seen; i++) await wp.get(BAD, `${NET}.22`, `${NET}.101:80`).catch(() => undefined);
    expect(locked.received.length).toBeGreaterThan(seen);
  });
});

describe('start-up refusals', () => {
  const NET = '127.0.105';

  test('the mode without istio.authz in the chain is refused', async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'wp-netpol-'));
    try {
      const meshFile = path.join(dir, 'mesh.yaml');
      fs.writeFileSync(meshFile, meshOf(NET));
      const bootstrap = overrideBootstrap(defaultBootstrap(), {
        listeners: { hbone: `${NET}.1:0`, admin: `${NET}.1:0`, readiness: '' },
        networkPolicy: { enforceOnOriginalIdentity: true },
        filters: [{ name: 'envoy.filters.http.router' }],
      });
      const err = await Waypoint.start({ bootstrap, meshFile, caDir: path.join(dir, 'ca'), watch: false, configFile: 'waypoint.yaml' }).then(
        () => undefined,
        (e: unknown) => e,
      );
      expect(err).toBeInstanceOf(ConfigError);
      expect(String(err)).toMatch(/^waypoint\.yaml: field networkPolicy\.enforceOnOriginalIdentity: .*istio\.authz/);
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });

  test('an invalid NetworkPolicy stops the start with file and line', async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'wp-netpol-'));
    try {
      const meshFile = path.join(dir, 'mesh.yaml');
      const text = meshOf(NET, netpol('bad', 'podSelector: {}\ningress: [{ ports: [{ port: web, endPort: 9000 }] }]'));
      fs.writeFileSync(meshFile, text);
      const line = text.split('\n').findIndex((l) => l.includes('endPort: 9000')) + 1;
      const bootstrap = overrideBootstrap(defaultBootstrap(), { listeners: { hbone: `${NET}.1:0`, admin: `${NET}.1:0`, readiness: '' } });
      const err = await Waypoint.start({ bootstrap, meshFile, caDir: path.join(dir, 'ca'), watch: false }).then(
        () => undefined,
        (e: unknown) => e,
      );
      expect(err).toBeInstanceOf(ConfigError);
      expect(String(err)).toContain(`${meshFile}:${line}: `);
      expect(String(err)).toContain('NetworkPolicy/foo/bad: field spec.ingress[0].ports[0].endPort: may not be specified when `port` is non-numeric');
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });
});
