/**
 * istiod's CA as a {@link CertificateIssuer}: each issuance makes a new key and CSR (ECDSA P-256,
 * empty subject, one URI SAN = the SPIFFE id; istio/ztunnel src/tls/csr.rs) and calls
 * `istio.v1.auth.IstioCertificateService/CreateCertificate` with it (istio/ztunnel
 * src/identity/caclient.rs). The answer is a leaf-first chain ending with the root; the leaf and
 * intermediates are served, the trust roots are the root file's. Plugs into
 * `WorkloadCertificate.begin`/`start`, which renews at half life with jittered backoff.
 */
import { create } from '@bufbuild/protobuf';
import type { ServiceError } from '@grpc/grpc-js';
import { status as GrpcStatus } from '@grpc/grpc-js';
import { checkIssuedChain, createWorkloadCsr, type CertificateIssuer, type IssuedCertificate, type TrustRootFiles } from '../identity/index.ts';
import type { IstiodChannel } from './channel.ts';
import { CREATE_CERTIFICATE_METHOD, IstioCertificateRequestSchema, IstioCertificateResponseSchema } from './proto-xds.ts';

export interface IstiodIssuerOptions {
  readonly channel: IstiodChannel;
  /** The roots the channel trusts: the workload certificate's `caPem`, re-read when they change. */
  readonly roots: TrustRootFiles;
  /** Deadline of one CreateCertificate call (default 10 s). */
  readonly timeoutMs?: number;
  /**
   * `IstioCertificateRequest.metadata` (a google.protobuf.Struct), e.g. ztunnel's
   * `ImpersonatedIdentity`; none by default: a waypoint asks for its own identity.
   */
  readonly metadata?: Readonly<Record<string, string>>;
}

/** `CODE: details` of a gRPC error, or the message of another error. */
export function describeCallError(err: unknown): string {
  const e = err as Partial<ServiceError>;
  if (typeof e.code === 'number' && GrpcStatus[e.code] !== undefined) return `${GrpcStatus[e.code]}: ${e.details || e.message}`;
  return err instanceof Error ? err.message : String(err);
}

const TLS_FAILURE = /certificate|ssl|tls|handshake|altname/i;

/**
 * An istiod call's failure worded by its cause: istiod refused the pod's credentials
 * (UNAUTHENTICATED, PERMISSION_DENIED: the token), the TLS handshake failed (istiod's certificate
 * does not chain to the root file, or names another host), else `otherwise` + the error.
 */
export function describeIstiodFailure(err: unknown, otherwise = 'istiod unreachable: '): string {
  const code = (err as Partial<ServiceError>).code;
  const text = describeCallError(err);
  if (code === GrpcStatus.UNAUTHENTICATED || code === GrpcStatus.PERMISSION_DENIED) {
    return `istiod refused the pod's credentials: ${text} (is the token file the pod's projected service-account token, audience istio-ca?)`;
  }
  if (TLS_FAILURE.test(text)) return `TLS with istiod failed: ${text} (does the root certificate file hold istiod's root?)`;
  return `${otherwise}${text}`;
}

export class IstiodCertificateIssuer implements CertificateIssuer {
  readonly #opts: IstiodIssuerOptions;

  constructor(opts: IstiodIssuerOptions) {
    this.#opts = opts;
  }

  /** The root file's certificates. @throws Error (naming the file) while they were never read. */
  get rootCertPem(): string {
    return this.#opts.roots.require();
  }

  /**
   * Ask istiod for a certificate for `spiffe`, valid `ttlMs` (rounded to seconds).
   * @throws Error `istiod CA at <addr>: <CODE>: <details>` when the call fails, or saying what is
   *   wrong with the chain istiod returned (not for our key, another identity, misordered).
   */
  async issue(spiffe: string, ttlMs: number): Promise<IssuedCertificate> {
    const { channel, roots } = this.#opts;
    // Roots rotated since the last poll: use the new ones for this call already.
    await roots.refresh();
    const csr = await createWorkloadCsr(spiffe);
    const request = create(IstioCertificateRequestSchema, {
      csr: csr.csrPem,
      validityDuration: BigInt(Math.max(1, Math.round(ttlMs / 1000))),
      ...(this.#opts.metadata ? { metadata: { ...this.#opts.metadata } } : {}),
    });
    let chain: string[];
    try {
      const response = await channel.unary(CREATE_CERTIFICATE_METHOD, IstioCertificateRequestSchema, IstioCertificateResponseSchema, request, {
        deadlineMs: this.#opts.timeoutMs ?? 10_000,
      });
      chain = response.certChain;
    } catch (err) {
      throw new Error(`istiod CA at ${channel.target}: ${describeIstiodFailure(err, '')}`, { cause: err });
    }
    let checked: ReturnType<typeof checkIssuedChain>;
    try {
      checked = checkIssuedChain(chain, csr.keyPem, spiffe);
    } catch (err) {
      throw new Error(`istiod CA at ${channel.target}: ${(err as Error).message}`, { cause: err });
    }
    return { certPem: checked.certPem, keyPem: csr.keyPem, notBefore: checked.notBefore, notAfter: checked.notAfter, spiffe };
  }

  onRootsChanged(listener: (rootCertPem: string) => void): () => void {
    const roots = this.#opts.roots;
    roots.on('changed', listener);
    return () => roots.off('changed', listener);
  }
}
