/**
 * `readTrustRoot` (a role's `--ca FILE`): the mesh root, or a bundle of CA certificates, is read;
 * a key, a workload certificate, a file without a certificate and a missing file are refused with
 * what the file is instead.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, expect, test } from 'vitest';
import { LocalCa, readTrustRoot } from '../../../src/identity/ca.ts';

let dir: string;
let ca: LocalCa;
const file = (name: string, text: string) => {
  const f = path.join(dir, name);
  fs.writeFileSync(f, text);
  return f;
};

beforeAll(async () => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'wp-trust-root-'));
  ca = await LocalCa.init(path.join(dir, 'ca'), 'cluster.local');
});
afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

test('the mesh root, and a bundle of two roots, are read as they are', async () => {
  const root = path.join(dir, 'ca', 'root-cert.pem');
  expect(await readTrustRoot(root)).toBe(ca.rootCertPem);
  const other = await LocalCa.init(path.join(dir, 'other'), 'example.org');
  const bundle = file('bundle.pem', ca.rootCertPem + other.rootCertPem);
  expect(await readTrustRoot(bundle)).toBe(ca.rootCertPem + other.rootCertPem);
});

test('a private key is refused', async () => {
  await expect(readTrustRoot(path.join(dir, 'ca', 'root-key.pem'))).rejects.toThrow(/^it holds a private key, not a CA certificate: give the mesh root certificate \(root-cert\.pem/);
  const issued = await ca.issue('spiffe://cluster.local/ns/a/sa/b', 3600_000);
  // A certificate and its key in one file: the key must not travel as a trust root either.
  await expect(readTrustRoot(file('both.pem', issued.certPem + issued.keyPem))).rejects.toThrow(/private key/);
});

test('a workload certificate is refused, naming its SPIFFE id; so is a bundle that holds one', async () => {
  const issued = await ca.issue('spiffe://cluster.local/ns/a/sa/b', 3600_000);
  await expect(readTrustRoot(file('leaf.pem', issued.certPem))).rejects.toThrow(/^it holds a workload certificate for spiffe:\/\/cluster\.local\/ns\/a\/sa\/b, not a CA certificate/);
  await expect(readTrustRoot(file('mixed.pem', ca.rootCertPem + issued.certPem))).rejects.toThrow(/workload certificate/);
});

test('no certificate, or no file', async () => {
  await expect(readTrustRoot(file('mesh.yaml', 'apiVersion: v1\nkind: Pod\n'))).rejects.toThrow(/^it holds no PEM certificate/);
  await expect(readTrustRoot(path.join(dir, 'missing.pem'))).rejects.toThrow(/^the file does not exist$/);
});
