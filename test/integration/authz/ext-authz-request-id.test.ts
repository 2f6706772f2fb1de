/**
 * `x-request-id` exists before any filter runs, as Envoy's connection manager sets it
 * (conn_manager_utility.cc `mutateRequestHeaders`): the ext_authz CheckRequest carries it (a
 * client's kept, else a generated UUID v4), the upstream gets the same one, and the access-log line
 * of a request ext_authz answered locally has it too. The CheckRequest header map has `:authority`
 * and no `host` (Envoy's header map stores Host as `:authority`). Addresses: 127.0.137.x.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import * as grpc from '@grpc/grpc-js';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import type { CheckRequest } from '../../../src/ext-authz/proto.ts';
import { log } from '../../../src/util/log.ts';
import { spiffe } from '../../helpers/identity.ts';
import { startBackend, type Backend } from '../../helpers/recorder.ts';
import { eventually } from '../../helpers/servers.ts';
import { startGrpcAuthz, type CheckReply } from '../ext-authz/helpers.ts';
import { AuthzWaypoint, customPolicy, meshYaml } from './harness.ts';

log.level = 'silent';

const NET = '127.0.137';
const GOOD = spiffe('a', 'good');
const WEB = `${NET}.104:80`;
const UUID_V4 = /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/;
const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'wp-ext-authz-rid-'));
const ACCESS_LOG = path.join(dir, 'access.log');

const MESH = meshYaml({
  meshConfig: `accessLogFile: ${ACCESS_LOG}
accessLogEncoding: JSON
extensionProviders:
- name: grpc
  envoyExtAuthzGrpc: { service: ext-authz.foo.svc.cluster.local, port: 9000, timeout: 5s }`,
  apps: [
    { name: 'ext-authz', vip: `${NET}.120`, podIp: `${NET}.20`, ports: [{ name: 'grpc', port: 9000, targetPort: 9000 }] },
    { name: 'web', vip: `${NET}.104`, podIp: `${NET}.12`, ports: [{ name: 'http', port: 80, targetPort: 8080 }] },
  ],
  docs: [
    customPolicy('web', 'web', 'grpc'),
  ],
});

/** Denies `/deny`, allows the rest. */
function reply(req: CheckRequest): CheckReply {
  return req.attributes?.request?.http?.path === '/deny'
    ? { kind: 'respond', response: { status: { code: grpc.status.PERMISSION_DENIED } } }
    : { kind: 'respond', response: { status: { code: 0 } } };
}

let wp: AuthzWaypoint;
let authz: Awaited<ReturnType<typeof startGrpcAuthz>>;
let web: Backend;

beforeAll(async () => {
  authz = await startGrpcAuthz(`${NET}.20:9000`, reply);
  web = await startBackend(`${NET}.12`, 8080);
  wp = await AuthzWaypoint.start({ ip: `${NET}.1`, mesh: MESH });
});
afterAll(async () => {
  await wp?.close();
  await Promise.all([authz?.close(), web?.close()]);
  fs.rmSync(dir, { recursive: true, force: true });
});

const checkOf = (p: string) => eventually(() => authz.seen.find((s) => s.request.attributes?.request?.http?.path === p)?.request.attributes!.request!.http!, `the check of ${p}`);
const logLineOf = (p: string) =>
  eventually(() => {
    if (!fs.existsSync(ACCESS_LOG)) return undefined;
    const lines = fs.readFileSync(ACCESS_LOG, 'utf8').split('\n').filter(Boolean).map((l) => JSON.parse(l) as Record<string, unknown>);
    return lines.find((l) => l.path === p);
  }, `the access-log line of ${p}`);

describe('x-request-id before the filters', () => {
  test('generated: the CheckRequest, the upstream request and the access log carry the same UUID v4', async () => {
    expect((await wp.http(GOOD, WEB, { path: '/gen' })).status).toBe(200);
    const id = (await checkOf('/gen')).headers['x-request-id'];
    expect(id).toMatch(UUID_V4);
    expect(web.received.find((r) => r.url === '/gen')?.headers['x-request-id']).toBe(id);
    expect((await logLineOf('/gen')).request_id).toBe(id);
  });

  test('a client’s x-request-id is kept', async () => {
    expect((await wp.http(GOOD, WEB, { path: '/kept', headers: [['x-request-id', 'client-id-1']] })).status).toBe(200);
    expect((await checkOf('/kept')).headers['x-request-id']).toBe('client-id-1');
    expect(web.received.find((r) => r.url === '/kept')?.headers['x-request-id']).toBe('client-id-1');
    expect((await logLineOf('/kept')).request_id).toBe('client-id-1');
  });

  test('a request ext_authz denied has its request id in the access log', async () => {
    expect((await wp.http(GOOD, WEB, { path: '/deny' })).status).toBe(403);
    const id = (await checkOf('/deny')).headers['x-request-id'];
    expect(id).toMatch(UUID_V4);
    const line = await logLineOf('/deny');
    expect(line).toMatchObject({ response_code: 403, response_code_details: 'ext_authz_denied', request_id: id });
  });

  test('the CheckRequest headers have :authority and no host (HTTP/1.1 Host is :authority in Envoy)', async () => {
    const http = await checkOf('/gen');
    expect(http.headers[':authority']).toBe(WEB);
    expect(http.headers.host).toBeUndefined();
    expect(http.host).toBe(WEB);
  });
});
