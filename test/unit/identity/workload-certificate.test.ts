import { test, expect, beforeAll, afterAll } from 'vitest';
import { X509Certificate } from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { LocalCa, type CertificateIssuer } from '../../../src/identity/ca.ts';
import { WorkloadCertificate, type CertificateMaterial } from '../../../src/identity/workload-certificate.ts';
import { issueOddLeaf } from '../../integration/transport/certs.ts';

const SPIFFE = 'spiffe://cluster.local/ns/istio-system/sa/waypoint';
let dir: string;
let ca: LocalCa;
beforeAll(async () => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'wp-wc-'));
  ca = await LocalCa.init(path.join(dir, 'ca'), 'cluster.local');
});
afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

/** The next 'rotated' event, or a rejection after `ms` so a broken renewal fails instead of hanging. */
function nextRotation(wc: WorkloadCertificate, ms: number): Promise<CertificateMaterial> {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`no 'rotated' event within ${ms} ms`)), ms);
    wc.once('rotated', (m) => {
      clearTimeout(timer);
      resolve(m);
    });
  });
}

const serial = (m: CertificateMaterial): string => new X509Certificate(m.certPem).serialNumber;

test('renews at half the lifetime and emits rotated with a new certificate', async () => {
  const started = Date.now();
  const wc = await WorkloadCertificate.start(ca, SPIFFE, 2000);
  try {
    const first = wc.current;
    expect(first.caPem).toBe(ca.rootCertPem);
    expect(new X509Certificate(first.certPem).subjectAltName).toBe(`URI:${SPIFFE}`);
    const rotated = await nextRotation(wc, 5000);
    const elapsed = Date.now() - started;
    expect(elapsed).toBeGreaterThanOrEqual(900); // ~1 s = half of 2 s, not immediately
    expect(elapsed).toBeLessThan(1900); // before expiry
    expect(serial(rotated)).not.toBe(serial(first));
    expect(rotated.keyPem).not.toBe(first.keyPem);
    expect(wc.current).toBe(rotated);
    expect(new X509Certificate(rotated.certPem).checkIssued(new X509Certificate(ca.rootCertPem))).toBe(true);
    // And it keeps renewing.
    const again = await nextRotation(wc, 5000);
    expect(serial(again)).not.toBe(serial(rotated));
  } finally {
    wc.close();
  }
});

test('close stops renewal', async () => {
  const wc = await WorkloadCertificate.start(ca, SPIFFE, 400);
  const first = wc.current;
  wc.close();
  await expect(nextRotation(wc, 800)).rejects.toThrow(/no 'rotated' event/);
  expect(wc.current).toBe(first);
});

test('a failed renewal is retried, keeping the old certificate meanwhile', async () => {
  let calls = 0;
  const flaky: CertificateIssuer = {
    rootCertPem: ca.rootCertPem,
    issue: (spiffe, ttlMs) => {
      calls += 1;
      if (calls === 2) return Promise.reject(new Error('CA unavailable'));
      return ca.issue(spiffe, ttlMs);
    },
  };
  const wc = await WorkloadCertificate.start(flaky, SPIFFE, 600, { retryMs: 100 });
  try {
    const first = wc.current;
    const rotated = await nextRotation(wc, 5000);
    expect(calls).toBe(3);
    expect(serial(rotated)).not.toBe(serial(first));
  } finally {
    wc.close();
  }
});

test('start propagates an invalid identity', async () => {
  await expect(WorkloadCertificate.start(ca, 'spiffe://other.local/ns/a/sa/b', 60_000)).rejects.toThrow(/trust domain/);
});

test('fromPrefix reads PREFIX-cert.pem / PREFIX-key.pem and never rotates', async () => {
  const prefix = path.join(dir, 'fixed');
  const issued = await ca.issue(SPIFFE, 60_000);
  fs.writeFileSync(`${prefix}-cert.pem`, issued.certPem);
  fs.writeFileSync(`${prefix}-key.pem`, issued.keyPem);
  const caFile = path.join(dir, 'ca', 'root-cert.pem');
  const wc = await WorkloadCertificate.fromPrefix(prefix, caFile);
  expect(wc.current).toEqual({ certPem: issued.certPem, keyPem: issued.keyPem, caPem: ca.rootCertPem, notAfter: issued.notAfter });
  wc.close();
});

test('fromPrefix names the missing or mismatched file', async () => {
  const prefix = path.join(dir, 'partial');
  const caFile = path.join(dir, 'ca', 'root-cert.pem');
  const issued = await ca.issue(SPIFFE, 60_000);
  await expect(WorkloadCertificate.fromPrefix(prefix, caFile)).rejects.toThrow(`${prefix}-cert.pem does not exist`);
  fs.writeFileSync(`${prefix}-cert.pem`, issued.certPem);
  await expect(WorkloadCertificate.fromPrefix(prefix, caFile)).rejects.toThrow(`${prefix}-key.pem does not exist`);
  fs.writeFileSync(`${prefix}-key.pem`, issued.keyPem);
  await expect(WorkloadCertificate.fromPrefix(prefix, path.join(dir, 'nope.pem'))).rejects.toThrow(`${path.join(dir, 'nope.pem')} does not exist`);
  fs.writeFileSync(`${prefix}-key.pem`, (await ca.issue(SPIFFE, 60_000)).keyPem);
  await expect(WorkloadCertificate.fromPrefix(prefix, caFile)).rejects.toThrow(`${prefix}-key.pem does not match ${prefix}-cert.pem`);
});

test('fromPrefix refuses a certificate with two URI SANs (SPIFFE X509-SVID: exactly one)', async () => {
  const prefix = path.join(dir, 'two-uris');
  const caFile = path.join(dir, 'ca', 'root-cert.pem');
  const leaf = await issueOddLeaf(path.join(dir, 'ca'), [SPIFFE, 'spiffe://cluster.local/ns/istio-system/sa/istiod']);
  fs.writeFileSync(`${prefix}-cert.pem`, leaf.certPem);
  fs.writeFileSync(`${prefix}-key.pem`, leaf.keyPem);
  await expect(WorkloadCertificate.fromPrefix(prefix, caFile)).rejects.toThrow(`${prefix}-cert.pem carries no SPIFFE identity: the certificate has 2 URI SANs; a SPIFFE certificate has exactly one`);
});
