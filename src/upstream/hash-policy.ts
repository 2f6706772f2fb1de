/**
 * The consistent-hash key of a request, as Envoy's route hash policies compute it
 * (source/common/http/hash_policy.cc; Istio `consistentHashToHashPolicy`):
 * - `httpHeaderName`: xxHash64 over the header's values, sorted, each hashed with the previous
 *   hash as seed (`HashUtil::xxHash64(span)`); absent header: no hash;
 * - `httpCookie`: xxHash64 of the cookie's value (surrounding quotes removed). When the request has
 *   no such cookie and a `ttl` is set, a cookie is generated as Envoy's router does
 *   (`addDownstreamSetCookie`): its value is the 16-hex-digit xxHash64 of the downstream remote
 *   address followed by the local address (so one connection always gets the same cookie), it is
 *   returned in `Set-Cookie: <name>="<value>"; Max-Age=<ttl s>; Path=<path>; HttpOnly` (Max-Age
 *   left out for a zero ttl: a session cookie), and the request hashes on it;
 * - `useSourceIp`: xxHash64 of the original client address (ztunnel's `Forwarded: for=`, else the
 *   tunnel's peer address) as a string;
 * - `httpQueryParameterName`: xxHash64 of the parameter's first value; absent: no hash.
 * No hash: the balancer picks a random endpoint (Envoy's ring hash and maglev without a hash).
 * The router passes the request's values in ({@link HashRequest}); a TCP connection hashes only
 * its source IP ({@link connectionHash}).
 */
import { formatHostPort } from '../state/index.ts';
import type { HashKey } from '../routing/index.ts';
import { uint64ToHex, xxHash64 } from './xxhash.ts';

/** What a request's hash reads; the router fills it from the stream (this layer knows no stream). */
export interface HashRequest {
  /** The original client address (ztunnel's `Forwarded: for=`, else the tunnel's peer address). */
  readonly sourceIp: string;
  readonly authority: string;
  readonly method: string;
  /** The request's `:path` as received. */
  readonly path: string;
  /** The target sent upstream (a filter may have rewritten `path`), whose query parameters hash. */
  readonly forwardPath: string;
  /** The value(s) of request header `name` (lower-case); undefined when absent. */
  header(name: string): string | string[] | undefined;
  /** The tunnel's addresses: a generated cookie's value hashes the peer's and the dialed one. */
  readonly connection: { readonly downstreamAddress: string; readonly downstreamPort: number; readonly targetIp: string; readonly targetPort: number };
  /** Receives the `Set-Cookie` value when a cookie was generated (the router adds it to the response). */
  setCookie(cookie: string): void;
}

/** The request's hash for `key`, or undefined when the request carries none (pick at random). */
export function requestHash(key: HashKey, r: HashRequest): bigint | undefined {
  switch (key.kind) {
    case 'header':
      return headerHash(r, key.name);
    case 'cookie':
      return cookieHash(r, key.name, key.path, key.ttlMs);
    case 'sourceIp':
      return xxHash64(r.sourceIp);
    case 'queryParameter': {
      const v = queryParameter(r.forwardPath, key.name);
      return v === undefined ? undefined : xxHash64(v);
    }
    case 'none':
      return undefined;
  }
}

/** A TCP connection's hash for `key`: only the source IP, the one key Envoy's tcp_proxy hashes. */
export function connectionHash(key: HashKey, sourceIp: string): bigint | undefined {
  return key.kind === 'sourceIp' ? xxHash64(sourceIp) : undefined;
}

function headerHash(r: HashRequest, name: string): bigint | undefined {
  let values: string[];
  if (name === ':authority' || name === 'host') values = r.authority ? [r.authority] : [];
  else if (name === ':path') values = [r.path];
  else if (name === ':method') values = [r.method];
  else {
    const v = r.header(name);
    values = v === undefined ? [] : Array.isArray(v) ? [...v] : [v];
  }
  if (values.length === 0) return undefined;
  if (values.length === 1) return xxHash64(values[0]);
  values.sort();
  let h = 0n;
  for (const v of values) h = xxHash64(v, h);
  return h;
}

function cookieHash(r: HashRequest, name: string, path: string, ttlMs: number | undefined): bigint | undefined {
  const existing = cookieValue(r.header('cookie'), name);
  if (existing !== undefined) return xxHash64(existing);
  if (ttlMs === undefined) return undefined;
  const c = r.connection;
  const value = uint64ToHex(xxHash64(formatHostPort(c.downstreamAddress, c.downstreamPort) + formatHostPort(c.targetIp, c.targetPort)));
  let cookie = `${name}="${value}"`;
  const maxAge = Math.floor(ttlMs / 1000);
  if (maxAge > 0) cookie += `; Max-Age=${maxAge}`;
  if (path) cookie += `; Path=${path}`;
  r.setCookie(`${cookie}; HttpOnly`);
  return xxHash64(value);
}

/** The value of cookie `name` in `Cookie` header(s) (quotes removed), as Envoy's `parseCookieValue`. */
export function cookieValue(header: string | string[] | undefined, name: string): string | undefined {
  if (header === undefined) return undefined;
  for (const line of Array.isArray(header) ? header : [header]) {
    for (const part of line.split(';')) {
      const eq = part.indexOf('=');
      if (eq < 0 || part.slice(0, eq).trim() !== name) continue;
      let v = part.slice(eq + 1).trim();
      if (v.length >= 2 && v.startsWith('"') && v.endsWith('"')) v = v.slice(1, -1);
      return v;
    }
  }
  return undefined;
}

/** The first value of query parameter `name` in `target`, undecoded (Envoy's `parseQueryString`), or undefined. */
export function queryParameter(target: string, name: string): string | undefined {
  const q = target.indexOf('?');
  if (q < 0) return undefined;
  const end = target.indexOf('#', q);
  for (const pair of target.slice(q + 1, end < 0 ? undefined : end).split('&')) {
    const eq = pair.indexOf('=');
    if ((eq < 0 ? pair : pair.slice(0, eq)) === name) return eq < 0 ? '' : pair.slice(eq + 1);
  }
  return undefined;
}
