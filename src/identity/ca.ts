/**
 * A local mesh CA standing in for istiod's: a self-signed root kept on disk under Istio's
 * plugged-CA file names (`root-cert.pem`, `root-key.pem`), issuing workload leaves shaped like
 * istiod's (empty subject, one URI SAN = the SPIFFE id, ECDSA P-256 / SHA-256; ztunnel
 * `src/tls/csr.rs`). Built on `@peculiar/x509` over
 * WebCrypto; node:crypto only parses and converts PEM.
 */
import 'reflect-metadata'; // tsyringe (inside @peculiar/x509) needs the Reflect metadata API
import * as x509 from '@peculiar/x509';
import { X509Certificate as NodeX509, createPrivateKey, type webcrypto as wc } from 'node:crypto';
import { mkdir, readFile, writeFile, chmod, access } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import ms from 'ms';
import { parseSpiffeId } from './spiffe.ts';

const webcrypto = globalThis.crypto;
x509.cryptoProvider.set(webcrypto);

/** File name of the root certificate inside a CA directory (Istio plugged-CA name). */
export const ROOT_CERT_FILE = 'root-cert.pem';
/** File name of the root private key inside a CA directory (Istio plugged-CA name). */
export const ROOT_KEY_FILE = 'root-key.pem';

/** Backdating of `notBefore`, for clock skew between peers. */
const CLOCK_SKEW_MS = 60_000;
const ROOT_VALIDITY_MS = 10 * 365 * 24 * 3600_000;
const P256: wc.EcKeyGenParams = { name: 'ECDSA', namedCurve: 'P-256' };

/** A freshly issued workload certificate, key in PKCS#8. */
export interface IssuedCertificate {
  /** The leaf, then the intermediates up to (not including) the root, as a TLS server sends them. */
  readonly certPem: string;
  readonly keyPem: string;
  readonly notBefore: Date;
  readonly notAfter: Date;
  readonly spiffe: string;
}

/** What can issue workload certificates: {@link LocalCa}, or a test double. */
export interface CertificateIssuer {
  /** PEM of the trust anchor peers must verify issued leaves against. */
  readonly rootCertPem: string;
  issue(spiffe: string, ttlMs: number): Promise<IssuedCertificate>;
  /**
   * For trust roots that change at run time (istiod's root file, re-read): call `listener` with
   * the new {@link rootCertPem} on each change; returns what unsubscribes it.
   */
  onRootsChanged?(listener: (rootCertPem: string) => void): () => void;
}

/**
 * `$WAYPOINT_STATE_DIR`, else `~/.local/state/node-waypoint`. The CA lives in
 * `<stateDir>/ca` ({@link defaultCaDir}).
 */
export function defaultStateDir(): string {
  if (process.env.WAYPOINT_STATE_DIR) return process.env.WAYPOINT_STATE_DIR;
  let home: string;
  try {
    home = os.homedir();
  } catch {
    // No HOME and a UID without a passwd entry (a container's numeric USER): libuv throws; CLI
    // defaults are computed while commands are built, so `--version` must not fail on this.
    return path.join(os.tmpdir(), `node-waypoint-${process.getuid?.() ?? 'user'}`);
  }
  return path.join(home, '.local', 'state', 'node-waypoint');
}

/** `<defaultStateDir()>/ca`. */
export function defaultCaDir(): string {
  return path.join(defaultStateDir(), 'ca');
}

/**
 * A duration in milliseconds from `ms` syntax (`24h`, `90m`, `1.5d`, `2s`; a bare number is
 * milliseconds). @throws Error on unparseable, non-finite or non-positive input.
 */
export function parseTtl(text: string): number {
  let value: number | undefined;
  try {
    value = ms(text as ms.StringValue);
  } catch {
    value = undefined;
  }
  if (typeof value !== 'number' || !Number.isFinite(value) || value <= 0) {
    throw new Error(`invalid duration ${JSON.stringify(text)} (expected e.g. 24h, 90m, 30s)`);
  }
  return Math.round(value);
}

function toPem(der: ArrayBuffer, tag: string): string {
  return x509.PemConverter.encode(der, tag) + '\n';
}

async function exists(file: string): Promise<boolean> {
  return access(file).then(() => true, () => false);
}

/** Import any PEM private key Node understands (PKCS#8, SEC1, PKCS#1) as a WebCrypto signing key. */
async function importSigningKey(pem: string): Promise<wc.CryptoKey> {
  const key = createPrivateKey(pem);
  const der = key.export({ type: 'pkcs8', format: 'der' });
  const pkcs8 = der.buffer.slice(der.byteOffset, der.byteOffset + der.byteLength) as ArrayBuffer;
  if (key.asymmetricKeyType === 'ec') {
    const curve = key.asymmetricKeyDetails?.namedCurve;
    const namedCurve = curve === 'prime256v1' ? 'P-256' : curve === 'secp384r1' ? 'P-384' : undefined;
    if (!namedCurve) throw new Error(`unsupported EC curve ${curve}`);
    return webcrypto.subtle.importKey('pkcs8', pkcs8, { name: 'ECDSA', namedCurve }, false, ['sign']);
  }
  if (key.asymmetricKeyType === 'rsa') {
    return webcrypto.subtle.importKey('pkcs8', pkcs8, { name: 'RSASSA-PKCS1-v1_5', hash: 'SHA-256' }, false, ['sign']);
  }
  throw new Error(`unsupported key type ${key.asymmetricKeyType}`);
}

const PEM_BLOCK = /-----BEGIN ([A-Z0-9 ]+)-----[\s\S]*?-----END \1-----/g;

/** What {@link readTrustRoot} tells to give instead of a wrong file, by default. */
const LOCAL_ROOT_HINT = `give the mesh root certificate (${ROOT_CERT_FILE} in the directory of \`waypoint ca init\`)`;

/**
 * Read a trust-root file (a role's `--ca`, istiod's root certificate): PEM certificates, every one
 * a CA (basicConstraints CA:true), as `root-cert.pem` of {@link LocalCa.init} is. Returns the PEM
 * text. `hint` says what file to give instead (default: the local CA's root).
 * @throws Error saying what the file is instead: missing, a private key, a workload (leaf)
 *   certificate, or no PEM certificate at all.
 */
export async function readTrustRoot(file: string, hint = LOCAL_ROOT_HINT): Promise<string> {
  let text: string;
  try {
    text = await readFile(file, 'utf8');
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    throw new Error(code === 'ENOENT' ? 'the file does not exist' : `cannot read it: ${(err as Error).message}`, { cause: err });
  }
  const blocks = [...text.matchAll(PEM_BLOCK)];
  if (blocks.some((b) => b[1].endsWith('PRIVATE KEY'))) throw new Error(`it holds a private key, not a CA certificate: ${hint}`);
  const certs = blocks.filter((b) => b[1] === 'CERTIFICATE');
  if (certs.length === 0) throw new Error(`it holds no PEM certificate: ${hint}`);
  for (const [pem] of certs) {
    let cert: NodeX509;
    try {
      cert = new NodeX509(pem);
    } catch (err) {
      throw new Error(`it holds a PEM certificate that cannot be parsed (${(err as Error).message}): ${hint}`, { cause: err });
    }
    if (!cert.ca) {
      const san = cert.subjectAltName ? ` for ${cert.subjectAltName.replace(/^URI:/, '')}` : '';
      throw new Error(`it holds a workload certificate${san}, not a CA certificate (basicConstraints CA:true missing): ${hint}`);
    }
  }
  return text;
}

/**
 * The local mesh CA. Create with {@link LocalCa.load}, {@link LocalCa.init} or
 * {@link LocalCa.ensure}; then {@link LocalCa.issue} leaves for SPIFFE ids of its trust domain.
 */
export class LocalCa implements CertificateIssuer {
  /** The trust domain, read from the root's subject `O=` (as in Istio's self-signed root). */
  readonly trustDomain: string;
  /** The root certificate, PEM: the trust anchor for every leaf issued here. */
  readonly rootCertPem: string;
  readonly #root: x509.X509Certificate;
  readonly #key: wc.CryptoKey;

  private constructor(root: x509.X509Certificate, rootCertPem: string, key: wc.CryptoKey, trustDomain: string) {
    this.#root = root;
    this.rootCertPem = rootCertPem;
    this.#key = key;
    this.trustDomain = trustDomain;
  }

  /**
   * Read `dir/root-cert.pem` and `dir/root-key.pem` (EC P-256/P-384 or RSA key; any PEM key
   * format). @throws Error naming the file that is missing or invalid, if the certificate is not
   * a CA, has no `O=` in its subject, or does not match the key.
   */
  static async load(dir: string): Promise<LocalCa> {
    const certFile = path.join(dir, ROOT_CERT_FILE);
    const keyFile = path.join(dir, ROOT_KEY_FILE);
    const read = async (file: string): Promise<string> => {
      try {
        return await readFile(file, 'utf8');
      } catch (err) {
        const code = (err as NodeJS.ErrnoException).code;
        throw new Error(code === 'ENOENT' ? `CA file ${file} does not exist (run: waypoint ca init --dir ${dir})` : `cannot read CA file ${file}: ${(err as Error).message}`, { cause: err });
      }
    };
    const certPem = await read(certFile);
    const keyPem = await read(keyFile);

    let nodeCert: NodeX509;
    let root: x509.X509Certificate;
    try {
      nodeCert = new NodeX509(certPem);
      root = new x509.X509Certificate(nodeCert.raw);
    } catch (err) {
      throw new Error(`${certFile} is not a PEM certificate: ${(err as Error).message}`, { cause: err });
    }
    if (!nodeCert.ca) throw new Error(`${certFile} is not a CA certificate (basicConstraints CA:true missing)`);
    const trustDomain = root.subjectName.getField('O')[0];
    if (!trustDomain) throw new Error(`${certFile} has no O=<trust domain> in its subject (${root.subject || 'empty'})`);

    let key: wc.CryptoKey;
    try {
      if (!nodeCert.checkPrivateKey(createPrivateKey(keyPem))) {
        throw new Error(`it does not match ${certFile}`);
      }
      key = await importSigningKey(keyPem);
    } catch (err) {
      throw new Error(`${keyFile} is not a usable CA key: ${(err as Error).message}`, { cause: err });
    }
    return new LocalCa(root, nodeCert.toString(), key, trustDomain);
  }

  /**
   * Create a new root in `dir` (created if needed): ECDSA P-256, subject `O=<trustDomain>`, valid
   * 10 years, CA:true, keyCertSign|cRLSign. Writes `root-cert.pem` and `root-key.pem` (PKCS#8,
   * mode 0600). @throws Error if either file already exists and `opts.force` is not set.
   */
  static async init(dir: string, trustDomain: string, opts: { force?: boolean } = {}): Promise<LocalCa> {
    if (!trustDomain || /[/\s]/.test(trustDomain)) throw new Error(`invalid trust domain ${JSON.stringify(trustDomain)}`);
    const certFile = path.join(dir, ROOT_CERT_FILE);
    const keyFile = path.join(dir, ROOT_KEY_FILE);
    if (!opts.force) {
      for (const file of [certFile, keyFile]) {
        if (await exists(file)) throw new Error(`${file} already exists; refusing to overwrite the CA (use --force to replace it)`);
      }
    }
    const keys = (await webcrypto.subtle.generateKey(P256, true, ['sign', 'verify'])) as wc.CryptoKeyPair;
    const now = Date.now();
    const name = new x509.Name([{ O: [trustDomain] }]);
    const root = await x509.X509CertificateGenerator.createSelfSigned({
      name,
      keys,
      notBefore: new Date(now - CLOCK_SKEW_MS),
      notAfter: new Date(now + ROOT_VALIDITY_MS),
      extensions: [
        new x509.BasicConstraintsExtension(true, undefined, true),
        new x509.KeyUsagesExtension(x509.KeyUsageFlags.keyCertSign | x509.KeyUsageFlags.cRLSign, true),
        await x509.SubjectKeyIdentifierExtension.create(keys.publicKey),
      ],
    });
    const certPem = root.toString('pem') + '\n';
    const keyPem = toPem(await webcrypto.subtle.exportKey('pkcs8', keys.privateKey), 'PRIVATE KEY');

    await mkdir(dir, { recursive: true });
    const flag = opts.force ? 'w' : 'wx';
    await writeFile(keyFile, keyPem, { mode: 0o600, flag });
    await chmod(keyFile, 0o600); // mode only applies on creation; --force may reuse a file
    await writeFile(certFile, certPem, { mode: 0o644, flag });
    return new LocalCa(root, certPem, keys.privateKey, trustDomain);
  }

  /**
   * {@link LocalCa.load} if `dir/root-cert.pem` exists, else {@link LocalCa.init}.
   * @throws Error if the existing CA's trust domain is not `trustDomain`.
   */
  static async ensure(dir: string, trustDomain: string): Promise<{ ca: LocalCa; created: boolean }> {
    if (await exists(path.join(dir, ROOT_CERT_FILE))) {
      const ca = await LocalCa.load(dir);
      if (ca.trustDomain !== trustDomain) {
        throw new Error(`the CA in ${dir} is for trust domain ${ca.trustDomain}, not ${trustDomain} (use waypoint ca init --force to replace it)`);
      }
      return { ca, created: false };
    }
    return { ca: await LocalCa.init(dir, trustDomain), created: true };
  }

  /**
   * Issue a workload leaf for `spiffe`, valid from now − 60 s to now + `ttlMs`: fresh ECDSA P-256
   * key, empty subject, a single critical URI SAN, digitalSignature|keyEncipherment,
   * serverAuth+clientAuth, CA:false, SKI/AKI, random serial, ECDSA-SHA256 (or the root key's
   * algorithm) signature. @throws Error if `spiffe` is not a valid SPIFFE id, its trust domain
   * is not this CA's, or `ttlMs` is not positive.
   */
  async issue(spiffe: string, ttlMs: number): Promise<IssuedCertificate> {
    const id = parseSpiffeId(spiffe);
    if (id.trustDomain !== this.trustDomain) {
      throw new Error(`${spiffe} is not in this CA's trust domain ${this.trustDomain}`);
    }
    if (!Number.isFinite(ttlMs) || ttlMs <= 0) throw new Error(`invalid certificate lifetime ${ttlMs} ms`);

    const keys = (await webcrypto.subtle.generateKey(P256, true, ['sign', 'verify'])) as wc.CryptoKeyPair;
    const now = Date.now();
    const notBefore = new Date(now - CLOCK_SKEW_MS);
    const notAfter = new Date(now + ttlMs);
    const rootSki = this.#root.getExtension(x509.SubjectKeyIdentifierExtension)?.keyId;
    const aki = rootSki
      ? new x509.AuthorityKeyIdentifierExtension(rootSki)
      : await x509.AuthorityKeyIdentifierExtension.create(this.#root.publicKey);
    const cert = await x509.X509CertificateGenerator.create({
      issuer: this.#root.subjectName,
      publicKey: keys.publicKey,
      signingKey: this.#key,
      notBefore,
      notAfter,
      extensions: [
        new x509.BasicConstraintsExtension(false, undefined, true),
        new x509.KeyUsagesExtension(x509.KeyUsageFlags.digitalSignature | x509.KeyUsageFlags.keyEncipherment, true),
        new x509.ExtendedKeyUsageExtension([x509.ExtendedKeyUsage.serverAuth, x509.ExtendedKeyUsage.clientAuth]),
        await x509.SubjectKeyIdentifierExtension.create(keys.publicKey),
        aki,
        // Critical because the subject is empty (RFC 5280 §4.2.1.6).
        new x509.SubjectAlternativeNameExtension([{ type: 'url', value: spiffe }], true),
      ],
    });
    return {
      certPem: cert.toString('pem') + '\n',
      keyPem: toPem(await webcrypto.subtle.exportKey('pkcs8', keys.privateKey), 'PRIVATE KEY'),
      notBefore: cert.notBefore,
      notAfter: cert.notAfter,
      spiffe,
    };
  }
}
