/**
 * The checks of a chain a CA returned for our CSR: served PEM = leaf + intermediates (no root);
 * refused when it is empty, not for our key, for another identity, or misordered.
 */
import { X509Certificate } from 'node:crypto';
import { afterAll, beforeAll, expect, test } from 'vitest';
import { checkIssuedChain, createWorkloadCsr, splitPemCertificates } from '../../../src/identity/index.ts';
import { IstiodPki } from '../../helpers/istiod-pki.ts';

const SPIFFE = 'spiffe://cluster.local/ns/a/sa/b';
let pki: IstiodPki;
beforeAll(async () => {
  pki = await IstiodPki.create();
});
afterAll(() => pki.close());

test('leaf and intermediate are served, the root is not; notBefore/notAfter from the leaf', async () => {
  const csr = await createWorkloadCsr(SPIFFE);
  const chain = await pki.sign(csr.csrPem, 600);
  const checked = checkIssuedChain(chain, csr.keyPem, SPIFFE);
  expect(splitPemCertificates(checked.certPem)).toEqual([chain[0], chain[1]]);
  expect(checked.notAfter).toEqual(new X509Certificate(chain[0]).validToDate);
  // A CA that sends the leaf only: served as it is.
  expect(checkIssuedChain([chain[0]], csr.keyPem, SPIFFE).certPem).toBe(chain[0]);
});

test('refusals say what is wrong', async () => {
  const csr = await createWorkloadCsr(SPIFFE);
  const other = await createWorkloadCsr(SPIFFE);
  const chain = await pki.sign(csr.csrPem, 600);
  expect(() => checkIssuedChain([], csr.keyPem, SPIFFE)).toThrow('the CA returned an empty certificate chain');
  expect(() => checkIssuedChain(['junk', chain[2]], csr.keyPem, SPIFFE)).toThrow('the CA returned no PEM certificate as the leaf');
  expect(() => checkIssuedChain(chain, other.keyPem, SPIFFE)).toThrow("the CA's leaf certificate is not for the key of the request");
  expect(() => checkIssuedChain(chain, csr.keyPem, 'spiffe://cluster.local/ns/a/sa/c')).toThrow(`the CA issued a certificate for ${SPIFFE}, not the requested spiffe://cluster.local/ns/a/sa/c`);
  expect(() => checkIssuedChain([chain[0], chain[2], chain[1]], csr.keyPem, SPIFFE)).toThrow(/certificate 0 of the CA's chain is not issued by certificate 1/);
  expect(() => checkIssuedChain([chain[0], chain[1], chain[1]], csr.keyPem, SPIFFE)).toThrow(/is not issued by the chain's root/);
  await expect(createWorkloadCsr('https://x')).rejects.toThrow(/invalid SPIFFE id/);
});
