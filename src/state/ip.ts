/**
 * IP address and `host:port` helpers shared by the mesh compiler and the data path.
 *
 * Every address stored in a `MeshSnapshot` goes through {@link normalizeIp}, so lookups are
 * plain string compares: IPv4 dotted quad, IPv6 RFC 5952 (compressed, lower case), and IPv4-mapped
 * IPv6 (`::ffff:10.0.0.1`) unwrapped to IPv4 the way ztunnel's `to_canonical()` does.
 */
import ipaddr from 'ipaddr.js';

type Parsed = ipaddr.IPv4 | ipaddr.IPv6;

/** Strict parse: four-part decimal IPv4 (no `10.1`, no octal `010.0.0.1`) or IPv6 without a zone. */
function parseStrict(text: string): Parsed | undefined {
  // Four-part decimal rejects shorthand (`10.1`), hex and leading zeros (octal to some stacks).
  if (ipaddr.IPv4.isValidFourPartDecimal(text)) return ipaddr.IPv4.parse(text);
  if (text.includes(':') && !text.includes('%') && ipaddr.IPv6.isValid(text)) {
    const v6 = ipaddr.IPv6.parse(text);
    return v6.isIPv4MappedAddress() ? v6.toIPv4Address() : v6;
  }
  return undefined;
}

function render(ip: Parsed): string {
  return ip.kind() === 'ipv6' ? (ip as ipaddr.IPv6).toRFC5952String() : ip.toString();
}

/**
 * Normalise an IP address literal.
 * - IPv4: four-part decimal only (`10.0.0.1`); shorthand (`10.1`) and leading zeros are rejected.
 * - IPv6: compressed lower case (`2001:db8::1`); zone ids (`fe80::1%eth0`) are rejected.
 * - IPv4-mapped IPv6 (`::ffff:10.0.0.1`, `::ffff:a00:1`) becomes the IPv4 address.
 * Returns undefined when `text` is not an IP literal (hostnames, CIDRs, empty strings, brackets).
 */
export function normalizeIp(text: string): string | undefined {
  const ip = parseStrict(text);
  return ip ? render(ip) : undefined;
}

/** `4` or `6` for a normalised address (as returned by {@link normalizeIp}). */
export function ipFamily(ip: string): 4 | 6 {
  return ip.includes(':') ? 6 : 4;
}

/**
 * Normalise an address that may be a CIDR, as ServiceEntry `spec.addresses` allows.
 * `10.0.0.0/24` → `10.0.0.0/24` (host bits cleared), `10.0.0.1/32` or `10.0.0.1` → `10.0.0.1`.
 * Returns undefined when it is neither an IP nor a valid CIDR.
 */
export function normalizeIpOrCidr(text: string): string | undefined {
  const slash = text.indexOf('/');
  if (slash < 0) return normalizeIp(text);
  const base = parseStrict(text.slice(0, slash));
  const bitsText = text.slice(slash + 1);
  if (!base || !/^\d{1,3}$/.test(bitsText)) return undefined;
  const bits = Number(bitsText);
  const max = base.kind() === 'ipv4' ? 32 : 128;
  if (bits > max) return undefined;
  if (bits === max) return render(base);
  const network =
    base.kind() === 'ipv4'
      ? ipaddr.IPv4.networkAddressFromCIDR(`${render(base)}/${bits}`)
      : ipaddr.IPv6.networkAddressFromCIDR(`${render(base)}/${bits}`);
  return `${render(network)}/${bits}`;
}

/**
 * A parsed CIDR for range checks. `contains(ip)` takes a normalised IP (see {@link normalizeIp})
 * and is false for the other address family.
 */
export interface Cidr {
  readonly text: string;
  contains(ip: string): boolean;
}

/** Parse a normalised CIDR (as returned by {@link normalizeIpOrCidr}); undefined when not a CIDR. */
export function parseCidr(text: string): Cidr | undefined {
  if (!text.includes('/')) return undefined;
  let range: [Parsed, number];
  try {
    range = ipaddr.parseCIDR(text);
  } catch {
    return undefined;
  }
  const kind = range[0].kind();
  return {
    text,
    contains(ip: string): boolean {
      const parsed = parseStrict(ip);
      if (!parsed || parsed.kind() !== kind) return false;
      return parsed.match(range);
    },
  };
}

/** `10.0.0.1:80`, or `[2001:db8::1]:80` for IPv6. `ip` should already be normalised. */
export function formatHostPort(ip: string, port: number): string {
  return ip.includes(':') ? `[${ip}]:${port}` : `${ip}:${port}`;
}

/**
 * Parse a CONNECT `:authority` of the form `ip:port` or `[ipv6]:port` (HBONE targets are always
 * IP literals, istio/ztunnel src/proxy/inbound.rs parses them as `SocketAddr`).
 * Strict: the port is 1–65535 in plain decimal (no sign, no leading zeros), IPv6 must be bracketed,
 * IPv4 must be four-part decimal. Hostnames, missing ports and anything else ⇒ undefined.
 * The returned `ip` is normalised (IPv4-mapped IPv6 unwrapped) and can be passed to
 * `MeshSnapshot.resolveTarget`.
 */
export function parseHostPort(authority: string): { ip: string; port: number } | undefined {
  let host: string;
  let portText: string;
  if (authority.startsWith('[')) {
    const close = authority.indexOf(']');
    if (close < 0 || authority[close + 1] !== ':') return undefined;
    host = authority.slice(1, close);
    portText = authority.slice(close + 2);
    if (!host.includes(':')) return undefined; // `[10.0.0.1]:80` is not valid
  } else {
    const colon = authority.lastIndexOf(':');
    if (colon < 0) return undefined;
    host = authority.slice(0, colon);
    portText = authority.slice(colon + 1);
    if (host.includes(':')) return undefined; // unbracketed IPv6
  }
  if (!/^[1-9]\d{0,4}$/.test(portText)) return undefined;
  const port = Number(portText);
  if (port > 65535) return undefined;
  const ip = normalizeIp(host);
  return ip === undefined ? undefined : { ip, port };
}
