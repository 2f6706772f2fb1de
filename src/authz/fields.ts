/**
 * One matcher generator per attribute, as istio/istio
 * `pilot/pkg/security/authz/model/generator.go` builds Envoy RBAC matchers for them. Each turns
 * one policy value into a {@link Predicate}; `httpOnly` attributes cannot be evaluated on a TCP
 * connection (generator.go's `"... is HTTP only"` errors; istio/istio
 * pilot/pkg/security/authz/model/model.go `checkError`).
 */
import { PSEUDO_HEADERS, type Predicate } from './context.ts';
import { cidrMatcher } from './ip-match.ts';
import { claimMatcher, parseClaimPath, requestPrincipalMatcher } from './jwt.ts';
import { compilePathTemplate, isPathTemplate } from './path-template.ts';
import { CLAIMS_KEY, EXPERIMENTAL_KEY, HEADER_KEY } from './policy.ts';
import { anyHeaderValue, escapeRegex, fullMatchRegex, headerMatcher, hostMatcher, stringMatcher } from './string-match.ts';

/** Builds matchers for one attribute key. */
export interface Generator {
  readonly httpOnly: boolean;
  /** @throws Error when the value cannot be turned into a matcher (reported as a config error). */
  value(value: string): Predicate;
}

/** Context a few generators need. */
export interface GeneratorScope {
  /** The policy's namespace: `serviceAccounts: [sa]` means `<policy ns>/sa`. */
  readonly policyNamespace: string;
}

const SPIFFE = 'spiffe://';

/** `principals`, `source.principal`: `spiffe://` is prepended (generator.go `srcPrincipalGenerator`). */
const principal: Generator = {
  httpOnly: false,
  value(v) {
    const m = stringMatcher(v, SPIFFE);
    return (ctx) => m(ctx.attrs.principal);
  },
};

/**
 * `namespaces`, `source.namespace`: the regex `.*` + `/ns/<v>/` + `.*` over the peer URI, each `*`
 * of the value becoming `.*` (generator.go `srcNamespaceGenerator`): `foo` does not match `foobar`.
 */
const namespace: Generator = {
  httpOnly: false,
  value(v) {
    const re = fullMatchRegex(`.*/ns/${v.replaceAll('*', '.*')}/.*`);
    return (ctx) => ctx.attrs.principal !== undefined && re.test(ctx.attrs.principal);
  },
};

/**
 * `serviceAccounts`, `source.serviceAccount`: `<ns>/<sa>` or `<sa>` in the policy's namespace
 * (generator.go `serviceAccountRegex`).
 */
function serviceAccount(scope: GeneratorScope): Generator {
  return {
    httpOnly: false,
    value(v) {
      const slash = v.indexOf('/');
      const ns = slash < 0 ? scope.policyNamespace : v.slice(0, slash);
      const sa = slash < 0 ? v : v.slice(slash + 1);
      const re = fullMatchRegex(`spiffe://.+/ns/${ns}/(.+/|)sa/${sa}(/.+)?`);
      return (ctx) => ctx.attrs.principal !== undefined && re.test(ctx.attrs.principal);
    },
  };
}

/**
 * `trustDomains`, `source.trustDomain`: `*` → any `spiffe://` URI; `td` → URI
 * starts with `spiffe://td/`; `pre*` / `*suf` → the wildcard stays inside the trust-domain segment.
 */
const trustDomain: Generator = {
  httpOnly: false,
  value(v) {
    let re: RegExp;
    if (v === '*') re = /^spiffe:\/\//;
    else if (v.startsWith('*')) re = new RegExp(`^spiffe://[^/]*${escapeRegex(v.slice(1))}/`);
    else if (v.endsWith('*')) re = new RegExp(`^spiffe://${escapeRegex(v.slice(0, -1))}[^/]*/`);
    else re = new RegExp(`^spiffe://${escapeRegex(v)}/`);
    return (ctx) => ctx.attrs.principal !== undefined && re.test(ctx.attrs.principal);
  },
};

/** `requestPrincipals`, `request.auth.principal` (generator.go `requestPrincipalGenerator`). */
const requestPrincipal: Generator = {
  httpOnly: true,
  value(v) {
    const m = requestPrincipalMatcher(v);
    return (ctx) => m(ctx.attrs.jwt);
  },
};

/** `ipBlocks`, `source.ip`: the direct peer address (Envoy `direct_remote_ip`). */
const sourceIp: Generator = {
  httpOnly: false,
  value(v) {
    const m = cidrMatcher(v);
    return (ctx) => m(ctx.sourceIp);
  },
};

/** `remoteIpBlocks`, `remote.ip` (Envoy `remote_ip`; also on TCP). */
const remoteIp: Generator = {
  httpOnly: false,
  value(v) {
    const m = cidrMatcher(v);
    return (ctx) => m(ctx.remoteIp);
  },
};

/** `destination.ip`. */
const destinationIp: Generator = {
  httpOnly: false,
  value(v) {
    const m = cidrMatcher(v);
    return (ctx) => m(ctx.destinationIp);
  },
};

/** `ports`, `destination.port`: decimal, exact (generator.go `destPortGenerator`). */
const destinationPort: Generator = {
  httpOnly: false,
  value(v) {
    const port = Number(v);
    return (ctx) => ctx.attrs.destinationPort === port;
  },
};

/** `hosts`: `:authority`, case-insensitive, `*` = present (generator.go `hostGenerator`). */
const host: Generator = {
  httpOnly: true,
  value(v) {
    const m = hostMatcher(v);
    return (ctx) => m(ctx.hostLower);
  },
};

/** `methods`: `:method`, case-sensitive (generator.go `methodGenerator`). */
const method: Generator = {
  httpOnly: true,
  value(v) {
    const m = headerMatcher(v);
    return (ctx) => m(ctx.attrs.method);
  },
};

/** `paths`: the normalized path without query; `{*}`/`{**}` templates (generator.go `pathGenerator`). */
const path: Generator = {
  httpOnly: true,
  value(v) {
    if (isPathTemplate(v)) {
      const re = compilePathTemplate(v);
      return (ctx) => ctx.attrs.path !== undefined && re.test(ctx.attrs.path);
    }
    const m = stringMatcher(v);
    return (ctx) => m(ctx.attrs.path);
  },
};

/** `connection.sni` (generator.go `connSNIGenerator`). */
const sni: Generator = {
  httpOnly: false,
  value(v) {
    const m = stringMatcher(v);
    return (ctx) => m(ctx.attrs.sni);
  },
};

/**
 * `request.headers[<name>]` (generator.go `requestHeaderGenerator`): every field of the header is
 * tested on its own ({@link anyHeaderValue}); `:authority`, `:method` and `:path` are one value
 * each.
 */
function requestHeader(name: string): Generator {
  const lower = name.toLowerCase();
  return {
    httpOnly: true,
    value(v) {
      const m = headerMatcher(v);
      if (PSEUDO_HEADERS.has(lower)) return (ctx) => m(ctx.pseudoHeader(lower));
      const any = anyHeaderValue(m);
      return (ctx) => any(ctx.headerValues(lower));
    },
  };
}

/** `request.auth.claims[...]`, `request.auth.audiences` (`aud`), `request.auth.presenter` (`azp`). */
function claim(path: readonly string[]): Generator {
  return {
    httpOnly: true,
    value(v) {
      const m = claimMatcher(path, [v]);
      return (ctx) => m(ctx.attrs.jwt);
    },
  };
}

/**
 * `experimental.envoy.filters.<filter>[<key>]` (generator.go `envoyFilterGenerator`): dynamic metadata of
 * `<filter>` under `<key>`; a value `[v]` matches a list holding `v`, otherwise a string value.
 */
function experimental(key: string): Generator {
  const body = key.slice('experimental.'.length, key.endsWith(']') ? -1 : undefined);
  const open = body.indexOf('[');
  const filter = body.slice(0, open);
  const metaKey = body.slice(open + 1);
  return {
    httpOnly: false,
    value(v) {
      const list = v.startsWith('[') && v.endsWith(']');
      const m = stringMatcher(list ? v.replace(/^[[\]]+|[[\]]+$/g, '') : v);
      return (ctx) => {
        const value = ctx.attrs.metadata?.[filter]?.[metaKey];
        if (list) return Array.isArray(value) && value.some((item) => typeof item === 'string' && m(item));
        return typeof value === 'string' && m(value);
      };
    },
  };
}

/** Generators of the `from.source` fields, by field name (without `not`). */
export function sourceGenerators(scope: GeneratorScope): Readonly<Record<string, Generator>> {
  return {
    principals: principal,
    requestPrincipals: requestPrincipal,
    namespaces: namespace,
    serviceAccounts: serviceAccount(scope),
    trustDomains: trustDomain,
    ipBlocks: sourceIp,
    remoteIpBlocks: remoteIp,
  };
}

/** Generators of the `to.operation` fields, by field name (without `not`). */
export const OPERATION_GENERATORS: Readonly<Record<string, Generator>> = {
  hosts: host,
  methods: method,
  paths: path,
  ports: destinationPort,
};

/**
 * The generator of a `when` key (validated by `policy.ts`).
 * @throws Error for a key the model does not know (validation rejects those first).
 */
export function conditionGenerator(key: string, scope: GeneratorScope): Generator {
  switch (key) {
    case 'source.ip':
      return sourceIp;
    case 'remote.ip':
      return remoteIp;
    case 'source.namespace':
      return namespace;
    case 'source.principal':
      return principal;
    case 'source.serviceAccount':
      return serviceAccount(scope);
    case 'source.trustDomain':
      return trustDomain;
    case 'request.auth.principal':
      return requestPrincipal;
    case 'request.auth.audiences':
      return claim(['aud']);
    case 'request.auth.presenter':
      return claim(['azp']);
    case 'destination.ip':
      return destinationIp;
    case 'destination.port':
      return destinationPort;
    case 'connection.sni':
      return sni;
  }
  if (key.startsWith(HEADER_KEY)) return requestHeader(key.slice(HEADER_KEY.length + 1, -1));
  if (key.startsWith(CLAIMS_KEY)) return claim(parseClaimPath(key.slice(CLAIMS_KEY.length)));
  if (key.startsWith(EXPERIMENTAL_KEY)) return experimental(key);
  throw new Error(`unknown attribute ${key}`);
}

/** Keys whose values are principals (trust-domain aliases apply) or trust domains (expansion applies). */
export const PRINCIPAL_KEYS: ReadonlySet<string> = new Set(['principals', 'source.principal']);
export const TRUST_DOMAIN_KEYS: ReadonlySet<string> = new Set(['trustDomains', 'source.trustDomain']);
