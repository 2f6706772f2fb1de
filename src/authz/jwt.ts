/**
 * Matching on the validated JWT (`requestPrincipals`, `request.auth.*` conditions: istio/istio
 * pilot/pkg/security/authz/model/generator.go): what Envoy's RBAC reads from the
 * `envoy.filters.http.jwt_authn` payload metadata.
 *
 * - Request principals (generator.go `requestPrincipalGenerator`): the value is split at its
 *   **last** `/` into issuer and subject and matched as two string matchers on the `iss` and `sub`
 *   claims (`*` alone: both present and non-empty; `*x` with a `/`: issuer suffix + exact subject;
 *   `*x` without: any issuer + subject suffix; `x*` with a `/`: exact issuer + subject prefix
 *   (`iss/*`: any subject); `x*` without: issuer prefix + any subject; otherwise exact issuer and
 *   exact subject, empty when there is no `/`).
 * - Claims (`request.auth.claims[a][b]`, `audiences` = `aud`, `presenter` = `azp`): a string value
 *   is matched as is, a list matches when any string element matches (Istio's list-or-string
 *   metadata matcher). Top-level space-delimited claims (`scope`, `permission`, plus the
 *   RequestAuthentication's `spaceDelimitedClaims`) are split on spaces first, as Envoy's
 *   `normalize_payload_in_metadata` does. Other value types never match.
 */
import { stringMatcher, type ValuePredicate } from './string-match.ts';
import type { JwtInfo } from './types.ts';

/**
 * Claims Istio always treats as space-delimited (istio/istio
 * pilot/pkg/security/authn/policy_applier.go `buildSpaceDelimitedClaims`).
 */
const ALWAYS_SPACE_DELIMITED: readonly string[] = ['scope', 'permission'];

/** Tests the request's JWT; undefined = no (valid) token. */
export type JwtPredicate = (jwt: JwtInfo | undefined) => boolean;

const nonEmpty: ValuePredicate = (v) => v !== undefined && v.length > 0;

function stringClaim(jwt: JwtInfo, name: string): string | undefined {
  const v = jwt.payload[name];
  return typeof v === 'string' ? v : undefined;
}

/** Compile one `requestPrincipals` / `request.auth.principal` value. */
export function requestPrincipalMatcher(value: string): JwtPredicate {
  const idx = value.lastIndexOf('/');
  const found = idx >= 0;
  const iss = found ? value.slice(0, idx) : value;
  const sub = found ? value.slice(idx + 1) : '';
  let matchIss: ValuePredicate;
  let matchSub: ValuePredicate;
  if (value === '*') {
    matchIss = nonEmpty;
    matchSub = nonEmpty;
  } else if (value.startsWith('*')) {
    if (found) {
      matchIss = iss === '*' ? nonEmpty : suffix(iss.slice(1));
      matchSub = exact(sub);
    } else {
      matchIss = nonEmpty;
      matchSub = suffix(value.slice(1));
    }
  } else if (value.endsWith('*')) {
    if (found) {
      matchIss = exact(iss);
      matchSub = sub === '*' ? nonEmpty : prefix(sub.slice(0, -1));
    } else {
      matchIss = prefix(value.slice(0, -1));
      matchSub = nonEmpty;
    }
  } else {
    matchIss = exact(iss);
    matchSub = exact(sub);
  }
  return (jwt) => jwt !== undefined && matchIss(stringClaim(jwt, 'iss')) && matchSub(stringClaim(jwt, 'sub'));
}

// Envoy's exact/prefix/suffix string matchers; `exact('')` matches an empty (present) claim.
function exact(text: string): ValuePredicate {
  return (v) => v === text;
}
function prefix(text: string): ValuePredicate {
  return (v) => v !== undefined && v.startsWith(text);
}
function suffix(text: string): ValuePredicate {
  return (v) => v !== undefined && v.endsWith(text);
}

/**
 * Compile a claim matcher: `path` is the claim path (`['groups']`, `['nested', 'key1']`), `values`
 * are ORed string-matcher values.
 */
export function claimMatcher(path: readonly string[], values: readonly string[]): JwtPredicate {
  const preds = values.map((v) => stringMatcher(v));
  const test = (s: string) => preds.some((p) => p(s));
  const top = path[0];
  return (jwt) => {
    if (jwt === undefined) return false;
    let v: unknown = jwt.payload;
    for (const key of path) {
      if (v === null || typeof v !== 'object' || Array.isArray(v)) return false;
      v = (v as Record<string, unknown>)[key];
    }
    if (typeof v === 'string') {
      if (path.length === 1 && (ALWAYS_SPACE_DELIMITED.includes(top) || jwt.spaceDelimitedClaims?.includes(top))) {
        return v.split(' ').some((part) => part !== '' && test(part));
      }
      return test(v);
    }
    if (Array.isArray(v)) return v.some((item) => typeof item === 'string' && test(item));
    return false;
  };
}

/**
 * Parse the bracket part of `request.auth.claims[a][b]` into `['a', 'b']` (Istio
 * `extractNameInNestedBrackets`).
 * @throws Error when it is not one or more non-empty `[name]` groups.
 */
export function parseClaimPath(brackets: string): string[] {
  const m = /^(\[[^\[\]]+\])+$/.exec(brackets);
  if (!m) throw new Error(`bad key: ${JSON.stringify(brackets)} should be one or more [name] groups, e.g. [groups] or [a][b]`);
  return brackets.slice(1, -1).split('][');
}
