/**
 * Istio's string matching for policy values (istio/api security/v1beta1/authorization_policy.proto
 * `Rule` comment: exact, `prefix*`, `*suffix`, `*`), compiled once into predicates.
 *
 * Follows istio/istio `pilot/pkg/security/authz/matcher/{string,header}.go`:
 * - `StringMatcherWithPrefix(v, prefix)`: `*` → regex `.+` (any non-empty value, the prefix is
 *   not added); `*abc` → suffix `abc` (with a prefix: the regex `<prefix>.*abc`, `abc` left
 *   unescaped as Istio writes it); `abc*` → prefix `<prefix>abc`; otherwise exact `<prefix>abc`.
 *   Only a leading or trailing `*` is special; a `*` elsewhere is a literal character.
 * - `HeaderMatcher(v)`: `*` → header present (even with an empty value); else the string matcher.
 * - `HostMatcher(v)`: as `HeaderMatcher`, case-insensitive.
 * - A header sent as several fields: see {@link anyHeaderValue}.
 * Envoy's regexes are RE2 full matches; they are built here as anchored JavaScript RegExps.
 */

/** Tests one attribute value; `undefined` means the attribute is absent. */
export type ValuePredicate = (value: string | undefined) => boolean;

/**
 * Build a full-match RegExp from an RE2 pattern as Istio writes it.
 * @throws Error when the pattern is not a valid regular expression (Envoy would reject it too).
 */
export function fullMatchRegex(pattern: string): RegExp {
  try {
    return new RegExp(`^(?:${pattern})$`);
  } catch (err) {
    throw new Error(`does not make a valid regular expression (${pattern}): ${(err as Error).message}`);
  }
}

/** RegExp source matching `text` literally. */
export function escapeRegex(text: string): string {
  return text.replace(/[.*+?^${}()|[\]\\/]/g, '\\$&');
}

/**
 * Istio's `StringMatcherWithPrefix(value, prefix)` (prefix `''` = `StringMatcher(value)`).
 * Case-sensitive; absent values never match.
 * @throws Error when a suffix form with a prefix does not make a valid regular expression.
 */
export function stringMatcher(value: string, prefix = ''): ValuePredicate {
  if (value === '*') return (v) => v !== undefined && v.length > 0;
  if (value.startsWith('*')) {
    const suffix = value.slice(1);
    if (prefix !== '') {
      const re = fullMatchRegex(`${escapeRegex(prefix)}.*${suffix}`);
      return (v) => v !== undefined && re.test(v);
    }
    return (v) => v !== undefined && v.endsWith(suffix);
  }
  if (value.endsWith('*')) {
    const start = prefix + value.slice(0, -1);
    return (v) => v !== undefined && v.startsWith(start);
  }
  const exact = prefix + value;
  return (v) => v === exact;
}

/** Istio's `HeaderMatcher`: `*` = present (even empty), else {@link stringMatcher} on the value. */
export function headerMatcher(value: string): ValuePredicate {
  if (value === '*') return (v) => v !== undefined;
  return stringMatcher(value);
}

/**
 * A header matcher over every field of one header, as Envoy matches since GHSA-ghc4-35x6-crw5
 * (CVE-2026-26308; envoyproxy/envoy changelogs/1.37.1.yaml "rbac", and 1.39.0.yaml "http" for every
 * other `HeaderMatcher`): each field's value is tested on its own and the matcher matches when any
 * one does; the comma-joined string is no longer tested. So with `x-role: user` and `x-role: admin`
 * as two fields, `admin` matches and `user,admin` does not, while one field `user,admin` is still
 * one value. Before the fix the joined `user,admin` was the only thing tested, and a DENY on
 * `admin` let the request through. A header that is absent matches nothing; `notValues` negate the
 * result (Istio negates them with RBAC `not_id`), so `notValues: [admin]` holds only when no field is
 * `admin`.
 */
export function anyHeaderValue(m: ValuePredicate): (values: readonly string[] | undefined) => boolean {
  return (values) => {
    if (values === undefined) return false;
    for (let i = 0; i < values.length; i++) if (m(values[i])) return true;
    return false;
  };
}

/**
 * Istio's `HostMatcher`: like {@link headerMatcher}, case-insensitive. The predicate takes the
 * host **already lower-cased** (the caller lowers it once per check).
 */
export function hostMatcher(value: string): ValuePredicate {
  if (value === '*') return (v) => v !== undefined;
  return stringMatcher(value.toLowerCase());
}
