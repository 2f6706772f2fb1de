/**
 * Leaves that the mesh CA (LocalCa) would never issue, signed by a topology's root so that TLS
 * accepts them and only the waypoint's own identity checks can refuse them: several URI SANs,
 * or none.
 */
import { createPrivateKey, webcrypto } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import 'reflect-metadata';
import * as x509 from '@peculiar/x509';
import type { ClientIdentity } from '../../helpers/hbone-client.ts';

const P256 = { name: 'ECDSA', namedCurve: 'P-256', hash: 'SHA-256' } as const;

/** A client leaf signed by the root in `caDir` whose SAN extension holds `uris` (URI SANs) and `dns` names. */
export async function issueOddLeaf(caDir: string, uris: readonly string[], dns: readonly string[] = []): Promise<ClientIdentity> {
  const rootPem = fs.readFileSync(path.join(caDir, 'root-cert.pem'), 'utf8');
  const root = new x509.X509Certificate(rootPem);
  const der = createPrivateKey(fs.readFileSync(path.join(caDir, 'root-key.pem'), 'utf8')).export({ type: 'pkcs8', format: 'der' });
  const signingKey = await webcrypto.subtle.importKey('pkcs8', new Uint8Array(der), P256, false, ['sign']);
  const keys = (await webcrypto.subtle.generateKey(P256, true, ['sign', 'verify'])) as webcrypto.CryptoKeyPair;
  const names = [...uris.map((value) => ({ type: 'url' as const, value })), ...dns.map((value) => ({ type: 'dns' as const, value }))];
  const cert = await x509.X509CertificateGenerator.create({
    issuer: root.subjectName,
    subject: names.length === 0 ? 'CN=no-san' : undefined,
    publicKey: keys.publicKey,
    signingKey,
    signingAlgorithm: P256,
    notBefore: new Date(Date.now() - 60_000),
    notAfter: new Date(Date.now() + 3600_000),
    extensions: [
      new x509.BasicConstraintsExtension(false, undefined, true),
      new x509.KeyUsagesExtension(x509.KeyUsageFlags.digitalSignature | x509.KeyUsageFlags.keyEncipherment, true),
      new x509.ExtendedKeyUsageExtension([x509.ExtendedKeyUsage.serverAuth, x509.ExtendedKeyUsage.clientAuth]),
      await x509.AuthorityKeyIdentifierExtension.create(root.publicKey),
      ...(names.length > 0 ? [new x509.SubjectAlternativeNameExtension(names, true)] : []),
    ],
  });
  const pkcs8 = Buffer.from(await webcrypto.subtle.exportKey('pkcs8', keys.privateKey)).toString('base64');
  const keyPem = `-----BEGIN PRIVATE KEY-----\n${pkcs8.match(/.{1,64}/g)!.join('\n')}\n-----END PRIVATE KEY-----\n`;
  return { certPem: cert.toString('pem') + '\n', keyPem, caPem: rootPem };
}
