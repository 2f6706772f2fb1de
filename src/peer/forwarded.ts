/**
 * The client address in a `Forwarded` header (RFC 7239) as ztunnel sends it on HBONE CONNECTs:
 * `for=10.0.0.1` or, for IPv6, the quoted bracketed form `for="[fd00::1]"`; a port, if any, is
 * dropped. Only the first element (the original client) is read.
 */
import { normalizeIp } from '../state/index.ts';

/** The first `for=` address of `forwarded`, normalised; undefined when absent or not an IP. */
export function forwardedFor(forwarded: string): string | undefined {
  if (!forwarded) return undefined;
  const first = forwarded.split(',')[0];
  for (const pair of first.split(';')) {
    const eq = pair.indexOf('=');
    if (eq < 0 || pair.slice(0, eq).trim().toLowerCase() !== 'for') continue;
    let v = pair.slice(eq + 1).trim();
    if (v.startsWith('"') && v.endsWith('"') && v.length >= 2) v = v.slice(1, -1);
    if (v.startsWith('[')) {
      const close = v.indexOf(']');
      v = close > 0 ? v.slice(1, close) : v;
    } else if (v.indexOf(':') === v.lastIndexOf(':') && v.includes(':')) {
      v = v.slice(0, v.indexOf(':'));
    }
    return normalizeIp(v);
  }
  return undefined;
}

/** The original client of a tunnel: the first `for=` of its `forwarded` header, else the HBONE peer address. */
export function originalClient(info: { readonly forwarded: string; readonly downstreamAddress: string }): string {
  return forwardedFor(info.forwarded) ?? info.downstreamAddress;
}
