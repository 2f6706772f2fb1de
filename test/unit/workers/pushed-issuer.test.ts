/**
 * A worker's certificate issuer (src/workers/pushed-issuer.ts): the first issue is the primary's
 * certificate; a renewal waits for a newer one rather than renewing to the same; a push with the
 * same leaf and new roots is a trust-root change for onRootsChanged listeners.
 */
import { expect, test } from 'vitest';
import { PushedIssuer } from '../../../src/workers/pushed-issuer.ts';

const cert = (n: number, ca = 'root-1') => ({ certPem: `leaf-${n}`, keyPem: `key-${n}`, caPem: ca, notAfter: Date.UTC(2030, 0, n) });

test('issue gives the pushed certificate once, then waits for a newer one', async () => {
  const issuer = new PushedIssuer('cluster.local', cert(1));
  expect((await issuer.issue('spiffe://cluster.local/ns/a/sa/b', 1000)).certPem).toBe('leaf-1');
  let second: string | undefined;
  const pending = issuer.issue('spiffe://cluster.local/ns/a/sa/b', 1000).then((c) => (second = c.certPem));
  await new Promise((r) => setTimeout(r, 20));
  expect(second).toBeUndefined();
  issuer.push(cert(2));
  await pending;
  expect(second).toBe('leaf-2');
  expect(issuer.rootCertPem).toBe('root-1');
});

test('the same leaf with new roots reaches onRootsChanged, and is no renewal', async () => {
  const issuer = new PushedIssuer('cluster.local', cert(1));
  await issuer.issue('x', 1);
  const roots: string[] = [];
  const off = issuer.onRootsChanged((r) => roots.push(r));
  let renewed = false;
  void issuer.issue('x', 1).then(() => (renewed = true));
  issuer.push(cert(1, 'root-2'));
  await new Promise((r) => setTimeout(r, 20));
  expect(roots).toEqual(['root-2']);
  expect(issuer.rootCertPem).toBe('root-2');
  expect(renewed).toBe(false);
  off();
  issuer.push(cert(1, 'root-3'));
  expect(roots).toEqual(['root-2']);
});
