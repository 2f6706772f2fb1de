import { test, expect, beforeAll, afterAll } from 'vitest';
import { X509Certificate, type webcrypto } from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import 'reflect-metadata';
import * as x509 from '@peculiar/x509';
import { LocalCa } from '../../../src/identity/ca.ts';
import {
  formatSpiffeId,
  parseSpiffeId,
  spiffeUrisOf,
  svidIdentity,
  trustDomainAllowed,
} from '../../../src/identity/spiffe.ts';

let dir: string;
let ca: LocalCa;
beforeAll(async () => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'wp-spiffe-'));
  ca = await LocalCa.init(dir, 'cluster.local');
});
afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

test.each([
  ['spiffe://cluster.local/ns/default/sa/bookinfo', 'cluster.local', 'default', 'bookinfo'],
  ['spiffe://example.org/ns/istio-system/sa/waypoint', 'example.org', 'istio-system', 'waypoint'],
  ['spiffe://td/ns/a.b_c-d/sa/X', 'td', 'a.b_c-d', 'X'],
])('parse %s', (uri, trustDomain, namespace, serviceAccount) => {
  expect(parseSpiffeId(uri)).toEqual({ uri, trustDomain, namespace, serviceAccount });
  expect(formatSpiffeId(trustDomain, namespace, serviceAccount)).toBe(uri);
});

test.each([
  ['', /scheme/],
  ['cluster.local/ns/a/sa/b', /scheme/],
  ['https://cluster.local/ns/a/sa/b', /scheme/],
  ['SPIFFE://cluster.local/ns/a/sa/b', /scheme/],
  ['spiffe://cluster.local', /0 segments, want 4/],
  ['spiffe://cluster.local/ns/a/sa', /3 segments, want 4/],
  ['spiffe://cluster.local/ns/a/sa/b/c', /5 segments, want 4/],
  ['spiffe://cluster.local/ns/a/sa/b/', /5 segments, want 4/],
  ['spiffe://cluster.local/namespace/a/sa/b', /\/ns\/<namespace>\/sa/],
  ['spiffe://cluster.local/ns/a/serviceaccount/b', /\/ns\/<namespace>\/sa/],
  ['spiffe:///ns/a/sa/b', /empty trust domain/],
  ['spiffe://cluster.local/ns//sa/b', /empty namespace/],
  ['spiffe://cluster.local/ns/a/sa/', /empty service account/],
])('parse rejects %j', (uri, why) => {
  expect(() => parseSpiffeId(uri)).toThrow(why);
  expect(() => parseSpiffeId(uri)).toThrow(JSON.stringify(uri));
});

test('format rejects parts that do not round-trip', () => {
  expect(() => formatSpiffeId('cluster.local', 'a/b', 'c')).toThrow(/segments/);
  expect(() => formatSpiffeId('cluster.local', '', 'c')).toThrow(/empty namespace/);
  expect(() => formatSpiffeId('', 'a', 'c')).toThrow(/empty trust domain/);
});

test('SAN extraction from a certificate issued by the local CA', async () => {
  const uri = 'spiffe://cluster.local/ns/default/sa/bookinfo';
  const cert = new X509Certificate((await ca.issue(uri, 60_000)).certPem);
  expect(spiffeUrisOf(cert)).toEqual([uri]);
  expect(svidIdentity(cert)).toEqual({ id: parseSpiffeId(uri) });
});

test('SAN extraction decodes values Node prints quoted', async () => {
  const uri = 'spiffe://cluster.local/ns/a,b/sa/c';
  const cert = new X509Certificate((await ca.issue(uri, 60_000)).certPem);
  expect(cert.subjectAltName).toContain('"'); // Node quoted it: the case under test
  expect(spiffeUrisOf(cert)).toEqual([uri]);
  expect(svidIdentity(cert)).toMatchObject({ id: { namespace: 'a,b' } });
});

test('SAN extraction with several names lists the spiffe URIs; several URI SANs are no SPIFFE identity', async () => {
  const keys = (await crypto.subtle.generateKey({ name: 'ECDSA', namedCurve: 'P-256' }, true, ['sign', 'verify'])) as webcrypto.CryptoKeyPair;
  const names = [
    { type: 'dns', value: 'a.example, URI:spiffe://evil/ns/x/sa/y' },
    { type: 'url', value: 'https://example.com/x' },
    { type: 'url', value: 'spiffe://bad/ns/only' },
    { type: 'dns', value: 'b.example' },
    { type: 'url', value: 'spiffe://td/ns/q"x/sa/y' },
    { type: 'url', value: 'spiffe://td/ns/second/sa/z' },
  ] as const;
  const generated = await x509.X509CertificateGenerator.createSelfSigned({
    name: 'CN=multi',
    keys,
    extensions: [new x509.SubjectAlternativeNameExtension(names.map((n) => ({ ...n })))],
  });
  const cert = new X509Certificate(generated.toString('pem'));
  expect(spiffeUrisOf(cert)).toEqual(['spiffe://bad/ns/only', 'spiffe://td/ns/q"x/sa/y', 'spiffe://td/ns/second/sa/z']);
  // SPIFFE X509-SVID §2: exactly one URI SAN (the DNS name that mimics one does not count).
  expect(svidIdentity(cert)).toEqual({ problem: 'the certificate has 4 URI SANs; a SPIFFE certificate has exactly one' });
});

test('exactly one URI SAN, plus any DNS names, is an identity; one URI SAN that is not an Istio SPIFFE id is not', async () => {
  const keys = (await crypto.subtle.generateKey({ name: 'ECDSA', namedCurve: 'P-256' }, true, ['sign', 'verify'])) as webcrypto.CryptoKeyPair;
  const make = async (names: { type: 'dns' | 'url'; value: string }[]) =>
    new X509Certificate(
      (await x509.X509CertificateGenerator.createSelfSigned({ name: 'CN=svid', keys, extensions: [new x509.SubjectAlternativeNameExtension(names)] })).toString('pem'),
    );
  const one = await make([
    { type: 'dns', value: 'a.example' },
    { type: 'url', value: 'spiffe://td/ns/a/sa/b' },
  ]);
  expect(svidIdentity(one)).toEqual({ id: parseSpiffeId('spiffe://td/ns/a/sa/b') });
  const two = await make([
    { type: 'url', value: 'spiffe://td/ns/a/sa/b' },
    { type: 'url', value: 'spiffe://td/ns/admin/sa/root' },
  ]);
  expect(svidIdentity(two)).toEqual({ problem: 'the certificate has 2 URI SANs; a SPIFFE certificate has exactly one' });
  const odd = await make([{ type: 'url', value: 'spiffe://td/workload' }]);
  expect((svidIdentity(odd) as { problem: string }).problem).toMatch(/invalid SPIFFE id/);
});

test('no certificate, or no SAN', async () => {
  expect(spiffeUrisOf(undefined)).toEqual([]);
  expect(svidIdentity(undefined)).toEqual({ problem: 'no certificate' });
  const root = new X509Certificate(ca.rootCertPem); // the root has no SAN extension
  expect(spiffeUrisOf(root)).toEqual([]);
  expect(svidIdentity(root)).toEqual({ problem: 'the certificate has no URI SAN (a SPIFFE identity)' });
});

test.each([
  ['cluster.local', [], true],
  ['other.local', [], false],
  ['old.local', ['old.local', 'x'], true],
  ['Cluster.local', [], false],
  ['cluster.local.', [], false],
])('trust domain %s allowed with aliases %j: %s', (td, aliases, allowed) => {
  const id = parseSpiffeId(`spiffe://${td}/ns/a/sa/b`);
  expect(trustDomainAllowed(id, 'cluster.local', aliases)).toBe(allowed);
});
