/**
 * `istio.authz` on L4 attributes end to end (pitfall I2): an ALLOW from namespace `good` bound to
 * the waypoint is enforced on raw TCP tunnels (CONNECT 401 before anything is dialed, as ztunnel
 * answers L4 denials), on undeclared (sniffed) ports once they turn out to be TCP (closed, nothing
 * dialed), and on HTTP (403). `ipBlocks` see the HBONE peer address. A policy change closes an open
 * TCP tunnel it now denies and leaves the others alone; an invalid policy is refused at reload
 * (the last good policies stay enforced) and at start-up. Addresses: 127.0.151.x.
 */
import type { ClientHttp2Stream } from 'node:http2';
import { describe, expect, test } from 'vitest';
import { parse } from 'yaml';
import { ConfigError } from '../../../src/util/errors.ts';
import { exchange } from '../../helpers/hbone-client.ts';
import { spiffe } from '../../helpers/identity.ts';
import { authorizationPolicy, toGateway, type Doc } from '../../helpers/mesh.ts';
import type { Backend, TcpBackend } from '../../helpers/recorder.ts';
import { eventually } from '../../helpers/servers.ts';
import { AuthzWaypoint, HTTP_PORT, meshYaml, startAll } from './harness.ts';

const NET = '127.0.151';
const GOOD = spiffe('good', 'c');
const BAD = spiffe('bad', 'c');
const TCP = `${NET}.100:9000`;
const TCP_B = `${NET}.100:9001`;
const WEB = `${NET}.101:80`;
const AUTO_TCP = `${NET}.102:7000`;
const AUTO_WEB = `${NET}.103:80`;

const policy = (name: string, spec: string) => authorizationPolicy(name, { targetRefs: toGateway(), ...parse(spec) }, { namespace: 'infra' });

/** Namespace `app` uses the waypoint `infra/waypoint`; `policies` are bound to it. */
const mesh = (...policies: Doc[]) =>
  meshYaml({
    namespace: 'app',
    waypointNamespace: 'infra',
    apps: [
      { name: 'tcp', vip: `${NET}.100`, podIp: `${NET}.11`, ports: [{ name: 'tcp', port: 9000, targetPort: 9000 }, { name: 'tcp-b', port: 9001, targetPort: 9001 }] },
      { name: 'web', vip: `${NET}.101`, podIp: `${NET}.12`, ports: [HTTP_PORT] },
      // Undeclared protocols (port names Istio does not know): sniffed.
      { name: 'auto-tcp', app: 'auto', vip: `${NET}.102`, podIp: `${NET}.13`, ports: [{ name: 'db', port: 7000, targetPort: 7000 }] },
      { name: 'auto-web', app: 'web', vip: `${NET}.103`, ports: [{ name: 'web', port: 80, targetPort: 8080 }] },
    ],
    docs: policies,
  });

const ALLOW_GOOD = policy('allow-good', '  rules: [{ from: [{ source: { namespaces: ["good"] } }] }]\n');
const DENY_IP = policy('deny-ip', `  action: DENY\n  rules: [{ from: [{ source: { ipBlocks: ["${NET}.52"] } }] }]\n`);
const MESH = mesh(ALLOW_GOOD, DENY_IP);

let wp: AuthzWaypoint;
let tcp: TcpBackend;
let tcpB: TcpBackend;
let auto: TcpBackend;
let web: Backend;

startAll(async (start) => {
  tcp = await start.tcp(`${NET}.11`, 9000);
  tcpB = await start.tcp(`${NET}.11`, 9001);
  auto = await start.tcp(`${NET}.13`, 7000);
  web = await start.http(`${NET}.12`, 8080);
  wp = await start.waypoint({ ip: `${NET}.1`, mesh: MESH });
});

/** Write `data` and wait for the same bytes back (the backends echo). */
async function echo(stream: ClientHttp2Stream, data: string): Promise<string> {
  let got = '';
  const done = new Promise<string>((resolve, reject) => {
    const onData = (c: Buffer) => {
      got += c.toString();
      if (got.length >= data.length) {
        stream.off('data', onData);
        resolve(got);
      }
    };
    stream.on('data', onData);
    stream.once('close', () => reject(new Error(`tunnel closed after ${JSON.stringify(got)}`)));
  });
  stream.write(data);
  return done;
}

/** Resolves when the stream is closed, with what it received. */
function closed(stream: ClientHttp2Stream): Promise<{ data: string; rstCode: number }> {
  let data = '';
  stream.on('data', (c: Buffer) => (data += c.toString()));
  stream.on('error', () => {});
  return new Promise((resolve) => (stream.destroyed ? resolve({ data, rstCode: stream.rstCode ?? 0 }) : stream.once('close', () => resolve({ data, rstCode: stream.rstCode ?? 0 }))));
}

describe('pitfall I2: ALLOW from namespace good, bound to the waypoint', () => {
  test('TCP from bad: CONNECT 401, the backend gets no connection and no byte', async () => {
    const r = await wp.connect(BAD, TCP, `${NET}.51`);
    expect(r.status).toBe(401);
    expect(r.body).toBe('rbac_access_denied_matched_policy[none]');
    const rec = await wp.tunnelRecord(TCP, BAD);
    expect(rec).toMatchObject({ rejectStatus: 401, details: 'rbac_access_denied_matched_policy[none]', bytesReceived: 0 });
    expect(rec.result?.decision).toBe('DENY');
    expect(tcp.connections).toBe(0);
    expect(tcp.bytes).toBe(0);
  });

  test('TCP from good is relayed', async () => {
    const r = await wp.connect(GOOD, TCP, `${NET}.50`);
    expect(r.status).toBe(200);
    expect(await echo(r.stream, 'ping')).toBe('ping');
    r.stream.close();
    expect(tcp.connections).toBe(1);
  });

  test('HTTP from bad: 403; from good: 200', async () => {
    const denied = await wp.http(BAD, WEB, { path: '/i2/bad' }, `${NET}.51`);
    expect(denied.status).toBe(403);
    expect(denied.body).toBe('RBAC: access denied');
    expect((await wp.http(GOOD, WEB, { path: '/i2/good' }, `${NET}.50`)).status).toBe(200);
    expect(web.received.map((q) => q.url)).toEqual(['/i2/good']);
  });

  test('undeclared port, TCP payload from bad: closed after sniffing, nothing dialed', async () => {
    const r = await wp.connect(BAD, AUTO_TCP, `${NET}.51`);
    expect(r.status).toBe(200); // answered before the payload is known, as Envoy's waypoint does
    const end = closed(r.stream);
    r.stream.write('hello, not http\n');
    expect((await end).data).toBe('');
    const rec = await wp.tunnelRecord(AUTO_TCP, BAD);
    expect(rec).toMatchObject({ inner: 'TCP', details: 'rbac_access_denied_matched_policy[none]', bytesReceived: 0 });
    expect(auto.connections).toBe(0);
  });

  test('undeclared port, TCP payload from good is relayed', async () => {
    const r = await wp.connect(GOOD, AUTO_TCP, `${NET}.50`);
    expect(r.status).toBe(200);
    expect(await echo(r.stream, 'hello, not http\n')).toBe('hello, not http\n');
    r.stream.close();
    expect(auto.connections).toBe(1);
  });

  test('undeclared port, HTTP payload: decided per request (bad 403, good 200)', async () => {
    expect((await wp.http(BAD, AUTO_WEB, { path: '/i2/auto-bad' }, `${NET}.51`)).status).toBe(403);
    expect((await wp.http(GOOD, AUTO_WEB, { path: '/i2/auto-good' }, `${NET}.50`)).status).toBe(200);
    expect(web.received.map((q) => q.url)).not.toContain('/i2/auto-bad');
  });

  test('ipBlocks match the HBONE peer address', async () => {
    const r = await wp.connect(GOOD, TCP_B, `${NET}.52`);
    expect(r.status).toBe(401);
    expect(r.body).toBe('rbac_access_denied_matched_policy[ns[infra]-policy[deny-ip]-rule[0]]');
    expect((await wp.http(GOOD, WEB, { path: '/i2/from-52' }, `${NET}.52`)).status).toBe(403);
    expect(tcpB.connections).toBe(0);
  });
});

describe('policy changes', () => {
  test('an open TCP tunnel now denied is closed; another one stays', async () => {
    const a = await wp.connect(GOOD, TCP, `${NET}.50`);
    const b = await wp.connect(GOOD, TCP_B, `${NET}.50`);
    expect([a.status, b.status]).toEqual([200, 200]);
    expect(await echo(a.stream, 'before')).toBe('before');
    expect(await echo(b.stream, 'before')).toBe('before');
    const aClosed = closed(a.stream);

    const deny9000 = policy('deny-9000', '  action: DENY\n  rules: [{ to: [{ operation: { ports: ["9000"] } }] }]\n');
    expect(await wp.setMesh(mesh(ALLOW_GOOD, DENY_IP, deny9000))).toBe(true);
    await aClosed;
    const rec = await wp.tunnelRecord(TCP, GOOD, 1);
    expect(rec).toMatchObject({ inner: 'TCP', details: 'rbac_access_denied_matched_policy[ns[infra]-policy[deny-9000]-rule[0]]' });
    await eventually(() => (tcp.open === 0 ? true : undefined), 'the backend side of the closed tunnel to close');
    // The tunnel to 9001 is still allowed and still works.
    expect(await echo(b.stream, 'after')).toBe('after');
    // New tunnels follow the new policy at once.
    expect((await wp.connect(GOOD, TCP, `${NET}.50`)).status).toBe(401);
    b.stream.close();
    expect(await wp.setMesh(MESH)).toBe(true);
    expect((await wp.connect(GOOD, TCP, `${NET}.50`)).status).toBe(200);
  });

  test('requests on an open HTTP tunnel follow policy changes; the tunnel itself stays', async () => {
    const t = await wp.connect(GOOD, WEB, `${NET}.50`);
    expect(t.status).toBe(200);
    expect((await exchange(t.stream, '/keep/1')).status).toBe(200);
    const denyWeb = policy('deny-web', '  action: DENY\n  rules: [{ to: [{ operation: { ports: ["80"], paths: ["/keep/*"] } }] }]\n');
    expect(await wp.setMesh(mesh(ALLOW_GOOD, DENY_IP, denyWeb))).toBe(true);
    const denied = await exchange(t.stream, '/keep/2');
    expect([denied.status, denied.body]).toEqual([403, 'RBAC: access denied']);
    expect(await wp.setMesh(MESH)).toBe(true);
    expect((await exchange(t.stream, '/keep/3')).status).toBe(200);
    t.stream.close();
    expect(web.received.map((q) => q.url).filter((u) => u.startsWith('/keep/'))).toEqual(['/keep/1', '/keep/3']);
  });

  test('an invalid policy is refused at reload: the last good policies stay enforced', async () => {
    const version = wp.waypoint.mesh.current.version;
    const broken = policy('broken', '  action: DENY\n'); // a DENY without rules is invalid
    expect(await wp.setMesh(mesh(DENY_IP, broken))).toBe(false);
    expect(wp.waypoint.mesh.current.version).toBe(version);
    // Not "deny everything", not "allow-good removed": the old state decides.
    expect((await wp.connect(BAD, TCP, `${NET}.51`)).status).toBe(401);
    const ok = await wp.connect(GOOD, TCP, `${NET}.50`);
    expect(ok.status).toBe(200);
    ok.stream.close();
    // A valid edit afterwards applies.
    expect(await wp.setMesh(mesh(DENY_IP))).toBe(true);
    const nowOpen = await wp.connect(BAD, TCP, `${NET}.51`);
    expect(nowOpen.status).toBe(200);
    nowOpen.stream.close();
    expect(await wp.setMesh(MESH)).toBe(true);
  });

  test('an invalid policy stops the start, naming the policy and the mesh file', async () => {
    const broken = policy('broken', '  action: DENY\n');
    const err = await AuthzWaypoint.start({ ip: `${NET}.2`, mesh: mesh(broken) }).then(
      (w) => w.close().then(() => undefined),
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(ConfigError);
    expect(String(err)).toContain('AuthorizationPolicy/infra/broken');
    expect((err as ConfigError).location.file).toMatch(/mesh\.yaml$/);
  });
});
