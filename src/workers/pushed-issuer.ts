/**
 * A worker's certificate issuer: the primary holds the identity (its CA or, later, a remote one) and
 * pushes each certificate it gets as PEM; the worker's renewing certificate (identity's
 * WorkloadCertificate) "issues" by taking the pushed one. A renewal waits for a certificate newer
 * than the one it has: the primary renews first (it started first, on the same schedule), and when
 * its renewal is retried the worker waits for it rather than renewing to the same certificate.
 */
import type { PushedCertificate } from './protocol.ts';

export class PushedIssuer {
  readonly trustDomain: string;
  rootCertPem: string;
  #latest: PushedCertificate;
  /** The certificate the last `issue` returned. */
  #given: PushedCertificate | undefined;
  #waiting: ((c: PushedCertificate) => void)[] = [];
  readonly #rootListeners = new Set<(rootCertPem: string) => void>();

  constructor(trustDomain: string, first: PushedCertificate) {
    this.trustDomain = trustDomain;
    this.rootCertPem = first.caPem;
    this.#latest = first;
  }

  /** A certificate from the primary: a renewal, or the same leaf under new trust roots. */
  push(c: PushedCertificate): void {
    const rootsOnly = c.certPem === this.#latest.certPem;
    this.#latest = c;
    const rootsChanged = c.caPem !== this.rootCertPem;
    this.rootCertPem = c.caPem;
    if (rootsOnly) {
      if (rootsChanged) for (const l of this.#rootListeners) l(c.caPem);
      return;
    }
    const waiting = this.#waiting;
    this.#waiting = [];
    for (const w of waiting) w(c);
  }

  /** The trust roots changed without a new leaf (identity's CertificateIssuer contract). */
  onRootsChanged(listener: (rootCertPem: string) => void): () => void {
    this.#rootListeners.add(listener);
    return () => this.#rootListeners.delete(listener);
  }

  /** The primary's latest certificate, once it is not the one given last time. `spiffe` and `ttlMs` are the primary's business. */
  async issue(_spiffe: string, _ttlMs: number): Promise<{ certPem: string; keyPem: string; notBefore: Date; notAfter: Date; spiffe: string }> {
    const c = this.#latest !== this.#given ? this.#latest : await new Promise<PushedCertificate>((r) => this.#waiting.push(r));
    this.#given = c;
    return { certPem: c.certPem, keyPem: c.keyPem, notBefore: new Date(0), notAfter: new Date(c.notAfter), spiffe: _spiffe };
  }
}
