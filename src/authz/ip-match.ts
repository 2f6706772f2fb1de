/**
 * IP and CIDR values of `ipBlocks`, `remoteIpBlocks`, `source.ip`, `remote.ip` and
 * `destination.ip`: a single address means /32 (IPv4) or /128 (IPv6), a CIDR is
 * matched by prefix containment (istio/istio pilot/pkg/security/authz/model/generator.go
 * `AddrStrToCidrRange`, Envoy `CidrRange`). No wildcards.
 */
import ipaddr from 'ipaddr.js';

import { normalizeIpOrCidr } from '../state/index.ts';

/** A parsed request address (IPv4-mapped IPv6 unwrapped), or undefined when absent or not an IP. */
export type ParsedIp = ipaddr.IPv4 | ipaddr.IPv6;

/** Tests a parsed request address. */
export type IpPredicate = (ip: ParsedIp | undefined) => boolean;

/**
 * Parse a policy value (IP or CIDR).
 * @throws Error `bad IP address (x)` / `bad CIDR range (x)` like Istio's `ValidateIPs`.
 */
export function cidrMatcher(value: string): IpPredicate {
  const normalized = normalizeIpOrCidr(value);
  if (normalized === undefined) {
    throw new Error(value.includes('/') ? `bad CIDR range (${value})` : `bad IP address (${value})`);
  }
  const [addr, bits] = normalized.includes('/')
    ? ipaddr.parseCIDR(normalized)
    : ((): [ParsedIp, number] => {
        const ip = ipaddr.parse(normalized);
        return [ip, ip.kind() === 'ipv4' ? 32 : 128];
      })();
  const kind = addr.kind();
  return (ip) => ip !== undefined && ip.kind() === kind && ip.match(addr, bits);
}

/**
 * Parse a request address once per check (`ipaddr.process` unwraps `::ffff:a.b.c.d`).
 * Returns undefined for absent or unparsable input, which then matches no positive IP value.
 */
export function parseRequestIp(text: string | undefined): ParsedIp | undefined {
  if (text === undefined) return undefined;
  // Strict forms only (no `10.1` shorthand), as everywhere else in the project (state/ip.ts).
  if (!ipaddr.IPv4.isValidFourPartDecimal(text) && !(text.includes(':') && ipaddr.IPv6.isValid(text))) return undefined;
  try {
    return ipaddr.process(text);
  } catch {
    return undefined;
  }
}
