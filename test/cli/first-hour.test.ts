/**
 * A newcomer's first hour with the `waypoint` CLI, as real child processes of the bin under the
 * project's Node 24 (node_modules/.bin/node): `--help` marks mandatory flags; `--hbone` mistakes
 * and bind failures name the flag; `--ca` given a key or a workload certificate is refused at
 * start; a misspelled kind is refused with file and line, and a Deployment without Pods gets a
 * warning saying to add the Pods; the admin root lists its endpoints; `--pid-file` holds the
 * waypoint's own PID, also under `npm exec` (whose PID a `kill -TERM` would not stop it through);
 * the demo turns the access log on. Addresses: 127.0.241.x (CLI), 127.0.242.x (demo topology).
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { request } from 'undici';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { demoCommand, demoTopology } from '../../src/cli/demo.ts';
import { topologyMesh } from '../../src/demo/topology.ts';
import { startTestTopology } from '../helpers/topology.ts';

const ROOT = path.resolve(import.meta.dirname, '../..');
const NODE = path.join(ROOT, 'node_modules', '.bin', 'node');
const BIN = path.join(ROOT, 'bin', 'waypoint.js');
const IP = (n: number) => `127.0.241.${n}`;
let dir: string;
const children: ChildProcess[] = [];

function waypoint(args: string[]) {
  return spawnSync(NODE, [BIN, ...args], { encoding: 'utf8', timeout: 20_000, env: { ...process.env, WAYPOINT_STATE_DIR: path.join(dir, 'state'), WAYPOINT_LOG_LEVEL: 'warn' } });
}

/** A long-running command; resolves once `ready()` holds, with its collected output. */
function start(cmd: string, args: string[], opts: { cwd?: string } = {}) {
  const child = spawn(cmd, args, { cwd: opts.cwd, env: { ...process.env, WAYPOINT_STATE_DIR: path.join(dir, 'state'), WAYPOINT_LOG_LEVEL: 'warn' } });
  children.push(child);
  const io = { out: '', err: '' };
  child.stdout!.on('data', (c) => (io.out += c));
  child.stderr!.on('data', (c) => (io.err += c));
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  return { child, io, exited };
}

const mesh = (n: number) => topologyMesh({ dir: '', waypointIp: IP(1), vip: IP(100), podIps: [IP(11 + n)], clientIp: IP(50), tunnelListen: '', admin: '' });

beforeAll(() => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'wp-first-hour-'));
  const ca = path.join(dir, 'ca');
  expect(waypoint(['ca', 'init', '--dir', ca]).status).toBe(0);
  expect(waypoint(['ca', 'issue', '--dir', ca, '--spiffe', 'spiffe://cluster.local/ns/demo/sa/client', '--out', path.join(dir, 'client')]).status).toBe(0);
});
afterAll(() => {
  for (const c of children) if (c.exitCode === null && c.signalCode === null) c.kill('SIGKILL');
  fs.rmSync(dir, { recursive: true, force: true });
});

test('--help marks the mandatory flags (run: --mesh or --cluster; tunnel and inbound --listen, --identity, --ca)', () => {
  const run = waypoint(['run', '--help']);
  expect(run.status).toBe(0);
  expect(run.stdout).toMatch(/--mesh <file>\s+mesh state:[^\n]*(\n\s+[^-\s][^\n]*)*\(required: this or --cluster\)/);
  expect(run.stdout.replace(/\n\s+(?!-)/g, ' ')).toMatch(/--cluster\s+in a Kubernetes cluster:[^\n]*\(required: this or --mesh\)/);
  expect(run.stdout).not.toMatch(/--config <file>[^\n]*\(required\)/);
  for (const cmd of ['tunnel', 'inbound']) {
    const help = waypoint([cmd, '--help']).stdout.replace(/\n\s+(?!-)/g, ' ');
    for (const flag of ['--listen', '--identity', '--ca']) expect(help, `${cmd} ${flag}`).toMatch(new RegExp(`${flag} <[^>]+>[^\\n]*\\(required\\)`));
  }
});

describe('--hbone', () => {
  test('a malformed address is refused naming the flag', () => {
    const meshFile = path.join(dir, 'hbone-mesh.yaml');
    fs.writeFileSync(meshFile, mesh(0));
    const r = waypoint(['run', '--mesh', meshFile, '--hbone', IP(1), '--admin', `${IP(1)}:0`, '--readiness', '']);
    expect(r.status).toBe(1);
    expect(r.stderr.trim().split('\n').pop()).toBe(`waypoint: --hbone ${IP(1)}: expected IP:PORT or [IPv6]:PORT (e.g. 127.0.0.1:15008)`);
    const empty = waypoint(['run', '--mesh', meshFile, '--hbone', '', '--admin', `${IP(1)}:0`, '--readiness', '']);
    expect(empty.stderr.trim().split('\n').pop()).toBe('waypoint: --hbone "": expected IP:PORT or [IPv6]:PORT (e.g. 127.0.0.1:15008)');
  });

  test('an address in use is refused naming the flag', async () => {
    const meshFile = path.join(dir, 'hbone-mesh.yaml');
    fs.writeFileSync(meshFile, mesh(0));
    const busy = net.createServer();
    await new Promise<void>((resolve) => busy.listen(0, IP(2), resolve));
    const port = (busy.address() as net.AddressInfo).port;
    try {
      const r = waypoint(['run', '--mesh', meshFile, '--hbone', `${IP(2)}:${port}`, '--admin', `${IP(2)}:0`, '--readiness', '']);
      expect(r.status).toBe(1);
      expect(r.stderr.trim().split('\n').pop()).toBe(`waypoint: --hbone ${IP(2)}:${port}: address already in use (is another waypoint or demo running?)`);
    } finally {
      busy.close();
    }
  });
});

describe('--ca must be the mesh root certificate', () => {
  const tunnel = (ca: string) =>
    waypoint(['tunnel', '--listen', `${IP(50)}:0`, '--to', `${IP(1)}:15008`, '--authority', `${IP(100)}:80`, '--identity', path.join(dir, 'client'), '--ca', ca]);

  test('a private key is refused at start, naming the flag and the file', () => {
    const key = path.join(dir, 'client-key.pem');
    const r = tunnel(key);
    expect(r.status).toBe(1);
    expect(r.stderr.trim()).toBe(`waypoint: --ca ${key}: it holds a private key, not a CA certificate: give the mesh root certificate (root-cert.pem in the directory of \`waypoint ca init\`)`);
  });

  test('a workload (leaf) certificate is refused at start', () => {
    const leaf = path.join(dir, 'client-cert.pem');
    const r = tunnel(leaf);
    expect(r.status).toBe(1);
    expect(r.stderr.trim()).toMatch(new RegExp(`^waypoint: --ca ${leaf.replaceAll('.', '\\.')}: it holds a workload certificate for spiffe://cluster\\.local/ns/demo/sa/client, not a CA certificate`));
  });

  test('inbound refuses a key too', () => {
    const key = path.join(dir, 'client-key.pem');
    const r = waypoint(['inbound', '--listen', `${IP(11)}:0`, '--identity', path.join(dir, 'client'), '--ca', key]);
    expect(r.status).toBe(1);
    expect(r.stderr).toContain(`waypoint: --ca ${key}: it holds a private key`);
  });
});

test('a misspelled kind is refused with file and line, as kubectl apply refuses it', () => {
  const meshFile = path.join(dir, 'typo.yaml');
  const base = mesh(0);
  fs.writeFileSync(meshFile, `${base}---\napiVersion: v1\nkind: Servce\nmetadata: { name: web, namespace: demo }\nspec: { ports: [{ port: 80 }] }\n`);
  const line = base.split('\n').length + 2;
  const r = waypoint(['run', '--mesh', meshFile, '--hbone', `${IP(3)}:0`, '--admin', `${IP(3)}:0`, '--readiness', '']);
  expect(r.status).toBe(1);
  expect(r.stderr.trim().split('\n').pop()).toMatch(
    new RegExp(`^waypoint: ${meshFile.replaceAll('.', '\\.')}:${line}: document \\d+: Servce/demo/web: field kind: no matches for kind "Servce" in version "v1" \\(did you mean Service\\?\\)$`),
  );
});

test('run: a Deployment without Pods is warned about; the admin root lists its endpoints; --pid-file holds the PID and goes at exit', async () => {
  const meshFile = path.join(dir, 'deploy.yaml');
  fs.writeFileSync(
    meshFile,
    `${mesh(1)}---\napiVersion: apps/v1\nkind: Deployment\nmetadata: { name: web, namespace: demo }\nspec:\n  selector: { matchLabels: { app: web } }\n  template: { metadata: { labels: { app: web } } }\n`,
  );
  const pidFile = path.join(dir, 'run.pid');
  const { child, io, exited } = start(NODE, [BIN, 'run', '--mesh', meshFile, '--hbone', `${IP(4)}:0`, '--admin', `${IP(4)}:15241`, '--readiness', `${IP(4)}:15242`, '--pid-file', pidFile, '--drain-delay', '0']);
  await expect.poll(() => fs.existsSync(pidFile), { timeout: 15_000 }).toBe(true);
  expect(fs.readFileSync(pidFile, 'utf8')).toBe(`${child.pid}\n`);
  expect(io.err).toContain('Deployment/demo/web: none of its Pods is in the file');
  expect(io.err).toContain('kubectl get pods -n demo -l app=web -o yaml');

  const admin = await request(`http://${IP(4)}:15241/`);
  expect(admin.statusCode).toBe(200);
  const index = await admin.body.text();
  for (const p of ['/config_dump', '/stats/prometheus', '/healthz/ready']) expect(index).toContain(p);
  const readiness = await request(`http://${IP(4)}:15242/`);
  expect(readiness.statusCode).toBe(200);
  const rindex = await readiness.body.text();
  expect(rindex).toContain('/healthz/ready');
  expect(rindex).not.toContain('/config_dump');

  process.kill(Number(fs.readFileSync(pidFile, 'utf8')), 'SIGTERM');
  expect(await exited).toBe(0);
  expect(fs.existsSync(pidFile), 'the PID file is removed at exit').toBe(false);
});

test("README's background recipe: under `npm exec`, kill -TERM $(cat --pid-file) stops the waypoint itself", async () => {
  const meshFile = path.join(dir, 'npx.yaml');
  fs.writeFileSync(meshFile, mesh(2));
  const pidFile = path.join(dir, 'npx.pid');
  const { child, exited } = start('npm', ['exec', '--no', '--', 'waypoint', 'run', '--mesh', meshFile, '--hbone', `${IP(5)}:0`, '--admin', `${IP(5)}:0`, '--readiness', '', '--pid-file', pidFile, '--drain-delay', '0'], { cwd: ROOT });
  await expect.poll(() => fs.existsSync(pidFile), { timeout: 30_000 }).toBe(true);
  const pid = Number(fs.readFileSync(pidFile, 'utf8'));
  expect(pid, 'the file names the waypoint, not npm').not.toBe(child.pid);
  process.kill(pid, 'SIGTERM');
  // npm exits once its child (the waypoint) has.
  expect(await exited).toBe(0);
  expect(() => process.kill(pid, 0), 'the waypoint is gone').toThrow();
  expect(fs.existsSync(pidFile)).toBe(false);
});

describe('demo', () => {
  test('the demo turns the access log on (MeshConfig accessLogFile /dev/stdout by default)', () => {
    const option = demoCommand().options.find((o) => o.long === '--access-log');
    expect(option?.defaultValue).toBe('/dev/stdout');
    const text = topologyMesh(demoTopology({ dir, listen: '127.0.0.1:15001', admin: '127.0.0.1:15020', accessLog: '/dev/stdout' }));
    expect(text).toMatch(/mesh: \|\n\s+trustDomain: cluster\.local\n\s+accessLogFile: \/dev\/stdout\n/);
  });

  test('a topology with accessLogFile writes a line per request', async () => {
    const log = path.join(dir, 'access.log');
    const topo = await startTestTopology(242, { accessLogFile: log });
    try {
      const socket = net.connect(topo.entry.port, topo.entry.host);
      socket.end('GET /first-hour HTTP/1.1\r\nhost: echo\r\nconnection: close\r\n\r\n');
      await new Promise((resolve) => socket.once('close', resolve).resume());
      await expect.poll(() => (fs.existsSync(log) ? fs.readFileSync(log, 'utf8') : ''), { timeout: 10_000 }).toMatch(/"GET \/first-hour HTTP\/1\.1" 200 /);
    } finally {
      await topo.close();
    }
  });
});
