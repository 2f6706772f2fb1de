/**
 * Certificate signing requests for a workload identity, shaped as ztunnel makes them for istiod's
 * CA (istio/ztunnel src/tls/csr.rs): a fresh ECDSA P-256 key, an empty subject, exactly one URI
 * SAN (the SPIFFE id), signed with ECDSA-SHA256; and the checks of what the CA sends back.
 */
import 'reflect-metadata'; // tsyringe (inside @peculiar/x509) needs the Reflect metadata API
import * as x509 from '@peculiar/x509';
import { X509Certificate, createPrivateKey, type webcrypto as wc } from 'node:crypto';
import { parseSpiffeId } from './spiffe.ts';
import { svidIdentity } from './spiffe.ts';

const webcrypto = globalThis.crypto;
x509.cryptoProvider.set(webcrypto);

const P256: wc.EcKeyGenParams = { name: 'ECDSA', namedCurve: 'P-256' };

/** A CSR (PEM) and the PKCS#8 PEM of its private key. */
export interface WorkloadCsr {
  readonly csrPem: string;
  readonly keyPem: string;
}

/**
 * A CSR for `spiffe`: new P-256 key, empty subject, one URI SAN, ECDSA-SHA256.
 * @throws Error when `spiffe` is not a SPIFFE id.
 */
export async function createWorkloadCsr(spiffe: string): Promise<WorkloadCsr> {
  parseSpiffeId(spiffe);
  const keys = (await webcrypto.subtle.generateKey(P256, true, ['sign', 'verify'])) as wc.CryptoKeyPair;
  const csr = await x509.Pkcs10CertificateRequestGenerator.create({
    keys,
    signingAlgorithm: { name: 'ECDSA', hash: 'SHA-256' },
    extensions: [new x509.SubjectAlternativeNameExtension([{ type: 'url', value: spiffe }], true)],
  });
  const pkcs8 = await webcrypto.subtle.exportKey('pkcs8', keys.privateKey);
  return { csrPem: csr.toString('pem') + '\n', keyPem: x509.PemConverter.encode(pkcs8, 'PRIVATE KEY') + '\n' };
}

const PEM_CERT = /-----BEGIN CERTIFICATE-----[\s\S]*?-----END CERTIFICATE-----/g;

/** The certificates of a PEM text, in order. */
export function splitPemCertificates(text: string): string[] {
  return [...text.matchAll(PEM_CERT)].map((m) => m[0] + '\n');
}

/**
 * Check a chain a CA returned for a CSR of {@link createWorkloadCsr} and return the PEM to serve:
 * `chain` is leaf first, root(s) last (istio/api security/v1alpha1 `IstioCertificateResponse`);
 * the served PEM is the leaf and the intermediates, without the root. Each element may hold
 * several PEM certificates (the last may bundle several roots).
 * @throws Error when the chain is empty or unparsable, the leaf does not match `keyPem`, its
 *   identity is not `spiffe`, or a certificate is not issued by the next one.
 */
export function checkIssuedChain(chain: readonly string[], keyPem: string, spiffe: string): { certPem: string; notBefore: Date; notAfter: Date } {
  if (chain.length === 0) throw new Error('the CA returned an empty certificate chain');
  const served = chain.length > 1 ? chain.slice(0, -1) : chain;
  const pems = served.flatMap((c) => splitPemCertificates(c));
  const roots = chain.length > 1 ? splitPemCertificates(chain[chain.length - 1]) : [];
  if (pems.length === 0) throw new Error('the CA returned no PEM certificate as the leaf');
  let certs: X509Certificate[];
  try {
    certs = [...pems, ...roots].map((p) => new X509Certificate(p));
  } catch (err) {
    throw new Error(`the CA returned a certificate that cannot be parsed: ${(err as Error).message}`, { cause: err });
  }
  const leaf = certs[0];
  if (!leaf.checkPrivateKey(createPrivateKey(keyPem))) throw new Error("the CA's leaf certificate is not for the key of the request");
  const svid = svidIdentity(leaf);
  if ('problem' in svid) throw new Error(`the CA's leaf certificate carries no SPIFFE identity: ${svid.problem}`);
  if (svid.id.uri !== spiffe) throw new Error(`the CA issued a certificate for ${svid.id.uri}, not the requested ${spiffe}`);
  // Each served certificate is issued by the next one; the last served by one of the roots.
  for (let i = 0; i + 1 < pems.length; i++) {
    if (!certs[i].checkIssued(certs[i + 1])) throw new Error(`certificate ${i} of the CA's chain is not issued by certificate ${i + 1} (${certs[i].issuer} / ${certs[i + 1].subject})`);
  }
  const top = certs[pems.length - 1];
  if (roots.length > 0 && !certs.slice(pems.length).some((r) => top.checkIssued(r))) {
    throw new Error(`the last intermediate of the CA's chain (issuer ${top.issuer}) is not issued by the chain's root`);
  }
  return { certPem: pems.join(''), notBefore: leaf.validFromDate, notAfter: leaf.validToDate };
}
