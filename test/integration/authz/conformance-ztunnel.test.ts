/**
 * End-to-end conformance of the ztunnel-side checks of test/data/authz-cases-sample.yaml against the
 * `waypoint inbound` role (the destination ztunnel): every check whose enforcer is `ztunnel`, and
 * the ztunnel part of `waypoint-http + ztunnel` checks (`destination_ztunnel_decision`: the
 * waypoint's own HBONE connection to the destination pod, from the waypoint's address with the
 * waypoint's identity). Each check connects over real HBONE mTLS with a client certificate of the
 * check's source principal (issued by the test CA) from the check's source address (remapped and
 * bound), or in plaintext to the role's `--plaintext` listener for the checks without identity
 * (`plaintext-inbound`). Asserted on the wire: an allowed CONNECT is answered 200 and relays to the
 * app; a denied one is answered 401 (`connect-401`) and the app is never dialed; a denied
 * plaintext connection is closed without a byte (`reset`) and the app is never dialed.
 *
 * One role serves all cases (the httpbin pod): each case's fixtures + policies are written as the
 * mesh file and applied with a reload. Fixture addresses map per /24 into 127.0.114.x – 127.0.119.x
 * (VIPs .114, pods .115, clients .116–.118, the waypoint .119); the app listens on 127.0.120.10.
 *
 * Then, beyond the cases: open tunnels and plaintext connections are re-checked when the mesh
 * changes (the now-denied ones are closed), and denials are logged with ztunnel's wording.
 */
import type { ClientHttp2Stream } from 'node:http2';
import net from 'node:net';
import { afterAll, beforeAll, describe, expect, test, vi } from 'vitest';

import { log } from '../../../src/util/log.ts';
import { caseMeshText, cases, checkSource, fixtures, serviceOf, type Case, type Check, type FixtureOptions } from '../../helpers/authz-cases.ts';
import { spiffe } from '../../helpers/identity.ts';
import { startTcpBackend, type TcpBackend } from '../../helpers/recorder.ts';
import { eventually } from '../../helpers/servers.ts';
import { AuthzInbound, remapByNets } from './harness.ts';

const NETS: Readonly<Record<string, string>> = {
  '10.96.0.': '127.0.114.',
  '10.244.2.': '127.0.115.',
  '10.244.1.': '127.0.116.',
  '10.244.3.': '127.0.117.',
  '10.244.4.': '127.0.118.',
  '10.244.9.': '127.0.119.',
};
const remap = remapByNets(NETS);
const OPTIONS: FixtureOptions = { remap };
const APP = '127.0.120.10';
const POD = remap(fixtures.services.httpbin.podIP);
const PORTS = [8080, 9090];
const WAYPOINT = fixtures.waypoint as typeof fixtures.waypoint & { principal: string; podIP: string };

/** One connection the destination ztunnel decides. */
interface ZtunnelCheck {
  readonly principal: string | undefined;
  readonly src: string;
  readonly dst: { readonly ip: string; readonly port: number };
  readonly decision: string;
  readonly status: string | number | undefined;
}

/** The destination ztunnel's part of `check`, or why it has none here. */
function ztunnelPart(c: Case, check: Check): ZtunnelCheck | string {
  const r = check.request;
  const e = check.expect;
  if (c.enforcer.startsWith('cni')) return 'CNI enforcer: Kubernetes NetworkPolicy on packets, not an AuthorizationPolicy decision';
  if (c.enforcer.startsWith('ingress-gateway')) return 'ingress-gateway enforcer (selector policy on a gateway, XFF trusted hops): no ingress gateway here';
  if (c.enforcer === 'ztunnel') {
    const { principal, ip } = checkSource(r);
    const { s } = serviceOf(r.dst, r.authority);
    const dst = { ip: remap(r.dst?.ip ?? s.podIP), port: r.dst?.port ?? s.ports[0].targetPort };
    const plaintext = (r as { path_kind?: string }).path_kind === 'plaintext-inbound';
    if (plaintext !== (principal === undefined)) return `a ${plaintext ? 'plaintext' : 'HBONE'} connection ${principal ? 'with' : 'without'} a peer identity cannot be made`;
    return { principal, src: remap(ip), dst, decision: e.decision, status: e.status };
  }
  if (e.destination_ztunnel_decision !== undefined) {
    // The waypoint forwards to the destination pod over HBONE, as itself.
    const { s } = serviceOf(r.dst, r.authority);
    return { principal: WAYPOINT.principal, src: remap(WAYPOINT.podIP), dst: { ip: remap(s.podIP), port: s.ports[0].targetPort }, decision: e.destination_ztunnel_decision, status: undefined };
  }
  return `enforcer ${c.enforcer}: the waypoint's decision, run by conformance.test.ts`;
}

/** Why a ztunnel check cannot run against this role, or undefined. */
function inboundSkip(z: ZtunnelCheck): string | undefined {
  if (z.dst.ip !== POD) return `destination ${z.dst.ip} is not the inbound role's workload (${POD})`;
  if (z.principal === undefined && !PORTS.includes(z.dst.port)) return `no plaintext listener on port ${z.dst.port}`;
  if (z.principal !== undefined && !z.principal.startsWith('spiffe://cluster.local/')) return `peer ${z.principal}: the role accepts its own trust domain only, and the test CA issues cluster.local identities`;
  return undefined;
}

const runnable = cases.flatMap((c) => c.checks.map((check) => ({ c, check, z: ztunnelPart(c, check) }))).filter((x): x is { c: Case; check: Check; z: ZtunnelCheck } => typeof x.z !== 'string' && !inboundSkip(x.z));

let inbound: AuthzInbound;
const apps: TcpBackend[] = [];
let current = '';
const appConnections = () => apps.reduce((n, a) => n + a.connections, 0);

beforeAll(async () => {
  for (const port of PORTS) apps.push(await startTcpBackend(APP, port));
  current = caseMeshText(runnable[0].c, OPTIONS);
  inbound = await AuthzInbound.start({ ip: POD, app: APP, plaintextPorts: PORTS, mesh: current });
});
afterAll(async () => {
  await inbound?.close();
  for (const a of apps) await a.close();
});

/** Make `text` the role's mesh. */
async function useMesh(text: string, what: string): Promise<void> {
  if (text === current) return;
  expect(await inbound.setMesh(text), `the role accepts ${what}'s mesh`).toBe(true);
  current = text;
}

/** Send `id` through an accepted tunnel and read it back. */
async function echo(stream: ClientHttp2Stream, id: string): Promise<string> {
  const back = new Promise<string>((resolve) => stream.once('data', (c: Buffer) => resolve(c.toString())));
  stream.write(id);
  return back;
}

async function run(id: string, z: ZtunnelCheck): Promise<void> {
  const before = appConnections();
  const allow = z.decision === 'allow';
  if (z.principal === undefined) {
    const r = await inbound.plain(z.dst.port, z.src, id);
    if (allow) expect(r.echoed).toBe(id);
    else {
      expect(['reset', 'close', undefined]).toContain(z.status);
      expect(r.echoed).toBe('');
      expect(appConnections(), 'the app is never dialed').toBe(before);
    }
    return;
  }
  const t = await inbound.connect(z.principal, `${z.dst.ip}:${z.dst.port}`, z.src);
  if (allow) {
    expect(t.status, t.body).toBe(200);
    expect(await echo(t.stream, id)).toBe(id);
    t.stream.close();
  } else {
    expect(['connect-401', 401, undefined]).toContain(z.status);
    expect(t.status).toBe(401);
    expect(t.body).toMatch(/^connection closed due to policy rejection: /);
    expect(appConnections(), 'the app is never dialed').toBe(before);
  }
}

for (const c of cases) {
  describe(`${c.id} ${c.title} [${c.enforcer}]`, () => {
    for (const check of c.checks) {
      const z = ztunnelPart(c, check);
      const reason = typeof z === 'string' ? z : inboundSkip(z);
      if (reason !== undefined || typeof z === 'string') {
        test.skip(`${check.id}: out of scope, ${reason}`, () => {});
        continue;
      }
      const how = z.principal === undefined ? 'plaintext' : 'HBONE';
      test(`${check.id} ${how} ${z.principal ?? '(no identity)'} → ${z.decision}${z.status ? ` (${z.status})` : ''}: ${check.why ?? ''}`, async () => {
        await useMesh(caseMeshText(c, OPTIONS), c.id);
        await run(check.id, z);
      });
    }
  });
}

test('the ztunnel checks ran here cover every ztunnel enforcer case and the destination ztunnel part', () => {
  const ids = new Set(runnable.map((x) => x.c.id));
  for (const c of cases) if (c.enforcer === 'ztunnel') expect(ids.has(c.id), c.id).toBe(true);
  expect(runnable.some((x) => x.check.expect.destination_ztunnel_decision !== undefined)).toBe(true);
});

test('every bound or dialed address is in 127.0.114–120 (never a 10.x)', () => {
  for (const { z } of runnable) {
    expect(z.src).toMatch(/^127\.0\.11[4-9]\.\d+$/);
    expect(z.dst.ip).toMatch(/^127\.0\.11[4-9]\.\d+$/);
  }
  expect(APP).toMatch(/^127\.0\.120\.\d+$/);
});

// ---- beyond the cases: policy changes and log wording -------------------------------------------------

describe('open connections under policy changes', () => {
  const SLEEP = spiffe('foo', 'sleep');
  const SLEEP_IP = remap(fixtures.clients.sleep.ip);
  const CURL = spiffe('foo', 'curl');
  const CURL_IP = remap(fixtures.clients.curl.ip);
  const NONMESH_IP = remap(fixtures.clients.nonmesh.ip);
  const base = { id: 'ZT-RECHECK', title: '', enforcer: 'ztunnel', checks: [] } as const;
  const meshWith = (...policies: object[]) => caseMeshText({ ...base, policies } as unknown as Case, OPTIONS);
  const denyHttpbin = (name: string, from: object) => ({
    apiVersion: 'security.istio.io/v1',
    kind: 'AuthorizationPolicy',
    metadata: { name, namespace: 'foo' },
    spec: { selector: { matchLabels: { app: 'httpbin' } }, action: 'DENY', rules: [{ from: [{ source: from }] }] },
  });
  /** A plaintext connection to the role, kept open once it relayed a first echo. */
  const openPlain = (port: number, localAddress: string) =>
    new Promise<net.Socket>((resolve, reject) => {
      const s = net.connect({ host: POD, port, localAddress });
      s.once('error', reject);
      s.once('connect', () => s.write('hello'));
      s.once('data', () => resolve(s));
    });
  const closed = (s: { once(e: 'close', f: () => void): unknown; destroyed?: boolean; closed?: boolean }) =>
    new Promise<void>((resolve) => (s.closed || s.destroyed ? resolve() : s.once('close', () => resolve())));

  test('an HBONE tunnel newly denied is closed; others stay; new CONNECTs get 401; logged as ztunnel does', async () => {
    await useMesh(meshWith(), 'no policies');
    const sleep = await inbound.connect(SLEEP, `${POD}:8080`, SLEEP_IP);
    const curl = await inbound.connect(CURL, `${POD}:8080`, CURL_IP);
    expect([sleep.status, curl.status]).toEqual([200, 200]);
    expect(await echo(sleep.stream, 'a')).toBe('a');
    const info = vi.spyOn(log, 'info');
    try {
      await useMesh(meshWith(denyHttpbin('deny-sleep', { principals: ['cluster.local/ns/foo/sa/sleep'] })), 'deny-sleep');
      await closed(sleep.stream);
      expect(await echo(curl.stream, 'still open')).toBe('still open');
      const again = await inbound.connect(SLEEP, `${POD}:8080`, SLEEP_IP);
      expect(again.status).toBe(401);
      expect(again.body).toBe('connection closed due to policy rejection: explicitly denied by: foo/deny-sleep');
      const messages = info.mock.calls.map((args) => args.find((a) => typeof a === 'string'));
      expect(messages).toContain('inbound: connection closed due to policy change');
      expect(messages).toContain('inbound: connection closed due to policy rejection: explicitly denied by: foo/deny-sleep');
    } finally {
      info.mockRestore();
      curl.stream.close();
    }
  });

  test('a plaintext connection newly denied is closed; the app side too', async () => {
    await useMesh(meshWith(), 'no policies');
    const socket = await openPlain(8080, NONMESH_IP);
    const openBefore = apps[0].open;
    expect(openBefore).toBeGreaterThan(0);
    await useMesh(meshWith(denyHttpbin('deny-plaintext', { notPrincipals: ['*'] })), 'deny-plaintext');
    await closed(socket);
    await eventually(() => (apps[0].open < openBefore ? true : undefined), 'the app connection closed');
    const r = await inbound.plain(8080, NONMESH_IP, 'refused');
    expect(r.echoed).toBe('');
  });

  test('ALLOW with no rules (allow-nothing) refuses every CONNECT; fixing it admits them again', async () => {
    const nothing = { apiVersion: 'security.istio.io/v1', kind: 'AuthorizationPolicy', metadata: { name: 'nothing', namespace: 'istio-system' }, spec: {} };
    await useMesh(meshWith(nothing), 'allow-nothing');
    const denied = await inbound.connect(SLEEP, `${POD}:9090`, SLEEP_IP);
    expect(denied.status).toBe(401);
    expect(denied.body).toBe('connection closed due to policy rejection: allow policies exist, but none allowed');
    await useMesh(meshWith({ ...nothing, spec: { rules: [{ to: [{ operation: { ports: ['9090'] } }] }] } }), 'allow 9090');
    const allowed = await inbound.connect(SLEEP, `${POD}:9090`, SLEEP_IP);
    expect(allowed.status).toBe(200);
    allowed.stream.close();
  });
});
