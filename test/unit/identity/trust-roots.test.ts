/**
 * Trust roots from files that change while the proxy runs (istiod's root-cert.pem): read when the
 * file appears, re-read when it changes (a kubelet-style symlink swap included), the old roots
 * kept when the new content is not CA certificates, and several files or several roots in one.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, expect, test } from 'vitest';
import { LocalCa, TrustRootFiles } from '../../../src/identity/index.ts';

let dir: string;
let a: LocalCa;
let b: LocalCa;
beforeAll(async () => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'wp-roots-'));
  a = await LocalCa.init(path.join(dir, 'a'), 'cluster.local');
  b = await LocalCa.init(path.join(dir, 'b'), 'cluster.local');
});
afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

const changed = (roots: TrustRootFiles) => new Promise<string>((resolve) => roots.once('changed', resolve));

test('missing at first: no roots and a reason; read once the file appears', async () => {
  const file = path.join(dir, 'later.pem');
  const roots = await TrustRootFiles.open([file], { pollMs: 20 });
  try {
    expect(roots.pem).toBeUndefined();
    expect(() => roots.require()).toThrow(`trust root file ${file}: the file does not exist`);
    const next = changed(roots);
    fs.writeFileSync(file, a.rootCertPem);
    expect(await next).toBe(a.rootCertPem);
    expect(roots.require()).toBe(a.rootCertPem);
  } finally {
    roots.close();
  }
});

test('a change, a symlink swap, and an invalid change (the old roots are kept)', async () => {
  const data1 = path.join(dir, 'data1');
  const data2 = path.join(dir, 'data2');
  fs.mkdirSync(data1);
  fs.mkdirSync(data2);
  fs.writeFileSync(path.join(data1, 'root-cert.pem'), a.rootCertPem);
  fs.writeFileSync(path.join(data2, 'root-cert.pem'), a.rootCertPem + b.rootCertPem);
  const link = path.join(dir, 'current');
  fs.symlinkSync(data1, link);
  const roots = await TrustRootFiles.open([path.join(link, 'root-cert.pem')], { pollMs: 20 });
  try {
    expect(roots.pem).toBe(a.rootCertPem);
    // Kubelet's way: a new directory, then the symlink swapped atomically.
    const swapped = changed(roots);
    fs.symlinkSync(data2, `${link}.tmp`);
    fs.renameSync(`${link}.tmp`, link);
    expect(await swapped).toBe(a.rootCertPem + b.rootCertPem);
    // A key where the root should be: refused, the roots read before stay.
    fs.writeFileSync(path.join(data2, 'root-cert.pem'), fs.readFileSync(path.join(dir, 'a', 'root-key.pem')));
    expect(await roots.refresh()).toBe(false);
    expect(roots.pem).toBe(a.rootCertPem + b.rootCertPem);
    expect(roots.problem).toMatch(/holds a private key, not a CA certificate: give istiod's root certificate/);
  } finally {
    roots.close();
  }
});

test('several files: their certificates in file order', async () => {
  const fa = path.join(dir, 'ra.pem');
  const fb = path.join(dir, 'rb.pem');
  fs.writeFileSync(fa, a.rootCertPem);
  fs.writeFileSync(fb, b.rootCertPem);
  const roots = await TrustRootFiles.open([fa, fb]);
  roots.close();
  expect(roots.pem).toBe(a.rootCertPem + b.rootCertPem);
  await expect(TrustRootFiles.open([])).rejects.toThrow('no trust root file given');
});
