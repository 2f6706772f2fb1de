/**
 * The waypoint's certificate from istiod's CA (a fake istiod on 127.0.71.x: real grpc-js over TLS,
 * intermediate CA): the CSR's shape (P-256, empty subject, one URI SAN), the bearer token read
 * from its file on every call and `ClusterID`, the leaf + intermediate chain served (a TLS peer
 * trusting only the root accepts it), renewal through CA failures (the valid certificate kept,
 * failures counted, metrics), istiod unreachable at start then reachable, new trust roots from
 * the root file (material and the channel to istiod), and the errors a user sees.
 */
import { X509Certificate } from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import tls from 'node:tls';
import 'reflect-metadata';
import * as x509 from '@peculiar/x509';
import * as grpc from '@grpc/grpc-js';
import { Registry } from 'prom-client';
import { afterAll, afterEach, beforeAll, expect, test } from 'vitest';
import { hboneTlsOptions } from '../../../src/hbone/settings.ts';
import { TrustRootFiles, WorkloadCertificate, type CertificateMaterial } from '../../../src/identity/index.ts';
import { IstiodCertificateIssuer, IstiodChannel, registerCertificateMetrics } from '../../../src/istiod/index.ts';
import { FakeIstiod } from '../../helpers/fake-istiod.ts';
import { IstiodPki } from '../../helpers/istiod-pki.ts';
import { parsePrometheus } from '../../helpers/prometheus.ts';

const SPIFFE = 'spiffe://cluster.local/ns/waypoint-ns/sa/waypoint';
let pki: IstiodPki;
let dir: string;
const cleanup: (() => unknown)[] = [];

beforeAll(async () => {
  pki = await IstiodPki.create();
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'wp-istiod-ca-'));
});
afterEach(async () => {
  for (const c of cleanup.splice(0).reverse()) await c();
});
afterAll(() => {
  pki.close();
  fs.rmSync(dir, { recursive: true, force: true });
});

/** A fake istiod on `host`, a token file, the root file's roots, a channel and an issuer. */
async function setup(host: string, opts: { token?: string; rootFile?: string; pollMs?: number; port?: number; maxTtlSeconds?: number } = {}) {
  const token = opts.token ?? 'token-1';
  const istiod = await FakeIstiod.start({ pki, host, token, port: opts.port, maxTtlSeconds: opts.maxTtlSeconds });
  cleanup.push(() => istiod.stop());
  const tokenFile = path.join(dir, `token-${host}`);
  fs.writeFileSync(tokenFile, `${token}\n`);
  const roots = await TrustRootFiles.open([opts.rootFile ?? pki.rootCertFile], { pollMs: opts.pollMs ?? 50 });
  cleanup.push(() => roots.close());
  const channel = new IstiodChannel({ address: istiod.address, roots, tokenFile, clusterId: 'cluster-7' });
  cleanup.push(() => channel.close());
  const issuer = new IstiodCertificateIssuer({ channel, roots, timeoutMs: 5_000 });
  return { istiod, tokenFile, roots, channel, issuer };
}

function next<T>(wc: WorkloadCertificate, event: 'rotated' | 'issueFailed', ms = 10_000): Promise<T> {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`no '${event}' within ${ms} ms`)), ms);
    wc.once(event, (v: unknown) => {
      clearTimeout(timer);
      resolve(v as T);
    });
  });
}

const certsOf = (pem: string) => pem.match(/-----BEGIN CERTIFICATE-----[\s\S]*?-----END CERTIFICATE-----/g)!.map((p) => new X509Certificate(p));

/** Handshake with a TLS server presenting `m`, as a client that trusts `rootPem` only. */
async function handshake(m: CertificateMaterial, rootPem: string, host: string): Promise<void> {
  const server = tls.createServer({ ...hboneTlsOptions(m), requestCert: false });
  await new Promise<void>((r) => server.listen(0, host, r));
  const port = (server.address() as { port: number }).port;
  try {
    await new Promise<void>((resolve, reject) => {
      const s = tls.connect({ host, port, ca: rootPem, ALPNProtocols: ['h2'], minVersion: 'TLSv1.3', checkServerIdentity: () => undefined }, () => {
        s.end();
        resolve();
      });
      s.on('error', reject);
    });
  } finally {
    server.close();
  }
}

test('CSR shape, bearer token and ClusterID, and the leaf + intermediate chain served', async () => {
  const { istiod, issuer } = await setup('127.0.71.1');
  const wc = await WorkloadCertificate.start(issuer, SPIFFE, 3600_000);
  cleanup.push(() => wc.close());

  expect(istiod.caCalls).toHaveLength(1);
  const call = istiod.caCalls[0];
  expect(call.authorization).toBe('Bearer token-1');
  expect(call.clusterId).toBe('cluster-7');
  expect(call.validitySeconds).toBe(3600);
  const csr = new x509.Pkcs10CertificateRequest(call.csrPem);
  expect(csr.subject).toBe('');
  expect(csr.publicKey.algorithm).toMatchObject({ name: 'ECDSA', namedCurve: 'P-256' });
  expect(csr.signatureAlgorithm).toMatchObject({ name: 'ECDSA', hash: { name: 'SHA-256' } });
  const san = csr.extensions.find((e): e is x509.SubjectAlternativeNameExtension => e instanceof x509.SubjectAlternativeNameExtension)!;
  expect(san.names.toJSON()).toEqual([{ type: 'url', value: SPIFFE }]);

  const m = wc.current;
  const [leaf, intermediate, ...rest] = certsOf(m.certPem);
  expect(rest).toEqual([]); // the root is not served
  expect(leaf.subjectAltName).toBe(`URI:${SPIFFE}`);
  expect(leaf.checkIssued(intermediate)).toBe(true);
  expect(intermediate.ca).toBe(true);
  expect(m.caPem).toBe(pki.rootCertPem);
  expect(wc.spiffeId.uri).toBe(SPIFFE);
  // A peer trusting only the root accepts the served chain (it needs the intermediate).
  await handshake(m, pki.rootCertPem, '127.0.71.1');
  await expect(handshake({ ...m, certPem: certsOf(m.certPem)[0].toString() }, pki.rootCertPem, '127.0.71.1')).rejects.toThrow(/issuer|verify/i);
});

test('the token is read from its file on every call (kubelet rotates it)', async () => {
  const { istiod, tokenFile, issuer } = await setup('127.0.71.2');
  await issuer.issue(SPIFFE, 600_000);
  fs.writeFileSync(tokenFile, 'token-2');
  istiod.token = 'token-2';
  await issuer.issue(SPIFFE, 600_000);
  expect(istiod.caCalls.map((c) => c.authorization)).toEqual(['Bearer token-1', 'Bearer token-2']);
});

test('renewal through a failing CA keeps the valid certificate, backs off, counts failures, then recovers', async () => {
  const { istiod, issuer } = await setup('127.0.71.3');
  const wc = await WorkloadCertificate.start(issuer, SPIFFE, 3_000, { retryMs: 100, maxRetryMs: 400 });
  cleanup.push(() => wc.close());
  const registry = new Registry();
  registerCertificateMetrics(registry, wc);
  const first = wc.current;
  istiod.failCa(2);
  const failed = await next<Error>(wc, 'issueFailed');
  expect(failed.message).toMatch(/^istiod CA at 127\.0\.71\.3:\d+: UNAVAILABLE: fake istiod CA failure/);
  expect(wc.current).toBe(first); // still serving the valid certificate
  const rotated = await next<CertificateMaterial>(wc, 'rotated');
  expect(wc.failures).toBe(2);
  expect(istiod.caCalls.length).toBe(4);
  expect(certsOf(rotated.certPem)[0].serialNumber).not.toBe(certsOf(first.certPem)[0].serialNumber);
  const samples = parsePrometheus(await registry.metrics());
  const value = (name: string) => samples.find((s) => s.name === name)?.value;
  expect(value('waypoint_certificate_renewal_failures_total')).toBe(2);
  expect(value('waypoint_certificate_expiry_timestamp_seconds')).toBe(Math.floor(rotated.notAfter.getTime() / 1000));
  expect(value('waypoint_certificate_expiry_seconds')).toBeGreaterThan(0);
});

test('a CA that grants less than asked: renewal at half of what was granted', async () => {
  const { istiod, issuer } = await setup('127.0.71.8', { maxTtlSeconds: 2 });
  const wc = await WorkloadCertificate.start(issuer, SPIFFE, 3600_000);
  cleanup.push(() => wc.close());
  expect(wc.current.notAfter.getTime() - Date.now()).toBeLessThan(3_000);
  await next(wc, 'rotated', 5_000); // not after half an hour
  expect(istiod.caCalls.length).toBe(2);
});

test('istiod unreachable at start: no certificate and no crash; the first one arrives when it is reachable', async () => {
  const { istiod, issuer } = await setup('127.0.71.4');
  await istiod.stop();
  const wc = WorkloadCertificate.begin(issuer, SPIFFE, 3600_000, { retryMs: 100, maxRetryMs: 300 });
  cleanup.push(() => wc.close());
  await next(wc, 'issueFailed');
  expect(wc.issued).toBe(false);
  expect(() => wc.current).toThrow(/no workload certificate yet: istiod CA at 127\.0\.71\.4:\d+: UNAVAILABLE/);
  await istiod.restart();
  await wc.ready;
  expect(certsOf(wc.current.certPem)[0].subjectAltName).toBe(`URI:${SPIFFE}`);
  expect(wc.failures).toBeGreaterThanOrEqual(1);
});

test('closing before the first certificate rejects ready', async () => {
  const { istiod, issuer } = await setup('127.0.71.5');
  await istiod.stop();
  const wc = WorkloadCertificate.begin(issuer, SPIFFE, 3600_000, { retryMs: 100 });
  wc.close();
  await expect(wc.ready).rejects.toThrow(/closed before it was issued/);
});

test('a changed root file: new caPem at once, and the channel to istiod trusts the new roots', async () => {
  const rootFile = path.join(dir, 'root-cert.pem');
  fs.writeFileSync(rootFile, pki.rootCertPem);
  const { istiod, issuer, roots } = await setup('127.0.71.6', { rootFile });
  const wc = await WorkloadCertificate.start(issuer, SPIFFE, 3600_000);
  cleanup.push(() => wc.close());
  const pki2 = await IstiodPki.create();
  cleanup.push(() => pki2.close());

  // Both roots (a root rotation in progress): same certificate, both trusted.
  const rotation = next<CertificateMaterial>(wc, 'rotated');
  fs.writeFileSync(rootFile, pki.rootCertPem + pki2.rootCertPem);
  const both = await rotation;
  expect(both.caPem).toBe(pki.rootCertPem + pki2.rootCertPem);
  expect(both.certPem).toBe(wc.current.certPem);

  // istiod now serves from the new root only, and the file says so: the next call must verify it.
  const port = Number(istiod.address.split(':')[1]);
  await istiod.stop();
  const istiod2 = await FakeIstiod.start({ pki: pki2, host: '127.0.71.6', port, token: 'token-1' });
  cleanup.push(() => istiod2.stop());
  fs.writeFileSync(rootFile, pki2.rootCertPem);
  await expect.poll(() => roots.pem, { timeout: 5_000 }).toBe(pki2.rootCertPem);
  const issued = await issuer.issue(SPIFFE, 600_000);
  expect(certsOf(issued.certPem)[0].checkIssued(new X509Certificate(pki2.intermediatePem))).toBe(true);
  expect(wc.current.caPem).toBe(pki2.rootCertPem);
});

test('errors say what is wrong: another identity, a refused token, no token file, no root file', async () => {
  const { istiod, issuer, tokenFile } = await setup('127.0.71.7');
  istiod.issueAs = () => 'spiffe://cluster.local/ns/other/sa/thief';
  await expect(issuer.issue(SPIFFE, 600_000)).rejects.toThrow(`the CA issued a certificate for spiffe://cluster.local/ns/other/sa/thief, not the requested ${SPIFFE}`);
  istiod.issueAs = undefined;
  istiod.token = 'another';
  await expect(issuer.issue(SPIFFE, 600_000)).rejects.toThrow(/UNAUTHENTICATED: authentication failure/);
  fs.rmSync(tokenFile);
  await expect(issuer.issue(SPIFFE, 600_000)).rejects.toThrow(`the token file ${tokenFile} does not exist`);
  const missing = path.join(dir, 'no-root.pem');
  const roots = await TrustRootFiles.open([missing]);
  cleanup.push(() => roots.close());
  const channel = new IstiodChannel({ address: istiod.address, roots, tokenFile, clusterId: 'c' });
  cleanup.push(() => channel.close());
  await expect(new IstiodCertificateIssuer({ channel, roots }).issue(SPIFFE, 600_000)).rejects.toThrow(`trust root file ${missing}: the file does not exist`);
  expect(() => new IstiodChannel({ address: 'istiod:99999', roots, tokenFile, clusterId: 'c' })).toThrow(/invalid istiod address "istiod:99999"/);
  expect(grpc.status.UNAVAILABLE).toBe(14);
});
