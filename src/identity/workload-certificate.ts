/**
 * The waypoint's own workload certificate: issued by a {@link CertificateIssuer} and renewed at
 * half its lifetime, as ztunnel refreshes at half of validity (ztunnel `src/tls/certificate.rs`
 * `refresh_at`); or fixed, read from PEM files.
 */
import { EventEmitter } from 'node:events';
import { X509Certificate, createPrivateKey } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import type { CertificateIssuer } from './ca.ts';
import { svidIdentity, type SpiffeId } from './spiffe.ts';
import { log } from '../util/index.ts';

/** The key material to put in a TLS context: leaf PEM, its PKCS#8 key, and the trust root(s). */
export interface CertificateMaterial {
  readonly certPem: string;
  readonly keyPem: string;
  readonly caPem: string;
  readonly notAfter: Date;
}

/** Events of {@link WorkloadCertificate}: `'rotated'` carries the new {@link WorkloadCertificate.current}. */
export type WorkloadCertificateEvents = { rotated: [CertificateMaterial] };

/** Delay before retrying a failed renewal. */
const DEFAULT_RETRY_MS = 5_000;
/** setTimeout's maximum delay; longer waits are done in steps. */
const MAX_TIMER_MS = 2 ** 31 - 1;

/**
 * A workload identity whose {@link WorkloadCertificate.current} material stays valid.
 * {@link WorkloadCertificate.start} issues and renews; {@link WorkloadCertificate.fromPrefix}
 * holds fixed files. Listen to `'rotated'` to rebuild TLS contexts.
 */
export class WorkloadCertificate extends EventEmitter<WorkloadCertificateEvents> {
  #current: CertificateMaterial;
  #timer: NodeJS.Timeout | undefined;
  #closed = false;

  private constructor(current: CertificateMaterial) {
    super();
    this.#current = current;
  }

  /**
   * Issue a certificate for `spiffe` from `ca` valid for `ttlMs`, and renew it every
   * `ttlMs * renewFraction` (default 0.5) after issuance. A failed renewal is logged and retried
   * after `retryMs` (default 5 s); the old certificate stays current meanwhile. Timers are
   * `unref`ed. @throws whatever the first `ca.issue` throws (bad SPIFFE id, foreign trust domain).
   */
  static async start(
    ca: CertificateIssuer,
    spiffe: string,
    ttlMs: number,
    opts: { renewFraction?: number; retryMs?: number } = {},
  ): Promise<WorkloadCertificate> {
    const fraction = opts.renewFraction ?? 0.5;
    if (!(fraction > 0 && fraction < 1)) throw new Error(`renewFraction must be in (0, 1), got ${fraction}`);
    const retryMs = opts.retryMs ?? DEFAULT_RETRY_MS;

    const issue = async (): Promise<CertificateMaterial> => {
      const c = await ca.issue(spiffe, ttlMs);
      return { certPem: c.certPem, keyPem: c.keyPem, caPem: ca.rootCertPem, notAfter: c.notAfter };
    };
    const wc = new WorkloadCertificate(await issue());

    const schedule = (at: number): void => {
      if (wc.#closed) return;
      wc.#timer = setTimeout(() => {
        if (Date.now() < at) return schedule(at); // a step of a wait longer than MAX_TIMER_MS
        issue().then(
          (material) => {
            if (wc.#closed) return;
            wc.#current = material;
            log.info({ spiffe, notAfter: material.notAfter.toISOString() }, 'workload certificate renewed');
            schedule(Date.now() + ttlMs * fraction);
            wc.emit('rotated', material);
          },
          (err: unknown) => {
            if (wc.#closed) return;
            log.error({ err, spiffe, retryMs }, 'workload certificate renewal failed; retrying');
            schedule(Date.now() + retryMs);
          },
        );
      }, Math.min(Math.max(at - Date.now(), 0), MAX_TIMER_MS));
      wc.#timer.unref();
    };
    schedule(Date.now() + ttlMs * fraction);
    return wc;
  }

  /**
   * A fixed identity from `certFile` (leaf, or leaf + chain), `keyFile` and `caFile` (trust
   * root). Never renews. @throws Error naming a missing/unreadable file, if the key does not
   * match the certificate, or if the certificate carries no SPIFFE identity (exactly one URI SAN).
   */
  static async fromFiles(certFile: string, keyFile: string, caFile: string): Promise<WorkloadCertificate> {
    const read = async (file: string, what: string): Promise<string> => {
      try {
        return await readFile(file, 'utf8');
      } catch (err) {
        const code = (err as NodeJS.ErrnoException).code;
        throw new Error(code === 'ENOENT' ? `${what} file ${file} does not exist` : `cannot read ${what} file ${file}: ${(err as Error).message}`, { cause: err });
      }
    };
    const certPem = await read(certFile, 'certificate');
    const keyPem = await read(keyFile, 'key');
    const caPem = await read(caFile, 'CA');
    let cert: X509Certificate;
    try {
      cert = new X509Certificate(certPem);
    } catch (err) {
      throw new Error(`${certFile} is not a PEM certificate: ${(err as Error).message}`, { cause: err });
    }
    let matches: boolean;
    try {
      matches = cert.checkPrivateKey(createPrivateKey(keyPem));
    } catch (err) {
      throw new Error(`${keyFile} is not a PEM private key: ${(err as Error).message}`, { cause: err });
    }
    if (!matches) throw new Error(`${keyFile} does not match ${certFile}`);
    // Peers would refuse it (SPIFFE X509-SVID §2): say so now rather than at every handshake.
    const svid = svidIdentity(cert);
    if ('problem' in svid) throw new Error(`${certFile} carries no SPIFFE identity: ${svid.problem}`);
    return new WorkloadCertificate({ certPem, keyPem, caPem, notAfter: cert.validToDate });
  }

  /**
   * {@link WorkloadCertificate.fromFiles} on `${prefix}-cert.pem` and `${prefix}-key.pem` (as
   * written by `waypoint ca issue --out PREFIX`), trusting `caFile`.
   */
  static async fromPrefix(prefix: string, caFile: string): Promise<WorkloadCertificate> {
    return WorkloadCertificate.fromFiles(`${prefix}-cert.pem`, `${prefix}-key.pem`, caFile);
  }

  /** The material to use now; replaced (not mutated) on each renewal. */
  get current(): CertificateMaterial {
    return this.#current;
  }

  /** The SPIFFE id of the current certificate. Throws when it has none (no URI SAN, or several). */
  get spiffeId(): SpiffeId {
    const svid = svidIdentity(new X509Certificate(this.#current.certPem));
    if ('problem' in svid) throw new Error(`the identity certificate carries no SPIFFE identity: ${svid.problem}`);
    return svid.id;
  }

  /** Stop renewing. Idempotent. */
  close(): void {
    this.#closed = true;
    clearTimeout(this.#timer);
    this.#timer = undefined;
  }
}
