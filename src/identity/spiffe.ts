/**
 * SPIFFE identities as Istio ambient uses them: `spiffe://<trust_domain>/ns/<namespace>/sa/<sa>`,
 * carried as the one URI SAN of workload certificates (istio/ztunnel `src/identity/manager.rs`,
 * `src/tls/workload.rs`; spiffe/spiffe `standards/X509-SVID.md` §2).
 */
import type { X509Certificate } from 'node:crypto';

/** A parsed Istio SPIFFE id. `uri` is the exact input string. */
export interface SpiffeId {
  readonly uri: string;
  readonly trustDomain: string;
  readonly namespace: string;
  readonly serviceAccount: string;
}

const PREFIX = 'spiffe://';

/**
 * Parse `spiffe://<td>/ns/<ns>/sa/<sa>`. Like ztunnel's `Identity::from_str`: the scheme must be
 * `spiffe://` and the rest must split on `/` into exactly `<td>`, `ns`, `<ns>`, `sa`, `<sa>`;
 * additionally no part may be empty. No further character-set check (ztunnel does none either).
 * @throws Error naming the input and what is wrong with it.
 */
export function parseSpiffeId(uri: string): SpiffeId {
  const bad = (why: string): Error =>
    new Error(`invalid SPIFFE id ${JSON.stringify(uri)}: ${why} (expected spiffe://<trust-domain>/ns/<namespace>/sa/<service-account>)`);
  if (typeof uri !== 'string' || !uri.startsWith(PREFIX)) throw bad('scheme must be spiffe://');
  const parts = uri.slice(PREFIX.length).split('/');
  if (parts.length !== 5) throw bad(`path has ${parts.length - 1} segments, want 4`);
  const [trustDomain, ns, namespace, sa, serviceAccount] = parts;
  if (ns !== 'ns' || sa !== 'sa') throw bad('path must be /ns/<namespace>/sa/<service-account>');
  if (!trustDomain) throw bad('empty trust domain');
  if (!namespace) throw bad('empty namespace');
  if (!serviceAccount) throw bad('empty service account');
  return { uri, trustDomain, namespace, serviceAccount };
}

/**
 * Build `spiffe://<td>/ns/<ns>/sa/<sa>`.
 * @throws Error (from {@link parseSpiffeId}) if a part is empty or contains `/`.
 */
export function formatSpiffeId(trustDomain: string, namespace: string, serviceAccount: string): string {
  const uri = `${PREFIX}${trustDomain}/ns/${namespace}/sa/${serviceAccount}`;
  parseSpiffeId(uri);
  return uri;
}

/**
 * Split Node's `X509Certificate.subjectAltName` text (`URI:spiffe://a/ns/b/sa/c, DNS:x`) into
 * `[type, value]` pairs. Node prints a value containing `,` `"` `\` `'` or non-printable
 * characters as a JSON string literal (`URI:"spiffe://a,b"`, since the CVE-2021-44532 fix), so a
 * quoted value is decoded with `JSON.parse`; unquoted values run to the next `, `.
 */
function splitSubjectAltName(text: string): Array<[string, string]> {
  const out: Array<[string, string]> = [];
  let i = 0;
  while (i < text.length) {
    const colon = text.indexOf(':', i);
    if (colon < 0) break;
    const type = text.slice(i, colon);
    let value: string;
    let end: number;
    if (text[colon + 1] === '"') {
      end = colon + 2;
      while (end < text.length && text[end] !== '"') end += text[end] === '\\' ? 2 : 1;
      end += 1; // past the closing quote
      try {
        value = JSON.parse(text.slice(colon + 1, end)) as string;
      } catch {
        value = text.slice(colon + 1, end);
      }
    } else {
      end = text.indexOf(', ', colon + 1);
      if (end < 0) end = text.length;
      value = text.slice(colon + 1, end);
    }
    out.push([type, value]);
    i = text.startsWith(', ', end) ? end + 2 : end;
  }
  return out;
}

/**
 * Every `URI:` SAN of `cert` that starts with `spiffe://`, in certificate order (not validated;
 * see {@link svidIdentity}). `[]` for no certificate or no SAN extension.
 */
export function spiffeUrisOf(cert: X509Certificate | undefined): string[] {
  const san = cert?.subjectAltName;
  if (!san) return [];
  return splitSubjectAltName(san)
    .filter(([type, value]) => type === 'URI' && value.startsWith(PREFIX))
    .map(([, value]) => value);
}

/**
 * The identity of an X.509 SVID: its URI SAN, parsed as an Istio SPIFFE id. "An X.509 SVID MUST
 * contain exactly one URI SAN" (spiffe/spiffe standards/X509-SVID.md §2): a certificate with none,
 * or with several (which one would authorization see?), is not one; other SAN types may be present.
 * Returns the id, or why the certificate carries no usable identity. Never throws.
 */
export function svidIdentity(cert: X509Certificate | undefined): { id: SpiffeId } | { problem: string } {
  if (!cert) return { problem: 'no certificate' };
  const uris = splitSubjectAltName(cert.subjectAltName ?? '').filter(([type]) => type === 'URI');
  if (uris.length === 0) return { problem: 'the certificate has no URI SAN (a SPIFFE identity)' };
  if (uris.length > 1) return { problem: `the certificate has ${uris.length} URI SANs; a SPIFFE certificate has exactly one` };
  try {
    return { id: parseSpiffeId(uris[0][1]) };
  } catch (err) {
    return { problem: (err as Error).message };
  }
}

/**
 * Whether `id` belongs to the mesh trust domain or one of its aliases (exact, case-sensitive
 * match, like Envoy's `spiffe://<td>/` prefix matchers built by istiod for waypoints).
 */
export function trustDomainAllowed(id: SpiffeId, trustDomain: string, aliases: readonly string[]): boolean {
  return id.trustDomain === trustDomain || aliases.includes(id.trustDomain);
}
