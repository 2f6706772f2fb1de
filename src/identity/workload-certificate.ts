/**
 * The waypoint's own workload certificate: issued by a {@link CertificateIssuer} (the local CA, or
 * istiod's) and renewed at half its lifetime, as ztunnel refreshes at half of validity (ztunnel
 * `src/tls/certificate.rs` `refresh_at`), retrying failures with jittered backoff while the valid
 * certificate keeps serving; or fixed, read from PEM files.
 */
import { EventEmitter } from 'node:events';
import { X509Certificate, createPrivateKey } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import type { CertificateIssuer } from './ca.ts';
import { svidIdentity, type SpiffeId } from './spiffe.ts';
import { Backoff, log } from '../util/index.ts';

/** The key material to put in a TLS context: leaf PEM (+ intermediates), its PKCS#8 key, and the trust root(s). */
export interface CertificateMaterial {
  /** The leaf, then any intermediates (leaf first), as presented to peers. */
  readonly certPem: string;
  readonly keyPem: string;
  readonly caPem: string;
  readonly notAfter: Date;
}

/**
 * Events of {@link WorkloadCertificate}: `'rotated'` carries the new {@link WorkloadCertificate.current}
 * (a renewed certificate, or new trust roots); `'issueFailed'` each failed issuance.
 */
export type WorkloadCertificateEvents = { rotated: [CertificateMaterial]; issueFailed: [Error] };

/** How {@link WorkloadCertificate.start} / {@link WorkloadCertificate.begin} renew. */
export interface RenewalOptions {
  /** Fraction of the lifetime after which to renew (default 0.5, ztunnel's). */
  readonly renewFraction?: number;
  /** First retry delay after a failed issuance (jittered, doubling; default 1 s). */
  readonly retryMs?: number;
  /** Longest retry delay (default 30 s). */
  readonly maxRetryMs?: number;
}

/** setTimeout's maximum delay; longer waits are done in steps. */
const MAX_TIMER_MS = 2 ** 31 - 1;

/**
 * A workload identity whose {@link WorkloadCertificate.current} material stays valid.
 * {@link WorkloadCertificate.start} / {@link WorkloadCertificate.begin} issue and renew;
 * {@link WorkloadCertificate.fromPrefix} holds fixed files. Listen to `'rotated'` to rebuild TLS
 * contexts.
 */
export class WorkloadCertificate extends EventEmitter<WorkloadCertificateEvents> {
  #current: CertificateMaterial | undefined;
  #timer: NodeJS.Timeout | undefined;
  #closed = false;
  #failures = 0;
  #lastError: Error | undefined;
  #unsubscribe: (() => void) | undefined;
  #ready: Promise<void> = Promise.resolve();
  /** Rejects {@link ready} when closed before the first certificate of {@link begin}. */
  #abandon: ((err: Error) => void) | undefined;

  private constructor(current: CertificateMaterial | undefined) {
    super();
    this.#current = current;
  }

  /**
   * Issue a certificate for `spiffe` from `ca` valid for `ttlMs`, and renew it every
   * `ttlMs * renewFraction` after issuance (sooner when the CA issued it for less). A failed renewal is logged and retried with jittered
   * exponential backoff (`retryMs` doubling up to `maxRetryMs`); the valid certificate stays
   * current meanwhile. New trust roots of `ca` (`onRootsChanged`) replace `caPem` at once.
   * Timers are `unref`ed. @throws whatever the first `ca.issue` throws (bad SPIFFE id, foreign
   * trust domain, CA unreachable).
   */
  static async start(ca: CertificateIssuer, spiffe: string, ttlMs: number, opts: RenewalOptions = {}): Promise<WorkloadCertificate> {
    const wc = new WorkloadCertificate(undefined);
    const renew = wc.#renewer(ca, spiffe, ttlMs, opts);
    wc.#install(await renew.issue());
    wc.#watchRoots(ca);
    renew.scheduleRenewal();
    return wc;
  }

  /**
   * Like {@link start}, but returns at once and retries the first issuance too (jittered
   * backoff, each failure logged and counted) until it succeeds: for a CA that may be unreachable
   * when the proxy starts (istiod). {@link ready} resolves with the first certificate;
   * {@link current} throws before. @throws Error for invalid options only.
   */
  static begin(ca: CertificateIssuer, spiffe: string, ttlMs: number, opts: RenewalOptions = {}): WorkloadCertificate {
    const wc = new WorkloadCertificate(undefined);
    const renew = wc.#renewer(ca, spiffe, ttlMs, opts);
    wc.#ready = new Promise<void>((resolve, reject) => {
      renew.scheduleFirst(() => {
        wc.#watchRoots(ca);
        resolve();
      }, reject);
    });
    wc.#ready.catch(() => {}); // closed before the first certificate: only awaiting callers hear of it
    return wc;
  }

  /** Issuance and its timers, shared by {@link start} and {@link begin}. */
  #renewer(ca: CertificateIssuer, spiffe: string, ttlMs: number, opts: RenewalOptions) {
    const fraction = opts.renewFraction ?? 0.5;
    if (!(fraction > 0 && fraction < 1)) throw new Error(`renewFraction must be in (0, 1), got ${fraction}`);
    const backoff = new Backoff({ initialMs: opts.retryMs ?? 1_000, maxMs: opts.maxRetryMs ?? 30_000 });
    const issue = async (): Promise<CertificateMaterial> => {
      const c = await ca.issue(spiffe, ttlMs);
      return { certPem: c.certPem, keyPem: c.keyPem, caPem: ca.rootCertPem, notAfter: c.notAfter };
    };
    const schedule = (at: number, run: () => void): void => {
      if (this.#closed) return;
      this.#timer = setTimeout(() => (Date.now() < at ? schedule(at, run) : run()), Math.min(Math.max(at - Date.now(), 0), MAX_TIMER_MS));
      this.#timer.unref();
    };
    const failed = (err: unknown, what: string): number => {
      const error = err instanceof Error ? err : new Error(String(err));
      this.#failures += 1;
      this.#lastError = error;
      const retryMs = backoff.next();
      const expired = this.#current !== undefined && this.#current.notAfter.getTime() <= Date.now();
      log.error({ error: error.message, spiffe, retryMs, failures: backoff.attempts, ...(expired ? { expiredAt: this.#current!.notAfter.toISOString() } : {}) }, `workload certificate ${what} failed; retrying`);
      this.emit('issueFailed', error);
      return retryMs;
    };
    /** Issue until it works (retrying with backoff), then schedule the renewal and call `done`. */
    const attempt = (what: 'issuance' | 'renewal', done: (material: CertificateMaterial) => void): void =>
      void issue().then(
        (material) => {
          if (this.#closed) return;
          backoff.reset();
          this.#install(material);
          log.info({ spiffe, notAfter: material.notAfter.toISOString() }, `workload certificate ${what === 'renewal' ? 'renewed' : 'issued'}`);
          scheduleRenewal();
          done(material);
        },
        (err: unknown) => {
          if (!this.#closed) schedule(Date.now() + failed(err, what), () => attempt(what, done));
        },
      );
    // A CA may issue for less than asked (istiod caps the lifetime): renew within what was given
    // (give or take the second X.509 rounds notAfter down to).
    const scheduleRenewal = (): void => {
      const lifetime = Math.min(ttlMs, (this.#current?.notAfter.getTime() ?? Infinity) + 1_000 - Date.now());
      schedule(Date.now() + Math.max(lifetime, 0) * fraction, () => attempt('renewal', (m) => this.emit('rotated', m)));
    };
    const scheduleFirst = (done: () => void, abandoned: (err: Error) => void): void => {
      this.#abandon = abandoned;
      attempt('issuance', done);
    };
    return { issue, scheduleRenewal, scheduleFirst };
  }

  #install(material: CertificateMaterial): void {
    this.#current = material;
    this.#lastError = undefined;
  }

  /** New trust roots of the issuer: same certificate and key, new `caPem`. */
  #watchRoots(ca: CertificateIssuer): void {
    this.#unsubscribe = ca.onRootsChanged?.((caPem) => {
      const cur = this.#current;
      if (this.#closed || cur === undefined || cur.caPem === caPem) return;
      const material = { ...cur, caPem };
      this.#current = material;
      this.emit('rotated', material);
    });
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

  /**
   * The material to use now; replaced (not mutated) on each renewal.
   * @throws Error before the first certificate of {@link begin} (with the last issuance error).
   */
  get current(): CertificateMaterial {
    if (this.#current === undefined) {
      throw new Error(`no workload certificate yet${this.#lastError ? `: ${this.#lastError.message}` : ''}`);
    }
    return this.#current;
  }

  /** True once a certificate is held (always, except before the first one of {@link begin}). */
  get issued(): boolean {
    return this.#current !== undefined;
  }

  /** Resolves when the first certificate is held; rejects if closed before. */
  get ready(): Promise<void> {
    return this.#ready;
  }

  /** Failed issuances and renewals so far. */
  get failures(): number {
    return this.#failures;
  }

  /** The SPIFFE id of the current certificate. Throws when it has none (no URI SAN, or several). */
  get spiffeId(): SpiffeId {
    const svid = svidIdentity(new X509Certificate(this.current.certPem));
    if ('problem' in svid) throw new Error(`the identity certificate carries no SPIFFE identity: ${svid.problem}`);
    return svid.id;
  }

  /** Stop renewing (and retrying a first issuance: {@link ready} then rejects). Idempotent. */
  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    clearTimeout(this.#timer);
    this.#timer = undefined;
    this.#unsubscribe?.();
    if (this.#current === undefined) this.#abandon?.(new Error('workload certificate closed before it was issued'));
  }
}
