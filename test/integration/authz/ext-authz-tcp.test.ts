/**
 * CUSTOM on TCP ports and the authorization counters, end to end:
 * - a gRPC provider is asked at CONNECT time with the connection's source and destination only
 *   (Envoy's network ext_authz); a denial refuses the CONNECT 401 (`ext_authz_denied`, flag
 *   UAEX), nothing dialed; an unreachable provider refuses with `ext_authz_error` unless
 *   `failOpen`; an HTTP provider's CUSTOM rules are ignored on TCP (istiod's builder);
 * - `/stats/prometheus` carries Envoy's RBAC and ext_authz counters (HTTP and TCP) and the
 *   refused tunnels' `istio_tcp_connections_opened_total` / `_closed_total`.
 * Addresses: 127.0.123.x.
 */
import * as grpc from '@grpc/grpc-js';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import type { CheckRequest } from '../../../src/ext-authz/proto.ts';
import { log } from '../../../src/util/log.ts';
import { spiffe } from '../../helpers/identity.ts';
import { RECORDER, startBackend, startTcpBackend, type Received, type TcpBackend } from '../../helpers/recorder.ts';
import { eventually } from '../../helpers/servers.ts';
import { startGrpcAuthz, type CheckReply } from '../ext-authz/helpers.ts';
import { AuthzWaypoint, customPolicy, DRY_RUN, meshYaml, servicePolicy } from './harness.ts';

log.level = 'silent';

const NET = '127.0.123';
const GOOD = spiffe('a', 'good');
const BAD = spiffe('a', 'bad');
const TCP_ASKED = `${NET}.100:9000`;
const TCP_OPEN = `${NET}.101:9000`;
const TCP_CLOSED = `${NET}.102:9000`;
const TCP_HTTP_PROVIDER = `${NET}.103:9000`;
const WEB = `${NET}.104:80`;
const WEB2 = `${NET}.105:80`;

const custom = (name: string, service: string, provider: string) => customPolicy(name, service, provider);
const tcpApp = (name: string, last: number) => ({ name, vip: `${NET}.${last}`, podIp: `${NET}.11`, ports: [{ name: 'tcp', port: 9000, targetPort: 9000 }] });
const webApp = (name: string, last: number) => ({ name, vip: `${NET}.${last}`, podIp: `${NET}.12`, ports: [{ name: 'http', port: 80, targetPort: 8080 }] });

const MESH = meshYaml({
  meshConfig: `extensionProviders:
- name: grpc
  envoyExtAuthzGrpc: { service: ext-authz.foo.svc.cluster.local, port: 9000, timeout: 2s }
- name: dead-open
  envoyExtAuthzGrpc: { service: dead.foo.svc.cluster.local, port: 9000, timeout: 2s, failOpen: true }
- name: dead-closed
  envoyExtAuthzGrpc: { service: dead.foo.svc.cluster.local, port: 9000, timeout: 2s, statusOnError: "503" }
- name: http
  envoyExtAuthzHttp: { service: dead.foo.svc.cluster.local, port: 9000, timeout: 2s }`,
  apps: [
    { name: 'ext-authz', vip: `${NET}.120`, podIp: `${NET}.20`, ports: [{ name: 'grpc', port: 9000, targetPort: 9000 }] },
    // Nothing listens on the dead provider's pod.
    { name: 'dead', vip: `${NET}.121`, podIp: `${NET}.21`, ports: [{ name: 'grpc', port: 9000, targetPort: 9000 }] },
    tcpApp('asked', 100),
    tcpApp('open', 101),
    tcpApp('closed', 102),
    tcpApp('httpprov', 103),
    webApp('web', 104),
    webApp('web2', 105),
  ],
  docs: [
    custom('asked', 'asked', 'grpc'),
    custom('open', 'open', 'dead-open'),
    custom('closed', 'closed', 'dead-closed'),
    custom('httpprov', 'httpprov', 'http'),
    custom('web', 'web', 'grpc'),
    servicePolicy('web2-deny', 'web2', 'action: DENY\nrules: [{ to: [{ operation: { paths: ["/deny"] } }] }]'),
    servicePolicy('web2-dry-allow', 'web2', 'rules: [{ to: [{ operation: { paths: ["/dry"] } }] }]', { annotations: DRY_RUN }),
  ],
});

function reply(req: CheckRequest): CheckReply {
  const denied = req.attributes?.source?.principal === BAD;
  return denied
    ? { kind: 'respond', response: { status: { code: grpc.status.PERMISSION_DENIED } } }
    : { kind: 'respond', response: { status: { code: 0 } } };
}

let wp: AuthzWaypoint;
let authz: Awaited<ReturnType<typeof startGrpcAuthz>>;
let tcp: TcpBackend;
let web: { received: Received[]; close(): Promise<void> };

beforeAll(async () => {
  authz = await startGrpcAuthz(`${NET}.20:9000`, reply);
  tcp = await startTcpBackend(`${NET}.11`, 9000);
  web = await startBackend(`${NET}.12`, 8080);
  wp = await AuthzWaypoint.start({
    ip: `${NET}.1`,
    mesh: MESH,
    filters: [{ name: 'istio.authz' }, { name: 'istio.stats' }, { name: RECORDER }, { name: 'envoy.filters.http.router' }],
  });
});
afterAll(async () => {
  await wp?.close();
  await authz?.close();
  await tcp?.close();
  await web?.close();
});

const tunnelOf = (authority: string, peer: string) =>
  eventually(() => wp.rec.tunnels.find((t) => t.authority === authority && t.peer === peer), `the tunnel record of ${authority}`);

async function scrape(): Promise<string> {
  const admin = wp.waypoint.addresses.admin;
  const res = await fetch(`http://${admin.address}:${admin.port}/stats/prometheus`);
  return res.text();
}
/** The value of the first series of `name` whose labels contain every `parts`; 0 when none. */
function value(text: string, name: string, ...parts: string[]): number {
  for (const line of text.split('\n')) {
    if (!line.startsWith(`${name}{`) && !line.startsWith(`${name} `)) continue;
    if (parts.every((p) => line.includes(p))) return Number(line.slice(line.lastIndexOf(' ') + 1));
  }
  return 0;
}

describe('CUSTOM on TCP (network ext_authz at CONNECT time)', () => {
  test('allowed: the tunnel carries bytes; the check had only source and destination', async () => {
    const t = await wp.connect(GOOD, TCP_ASKED);
    expect(t.status).toBe(200);
    t.stream.write('ping');
    const echoed = await new Promise<string>((resolve) => t.stream.once('data', (c: Buffer) => resolve(c.toString())));
    expect(echoed).toBe('ping');
    t.stream.close();
    const check = authz.seen.find((s) => s.request.attributes?.source?.principal === GOOD)?.request.attributes;
    expect(check?.request?.http).toBeUndefined();
    expect(check?.destination?.address?.address.case).toBe('socketAddress');
  });

  test('denied: CONNECT 401, ext_authz_denied, UAEX, nothing dialed', async () => {
    const before = tcp.connections;
    const t = await wp.connect(BAD, TCP_ASKED);
    expect(t.status).toBe(401);
    expect(await tunnelOf(TCP_ASKED, BAD)).toMatchObject({ rejectStatus: 401, details: 'ext_authz_denied' });
    expect(tcp.connections).toBe(before);
  });

  test('provider unreachable: 401 ext_authz_error (statusOnError has no TCP meaning); failOpen lets it through', async () => {
    expect((await wp.connect(GOOD, TCP_CLOSED)).status).toBe(401);
    expect(await tunnelOf(TCP_CLOSED, GOOD)).toMatchObject({ rejectStatus: 401, details: 'ext_authz_error' });
    expect((await wp.connect(GOOD, TCP_OPEN)).status).toBe(200);
  });

  test('an HTTP provider’s CUSTOM rules do not apply on TCP', async () => {
    const t = await wp.connect(BAD, TCP_HTTP_PROVIDER);
    expect(t.status).toBe(200);
    t.stream.close();
  });
});

describe('authorization counters in /stats/prometheus', () => {
  test('TCP: network RBAC and ext_authz counters, refused tunnels opened and closed with their flag', async () => {
    // The tunnels above (each test's state is visible here: the file runs in order).
    await tunnelOf(TCP_ASKED, BAD);
    // Bounded wait for the closed tunnels to be reported (the assertions below decide).
    let text = await scrape();
    for (let i = 0; i < 100 && value(text, 'istio_tcp_connections_closed_total', 'response_flags="UAEX"', 'destination_service_name="closed"') < 1; i++) {
      await new Promise((r) => setTimeout(r, 20));
      text = await scrape();
    }
    // Envoy's network ext_authz under Istio's `stat_prefix: tcp.`: `ext_authz.tcp..ok`, no tag
    // extracted (only `rbac.*` stats get envoy_rbac_prefix), so no labels.
    expect(text).toMatch(/^envoy_ext_authz_tcp__ok \d+$/m);
    expect(text).not.toMatch(/^envoy_ext_authz_tcp_\w*\{/m);
    expect(value(text, 'envoy_ext_authz_tcp__ok')).toBeGreaterThanOrEqual(1);
    expect(value(text, 'envoy_ext_authz_tcp__denied')).toBe(1);
    expect(value(text, 'envoy_ext_authz_tcp__error')).toBe(2); // closed + failed open
    expect(value(text, 'envoy_ext_authz_tcp__failure_mode_allowed')).toBe(1);
    expect(value(text, 'envoy_rbac_allowed', 'envoy_rbac_prefix="tcp"')).toBeGreaterThanOrEqual(2);
    expect(value(text, 'istio_tcp_connections_opened_total', 'response_flags="UAEX"', 'destination_service_name="asked"')).toBe(1);
    expect(value(text, 'istio_tcp_connections_closed_total', 'response_flags="UAEX"', 'destination_service_name="asked"')).toBe(1);
    expect(value(text, 'istio_tcp_connections_closed_total', 'response_flags="UAEX"', 'destination_service_name="closed"')).toBe(1);
  });

  test('HTTP: ext_authz ok/denied and RBAC allowed/denied with dry-run counters, per HTTP chain', async () => {
    expect((await wp.http(GOOD, WEB, { path: '/a' })).status).toBe(200);
    expect((await wp.http(BAD, WEB, { path: '/b' })).status).toBe(403);
    expect((await wp.http(GOOD, WEB2, { path: '/deny' })).status).toBe(403);
    expect((await wp.http(GOOD, WEB2, { path: '/dry' })).status).toBe(200);
    const text = await scrape();
    const web1 = 'envoy_http_conn_manager_prefix="inbound-vip|80|http|web.foo.svc.cluster.local"';
    const web2 = 'envoy_http_conn_manager_prefix="inbound-vip|80|http|web2.foo.svc.cluster.local"';
    expect(value(text, 'envoy_http_ext_authz_ok', web1)).toBe(1);
    expect(value(text, 'envoy_http_ext_authz_denied', web1)).toBe(1);
    expect(value(text, 'envoy_http_rbac_allowed', web1)).toBe(1); // the request the provider allowed
    expect(value(text, 'envoy_http_rbac_denied', web2)).toBe(1);
    expect(value(text, 'envoy_http_rbac_allowed', web2)).toBe(1);
    expect(value(text, 'envoy_http_rbac_istio_dry_run_allow_shadow_allowed', web2)).toBe(1);
    expect(value(text, 'envoy_http_rbac_istio_dry_run_allow_shadow_denied', web2)).toBe(0);
    // No policy name in any label (Envoy has none without rules_stat_prefix).
    expect(text).not.toMatch(/envoy_(http_)?rbac_[a-z_]*\{[^}]*policy/);
  });
});
