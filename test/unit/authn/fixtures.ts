/**
 * Fixtures of the RequestAuthentication tests: a mesh with the waypoint `foo/waypoint` and two
 * services (httpbin, other), RequestAuthentication objects, signing keys and tokens made with
 * `jose`, and a JWKS server on loopback whose key set, failures and fetch count a test controls.
 */
import http from 'node:http';
import type net from 'node:net';
import { exportJWK, generateKeyPair, SignJWT, type CryptoKey, type JWK } from 'jose';
import { stringify } from 'yaml';
import { headersFromRaw } from '../../../src/authz/headers.ts';
import type { AuthnRequest } from '../../../src/authn/index.ts';
import { compileMesh } from '../../../src/state/compile.ts';
import type { MeshPart, MeshSnapshot, Target } from '../../../src/state/types.ts';

export const HTTPBIN = { ip: '127.0.172.100', port: 8000 };
export const OTHER = { ip: '127.0.172.101', port: 8000 };
export const TO_WAYPOINT = [{ group: 'gateway.networking.k8s.io', kind: 'Gateway', name: 'waypoint' }];

const service = (name: string, ip: string) => ({
  apiVersion: 'v1',
  kind: 'Service',
  metadata: { name, namespace: 'foo' },
  spec: { clusterIP: ip, selector: { app: name }, ports: [{ name: 'http', port: 8000, targetPort: 8080 }] },
});

/** A RequestAuthentication in `foo`. */
export function ra(name: string, spec: object): object {
  return { apiVersion: 'security.istio.io/v1', kind: 'RequestAuthentication', metadata: { name, namespace: 'foo' }, spec };
}

/** A snapshot of the base mesh plus `objects`, compiled with `parts` (e.g. a RequestAuthn's `part`). */
export function meshWith(objects: readonly object[], parts: readonly MeshPart<unknown>[] = []): MeshSnapshot {
  const docs = [
    { apiVersion: 'v1', kind: 'ConfigMap', metadata: { name: 'istio', namespace: 'istio-system' }, data: { mesh: stringify({ trustDomain: 'cluster.local' }) } },
    {
      apiVersion: 'gateway.networking.k8s.io/v1',
      kind: 'Gateway',
      metadata: { name: 'waypoint', namespace: 'foo' },
      spec: { gatewayClassName: 'istio-waypoint', listeners: [{ name: 'mesh', port: 15008, protocol: 'HBONE' }] },
    },
    { apiVersion: 'v1', kind: 'Namespace', metadata: { name: 'foo', labels: { 'istio.io/use-waypoint': 'waypoint' } } },
    service('httpbin', HTTPBIN.ip),
    service('other', OTHER.ip),
    ...objects,
  ];
  return compileMesh({ text: docs.map((d) => stringify(d)).join('---\n'), file: 'authn-test.yaml', parts });
}

export function targetOf(snap: MeshSnapshot, at: { ip: string; port: number } = HTTPBIN): Target {
  const t = snap.resolveTarget(at.ip, at.port);
  if (!t) throw new Error(`no target at ${at.ip}:${at.port}`);
  return t;
}

/** A request to httpbin with the given raw headers. */
export function req(headers: string[] = [], over: Partial<AuthnRequest> = {}): AuthnRequest {
  return { method: 'GET', path: '/headers', host: 'httpbin.foo:8000', headers: headersFromRaw(headers), ...over };
}

/** A signing key with its public JWK. */
export interface SigningKey {
  readonly kid: string;
  readonly alg: string;
  readonly privateKey: CryptoKey;
  readonly jwk: JWK;
}

export async function signingKey(kid: string, alg = 'RS256'): Promise<SigningKey> {
  const { privateKey, publicKey } = await generateKeyPair(alg, { extractable: true });
  return { kid, alg, privateKey, jwk: { ...(await exportJWK(publicKey)), kid, alg, use: 'sig' } };
}

export const now = (): number => Math.floor(Date.now() / 1000);

/** A token signed by `key` with `claims` (iss/sub/aud/exp/nbf as given; exp defaults to +1 h). */
export async function token(key: SigningKey, claims: Record<string, unknown>, header: Record<string, unknown> = {}): Promise<string> {
  const body = { exp: now() + 3600, ...claims };
  return new SignJWT(body).setProtectedHeader({ alg: key.alg, kid: key.kid, typ: 'JWT', ...header }).sign(key.privateKey);
}

/** A JWKS server at `http://<ip>:<port>/jwks` (and an OpenID configuration at `/.well-known/openid-configuration`). */
export async function startJwksServer(ip: string, port: number) {
  const state = { keys: [] as JWK[], fail: false, fetches: 0 };
  const sockets = new Set<net.Socket>();
  const base = `http://${ip}:${port}`;
  const server = http.createServer((request, res) => {
    if (request.url === '/.well-known/openid-configuration') {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ issuer: base, jwks_uri: `${base}/jwks` }));
      return;
    }
    state.fetches++;
    if (state.fail) {
      res.writeHead(503);
      res.end('down');
      return;
    }
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end(JSON.stringify({ keys: state.keys }));
  });
  server.on('connection', (s) => {
    sockets.add(s);
    s.once('close', () => sockets.delete(s));
  });
  await new Promise<void>((resolve) => server.listen(port, ip, resolve));
  return {
    state,
    base,
    uri: `${base}/jwks`,
    close: () => {
      for (const s of sockets) s.destroy();
      return new Promise<void>((r) => server.close(() => r()));
    },
  };
}
