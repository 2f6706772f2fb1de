/**
 * Workload identity: SPIFFE ids as Istio ambient uses them (the URI SAN of workload certificates),
 * the waypoint's own renewing certificate, a local mesh CA standing in for istiod's, CSRs for
 * istiod's CA and trust-root files re-read when they change.
 */
export { LocalCa, defaultCaDir, parseTtl, ROOT_CERT_FILE, ROOT_KEY_FILE, defaultStateDir, readTrustRoot, type CertificateIssuer, type IssuedCertificate } from './ca.ts';
export { WorkloadCertificate, type CertificateMaterial, type RenewalOptions } from './workload-certificate.ts';
export { checkIssuedChain, createWorkloadCsr, splitPemCertificates, type WorkloadCsr } from './csr.ts';
export { ISTIO_ROOT_HINT, TrustRootFiles } from './trust-roots.ts';
export { parseSpiffeId, type SpiffeId, spiffeUrisOf, svidIdentity, trustDomainAllowed } from './spiffe.ts';
