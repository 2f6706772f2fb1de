/**
 * Trust-domain aliases in policy values, as istio/istio
 * `pilot/pkg/security/trustdomain/{bundle,util}.go` rewrites them before generating matchers.
 * The bundle is `[meshConfig.trustDomain, ...meshConfig.trustDomainAliases]`.
 */

/** Istio's `constants.DefaultClusterLocalDomain`: a principal written with it means "this mesh". */
const CLUSTER_LOCAL = 'cluster.local';

function prefixMatch(a: string, pattern: string): boolean {
  return pattern.endsWith('*') && a.startsWith(pattern.slice(0, -1));
}

function suffixMatch(a: string, pattern: string): boolean {
  return pattern.startsWith('*') && a.endsWith(pattern.slice(1));
}

/** Istio `stringMatch`: exact, `*`, or a prefix/suffix pattern on either side. */
function stringMatch(a: string, list: readonly string[]): boolean {
  return list.some((s) => a === s || s === '*' || prefixMatch(a, s) || prefixMatch(s, a) || suffixMatch(a, s) || suffixMatch(s, a));
}

/**
 * Istio `Bundle.ReplaceTrustDomainAliases` for `principals`/`notPrincipals`/`source.principal`
 * values (written without `spiffe://`). A value of exactly 5 `/`-separated parts whose trust
 * domain is not `*` and matches a bundle member (or is the literal `cluster.local`) becomes one
 * value per bundle member (a member matched by a `*`-prefixed trust domain keeps the value as
 * written); every other value is kept as is. Order follows the bundle; duplicates are dropped.
 */
export function replaceTrustDomainAliases(principals: readonly string[], bundle: readonly string[]): string[] {
  const out: string[] = [];
  for (const principal of principals) {
    const parts = principal.split('/');
    if (parts.length !== 5 || parts[0] === '*') {
      out.push(principal);
      continue;
    }
    const td = parts[0];
    if (!stringMatch(td, bundle) && td !== CLUSTER_LOCAL) {
      out.push(principal);
      continue;
    }
    const expanded: string[] = [];
    for (const member of bundle) {
      const next = suffixMatch(member, td) ? principal : [member, ...parts.slice(1)].join('/');
      if (!expanded.includes(next)) expanded.push(next);
    }
    out.push(...expanded);
  }
  return out;
}

/**
 * Istio `Bundle.ExpandTrustDomainAliases` for `trustDomains`/`source.trustDomain` values: a value
 * equal to a bundle member becomes every member; duplicates are dropped.
 */
export function expandTrustDomainAliases(values: readonly string[], bundle: readonly string[]): string[] {
  const out: string[] = [];
  for (const v of values) for (const x of bundle.includes(v) ? bundle : [v]) if (!out.includes(x)) out.push(x);
  return out;
}
