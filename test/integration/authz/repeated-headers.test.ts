/**
 * GHSA-ghc4-35x6-crw5 end to end: a DENY on `request.headers[x-role]` = `admin` is not defeated by
 * sending `x-role` as two fields (`user`, then `admin`), from an HTTP/1.1 client and from an h2c
 * client, through client → tunnel → waypoint (HBONE) → echo pods. One field `user,admin` is one
 * value and is not `admin` (as in Envoy after the fix); a request without `admin` reaches the pod
 * with both of its fields. Addresses: 127.0.240.x only.
 */
import fs from 'node:fs';
import http2 from 'node:http2';
import net from 'node:net';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { parseHttpResponse } from '../../helpers/hbone-client.ts';
import { startTestTopology, type TestTopology } from '../../helpers/topology.ts';

const POLICY = `apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: { name: deny-admin-role, namespace: demo }
spec:
  targetRefs: [{ group: gateway.networking.k8s.io, kind: Gateway, name: waypoint }]
  action: DENY
  rules:
  - when:
    - key: request.headers[x-role]
      values: [admin]
`;

let topo: TestTopology;

beforeAll(async () => {
  topo = await startTestTopology(240);
  fs.writeFileSync(topo.meshFile, `${fs.readFileSync(topo.meshFile, 'utf8')}---\n${POLICY}`);
  await topo.waypoint!.mesh.reload();
  expect(topo.waypoint!.mesh.current.resources('AuthorizationPolicy').length, 'the DENY policy is in force').toBe(1);
});
afterAll(async () => {
  await topo?.close();
});

interface Answer {
  readonly status: number;
  readonly body: string;
}

/** One HTTP/1.1 request with `roles` as separate `x-role` lines, on a fresh connection to the tunnel entry. */
function http1(roles: readonly string[]): Promise<Answer> {
  const lines = ['GET /roles HTTP/1.1', 'host: echo.demo.svc.cluster.local', 'connection: close', ...roles.map((r) => `x-role: ${r}`)];
  return new Promise((resolve, reject) => {
    const s = net.connect(topo.entry.port, topo.entry.host);
    const chunks: Buffer[] = [];
    s.on('data', (c: Buffer) => chunks.push(c));
    s.once('end', () => {
      const r = parseHttpResponse(Buffer.concat(chunks));
      resolve({ status: r.status, body: r.body.toString() });
    });
    s.once('error', reject);
    s.write(`${lines.join('\r\n')}\r\n\r\n`);
  });
}

/** One h2c request with `roles` as separate `x-role` fields (a raw header list keeps them apart). */
function h2c(session: http2.ClientHttp2Session, roles: readonly string[]): Promise<Answer> {
  const raw = [':method', 'GET', ':path', '/roles', ':scheme', 'http', ':authority', 'echo.demo.svc.cluster.local', ...roles.flatMap((r) => ['x-role', r])];
  return new Promise((resolve, reject) => {
    const req = session.request(raw as unknown as http2.OutgoingHttpHeaders);
    let status = 0;
    const chunks: Buffer[] = [];
    req.on('response', (h) => (status = Number(h[':status'])));
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => resolve({ status, body: Buffer.concat(chunks).toString() }));
    req.on('error', reject);
  });
}

const denied = (a: Answer) => {
  expect(a.status).toBe(403);
  expect(a.body).toBe('RBAC: access denied');
};
/** Allowed: the echo pod answered and saw every x-role field (Node joins them with ", "). */
const allowed = (a: Answer, roles: readonly string[]) => {
  expect(a.status, a.body).toBe(200);
  expect(JSON.parse(a.body).headers['x-role']).toBe(roles.join(', '));
};

describe('HTTP/1.1 client', () => {
  test('x-role: user + x-role: admin is denied, in either order', async () => {
    denied(await http1(['user', 'admin']));
    denied(await http1(['admin', 'user']));
    denied(await http1(['admin']));
  });

  test('without an admin field the request reaches the pod with all its fields', async () => {
    allowed(await http1(['user', 'guest']), ['user', 'guest']);
    allowed(await http1(['user,admin']), ['user,admin']);
  });
});

describe('h2c client', () => {
  let session: http2.ClientHttp2Session;
  beforeAll(async () => {
    session = http2.connect(`http://${topo.entry.host}:${topo.entry.port}`);
    await new Promise<void>((resolve, reject) => {
      session.once('connect', () => resolve());
      session.once('error', reject);
    });
  });
  afterAll(() => session?.close());

  test('x-role: user + x-role: admin is denied, in either order', async () => {
    denied(await h2c(session, ['user', 'admin']));
    denied(await h2c(session, ['admin', 'user']));
  });

  test('without an admin field the request reaches the pod with all its fields', async () => {
    allowed(await h2c(session, ['user', 'guest']), ['user', 'guest']);
    allowed(await h2c(session, ['user,admin']), ['user,admin']);
  });
});
