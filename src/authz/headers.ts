/**
 * {@link HeaderLookup} adapters: request headers as `request.headers[...]` conditions see them,
 * every value of a name joined with `,` and no space (authz.md §5.5; Envoy's header matchers run
 * on the concatenated value). Names compare case-insensitively.
 */
import type { HeaderLookup } from './types.ts';

/**
 * Over a flat raw list `[name, value, name, value, ...]` (Node's `rawHeaders`, `HeaderList.raw`).
 * Linear scan per lookup: a request has few headers and only rules that name a header look one up.
 */
export function headersFromRaw(raw: readonly string[]): HeaderLookup {
  return {
    get(lowerName: string): string | undefined {
      let joined: string | undefined;
      for (let i = 0; i < raw.length; i += 2) {
        const name = raw[i];
        if (name.length !== lowerName.length || name.toLowerCase() !== lowerName) continue;
        joined = joined === undefined ? raw[i + 1] : `${joined},${raw[i + 1]}`;
      }
      return joined;
    },
  };
}

/** Over a record of name → value or values (names in any case); built once, then O(1) lookups. */
export function headersFromRecord(headers: Readonly<Record<string, string | readonly string[] | undefined>>): HeaderLookup {
  const joined = new Map<string, string>();
  for (const [name, value] of Object.entries(headers)) {
    if (value === undefined) continue;
    const lower = name.toLowerCase();
    const text = typeof value === 'string' ? value : value.join(',');
    const prev = joined.get(lower);
    joined.set(lower, prev === undefined ? text : `${prev},${text}`);
  }
  return { get: (lowerName: string) => joined.get(lowerName) };
}
