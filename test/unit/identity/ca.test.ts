import { test, expect, beforeAll, afterAll } from 'vitest';
import { X509Certificate } from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import tls from 'node:tls';
import type { AddressInfo } from 'node:net';
import 'reflect-metadata';
import * as x509 from '@peculiar/x509';
import { LocalCa, defaultStateDir, parseTtl, type IssuedCertificate } from '../../../src/identity/ca.ts';

const SPIFFE = 'spiffe://cluster.local/ns/default/sa/bookinfo';
const dirs: string[] = [];
function tmpDir(): string {
  const d = fs.mkdtempSync(path.join(os.tmpdir(), 'wp-ca-'));
  dirs.push(d);
  return d;
}
let ca: LocalCa;
beforeAll(async () => {
  ca = await LocalCa.init(path.join(tmpDir(), 'ca'), 'cluster.local');
});
afterAll(() => {
  for (const d of dirs) fs.rmSync(d, { recursive: true, force: true });
});

test('init writes the root files (key 0600) and load reads the trust domain back', async () => {
  const dir = path.join(tmpDir(), 'nested', 'ca');
  const created = await LocalCa.init(dir, 'example.org');
  const certFile = path.join(dir, 'root-cert.pem');
  const keyFile = path.join(dir, 'root-key.pem');
  expect(fs.readFileSync(keyFile, 'utf8')).toMatch(/^-----BEGIN PRIVATE KEY-----\n/);
  expect(fs.statSync(keyFile).mode & 0o777).toBe(0o600);
  const root = new X509Certificate(fs.readFileSync(certFile));
  expect(root.subject).toBe('O=example.org');
  expect(root.ca).toBe(true);
  expect(root.checkIssued(root)).toBe(true);
  const parsed = new x509.X509Certificate(root.raw);
  const ku = parsed.getExtension(x509.KeyUsagesExtension);
  expect(ku?.usages).toBe(x509.KeyUsageFlags.keyCertSign | x509.KeyUsageFlags.cRLSign);
  expect(ku?.critical).toBe(true);
  expect(parsed.getExtension(x509.BasicConstraintsExtension)?.critical).toBe(true);
  const years = (root.validToDate.getTime() - Date.now()) / (365 * 24 * 3600_000);
  expect(years).toBeGreaterThan(9.9);
  expect(years).toBeLessThan(10.1);

  const loaded = await LocalCa.load(dir);
  expect(loaded.trustDomain).toBe('example.org');
  expect(loaded.rootCertPem).toBe(created.rootCertPem);
  // The loaded key signs leaves the original root verifies.
  const leaf = new X509Certificate((await loaded.issue('spiffe://example.org/ns/a/sa/b', 60_000)).certPem);
  expect(leaf.verify(root.publicKey)).toBe(true);
});

test('init refuses to overwrite an existing root unless forced', async () => {
  const dir = tmpDir();
  const first = await LocalCa.init(dir, 'cluster.local');
  await expect(LocalCa.init(dir, 'other.local')).rejects.toThrow(/root-cert\.pem already exists.*--force/);
  expect((await LocalCa.load(dir)).rootCertPem).toBe(first.rootCertPem);
  fs.rmSync(path.join(dir, 'root-cert.pem'));
  await expect(LocalCa.init(dir, 'other.local')).rejects.toThrow(/root-key\.pem already exists/);

  fs.chmodSync(path.join(dir, 'root-key.pem'), 0o644);
  const second = await LocalCa.init(dir, 'other.local', { force: true });
  expect(second.rootCertPem).not.toBe(first.rootCertPem);
  expect((await LocalCa.load(dir)).trustDomain).toBe('other.local');
  expect(fs.statSync(path.join(dir, 'root-key.pem')).mode & 0o777).toBe(0o600);
});

test('load names the missing or invalid file', async () => {
  const dir = tmpDir();
  await expect(LocalCa.load(dir)).rejects.toThrow(path.join(dir, 'root-cert.pem'));
  await LocalCa.init(dir, 'cluster.local');
  fs.rmSync(path.join(dir, 'root-key.pem'));
  await expect(LocalCa.load(dir)).rejects.toThrow(`${path.join(dir, 'root-key.pem')} does not exist`);
  fs.writeFileSync(path.join(dir, 'root-key.pem'), 'garbage');
  await expect(LocalCa.load(dir)).rejects.toThrow(path.join(dir, 'root-key.pem'));
  // A key that belongs to another root.
  const other = tmpDir();
  await LocalCa.init(other, 'cluster.local');
  fs.copyFileSync(path.join(other, 'root-key.pem'), path.join(dir, 'root-key.pem'));
  await expect(LocalCa.load(dir)).rejects.toThrow(/root-key\.pem.*does not match/);
  fs.writeFileSync(path.join(dir, 'root-cert.pem'), 'garbage');
  await expect(LocalCa.load(dir)).rejects.toThrow(`${path.join(dir, 'root-cert.pem')} is not a PEM certificate`);
});

test('ensure creates once, then loads; refuses a different trust domain', async () => {
  const dir = tmpDir();
  const a = await LocalCa.ensure(dir, 'cluster.local');
  expect(a.created).toBe(true);
  const b = await LocalCa.ensure(dir, 'cluster.local');
  expect(b.created).toBe(false);
  expect(b.ca.rootCertPem).toBe(a.ca.rootCertPem);
  await expect(LocalCa.ensure(dir, 'other.local')).rejects.toThrow(/trust domain cluster\.local, not other\.local/);
});

test('issue: a P-256 leaf signed by the root, empty subject, exactly the SPIFFE URI SAN', async () => {
  const ttl = 3600_000;
  const before = Date.now();
  const issued = await ca.issue(SPIFFE, ttl);
  const root = new X509Certificate(ca.rootCertPem);
  const leaf = new X509Certificate(issued.certPem);
  expect(issued.spiffe).toBe(SPIFFE);
  expect(issued.keyPem).toMatch(/^-----BEGIN PRIVATE KEY-----\n/);
  expect(issued.certPem.match(/BEGIN CERTIFICATE/g)).toHaveLength(1);
  expect(leaf.checkIssued(root)).toBe(true);
  expect(leaf.verify(root.publicKey)).toBe(true);
  expect(leaf.publicKey.asymmetricKeyDetails?.namedCurve).toBe('prime256v1');
  expect(leaf.subjectAltName).toBe(`URI:${SPIFFE}`);
  expect(leaf.subject ?? '').toBe('');
  expect(leaf.ca).toBe(false);
  expect(leaf.keyUsage).toEqual(['1.3.6.1.5.5.7.3.1', '1.3.6.1.5.5.7.3.2']); // serverAuth, clientAuth
  expect(leaf.issuer).toBe('O=cluster.local');
  const parsed = new x509.X509Certificate(leaf.raw);
  expect(parsed.getExtension(x509.KeyUsagesExtension)?.usages).toBe(x509.KeyUsageFlags.digitalSignature | x509.KeyUsageFlags.keyEncipherment);
  expect(parsed.getExtension(x509.SubjectAlternativeNameExtension)?.critical).toBe(true);
  expect(parsed.getExtension(x509.BasicConstraintsExtension)?.critical).toBe(true);
  const aki = parsed.getExtension(x509.AuthorityKeyIdentifierExtension)?.keyId;
  expect(aki).toBe(new x509.X509Certificate(root.raw).getExtension(x509.SubjectKeyIdentifierExtension)?.keyId);
  expect(aki).toBeTruthy();
  // Validity ≈ ttl after a 60 s backdating (X.509 times have 1 s resolution).
  expect(Math.abs(leaf.validFromDate.getTime() - (before - 60_000))).toBeLessThan(3000);
  expect(Math.abs(leaf.validToDate.getTime() - (before + ttl))).toBeLessThan(3000);
  expect(issued.notAfter.getTime()).toBe(leaf.validToDate.getTime());
  expect(issued.notBefore.getTime()).toBe(leaf.validFromDate.getTime());
  // Fresh key and serial each time.
  const again = await ca.issue(SPIFFE, ttl);
  expect(new X509Certificate(again.certPem).serialNumber).not.toBe(leaf.serialNumber);
  expect(again.keyPem).not.toBe(issued.keyPem);
});

test('issue refuses foreign trust domains, bad ids and bad lifetimes', async () => {
  await expect(ca.issue('spiffe://other.local/ns/a/sa/b', 60_000)).rejects.toThrow(/not in this CA's trust domain cluster\.local/);
  await expect(ca.issue('spiffe://cluster.local/ns/a', 60_000)).rejects.toThrow(/invalid SPIFFE id/);
  await expect(ca.issue(SPIFFE, 0)).rejects.toThrow(/lifetime/);
  await expect(ca.issue(SPIFFE, Number.NaN)).rejects.toThrow(/lifetime/);
});

interface HandshakeResult {
  serverSawClient?: { authorized: boolean; san: string | undefined };
  serverError?: Error;
  clientReceived?: string;
}

/** Mutual TLS on 127.0.0.1: server trusts `ca`, requires a client cert; client presents `client`. */
async function handshake(server: IssuedCertificate, client: IssuedCertificate, caPem: string): Promise<HandshakeResult> {
  const result: HandshakeResult = {};
  const srv = tls.createServer({
    key: server.keyPem,
    cert: server.certPem,
    ca: caPem,
    requestCert: true,
    rejectUnauthorized: true,
    minVersion: 'TLSv1.3',
  });
  srv.on('secureConnection', (socket) => {
    result.serverSawClient = { authorized: socket.authorized, san: socket.getPeerX509Certificate()?.subjectAltName };
    socket.end('hello');
  });
  srv.on('tlsClientError', (err) => {
    result.serverError = err;
  });
  await new Promise<void>((resolve) => srv.listen(0, '127.0.0.1', resolve));
  const { port } = srv.address() as AddressInfo;
  try {
    await new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error('handshake test timed out')), 10_000);
      const sock = tls.connect({
        host: '127.0.0.1',
        port,
        key: client.keyPem,
        cert: client.certPem,
        ca: caPem,
        checkServerIdentity: () => undefined,
      });
      let data = '';
      sock.on('data', (d: Buffer) => (data += d.toString()));
      sock.on('error', () => {}); // the rejected case ends in an alert; judged on the server side
      sock.on('close', () => {
        clearTimeout(timer);
        if (data) result.clientReceived = data;
        resolve();
      });
    });
    // A server-side tlsClientError may trail the client's close by a tick.
    for (let i = 0; i < 50 && !result.serverSawClient && !result.serverError; i++) await new Promise((r) => setTimeout(r, 10));
  } finally {
    await new Promise((resolve) => srv.close(resolve));
  }
  return result;
}

test('mutual TLS with leaves from the same CA succeeds', async () => {
  const server = await ca.issue('spiffe://cluster.local/ns/istio-system/sa/waypoint', 60_000);
  const client = await ca.issue(SPIFFE, 60_000);
  const r = await handshake(server, client, ca.rootCertPem);
  expect(r.serverError).toBeUndefined();
  expect(r.serverSawClient).toEqual({ authorized: true, san: `URI:${SPIFFE}` });
  expect(r.clientReceived).toBe('hello');
});

test('mutual TLS with a client leaf from another CA is rejected by the server', async () => {
  const server = await ca.issue('spiffe://cluster.local/ns/istio-system/sa/waypoint', 60_000);
  const otherCa = await LocalCa.init(tmpDir(), 'cluster.local'); // same trust domain, other root
  const client = await otherCa.issue(SPIFFE, 60_000);
  const r = await handshake(server, client, ca.rootCertPem);
  expect(r.serverSawClient).toBeUndefined();
  expect(r.clientReceived).toBeUndefined();
  expect(r.serverError).toBeInstanceOf(Error);
});

test.each([
  ['24h', 86_400_000],
  ['90m', 5_400_000],
  ['2s', 2000],
  ['1.5d', 129_600_000],
  ['500', 500],
])('parseTtl(%j) = %d', (text, want) => {
  expect(parseTtl(text)).toBe(want);
});

test.each(['', 'abc', '0', '0s', '-5m', '24 parsecs', 'Infinity'])('parseTtl rejects %j', (text) => {
  expect(() => parseTtl(text)).toThrow(/invalid duration/);
});

test('defaultStateDir honours WAYPOINT_STATE_DIR', () => {
  const saved = process.env.WAYPOINT_STATE_DIR;
  try {
    process.env.WAYPOINT_STATE_DIR = '/some/where';
    expect(defaultStateDir()).toBe('/some/where');
    delete process.env.WAYPOINT_STATE_DIR;
    expect(defaultStateDir()).toBe(path.join(os.homedir(), '.local', 'state', 'node-waypoint'));
  } finally {
    if (saved === undefined) delete process.env.WAYPOINT_STATE_DIR;
    else process.env.WAYPOINT_STATE_DIR = saved;
  }
});
