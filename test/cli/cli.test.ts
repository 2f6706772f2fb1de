/**
 * The `waypoint` CLI as a user runs it: a real child process per case. Exit codes, the one-line
 * errors with file and line, the CA commands, and `run` + SIGTERM. Addresses: 127.0.28.x.
 */
import { spawn, spawnSync } from 'node:child_process';
import { X509Certificate } from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, expect, test } from 'vitest';
import { request } from 'undici';
import { topologyMesh } from '../../src/demo/topology.ts';

const BIN = path.resolve(import.meta.dirname, '../../bin/waypoint.js');
let dir: string;

function waypoint(args: string[], env: Record<string, string> = {}) {
  return spawnSync(process.execPath, [BIN, ...args], { encoding: 'utf8', timeout: 20_000, env: { ...process.env, WAYPOINT_STATE_DIR: path.join(dir, 'state'), WAYPOINT_LOG_LEVEL: 'error', ...env } });
}

beforeAll(() => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'wp-cli-'));
});
afterAll(() => {
  fs.rmSync(dir, { recursive: true, force: true });
});

const mesh = () =>
  topologyMesh({ dir, waypointIp: '127.0.28.1', vip: '127.0.28.100', podIps: ['127.0.28.11'], clientIp: '127.0.28.50', tunnelListen: '', admin: '' });

test('every command has --help', () => {
  for (const cmd of [[], ['run'], ['ca'], ['ca', 'init'], ['ca', 'issue'], ['tunnel'], ['inbound'], ['demo']]) {
    const r = waypoint([...cmd, '--help']);
    expect(r.status, cmd.join(' ')).toBe(0);
    expect(r.stdout).toMatch(/^Usage: waypoint/);
  }
});

test('ca init + ca issue write Istio-named files and a leaf for the SPIFFE id', () => {
  const ca = path.join(dir, 'ca1');
  const init = waypoint(['ca', 'init', '--dir', ca, '--trust-domain', 'example.org']);
  expect(init.status).toBe(0);
  expect(fs.existsSync(path.join(ca, 'root-cert.pem')) && fs.existsSync(path.join(ca, 'root-key.pem'))).toBe(true);
  const issue = waypoint(['ca', 'issue', '--dir', ca, '--spiffe', 'spiffe://example.org/ns/a/sa/b', '--out', path.join(dir, 'b'), '--ttl', '1h']);
  expect(issue.status).toBe(0);
  const pem = fs.readFileSync(path.join(dir, 'b-cert.pem'), 'utf8');
  expect(new X509Certificate(pem).subjectAltName).toBe('URI:spiffe://example.org/ns/a/sa/b');
  const foreign = waypoint(['ca', 'issue', '--dir', ca, '--spiffe', 'spiffe://other.org/ns/a/sa/b', '--out', path.join(dir, 'c')]);
  expect(foreign.status).toBe(1);
  expect(foreign.stderr).toMatch(/^waypoint ca: .*other\.org/);
});

test('invalid mesh YAML: exit 1 with file, line, document, object and field', () => {
  const file = path.join(dir, 'bad-mesh.yaml');
  fs.writeFileSync(file, `${mesh()}---\napiVersion: v1\nkind: Service\nmetadata: { name: broken, namespace: demo }\nspec:\n  clusterIP: "127.0.28.101"\n  ports: [{ name: http, port: 70000 }]\n`);
  const r = waypoint(['run', '--mesh', file, '--hbone', '127.0.28.1:0', '--admin', '127.0.28.1:0', '--readiness', '']);
  expect(r.status).toBe(1);
  const line = r.stderr.trim().split('\n').pop()!;
  expect(line).toMatch(new RegExp(`^waypoint: ${file.replaceAll('.', '\\.')}:\\d+: document \\d+: Service/demo/broken: field spec\\.ports\\[0\\]\\.port: `));
});

test('invalid bootstrap config: exit 1 with file, line and field', () => {
  const meshFile = path.join(dir, 'mesh.yaml');
  fs.writeFileSync(meshFile, mesh());
  const cfg = path.join(dir, 'bad.yaml');
  fs.writeFileSync(cfg, 'upstream:\n  loadBalancer: RANDOMISH\n');
  const r = waypoint(['run', '--mesh', meshFile, '--config', cfg]);
  expect(r.status).toBe(1);
  expect(r.stderr).toMatch(new RegExp(`waypoint: ${cfg.replaceAll('.', '\\.')}:2: field upstream\\.loadBalancer: `));
});

test('a CA whose trust domain differs from the mesh: exit 1 and say so', () => {
  const meshFile = path.join(dir, 'mesh.yaml');
  fs.writeFileSync(meshFile, mesh());
  const ca = path.join(dir, 'ca-other');
  expect(waypoint(['ca', 'init', '--dir', ca, '--trust-domain', 'other.org']).status).toBe(0);
  const r = waypoint(['run', '--mesh', meshFile, '--ca-dir', ca, '--hbone', '127.0.28.1:0', '--admin', '127.0.28.1:0', '--readiness', '']);
  expect(r.status).toBe(1);
  expect(r.stderr).toMatch(/trust domain "other\.org".*"cluster\.local"/);
});

test('run: creates the state-dir CA, serves, and exits 0 on SIGTERM', async () => {
  const meshFile = path.join(dir, 'mesh.yaml');
  fs.writeFileSync(meshFile, mesh());
  const child = spawn(process.execPath, [BIN, 'run', '--mesh', meshFile, '--hbone', '127.0.28.1:0', '--admin', '127.0.28.1:15028', '--readiness', '', '--drain-delay', '0'], {
    env: { ...process.env, WAYPOINT_STATE_DIR: path.join(dir, 'state'), WAYPOINT_LOG_LEVEL: 'error' },
  });
  let out = '';
  child.stdout.on('data', (c) => (out += c));
  const exited = new Promise<number | null>((r) => child.once('exit', (code) => r(code)));
  try {
    await expect.poll(() => out, { timeout: 15_000 }).toMatch(/admin: +http:\/\/127\.0\.28\.1:15028/);
    expect(out).toContain(`${path.join(dir, 'state', 'ca')} (created)`);
    expect((await request('http://127.0.28.1:15028/healthz/ready')).statusCode).toBe(200);
  } finally {
    child.kill('SIGTERM');
  }
  expect(await exited).toBe(0);
});

test('SIGTERM still exits 0 when whoever read our output has gone (closed pipes)', async () => {
  const meshFile = path.join(dir, 'mesh.yaml');
  fs.writeFileSync(meshFile, mesh());
  const child = spawn(process.execPath, [BIN, 'run', '--mesh', meshFile, '--hbone', '127.0.28.2:0', '--admin', '127.0.28.2:15028', '--readiness', '', '--drain-delay', '0'], {
    env: { ...process.env, WAYPOINT_STATE_DIR: path.join(dir, 'state'), WAYPOINT_LOG_LEVEL: 'info' },
  });
  const exited = new Promise<number | null>((r) => child.once('exit', (code) => r(code)));
  await expect.poll(async () => (await request('http://127.0.28.2:15028/healthz/ready').catch(() => ({ statusCode: 0 }))).statusCode, { timeout: 15_000 }).toBe(200);
  // Like `waypoint run | head`: the reader closes both pipes, then the waypoint logs on SIGTERM.
  child.stdout.destroy();
  child.stderr.destroy();
  child.kill('SIGTERM');
  const code = await Promise.race([exited, new Promise((r) => setTimeout(() => r('hung'), 10_000))]);
  if (code === 'hung') child.kill('SIGKILL');
  expect(code).toBe(0);
});
