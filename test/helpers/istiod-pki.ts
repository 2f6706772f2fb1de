/**
 * istiod's PKI for tests, shaped as a plugged-in CA (Istio's `cacerts`: root → intermediate):
 * a root (a LocalCa in a temp directory), an intermediate CA signed by it, istiod's serving
 * certificate (DNS SAN `istiod.istio-system.svc`) signed by the intermediate, and CSR signing by
 * the intermediate as istiod's CA does (leaf for the CSR's key and URI SAN, chain
 * `[leaf, intermediate, root]`).
 */
import { createPrivateKey, webcrypto } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import 'reflect-metadata';
import * as x509 from '@peculiar/x509';
import { TestCa } from './identity.ts';

const P256 = { name: 'ECDSA', namedCurve: 'P-256', hash: 'SHA-256' } as const;
const pem = (c: x509.X509Certificate): string => c.toString('pem') + '\n';

async function keyPair(): Promise<webcrypto.CryptoKeyPair> {
  return (await webcrypto.subtle.generateKey(P256, true, ['sign', 'verify'])) as webcrypto.CryptoKeyPair;
}

async function pkcs8Pem(key: webcrypto.CryptoKey): Promise<string> {
  return x509.PemConverter.encode(await webcrypto.subtle.exportKey('pkcs8', key), 'PRIVATE KEY') + '\n';
}

export class IstiodPki {
  /** The root (its directory holds `root-cert.pem`, what the waypoint's root file is). */
  readonly root: TestCa;
  readonly intermediatePem: string;
  /** istiod's serving certificate chain (leaf, intermediate) and key. */
  readonly servingCertPem: string;
  readonly servingKeyPem: string;
  readonly #intermediate: x509.X509Certificate;
  readonly #intermediateKey: webcrypto.CryptoKey;

  private constructor(root: TestCa, intermediate: x509.X509Certificate, key: webcrypto.CryptoKey, servingCertPem: string, servingKeyPem: string) {
    this.root = root;
    this.#intermediate = intermediate;
    this.#intermediateKey = key;
    this.intermediatePem = pem(intermediate);
    this.servingCertPem = servingCertPem;
    this.servingKeyPem = servingKeyPem;
  }

  /** A new root (trust domain `trustDomain`), intermediate and serving certificate for `serverName`. */
  static async create(trustDomain = 'cluster.local', serverName = 'istiod.istio-system.svc'): Promise<IstiodPki> {
    const root = await TestCa.create(trustDomain);
    const rootCert = new x509.X509Certificate(root.rootCertPem);
    const der = createPrivateKey(fs.readFileSync(path.join(root.dir, 'root-key.pem'), 'utf8')).export({ type: 'pkcs8', format: 'der' });
    const rootKey = await webcrypto.subtle.importKey('pkcs8', new Uint8Array(der), P256, false, ['sign']);
    const keys = await keyPair();
    const intermediate = await x509.X509CertificateGenerator.create({
      issuer: rootCert.subjectName,
      subject: `O=${trustDomain}, CN=Intermediate CA`,
      publicKey: keys.publicKey,
      signingKey: rootKey,
      signingAlgorithm: P256,
      notBefore: new Date(Date.now() - 60_000),
      notAfter: new Date(Date.now() + 24 * 3600_000),
      extensions: [
        new x509.BasicConstraintsExtension(true, 0, true),
        new x509.KeyUsagesExtension(x509.KeyUsageFlags.keyCertSign | x509.KeyUsageFlags.cRLSign, true),
        await x509.SubjectKeyIdentifierExtension.create(keys.publicKey),
        await x509.AuthorityKeyIdentifierExtension.create(rootCert.publicKey),
      ],
    });
    const servingKeys = await keyPair();
    const serving = await x509.X509CertificateGenerator.create({
      issuer: intermediate.subjectName,
      publicKey: servingKeys.publicKey,
      signingKey: keys.privateKey,
      signingAlgorithm: P256,
      notBefore: new Date(Date.now() - 60_000),
      notAfter: new Date(Date.now() + 24 * 3600_000),
      extensions: [
        new x509.BasicConstraintsExtension(false, undefined, true),
        new x509.KeyUsagesExtension(x509.KeyUsageFlags.digitalSignature | x509.KeyUsageFlags.keyEncipherment, true),
        new x509.ExtendedKeyUsageExtension([x509.ExtendedKeyUsage.serverAuth]),
        await x509.AuthorityKeyIdentifierExtension.create(intermediate.publicKey),
        new x509.SubjectAlternativeNameExtension([{ type: 'dns', value: serverName }], true),
      ],
    });
    return new IstiodPki(root, intermediate, keys.privateKey, pem(serving) + pem(intermediate), await pkcs8Pem(servingKeys.privateKey));
  }

  get rootCertPem(): string {
    return this.root.rootCertPem;
  }

  /** The root file the waypoint reads (`<root dir>/root-cert.pem`). */
  get rootCertFile(): string {
    return path.join(this.root.dir, 'root-cert.pem');
  }

  /**
   * Sign a CSR as istiod's CA: check its signature and that it asks for exactly one URI SAN, then
   * issue a leaf for its key valid `ttlSeconds`; returns `[leaf, intermediate, root]` PEMs.
   * @throws Error for a CSR with a bad signature or not exactly one URI SAN.
   */
  async sign(csrPem: string, ttlSeconds: number, identity?: (uri: string) => string): Promise<string[]> {
    const csr = new x509.Pkcs10CertificateRequest(csrPem);
    if (!(await csr.verify())) throw new Error('CSR signature does not verify');
    const san = csr.extensions.find((e): e is x509.SubjectAlternativeNameExtension => e instanceof x509.SubjectAlternativeNameExtension);
    const uris = (san?.names.toJSON() ?? []).filter((n) => n.type === 'url').map((n) => n.value);
    if (uris.length !== 1) throw new Error(`CSR has ${uris.length} URI SANs, expected exactly one`);
    const uri = identity ? identity(uris[0]) : uris[0];
    const leaf = await x509.X509CertificateGenerator.create({
      issuer: this.#intermediate.subjectName,
      publicKey: await csr.publicKey.export(P256, ['verify']),
      signingKey: this.#intermediateKey,
      signingAlgorithm: P256,
      notBefore: new Date(Date.now() - 60_000),
      notAfter: new Date(Date.now() + ttlSeconds * 1000),
      extensions: [
        new x509.BasicConstraintsExtension(false, undefined, true),
        new x509.KeyUsagesExtension(x509.KeyUsageFlags.digitalSignature | x509.KeyUsageFlags.keyEncipherment, true),
        new x509.ExtendedKeyUsageExtension([x509.ExtendedKeyUsage.serverAuth, x509.ExtendedKeyUsage.clientAuth]),
        await x509.AuthorityKeyIdentifierExtension.create(this.#intermediate.publicKey),
        new x509.SubjectAlternativeNameExtension([{ type: 'url', value: uri }], true),
      ],
    });
    return [pem(leaf), this.intermediatePem, this.rootCertPem];
  }

  /** Remove the root's temp directory. */
  close(): void {
    this.root.close();
  }
}
