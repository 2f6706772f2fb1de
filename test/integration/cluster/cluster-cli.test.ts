/**
 * `waypoint run --cluster` as the container runs it: the real bin in a process of its own, the
 * pod's environment (POD_NAME, ..., CA_ADDR, PROXY_CONFIG), KUBECONFIG for the fake API server,
 * `--token-file` and `--root-cert`. istiod away at start: the process answers readiness 503 and
 * keeps running; istiod back: ready, HBONE traffic served, the summary printed; SIGTERM exits 0,
 * before ready too. A missing variable is an error naming it (exit 1).
 * Addresses: 127.0.203.x (istiod, API server, waypoints) and 127.0.204.x (pod, VIP).
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import path from 'node:path';
import { afterAll, beforeAll, expect, test } from 'vitest';
import { hboneSession } from '../../helpers/hbone-client.ts';
import { within } from '../../helpers/servers.ts';
import { get, readiness, startClusterRig, until, wdsPod, wdsWebService, type ClusterRig } from './rig.ts';

const NET = '127.0.203';
const POD = '127.0.204.11';
const VIP = '127.0.204.100';
const BIN = path.resolve(import.meta.dirname, '../../../bin/waypoint.js');

let rig: ClusterRig;
const children: ChildProcess[] = [];

beforeAll(async () => {
  rig = await startClusterRig(NET, [POD]);
  rig.writeRoot();
  rig.writeToken();
  rig.istiod.push({ resources: [wdsWebService('web', VIP), wdsPod('echo-1', POD, ['web'])] });
});
afterAll(async () => {
  for (const c of children) if (c.exitCode === null) c.kill('SIGKILL');
  await rig?.close();
});

/** `waypoint run --cluster` for a waypoint at `ip` (HBONE :15008, readiness :15021). */
function runCluster(ip: string, env: Record<string, string> = {}) {
  const child = spawn(
    process.execPath,
    [BIN, 'run', '--cluster', '--token-file', rig.tokenFile, '--root-cert', rig.rootFile, '--hbone', `${ip}:15008`, '--admin', `${ip}:0`, '--readiness', `${ip}:15021`, '--drain-delay', '0', '--drain-timeout', '1s'],
    { stdio: ['ignore', 'pipe', 'pipe'], env: { PATH: process.env.PATH, HOME: rig.dir, ...rig.env(ip), KUBECONFIG: rig.kubeconfig, ...env } },
  );
  children.push(child);
  let out = '';
  let err = '';
  child.stdout!.on('data', (c: Buffer) => (out += c.toString()));
  child.stderr!.on('data', (c: Buffer) => (err += c.toString()));
  const exited = new Promise<number | null>((r) => child.once('exit', (code) => r(code)));
  return { child, exited, out: () => out, err: () => err };
}

test('istiod away at start: alive and not ready; back: ready and serving; SIGTERM exits 0', async () => {
  const ip = `${NET}.10`;
  await rig.istiod.stop();
  const wp = runCluster(ip);
  const waiting = await until(async () => {
    const r = await readiness(`${ip}:15021`).catch(() => undefined);
    return r?.status === 503 && wp.err().includes('WDS: istiod unreachable') ? r : undefined;
  }, 'readiness 503 while istiod is away', 20_000);
  expect(waiting.body).toContain(`waiting for the first workload discovery (WDS) sync from istiod at ${rig.istiod.address}`);
  expect(wp.child.exitCode).toBeNull();

  await rig.istiod.restart();
  await until(async () => ((await readiness(`${ip}:15021`).catch(() => undefined))?.status === 200 ? true : undefined), 'ready once istiod is back', 30_000);
  const summary = wp.out();
  expect(summary).toContain('waypoint demo/waypoint (spiffe://cluster.local/ns/demo/sa/waypoint)');
  expect(summary).toContain(`  istiod:    CA ${rig.istiod.address} (root ${rig.rootFile})`);
  expect(summary).toContain(`  kube API:  ${rig.kube.url}`);
  expect(summary).toContain(`  HBONE:     ${ip}:15008`);

  const session = await hboneSession(ip, 15008, rig.client);
  try {
    expect(await get(session, VIP)).toEqual({ status: 200, pod: 'echo-1' });
  } finally {
    session.close();
  }
  wp.child.kill('SIGTERM');
  expect(await within(wp.exited, 15_000, 'exit after SIGTERM')).toBe(0);
  expect(wp.err()).toContain('waypoint stopped');
}, 60_000);

test('SIGTERM before ready (istiod away) exits 0 without an error', async () => {
  const ip = `${NET}.11`;
  await rig.istiod.stop();
  try {
    const wp = runCluster(ip);
    await until(async () => ((await readiness(`${ip}:15021`).catch(() => undefined))?.status === 503 ? true : undefined), 'readiness 503', 20_000);
    wp.child.kill('SIGTERM');
    expect(await within(wp.exited, 15_000, 'exit after SIGTERM')).toBe(0);
    expect(wp.err()).not.toMatch(/^waypoint: /m);
    expect((await readiness(`${ip}:15021`).catch(() => ({ status: -1 }))).status).toBe(-1);
  } finally {
    await rig.istiod.restart();
  }
}, 40_000);

test('a missing variable of the pod template is an error naming it (exit 1)', () => {
  const r = spawnSync(process.execPath, [BIN, 'run', '--cluster'], {
    encoding: 'utf8',
    timeout: 20_000,
    env: { PATH: process.env.PATH, HOME: rig.dir, ...rig.env(`${NET}.12`), INSTANCE_IP: '', KUBECONFIG: rig.kubeconfig },
  });
  expect(r.status).toBe(1);
  expect(r.stderr).toContain('waypoint: --cluster: environment variable INSTANCE_IP (fieldRef status.podIP) not set');
});
