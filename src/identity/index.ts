/**
 * Workload identity: SPIFFE ids as Istio ambient uses them (the URI SAN of workload certificates),
 * the waypoint's own renewing certificate, and a local mesh CA standing in for istiod's.
 */
export { LocalCa, defaultCaDir, parseTtl, ROOT_CERT_FILE, ROOT_KEY_FILE, defaultStateDir, readTrustRoot } from './ca.ts';
export { WorkloadCertificate } from './workload-certificate.ts';
export { parseSpiffeId, type SpiffeId, spiffeUrisOf, svidIdentity, trustDomainAllowed } from './spiffe.ts';
