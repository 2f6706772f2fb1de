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
import type { ClientHttp2Session, ClientHttp2Stream } from 'node:http2';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { Waypoint } from '../../src/app.ts';
import { defaultBootstrap, overrideBootstrap } from '../../src/config/bootstrap.ts';
import { ConfigError } from '../../src/util/errors.ts';
import { LocalCa } from '../../src/identity/ca.ts';
import { connect, hboneSession, parseHttpResponse, readAll } from '../helpers/hbone-client.ts';
import { samplesOf } from '../helpers/prometheus.ts';
import { eventually, meshYaml, recorder, spiffe, startHttpBackend, startTcpBackend, type Received, type TcpBackend } from './authz/harness.ts';

const GOOD = spiffe('client', 'good');
const BAD = spiffe('client', 'bad');

/** A Pod document (service account = its name); `port` = `name: number` of one container port. */
const pod = (name: string, ns: string, labels: string, ip: string, port?: string) => {
  const containers = port ? `, containers: [{ name: app, ports: [{ name: ${port.replace(':', ', containerPort:')} }] }]` : '';
  return `apiVersion: v1\nkind: Pod\nmetadata: { name: ${name}, namespace: ${ns}, labels: ${labels} }\nspec: { serviceAccountName: ${name}${containers} }\nstatus: { podIP: "${ip}" }`;
};

/**
 * The mesh of network `net` (127.0.<net>.x): namespace `foo` served by the waypoint (TCP service
 * `tcp`, HTTP service `web` with pods web-open and web-locked), client pods `good` and `bad` of
 * namespace `client`, then `policies`.
 */
function meshText(net: string, ...policies: string[]): string {
  const tcp = { name: 'tcp', vip: `${net}.100`, podIp: `${net}.11`, ports: ['{ name: tcp, port: 9000, targetPort: 9000 }'] };
  return meshYaml({
    apps: [tcp],
    docs: [
      `apiVersion: v1\nkind: Service\nmetadata: { name: web, namespace: foo }\nspec: { clusterIP: "${net}.101", selector: { app: web }, ports: [{ name: http, port: 80, targetPort: web }] }`,
      pod('web-open', 'foo', '{ app: web, tier: open }', `${net}.12`, 'web: 8080'),
      pod('web-locked', 'foo', '{ app: web, tier: locked }', `${net}.13`, 'web: 8080'),
      'apiVersion: v1\nkind: Namespace\nmetadata: { name: client, labels: { team: client } }',
      pod('good', 'client', '{ role: good }', `${net}.21`),
      pod('bad', 'client', '{ role: bad }', `${net}.22`),
      ...policies,
    ],
  });
}

const netpol = (name: string, spec: string) => `apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: { name: ${name}, namespace: foo }
spec:
${spec}
`;

/** Client pods of namespace `client` with the given role label, on the given named or numbered port. */
const fromRoles = (roles: string[], port: string) => `  ingress:
  - from:
    - namespaceSelector: { matchLabels: { kubernetes.io/metadata.name: client } }
      podSelector: { matchExpressions: [{ key: role, operator: In, values: [${roles.join(', ')}] }] }
    ports: [{ port: ${port} }]`;

const TCP_GOOD_ONLY = netpol('tcp', `  podSelector: { matchLabels: { app: tcp } }\n${fromRoles(['good'], '9000')}`);
const TCP_BAD_ONLY = netpol('tcp', `  podSelector: { matchLabels: { app: tcp } }\n${fromRoles(['bad'], '9000')}`);
const WEB_OPEN = netpol('web-open', `  podSelector: { matchLabels: { tier: open } }\n${fromRoles(['good'], 'web')}`);
const WEB_LOCKED = netpol('web-locked', '  podSelector: { matchLabels: { tier: locked } }\n  policyTypes: [Ingress]');

/** A waypoint in a temp dir with its own CA, JSON access log, and the filters under test. */
class NetpolWaypoint {
  readonly rec = recorder();
  private readonly sessions = new Map<string, Promise<ClientHttp2Session>>();
  waypoint!: Waypoint;
  ca!: LocalCa;
  readonly dir = fs.mkdtempSync(path.join(os.tmpdir(), 'wp-netpol-'));
  readonly meshFile = path.join(this.dir, 'mesh.yaml');
  readonly accessLog = path.join(this.dir, 'access.log');

  static async start(ip: string, mesh: string, enforce: boolean): Promise<NetpolWaypoint> {
    const w = new NetpolWaypoint();
    const caDir = path.join(w.dir, 'ca');
    w.ca = (await LocalCa.ensure(caDir, 'cluster.local')).ca;
    fs.writeFileSync(w.meshFile, mesh);
    const bootstrap = overrideBootstrap(defaultBootstrap(), {
      listeners: { hbone: `${ip}:0`, admin: `${ip}:0`, readiness: '' },
      drain: { timeoutMs: 200 },
      accessLog: { file: w.accessLog, encoding: 'JSON' },
      networkPolicy: { enforceOnOriginalIdentity: enforce },
      filters: [{ name: 'istio.peer_metadata' }, { name: 'istio.authz' }, { name: 'istio.stats' }, { name: 'test.authzrec' }, { name: 'envoy.filters.http.router' }],
    });
    w.waypoint = await Waypoint.start({ bootstrap, meshFile: w.meshFile, caDir, watch: false, extraFilters: [w.rec.factory] });
    return w;
  }

  async setMesh(text: string): Promise<void> {
    const before = this.waypoint.mesh.current.version;
    fs.writeFileSync(this.meshFile, text);
    await this.waypoint.mesh.reload();
    if (this.waypoint.mesh.current.version === before) throw new Error('the mesh update was refused');
  }

  session(principal: string, localAddress: string): Promise<ClientHttp2Session> {
    const key = `${principal}|${localAddress}`;
    let s = this.sessions.get(key);
    if (!s) {
      const hbone = this.waypoint.addresses.hbone;
      s = this.ca
        .issue(principal, 3600_000)
        .then((leaf) => hboneSession(hbone.address, hbone.port, { certPem: leaf.certPem, keyPem: leaf.keyPem, caPem: this.ca.rootCertPem }, { localAddress }));
      this.sessions.set(key, s);
    }
    return s;
  }

  async connect(principal: string, from: string, authority: string): Promise<{ status: number; body: string; stream: ClientHttp2Stream }> {
    const r = await connect(await this.session(principal, from), authority);
    const body = r.status === 200 ? '' : (await readAll(r.stream)).toString();
    return { status: r.status, body, stream: r.stream };
  }

  /** One HTTP/1.1 GET in a tunnel of its own. */
  async get(principal: string, from: string, authority: string, p = '/'): Promise<{ status: number; body: string }> {
    const t = await this.connect(principal, from, authority);
    if (t.status !== 200) throw new Error(`CONNECT ${authority} answered ${t.status}`);
    const answer = readAll(t.stream);
    t.stream.write(`GET ${p} HTTP/1.1\r\nhost: web\r\nconnection: close\r\n\r\n`);
    const r = parseHttpResponse(await answer);
    return { status: r.status, body: r.body.toString() };
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
    for (const s of this.sessions.values()) await s.then((x) => x.destroy(), () => {});
    await this.waypoint?.shutdown();
    fs.rmSync(this.dir, { recursive: true, force: true });
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
  let open: { received: Received[]; close(): Promise<void> };
  let locked: { received: Received[]; close(): Promise<void> };

  beforeAll(async () => {
    tcp = await startTcpBackend(`${NET}.11`, 9000);
    open = await startHttpBackend(`${NET}.12`, 8080);
    locked = await startHttpBackend(`${NET}.13`, 8080);
    wp = await NetpolWaypoint.start(`${NET}.1`, meshText(NET, TCP_GOOD_ONLY, WEB_OPEN, WEB_LOCKED), true);
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

    await wp.setMesh(meshText(NET, TCP_BAD_ONLY, WEB_OPEN, WEB_LOCKED));
    await gone; // closed by the policy change (a hang fails the test)
    const rec = await eventually(() => wp.rec.tunnels.filter((x) => x.peer === GOOD && x.authority === TCP && x.details === 'network_policy_access_denied')[0], 'the closed tunnel');
    expect(rec.inner).toBe('TCP');
    expect((await wp.connect(GOOD, GOOD_IP, TCP)).status).toBe(401);
    const now = await wp.connect(BAD, BAD_IP, TCP);
    expect(now.status).toBe(200);
    expect(await echo(now.stream, 'after')).toBe('after');
    now.stream.close();

    // No NetworkPolicy left for web: both endpoints serve the bad client again.
    await wp.setMesh(meshText(NET, TCP_BAD_ONLY));
    const seenLocked = locked.received.length;
    for (let i = 0; i < 12 && locked.received.length === seenLocked; i++) expect((await wp.get(BAD, BAD_IP, WEB)).status).toBe(200);
    expect(locked.received.length).toBeGreaterThan(seenLocked);
  });
});

describe('NetworkPolicy mode off (the default)', () => {
  const NET = '127.0.104';
  let wp: NetpolWaypoint;
  let tcp: TcpBackend;
  let locked: { received: Received[]; close(): Promise<void> };

  beforeAll(async () => {
    tcp = await startTcpBackend(`${NET}.11`, 9000);
    locked = await startHttpBackend(`${NET}.13`, 8080);
    wp = await NetpolWaypoint.start(`${NET}.1`, meshText(NET, TCP_GOOD_ONLY, WEB_LOCKED), false);
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
      fs.writeFileSync(meshFile, meshText(NET));
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
      const text = meshText(NET, netpol('bad', '  podSelector: {}\n  ingress: [{ ports: [{ port: web, endPort: 9000 }] }]'));
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
