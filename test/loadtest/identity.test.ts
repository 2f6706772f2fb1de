/**
 * The client identity of an HBONE load test is checked before any load, with the same words as
 * `waypoint tunnel`: `--ca` must be the mesh root (not a key, not a workload certificate), and a
 * client certificate the waypoint does not trust is named as such rather than as a closed stream.
 * Addresses: 127.0.184.x (.1 waypoint, .100 the service, .11-.12 pods, .50 client).
 */
import fs from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, expect, test } from 'vitest';
import { LocalCa } from '../../src/identity/index.ts';
import { spiffe } from '../helpers/identity.ts';
import { startTestTopology, type TestTopology } from '../helpers/topology.ts';
import { cli } from './helpers.ts';

let topo: TestTopology;
let root: string;

async function writeIdentity(ca: LocalCa, prefix: string): Promise<string> {
  const leaf = await ca.issue(spiffe('demo', 'client'), 3600_000);
  fs.writeFileSync(`${prefix}-cert.pem`, leaf.certPem);
  fs.writeFileSync(`${prefix}-key.pem`, leaf.keyPem);
  return prefix;
}

beforeAll(async () => {
  topo = await startTestTopology(184);
  root = path.join(topo.caDir, 'root-cert.pem');
  await writeIdentity(await LocalCa.load(topo.caDir), path.join(topo.dir, 'client'));
  await writeIdentity(await LocalCa.init(path.join(topo.dir, 'other-ca'), 'cluster.local'), path.join(topo.dir, 'stranger'));
});
afterAll(async () => {
  await topo?.close();
});

const loadtest = (identity: string, ca: string) =>
  cli(['loadtest', '--no-progress', '--waypoint', '127.0.184.1:15008', '--authority', '127.0.184.100:80', '--identity', path.join(topo.dir, identity), '--ca', ca, '--requests', '5']);

test('--ca holding a private key is refused before any load, as by waypoint tunnel', async () => {
  const key = path.join(topo.dir, 'client-key.pem');
  const r = await loadtest('client', key);
  expect(r.code).toBe(2);
  expect(r.stderr).toBe(`waypoint: --ca ${key}: it holds a private key, not a CA certificate: give the mesh root certificate (root-cert.pem in the directory of \`waypoint ca init\`)\n`);
});

test('--ca holding a workload certificate is refused before any load', async () => {
  const leaf = path.join(topo.dir, 'client-cert.pem');
  const r = await loadtest('client', leaf);
  expect(r.code).toBe(2);
  expect(r.stderr).toMatch(/^waypoint: --ca \S+client-cert\.pem: it holds a workload certificate for spiffe:\/\/cluster\.local\/ns\/demo\/sa\/client, not a CA certificate/);
});

test('a client certificate from another CA: the failure says the waypoint did not accept it', async () => {
  const r = await loadtest('stranger', root);
  expect(r.code).toBe(1);
  expect(r.stderr).toContain('closed the connection after the TLS handshake without an HTTP/2 SETTINGS frame, as a server does when it does not accept the client certificate');
  expect(r.stderr).toContain(`check the identity: the waypoint must trust the issuer of --identity ${path.join(topo.dir, 'stranger')}, and --ca ${root} must be the root`);
  expect(r.stderr).not.toContain('stream closed (code 8)\n');
});

test('the right identity and root: the run goes through', async () => {
  const r = await loadtest('client', root);
  expect(r.stderr).toBe('');
  expect(r.code).toBe(0);
});
