/**
 * The waypoint gets over an ext_authz provider restart (finding: after `kill -TERM` and a new
 * start on the same port, every check waited the full timeout until the idle timeout dropped the
 * half-closed connection). The provider is a real grpc-js server in a child process, killed with
 * SIGTERM as a pod would be; Envoy and grpc-js notice the FIN / GOAWAY and use a new connection for
 * the next call, so must we: the next HTTP check (router path) and the next TCP check (CONNECT
 * time) succeed, without waiting for the provider's timeout. Addresses: 127.0.136.x.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { log } from '../../../src/util/log.ts';
import { spiffe } from '../../helpers/identity.ts';
import { startBackend, startTcpBackend, type Backend, type TcpBackend } from '../../helpers/recorder.ts';
import { AuthzWaypoint, customPolicy, meshYaml } from './harness.ts';

log.level = 'silent';

const NET = '127.0.136';
const PROVIDER = `${NET}.20:9000`;
const GOOD = spiffe('a', 'good');
const WEB = `${NET}.104:80`;
const TCP = `${NET}.100:9000`;
const SERVER_SCRIPT = fileURLToPath(new URL('../ext-authz/grpc-authz-process.ts', import.meta.url));

const custom = (name: string) => customPolicy(name, name, 'grpc');

const MESH = meshYaml({
  // A timeout well above the bound of the tests: a check waiting on a dead connection shows as a failure.
  meshConfig: `extensionProviders:
- name: grpc
  envoyExtAuthzGrpc: { service: ext-authz.foo.svc.cluster.local, port: 9000, timeout: 10s }`,
  apps: [
    { name: 'ext-authz', vip: `${NET}.120`, podIp: `${NET}.20`, ports: [{ name: 'grpc', port: 9000, targetPort: 9000 }] },
    { name: 'tcpapp', vip: `${NET}.100`, podIp: `${NET}.11`, ports: [{ name: 'tcp', port: 9000, targetPort: 9000 }] },
    { name: 'web', vip: `${NET}.104`, podIp: `${NET}.12`, ports: [{ name: 'http', port: 80, targetPort: 8080 }] },
  ],
  docs: [custom('tcpapp'), custom('web')],
});

async function startProvider(): Promise<ChildProcess> {
  const child = spawn(process.execPath, [SERVER_SCRIPT, PROVIDER], { stdio: ['ignore', 'pipe', 'inherit'] });
  let out = '';
  await new Promise<void>((resolve, reject) => {
    child.stdout!.on('data', (c: Buffer) => {
      out += c.toString();
      if (out.includes('ready')) resolve();
    });
    child.once('exit', (code) => reject(new Error(`the ext_authz server exited (${code}) before it was ready`)));
  });
  return child;
}

/** SIGTERM the provider (the kernel closes its connections: FIN, no GOAWAY) and start it again on the same port. */
async function restartProvider(): Promise<void> {
  const exited = once(provider, 'exit');
  provider.kill('SIGTERM');
  await exited;
  provider = await startProvider();
}

let wp: AuthzWaypoint;
let provider: ChildProcess;
let web: Backend;
let tcp: TcpBackend;

beforeAll(async () => {
  provider = await startProvider();
  web = await startBackend(`${NET}.12`, 8080);
  tcp = await startTcpBackend(`${NET}.11`, 9000);
  wp = await AuthzWaypoint.start({ ip: `${NET}.1`, mesh: MESH });
});
afterAll(async () => {
  await wp?.close();
  provider?.kill('SIGKILL');
  await web?.close();
  await tcp?.close();
});

describe('ext_authz provider restart', () => {
  test('HTTP: the check after a restart goes to the new server', { timeout: 20_000 }, async () => {
    expect((await wp.http(GOOD, WEB, { path: '/before' })).status).toBe(200);
    await restartProvider();
    const started = Date.now();
    expect((await wp.http(GOOD, WEB, { path: '/after' })).status).toBe(200);
    // Bounds a hang only (the provider’s timeout is 10 s).
    expect(Date.now() - started).toBeLessThan(5000);
    expect((await wp.record('/after')).code).toBe(200);
  });

  test('TCP: the CONNECT-time check after a restart goes to the new server', { timeout: 20_000 }, async () => {
    const first = await wp.connect(GOOD, TCP);
    expect(first.status).toBe(200);
    first.stream.close();
    await restartProvider();
    const started = Date.now();
    const t = await wp.connect(GOOD, TCP);
    expect(t.status).toBe(200);
    expect(Date.now() - started).toBeLessThan(5000);
    t.stream.close();
  });
});
