/**
 * `waypoint inbound --mesh FILE` as a user runs it (real child processes): the destination
 * ztunnel needs no waypoint Gateway in the file (the `run` role still does); an invalid
 * PeerAuthentication (a mode typo) stops the start with file and line, and a reload bringing one is
 * refused with the old state kept (`mesh: reload refused, keeping version 1`), STRICT still closing
 * plaintext, and a valid one (PERMISSIVE) then applies. Addresses: 127.0.138.x.
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, expect, test } from 'vitest';

const BIN = path.resolve(import.meta.dirname, '../../bin/waypoint.js');
const POD = '127.0.138.1';
const APP = '127.0.138.2';
const PLAIN_PORT = 18380;
let dir: string;
let app: net.Server;
let child: ChildProcess | undefined;

const run = (args: string[]) => spawnSync(process.execPath, [BIN, ...args], { encoding: 'utf8', timeout: 20_000, env: { ...process.env, WAYPOINT_LOG_LEVEL: 'error' } });

const pod = `apiVersion: v1
kind: Pod
metadata: { name: web, namespace: foo, labels: { app: web } }
spec: { serviceAccountName: web }
status: { podIP: ${POD} }
`;
/** The mesh file: no waypoint Gateway, one Pod, a mesh-wide PeerAuthentication of `mode`. */
const meshWith = (mode: string) => `${pod}---
apiVersion: security.istio.io/v1
kind: PeerAuthentication
metadata: { name: default, namespace: istio-system }
spec:
  mtls: { mode: ${mode} }
`;

/** Whether a plaintext client of `port` gets its bytes back from the app (relayed), rather than closed. */
async function relayed(port: number): Promise<boolean> {
  const socket = net.connect({ host: POD, port, allowHalfOpen: true });
  let got = '';
  socket.on('data', (c: Buffer) => (got += c.toString()));
  socket.on('error', () => undefined);
  socket.once('connect', () => socket.end('ping'));
  await new Promise((resolve) => socket.once('close', resolve));
  return got === 'ping';
}

const inboundArgs = (meshFile: string) => [
  'inbound', '--listen', `${POD}:15008`, '--identity', path.join(dir, 'web'), '--ca', path.join(dir, 'ca', 'root-cert.pem'),
  '--forward', APP, '--mesh', meshFile, '--plaintext', `${POD}:${PLAIN_PORT}`,
];

beforeAll(async () => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'wp-cli-inbound-mesh-'));
  const ca = path.join(dir, 'ca');
  for (const args of [['ca', 'init', '--dir', ca], ['ca', 'issue', '--dir', ca, '--spiffe', 'spiffe://cluster.local/ns/foo/sa/web', '--out', path.join(dir, 'web')]]) {
    expect(run(args).status).toBe(0);
  }
  app = net.createServer({ allowHalfOpen: true }, (s) => s.on('error', () => undefined).pipe(s)).listen(PLAIN_PORT, APP);
  await once(app, 'listening');
});

afterAll(async () => {
  if (child?.exitCode === null) {
    child.kill('SIGTERM');
    await once(child, 'exit');
  }
  app.close();
  await once(app, 'close');
  fs.rmSync(dir, { recursive: true, force: true });
});

test('the run role still needs a waypoint Gateway', () => {
  const file = path.join(dir, 'no-gateway.yaml');
  fs.writeFileSync(file, meshWith('STRICT'));
  const r = run(['run', '--mesh', file, '--ca-dir', path.join(dir, 'ca'), '--hbone', `${POD}:0`, '--admin', `${POD}:0`, '--readiness', '']);
  expect(r.status).toBe(1);
  expect(r.stderr).toContain('no Gateway with gatewayClassName istio-waypoint');
});

test('an invalid PeerAuthentication stops the start, naming file, line and field', () => {
  const file = path.join(dir, 'typo.yaml');
  fs.writeFileSync(file, meshWith('STRICTT'));
  const r = run(inboundArgs(file));
  expect(r.status).toBe(1);
  expect(r.stderr).toContain(`${file}:11: document 1: PeerAuthentication/istio-system/default: field spec.mtls.mode: Unsupported value: "STRICTT"`);
});

test('no Gateway needed; a reload with an invalid PeerAuthentication is refused and STRICT stays', { timeout: 20_000 }, async () => {
  const file = path.join(dir, 'mesh.yaml');
  fs.writeFileSync(file, meshWith('STRICT'));
  child = spawn(process.execPath, [BIN, ...inboundArgs(file)], { env: { ...process.env, WAYPOINT_LOG_LEVEL: 'error' }, stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  const seen = (text: string) =>
    new Promise<void>((resolve, reject) => {
      if (out.includes(text)) return resolve();
      const on = () => {
        if (!out.includes(text)) return;
        child!.stdout!.off('data', on);
        child!.stderr!.off('data', on);
        resolve();
      };
      child!.stdout!.on('data', on);
      child!.stderr!.on('data', on);
      child!.once('exit', (code) => reject(new Error(`inbound exited ${code}: ${out}`)));
    });
  child.stdout!.on('data', (c: Buffer) => (out += c.toString()));
  child.stderr!.on('data', (c: Buffer) => (out += c.toString()));
  await seen(`inbound: plaintext ${POD}:${PLAIN_PORT}`);
  expect(await relayed(PLAIN_PORT)).toBe(false);

  fs.writeFileSync(file, meshWith('STRICTT'));
  child.kill('SIGHUP');
  await seen('mesh: reload refused, keeping version 1');
  expect(out).toContain('PeerAuthentication/istio-system/default: field spec.mtls.mode: Unsupported value');
  expect(await relayed(PLAIN_PORT)).toBe(false);
  expect(child.exitCode).toBeNull();

  // A valid change still applies (and the relay works): PERMISSIVE lets plaintext through.
  fs.writeFileSync(file, meshWith('PERMISSIVE'));
  child.kill('SIGHUP');
  let ok = false;
  for (let i = 0; i < 100 && !ok; i++) ok = await relayed(PLAIN_PORT);
  expect(ok).toBe(true);
});
