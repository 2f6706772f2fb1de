/**
 * A header block as HTTP/1.1 carries it: an ordered flat list `[name, value, name, value, ...]`
 * with the sender's case preserved (Node's `rawHeaders` shape, which `res.writeHead` and undici
 * accept as-is). Lookups compare names case-insensitively. Linear scans are deliberate: blocks are
 * small and this avoids building an object per request.
 */
export class HeaderList {
  /** The flat list itself; mutate through the methods. */
  readonly raw: string[];

  constructor(raw: string[] = []) {
    this.raw = raw;
  }

  /** First value of `name` (lower-case expected), or undefined. */
  get(name: string): string | undefined {
    const raw = this.raw;
    for (let i = 0; i < raw.length; i += 2) if (raw[i].length === name.length && raw[i].toLowerCase() === name) return raw[i + 1];
    return undefined;
  }

  /**
   * Every value of `name` joined with `,` (Envoy's `getAllOfHeaderAsString`, what header matchers
   * and `%REQ(..)%` see), or undefined when absent.
   */
  joined(name: string): string | undefined {
    const raw = this.raw;
    let out: string | undefined;
    for (let i = 0; i < raw.length; i += 2) {
      if (raw[i].length === name.length && raw[i].toLowerCase() === name) out = out === undefined ? raw[i + 1] : `${out},${raw[i + 1]}`;
    }
    return out;
  }

  /** Every value of `name` (lower-case expected), in order. */
  getAll(name: string): string[] {
    const raw = this.raw;
    const out: string[] = [];
    for (let i = 0; i < raw.length; i += 2) if (raw[i].length === name.length && raw[i].toLowerCase() === name) out.push(raw[i + 1]);
    return out;
  }

  /**
   * A record of lower-case name → all values joined with `,` (for code that matches over Node-style
   * header objects); built on each call.
   */
  toRecord(): Record<string, string> {
    const raw = this.raw;
    const out: Record<string, string> = Object.create(null) as Record<string, string>;
    for (let i = 0; i < raw.length; i += 2) {
      const n = raw[i].toLowerCase();
      const prev = out[n];
      out[n] = prev === undefined ? raw[i + 1] : `${prev},${raw[i + 1]}`;
    }
    return out;
  }

  /** Replace every value of `name` with one `value` (appended at the end when absent). */
  set(name: string, value: string): void {
    this.remove(name);
    this.raw.push(name, value);
  }

  /** Add a value, keeping existing ones. */
  append(name: string, value: string): void {
    this.raw.push(name, value);
  }

  /** Remove every value of `name` (lower-case expected). Returns how many were removed. */
  remove(name: string): number {
    const raw = this.raw;
    let w = 0;
    for (let r = 0; r < raw.length; r += 2) {
      if (raw[r].length === name.length && raw[r].toLowerCase() === name) continue;
      raw[w] = raw[r];
      raw[w + 1] = raw[r + 1];
      w += 2;
    }
    const removed = (raw.length - w) / 2;
    raw.length = w;
    return removed;
  }
}

/**
 * Whether `name` (any case) is a hop-by-hop header (RFC 9110 §7.6.1) or one of the legacy ones
 * proxies strip (connection, keep-alive, proxy-connection, proxy-authenticate, proxy-authorization,
 * te, trailer, transfer-encoding, upgrade): they describe one connection and never cross a proxy.
 * Names a `Connection` header lists are hop-by-hop too (see {@link stripHopByHop}).
 */
export function isHopByHop(name: string): boolean {
  // By length, then compared without lower-casing (no string per header).
  switch (name.length) {
    case 2:
      return sameLower(name, 'te');
    case 7:
      return sameLower(name, 'trailer') || sameLower(name, 'upgrade');
    case 10:
      return sameLower(name, 'connection') || sameLower(name, 'keep-alive');
    case 16:
      return sameLower(name, 'proxy-connection');
    case 17:
      return sameLower(name, 'transfer-encoding');
    case 18:
      return sameLower(name, 'proxy-authenticate');
    case 19:
      return sameLower(name, 'proxy-authorization');
    default:
      return false;
  }
}

/** `s` equals `lower` (lower case, same length) ignoring ASCII case. */
function sameLower(s: string, lower: string): boolean {
  for (let i = 0; i < lower.length; i++) {
    const c = s.charCodeAt(i);
    if ((c >= 0x41 && c <= 0x5a ? c | 0x20 : c) !== lower.charCodeAt(i)) return false;
  }
  return true;
}

/** Whether a `Connection` header value names headers to drop (any token but `close` and `keep-alive`). */
export function namesMoreHeaders(connectionValue: string): boolean {
  // The usual values, without splitting.
  const v = connectionValue.length <= 12 ? connectionValue.trim().toLowerCase() : '';
  if (v === 'keep-alive' || v === 'close') return false;
  return connectionExtras(connectionValue) !== undefined;
}

function connectionExtras(connectionValue: string | undefined): Set<string> | undefined {
  let extra: Set<string> | undefined;
  if (connectionValue) {
    for (const token of connectionValue.split(',')) {
      const t = token.trim().toLowerCase();
      if (t && t !== 'close' && t !== 'keep-alive') (extra ??= new Set()).add(t);
    }
  }
  return extra;
}

/**
 * Copy a raw header list without hop-by-hop headers. `connectionValue` is the message's
 * `Connection` header (its tokens name more headers to drop). Returns a new flat list.
 */
export function stripHopByHop(raw: readonly string[], connectionValue: string | undefined): string[] {
  const extra = connectionExtras(connectionValue);
  const out: string[] = [];
  for (let i = 0; i < raw.length; i += 2) {
    const name = raw[i];
    if (isHopByHop(name) || extra?.has(name.toLowerCase())) continue;
    out.push(name, raw[i + 1]);
  }
  return out;
}
