/**
 * {@link HeaderLookup} adapters: request headers as the engine sees them, one list of values per
 * lower-case name, each header field's value on its own and in arrival order (HTTP/1.1 lines and
 * HTTP/2 fields alike), so `request.headers[...]` conditions can test every value by itself as
 * Envoy's header matcher does since GHSA-ghc4-35x6-crw5 (see `string-match.ts`
 * {@link anyHeaderValue}). `get` keeps the comma-joined form for callers that read one string
 * (JWT extraction).
 *
 * `cookie` is the exception: its fields are one value joined with `; `, as RFC 9113 §8.2.3
 * requires of HTTP/2 cookie crumbs before any other use (an HTTP/1.1 client sends one line).
 */
import type { HeaderLookup } from './types.ts';

const COOKIE = 'cookie';

function join(lowerName: string, values: readonly string[]): string {
  return values.join(lowerName === COOKIE ? '; ' : ',');
}

/** Cookie crumbs as one value; every other header as its fields. */
function asValues(lowerName: string, values: string[]): readonly string[] {
  return lowerName === COOKIE && values.length > 1 ? [values.join('; ')] : values;
}

/**
 * Over a flat raw list `[name, value, name, value, ...]` (Node's `rawHeaders`, `HeaderList.raw`).
 * Linear scan per lookup: a request has few headers and only rules that name a header look one up.
 */
export function headersFromRaw(raw: readonly string[]): HeaderLookup {
  const values = (lowerName: string): readonly string[] | undefined => {
    let found: string[] | undefined;
    for (let i = 0; i < raw.length; i += 2) {
      const name = raw[i];
      if (name.length !== lowerName.length || name.toLowerCase() !== lowerName) continue;
      (found ??= []).push(raw[i + 1]);
    }
    return found && asValues(lowerName, found);
  };
  return {
    values,
    get(lowerName) {
      const v = values(lowerName);
      return v && join(lowerName, v);
    },
  };
}
