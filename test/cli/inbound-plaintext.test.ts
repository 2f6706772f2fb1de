/**
 * `waypoint inbound --plaintext` as a user runs it (a real child process): both listeners bound and
 * announced, PeerAuthentication from `--mesh` applied per port (STRICT port closed, port-level
 * PERMISSIVE relayed), a bad address refused with exit 1. Addresses: 127.0.188.x.
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, expect, test } from 'vitest';

const BIN = path.resolve(import.meta.dirname, '../../bin/waypoint.js');
const POD = '127.0.188.1';
const APP = '127.0.188.2';
let dir: string;
let app: net.Server;
let child: ChildProcess | undefined;

const run = (args: string[]) => spawnSync(process.execPath, [BIN, ...args], { encoding: 'utf8', timeout: 20_000, env: { ...process.env, WAYPOINT_LOG_LEVEL: 'error' } });

const MESH = `apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: { name: waypoint, namespace: foo }
spec: { gatewayClassName: istio-waypoint, listeners: [{ name: mesh, port: 15008, protocol: HBONE }] }
---
apiVersion: v1
kind: Pod
metadata: { name: web, namespace: foo, labels: { app: web } }
spec: { serviceAccountName: web }
status: { podIP: ${POD} }
---
apiVersion: security.istio.io/v1
kind: PeerAuthentication
metadata: { name: default, namespace: istio-system }
spec: { mtls: { mode: STRICT } }
---
apiVersion: security.istio.io/v1
kind: PeerAuthentication
metadata: { name: web, namespace: foo }
spec:
  selector: { matchLabels: { app: web } }
  portLevelMtls: { "18081": { mode: PERMISSIVE } }
`;

function echo(port: number): Promise<string> {
  return new Promise((resolve) => {
    const chunks: Buffer[] = [];
    const s = net.connect({ host: POD, port, allowHalfOpen: true });
    s.on('connect', () => s.end('ping'));
    s.on('data', (c: Buffer) => chunks.push(c));
    s.on('error', () => resolve(Buffer.concat(chunks).toString()));
    s.on('close', () => resolve(Buffer.concat(chunks).toString()));
  });
}

beforeAll(async () => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'wp-cli-pa-'));
  expect(run(['ca', 'init', '--dir', path.join(dir, 'ca')]).status).toBe(0);
  expect(run(['ca', 'issue', '--dir', path.join(dir, 'ca'), '--spiffe', 'spiffe://cluster.local/ns/foo/sa/web', '--out', path.join(dir, 'web')]).status).toBe(0);
  fs.writeFileSync(path.join(dir, 'mesh.yaml'), MESH);
  app = net.createServer({ allowHalfOpen: true }, (s) => s.on('error', () => undefined).pipe(s));
  await new Promise<void>((r) => app.listen(18080, APP, () => r()));
});

afterAll(async () => {
  if (child && child.exitCode === null) {
    const exited = new Promise((r) => child!.once('exit', r));
    child.kill('SIGTERM');
    await exited;
  }
  await new Promise<void>((r) => app.close(() => r()));
  fs.rmSync(dir, { recursive: true, force: true });
});

test('--plaintext: STRICT port closed, port-level PERMISSIVE relayed to --forward on the same port', async () => {
  const second = net.createServer({ allowHalfOpen: true }, (s) => s.on('error', () => undefined).pipe(s));
  await new Promise<void>((r) => second.listen(18081, APP, r));
  try {
    child = spawn(
      process.execPath,
      [BIN, 'inbound', '--listen', `${POD}:15008`, '--identity', path.join(dir, 'web'), '--ca', path.join(dir, 'ca', 'root-cert.pem'), '--forward', APP, '--mesh', path.join(dir, 'mesh.yaml'), '--plaintext', `${POD}:18080`, '--plaintext', `${POD}:18081`],
      { env: { ...process.env, WAYPOINT_LOG_LEVEL: 'error' }, stdio: ['ignore', 'pipe', 'pipe'] },
    );
    let out = '';
    await new Promise<void>((resolve, reject) => {
      child!.stdout!.on('data', (c: Buffer) => {
        out += c.toString();
        if (out.includes(`plaintext ${POD}:18081`)) resolve();
      });
      child!.once('exit', (code) => reject(new Error(`inbound exited ${code}`)));
    });
    expect(out).toContain(`inbound: plaintext ${POD}:18080 -> ${APP}:18080`);
    expect(await echo(18080)).toBe('');
    expect(await echo(18081)).toBe('ping');
  } finally {
    await new Promise<void>((r) => second.close(() => r()));
  }
});

test('--plaintext with a bad address: exit 1', () => {
  const r = run(['inbound', '--listen', `${POD}:15009`, '--identity', path.join(dir, 'web'), '--ca', path.join(dir, 'ca', 'root-cert.pem'), '--plaintext', 'nonsense']);
  expect(r.status).toBe(1);
  expect(r.stderr).toMatch(/--plaintext nonsense: expected IP:PORT/);
});
