/**
 * The in-cluster identity of a load-test pod: a workload certificate requested from istiod's CA
 * as istio-agent and ztunnel do (istio/api security/v1alpha1/ca.proto
 * `IstioCertificateService/CreateCertificate`: `IstioCertificateRequest{csr=1, validity_duration=3}`
 * → `IstioCertificateResponse{cert_chain=1}`), over TLS to istiod (port 15012) verified against
 * the mesh root, authenticated by the pod's service-account token (`authorization: Bearer …`,
 * audience `istio-ca`). The CSR names the pod's SPIFFE id (from the token's namespace and service
 * account); istiod signs the identity it authenticated.
 */
import 'reflect-metadata'; // tsyringe (inside @peculiar/x509) needs the Reflect metadata API
import * as x509 from '@peculiar/x509';
import { BinaryReader, BinaryWriter, WireType } from '@bufbuild/protobuf/wire';
import { X509Certificate, type webcrypto } from 'node:crypto';
import fs from 'node:fs';
import http2 from 'node:http2';
import net from 'node:net';
import type { TlsMaterial } from '../hbone/index.ts';
import { svidIdentity } from '../identity/index.ts';
import { parseListenAddress } from '../util/index.ts';

x509.cryptoProvider.set(globalThis.crypto);

/** Where the in-cluster identity comes from (the CLI's defaults are an Istio pod's paths). */
export interface InClusterOptions {
  /** istiod's CA address, `HOST:PORT` (default `istiod.istio-system.svc:15012`). */
  readonly istiod: string;
  /** The mesh root certificate (the `istio-ca-root-cert` ConfigMap's `root-cert.pem`). */
  readonly rootFile: string;
  /** A service-account token with audience `istio-ca` (projected volume). */
  readonly tokenFile: string;
  readonly trustDomain: string;
  /** Sent as the `ClusterID` metadata (istiod's default cluster is `Kubernetes`). */
  readonly clusterId: string;
  /** Requested lifetime of the certificate (s). */
  readonly validitySeconds: number;
  readonly timeoutMs?: number;
}

const METHOD = '/istio.v1.auth.IstioCertificateService/CreateCertificate';

function read(what: string, file: string): string {
  try {
    return fs.readFileSync(file, 'utf8').trim();
  } catch (err) {
    throw new Error(`${what} ${file}: ${(err as NodeJS.ErrnoException).code === 'ENOENT' ? 'no such file' : (err as Error).message}`, { cause: err });
  }
}

/** Namespace and service account of a Kubernetes service-account token (its claims; not verified here). */
export function tokenSubject(token: string): { namespace: string; serviceAccount: string } {
  const payload = token.split('.')[1];
  let claims: { sub?: string; 'kubernetes.io'?: { namespace?: string; serviceaccount?: { name?: string } } };
  try {
    claims = JSON.parse(Buffer.from(payload ?? '', 'base64url').toString('utf8'));
  } catch {
    throw new Error('the token is not a JWT');
  }
  const k = claims['kubernetes.io'];
  if (k?.namespace && k.serviceaccount?.name) return { namespace: k.namespace, serviceAccount: k.serviceaccount.name };
  const m = /^system:serviceaccount:([^:]+):([^:]+)$/.exec(claims.sub ?? '');
  if (m) return { namespace: m[1], serviceAccount: m[2] };
  throw new Error('the token names no service account (no kubernetes.io claims, no system:serviceaccount subject)');
}

function encodeRequest(csrPem: string, validitySeconds: number): Uint8Array {
  return new BinaryWriter().tag(1, WireType.LengthDelimited).string(csrPem).tag(3, WireType.Varint).int64(validitySeconds).finish();
}

function decodeChain(bytes: Uint8Array): string[] {
  const r = new BinaryReader(bytes);
  const chain: string[] = [];
  while (r.pos < r.len) {
    const [field, wire] = r.tag();
    if (field === 1 && wire === WireType.LengthDelimited) chain.push(r.string());
    else r.skip(wire);
  }
  return chain;
}

/** One unary gRPC call over TLS; resolves with the response message. */
function unaryCall(address: string, rootPem: string, headers: Record<string, string>, message: Uint8Array, timeoutMs: number): Promise<Uint8Array> {
  const { host, port } = parseListenAddress(address);
  return new Promise((resolve, reject) => {
    const session = http2.connect(`https://${net.isIPv6(host) ? `[${host}]` : host}:${port}`, { ca: rootPem, servername: net.isIP(host) ? undefined : host, ALPNProtocols: ['h2'] });
    const fail = (err: Error) => {
      clearTimeout(timer);
      session.destroy();
      reject(err);
    };
    const timer = setTimeout(() => fail(new Error(`no answer from ${address} within ${timeoutMs} ms`)), timeoutMs);
    session.on('error', (err) => fail(new Error(`${address}: ${err.message}`)));
    const req = session.request({ ':method': 'POST', ':path': METHOD, 'content-type': 'application/grpc', te: 'trailers', ...headers });
    const frame = Buffer.alloc(5 + message.length);
    frame.writeUInt32BE(message.length, 1);
    frame.set(message, 5);
    req.end(frame);
    const chunks: Buffer[] = [];
    let status: string | undefined;
    let detail = '';
    const grpc = (h: http2.IncomingHttpHeaders) => {
      if (h['grpc-status'] !== undefined) status = String(h['grpc-status']);
      if (h['grpc-message'] !== undefined) detail = decodeURIComponent(String(h['grpc-message']));
    };
    req.on('response', (h) => {
      if (Number(h[':status']) !== 200) fail(new Error(`${address} answered HTTP ${h[':status']}`));
      grpc(h);
    });
    req.on('trailers', grpc);
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('error', (err) => fail(new Error(`${address}: ${err.message}`)));
    req.on('end', () => {
      clearTimeout(timer);
      session.close();
      if (status !== '0') return reject(new Error(`istiod refused the certificate request (gRPC status ${status ?? 'missing'}${detail ? `: ${detail}` : ''})`));
      const body = Buffer.concat(chunks);
      if (body.length < 5) return reject(new Error('istiod answered no certificate'));
      resolve(body.subarray(5, 5 + body.readUInt32BE(1)));
    });
  });
}

/** Request a workload certificate from istiod. @throws naming what failed (file, token, istiod's answer). */
export async function inClusterIdentity(o: InClusterOptions): Promise<{ material: TlsMaterial; spiffe: string; trustDomain: string }> {
  const token = read('--token-file', o.tokenFile);
  const rootPem = read('--ca', o.rootFile);
  let subject: { namespace: string; serviceAccount: string };
  try {
    subject = tokenSubject(token);
  } catch (err) {
    throw new Error(`--token-file ${o.tokenFile}: ${(err as Error).message}`, { cause: err });
  }
  const spiffe = `spiffe://${o.trustDomain}/ns/${subject.namespace}/sa/${subject.serviceAccount}`;
  const alg = { name: 'ECDSA', namedCurve: 'P-256', hash: 'SHA-256' };
  const keys = (await crypto.subtle.generateKey(alg, true, ['sign', 'verify'])) as webcrypto.CryptoKeyPair;
  const csr = await x509.Pkcs10CertificateRequestGenerator.create({
    keys,
    signingAlgorithm: alg,
    extensions: [new x509.SubjectAlternativeNameExtension([{ type: 'url', value: spiffe }])],
  });
  const response = await unaryCall(o.istiod, rootPem, { authorization: `Bearer ${token}`, clusterid: o.clusterId }, encodeRequest(csr.toString('pem'), o.validitySeconds), o.timeoutMs ?? 10_000);
  const chain = decodeChain(response);
  if (chain.length === 0) throw new Error('istiod answered an empty certificate chain');
  const certPem = chain.map((c) => `${c.trim()}\n`).join('');
  const svid = svidIdentity(new X509Certificate(chain[0]));
  if ('problem' in svid) throw new Error(`istiod's certificate carries no SPIFFE identity: ${svid.problem}`);
  const keyPem = x509.PemConverter.encode(await crypto.subtle.exportKey('pkcs8', keys.privateKey), 'PRIVATE KEY');
  return { material: { certPem, keyPem: `${keyPem}\n`, caPem: rootPem }, spiffe: svid.id.uri, trustDomain: svid.id.trustDomain };
}
