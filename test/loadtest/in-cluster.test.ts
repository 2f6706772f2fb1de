/**
 * `--in-cluster`: the pod's identity comes from istiod's CA (IstioCertificateService/
 * CreateCertificate over TLS, the service-account token as bearer), and that certificate carries
 * the load through a real waypoint. istiod is a stand-in here: it checks what a real one checks
 * (method, token, the CSR's SPIFFE id) and signs with the mesh root. Addresses: 127.0.179.x.
 */
import 'reflect-metadata';
import * as x509 from '@peculiar/x509';
import { BinaryReader, BinaryWriter, WireType } from '@bufbuild/protobuf/wire';
import { createPrivateKey, type webcrypto } from 'node:crypto';
import fs from 'node:fs';
import http2 from 'node:http2';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, expect, test } from 'vitest';
import { tokenSubject } from '../../src/loadtest/index.ts';
import { startTestTopology, type TestTopology } from '../helpers/topology.ts';
import { cli } from './helpers.ts';

x509.cryptoProvider.set(globalThis.crypto);

const ISTIOD = '127.0.179.5:15012';
const claims = { iss: 'https://kubernetes.default.svc', sub: 'system:serviceaccount:demo:client', aud: ['istio-ca'], 'kubernetes.io': { namespace: 'demo', serviceaccount: { name: 'client' } } };
const TOKEN = `e30.${Buffer.from(JSON.stringify(claims)).toString('base64url')}.c2ln`;

let topo: TestTopology;
let istiod: http2.Http2SecureServer;
let dir: string;
const seen: { csrSan: string[]; validity: number; clusterId: string }[] = [];

async function signingKey(pem: string) {
  const der = createPrivateKey(pem).export({ type: 'pkcs8', format: 'der' });
  return crypto.subtle.importKey('pkcs8', der, { name: 'ECDSA', namedCurve: 'P-256' }, false, ['sign']);
}

beforeAll(async () => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'wp-loadtest-incluster-'));
  topo = await startTestTopology(179);
  const rootPem = fs.readFileSync(path.join(topo.caDir, 'root-cert.pem'), 'utf8');
  const root = new x509.X509Certificate(rootPem);
  const rootKey = await signingKey(fs.readFileSync(path.join(topo.caDir, 'root-key.pem'), 'utf8'));
  const alg = { name: 'ECDSA', namedCurve: 'P-256', hash: 'SHA-256' };
  const sign = (publicKey: x509.PublicKey | webcrypto.CryptoKey, ext: x509.Extension[]) =>
    x509.X509CertificateGenerator.create({ issuer: root.subjectName, publicKey, signingKey: rootKey, signingAlgorithm: alg, notBefore: new Date(Date.now() - 60_000), notAfter: new Date(Date.now() + 3600_000), extensions: ext });
  // istiod's serving certificate, for the address the client dials.
  const keys = (await crypto.subtle.generateKey(alg, true, ['sign', 'verify'])) as webcrypto.CryptoKeyPair;
  const serving = await sign(keys.publicKey, [new x509.SubjectAlternativeNameExtension([{ type: 'ip', value: '127.0.179.5' }])]);
  const servingKey = x509.PemConverter.encode(await crypto.subtle.exportKey('pkcs8', keys.privateKey), 'PRIVATE KEY');
  istiod = http2.createSecureServer({ cert: serving.toString('pem'), key: servingKey });
  istiod.on('stream', (stream, headers) => {
    const chunks: Buffer[] = [];
    stream.on('data', (c: Buffer) => chunks.push(c));
    stream.on('end', async () => {
      const deny = (code: number, msg: string) => stream.respond({ ':status': 200, 'content-type': 'application/grpc', 'grpc-status': String(code), 'grpc-message': encodeURIComponent(msg) }, { endStream: true });
      if (headers[':path'] !== '/istio.v1.auth.IstioCertificateService/CreateCertificate') return deny(12, 'unknown method');
      if (headers.authorization !== `Bearer ${TOKEN}`) return deny(16, 'authentication failure');
      const body = Buffer.concat(chunks);
      const r = new BinaryReader(body.subarray(5, 5 + body.readUInt32BE(1)));
      let csrPem = '';
      let validity = 0;
      while (r.pos < r.len) {
        const [f, w] = r.tag();
        if (f === 1) csrPem = r.string();
        else if (f === 3) validity = Number(r.int64());
        else r.skip(w);
      }
      const csr = new x509.Pkcs10CertificateRequest(csrPem);
      const san = csr.extensions.find((e): e is x509.SubjectAlternativeNameExtension => e instanceof x509.SubjectAlternativeNameExtension)?.names.items.map((n) => n.value) ?? [];
      seen.push({ csrSan: san, validity, clusterId: String(headers.clusterid) });
      // Like istiod: sign the identity the token authenticated, whatever the CSR asked for.
      const sub = tokenSubject(TOKEN);
      const leaf = await sign(await csr.publicKey.export(), [new x509.SubjectAlternativeNameExtension([{ type: 'url', value: `spiffe://cluster.local/ns/${sub.namespace}/sa/${sub.serviceAccount}` }], true)]);
      const msg = new BinaryWriter().tag(1, WireType.LengthDelimited).string(leaf.toString('pem')).tag(1, WireType.LengthDelimited).string(rootPem).finish();
      const frame = Buffer.alloc(5 + msg.length);
      frame.writeUInt32BE(msg.length, 1);
      frame.set(msg, 5);
      stream.respond({ ':status': 200, 'content-type': 'application/grpc' }, { waitForTrailers: true });
      stream.on('wantTrailers', () => stream.sendTrailers({ 'grpc-status': '0' }));
      stream.end(frame);
    });
  });
  await new Promise<void>((r) => istiod.listen(15012, '127.0.179.5', r));
  fs.writeFileSync(path.join(dir, 'token'), TOKEN);
  fs.writeFileSync(path.join(dir, 'wrong-token'), `e30.${Buffer.from(JSON.stringify({ ...claims, aud: ['other'] })).toString('base64url')}.c2ln`);
});
afterAll(async () => {
  await new Promise((r) => istiod?.close(r));
  await topo?.close();
  fs.rmSync(dir, { recursive: true, force: true });
});

const args = (token: string) => ['loadtest', '--no-progress', '--in-cluster', '--istiod', ISTIOD, '--token-file', path.join(dir, token), '--ca', path.join(topo.caDir, 'root-cert.pem'), '--waypoint', '127.0.179.1:15008', '--authority', '127.0.179.100:80', '--requests', '20'];

test('the certificate istiod signs for the pod carries the load through the waypoint', async () => {
  const r = await cli(args('token'));
  expect(r.stderr).toBe('waypoint: in-cluster identity spiffe://cluster.local/ns/demo/sa/client from istiod 127.0.179.5:15012\n');
  expect(r.code).toBe(0);
  expect(r.stdout).toMatch(/HBONE 127\.0\.179\.1:15008 → 127\.0\.179\.100:80, http1/);
  expect(r.stdout).toMatch(/20 requests, 20 ok, 0 errors/);
  // The CSR named the token's service account; the lifetime covers the run (at least an hour).
  expect(seen.at(-1)).toEqual({ csrSan: ['spiffe://cluster.local/ns/demo/sa/client'], validity: 3600, clusterId: 'Kubernetes' });
});

test("istiod's refusal ends the run before any load, with its reason", async () => {
  const r = await cli(args('wrong-token'));
  expect(r.code).toBe(1);
  expect(r.stderr).toMatch(/waypoint: istiod refused the certificate request \(gRPC status 16: authentication failure\)/);
  expect(r.stdout).toBe('');
});
