/**
 * ext_authz end to end through the waypoint's own client: the request body in the check
 * (`includeRequestBodyInCheck`: Envoy's `with_request_body` — buffered up to `maxRequestBytes`,
 * 413 past it without `allowPartialMessage`, a partial body and `x-envoy-auth-partial-body: true`
 * with it, `raw_body` with `packAsBytes`) while the upstream still receives the whole body
 * untouched; and the headers an allowing server adds to the downstream response (gRPC
 * `OkHttpResponse.response_headers_to_add`, HTTP `headersToDownstreamOnAllow`).
 * Addresses: 127.0.122.x.
 */
import { createHash, randomBytes } from 'node:crypto';
import * as grpc from '@grpc/grpc-js';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { HeaderAppendAction, type CheckRequest } from '../../../src/ext-authz/proto.ts';
import { log } from '../../../src/util/log.ts';
import { parseHttpResponse, readAll } from '../../helpers/hbone-client.ts';
import { spiffe } from '../../helpers/identity.ts';
import { startBackend, type Received } from '../../helpers/recorder.ts';
import { eventually } from '../../helpers/servers.ts';
import { startGrpcAuthz, startHttpAuthz, type CheckReply, type SeenHttp } from '../ext-authz/helpers.ts';
import { AuthzWaypoint, customPolicy, meshYaml } from './harness.ts';

log.level = 'silent';

const NET = '127.0.122';
const X = spiffe('a', 'x');
const STRICT = `${NET}.100:80`; // gRPC provider, 16 bytes, no partial message
const PARTIAL = `${NET}.101:80`; // gRPC provider, 16 bytes, partial, packAsBytes
const HTTPP = `${NET}.102:80`; // HTTP provider with headersToDownstreamOnAllow

const custom = (name: string, service: string, provider: string) => customPolicy(name, service, provider, [{ to: [{ operation: { paths: ['/checked/*'] } }] }]);

const MESH = meshYaml({
  meshConfig: `extensionProviders:
- name: strict
  envoyExtAuthzGrpc: { service: ext-authz.foo.svc.cluster.local, port: 9000, timeout: 2s, includeRequestBodyInCheck: { maxRequestBytes: 16 } }
- name: partial
  envoyExtAuthzGrpc:
    service: foo/ext-authz.foo.svc.cluster.local
    port: 9000
    timeout: 2s
    includeRequestBodyInCheck: { maxRequestBytes: 16, allowPartialMessage: true, packAsBytes: true }
- name: http
  envoyExtAuthzHttp: { service: http-authz.foo.svc.cluster.local, port: 9001, timeout: 2s, headersToDownstreamOnAllow: ["x-down-*"] }`,
  apps: [
    { name: 'ext-authz', vip: `${NET}.120`, podIp: `${NET}.20`, ports: [{ name: 'grpc', port: 9000, targetPort: 9000 }] },
    { name: 'http-authz', vip: `${NET}.121`, podIp: `${NET}.21`, ports: [{ name: 'http', port: 9001, targetPort: 9001 }] },
    { name: 'strict', vip: `${NET}.100`, podIp: `${NET}.11`, ports: [{ name: 'http', port: 80, targetPort: 8080 }] },
    { name: 'partial', vip: `${NET}.101`, podIp: `${NET}.11`, ports: [{ name: 'http', port: 80, targetPort: 8080 }] },
    { name: 'httpp', vip: `${NET}.102`, podIp: `${NET}.11`, ports: [{ name: 'http', port: 80, targetPort: 8080 }] },
  ],
  docs: [custom('strict-custom', 'strict', 'strict'), custom('partial-custom', 'partial', 'partial'), custom('http-custom', 'httpp', 'http')],
});

function grpcReply(req: CheckRequest): CheckReply {
  const path = req.attributes?.request?.http?.path ?? '';
  const ok = (responseHeadersToAdd: object[]) => ({
    kind: 'respond' as const,
    response: { status: { code: 0 }, httpResponse: { case: 'okResponse' as const, value: { responseHeadersToAdd } } },
  });
  if (path.startsWith('/checked/deny')) {
    return { kind: 'respond', response: { status: { code: grpc.status.PERMISSION_DENIED }, httpResponse: { case: 'deniedResponse', value: { body: 'no' } } } };
  }
  if (path.startsWith('/checked/headers')) {
    return ok([
      { header: { key: 'x-authz-note', value: 'checked' }, appendAction: HeaderAppendAction.APPEND_IF_EXISTS_OR_ADD },
      { header: { key: 'content-type', value: 'text/x-authz' }, appendAction: HeaderAppendAction.OVERWRITE_IF_EXISTS },
      { header: { key: 'x-absent', value: 'no' }, appendAction: HeaderAppendAction.OVERWRITE_IF_EXISTS },
      { header: { key: 'x-if-absent', value: 'yes' }, appendAction: HeaderAppendAction.ADD_IF_ABSENT },
    ]);
  }
  return ok([]);
}

let wp: AuthzWaypoint;
let authz: Awaited<ReturnType<typeof startGrpcAuthz>>;
let httpAuthz: Awaited<ReturnType<typeof startHttpAuthz>>;
let backend: { received: Received[]; close(): Promise<void> };

beforeAll(async () => {
  authz = await startGrpcAuthz(`${NET}.20:9000`, grpcReply);
  httpAuthz = await startHttpAuthz(`${NET}.21`, 9001, (r: SeenHttp) =>
    r.url.startsWith('/checked/deny') ? { status: 403, body: 'nope' } : { status: 200, headers: { 'x-down-a': '1', 'x-other': '2' } },
  );
  backend = await startBackend(`${NET}.11`, 8080);
  wp = await AuthzWaypoint.start({ ip: `${NET}.1`, mesh: MESH });
});
afterAll(async () => {
  await wp?.close();
  await authz?.close();
  await httpAuthz?.close();
  await backend?.close();
});

const checkOf = (path: string) => authz.seen.find((s) => s.request.attributes?.request?.http?.path === path)?.request.attributes?.request?.http;
const receivedAt = (path: string) => eventually(() => backend.received.find((r) => r.url === path), `the backend request ${path}`);
const record = (path: string) => eventually(() => wp.rec.streams.find((r) => r.path === path), `the record of ${path}`);
const post = (authority: string, path: string, body: string | Buffer, headers: [string, string][] = []) =>
  wp.http(X, authority, { method: 'POST', path, headers: [['content-length', String(Buffer.byteLength(body))], ...headers], body });
const sha = (b: Buffer | string) => createHash('sha256').update(b).digest('hex');

describe('includeRequestBodyInCheck', () => {
  test('a body within maxRequestBytes is in the check (body, partial false) and reaches the upstream whole', async () => {
    const r = await post(STRICT, '/checked/small', 'hello, authz!');
    expect(r.status).toBe(200);
    const check = checkOf('/checked/small');
    expect(check?.body).toBe('hello, authz!');
    expect(check?.headers['x-envoy-auth-partial-body']).toBe('false');
    expect(check?.size).toBe(13n);
    expect((await receivedAt('/checked/small')).body.toString()).toBe('hello, authz!');
  });

  test('a chunked body within the limit too', async () => {
    const r = await wp.http(X, STRICT, { method: 'POST', path: '/checked/chunked', headers: [['transfer-encoding', 'chunked']], body: '5\r\nabcde\r\n3\r\nfgh\r\n0\r\n\r\n' });
    expect(r.status).toBe(200);
    expect(checkOf('/checked/chunked')?.body).toBe('abcdefgh');
    expect((await receivedAt('/checked/chunked')).body.toString()).toBe('abcdefgh');
  });

  test('a larger body without allowPartialMessage: 413 Payload Too Large, nobody asked, nothing forwarded', async () => {
    const before = authz.seen.length;
    const r = await post(STRICT, '/checked/large', 'x'.repeat(100));
    expect(r.status).toBe(413);
    expect(r.body).toBe('Payload Too Large');
    expect(await record('/checked/large')).toMatchObject({ code: 413, flags: '-', details: 'request_payload_too_large' });
    expect(authz.seen.length).toBe(before);
    expect(backend.received.some((q) => q.url === '/checked/large')).toBe(false);
  });

  test('allowPartialMessage + packAsBytes: the first 16 bytes as raw_body, partial true; the upstream gets all 200 KiB', async () => {
    const big = randomBytes(200 * 1024);
    const r = await post(PARTIAL, '/checked/big', big);
    expect(r.status).toBe(200);
    const check = checkOf('/checked/big');
    expect(Buffer.from(check?.rawBody ?? new Uint8Array()).equals(big.subarray(0, 16))).toBe(true);
    expect(check?.body).toBe('');
    expect(check?.headers['x-envoy-auth-partial-body']).toBe('true');
    const got = await receivedAt('/checked/big');
    expect(got.body.length).toBe(big.length);
    expect(sha(got.body)).toBe(sha(big));
  });

  test('a denial after reading part of the body: the server’s answer, the rest of the upload dropped', async () => {
    const r = await post(PARTIAL, '/checked/deny', 'y'.repeat(64 * 1024));
    expect(r.status).toBe(403);
    expect(r.body).toBe('no');
    expect(backend.received.some((q) => q.url === '/checked/deny')).toBe(false);
  });

  test('requests without a body are checked without one', async () => {
    expect((await wp.http(X, STRICT, { path: '/checked/get' })).status).toBe(200);
    const check = checkOf('/checked/get');
    expect(check?.body).toBe('');
    expect(check?.headers['x-envoy-auth-partial-body']).toBeUndefined();
  });

  test('Expect: 100-continue: the waypoint answers 100, reads the body for the check, forwards it', async () => {
    const t = await wp.connect(X, STRICT);
    expect(t.status).toBe(200);
    const answer = readAll(t.stream);
    let seen = '';
    const got100 = new Promise<void>((resolve) => {
      const onData = (c: Buffer) => {
        seen += c.toString('latin1');
        if (seen.includes('100 Continue')) {
          t.stream.off('data', onData);
          resolve();
        }
      };
      t.stream.on('data', onData);
    });
    t.stream.write(`POST /checked/continue HTTP/1.1\r\nhost: ${STRICT}\r\ncontent-length: 5\r\nexpect: 100-continue\r\nconnection: close\r\n\r\n`);
    await got100;
    t.stream.write('12345');
    const raw = await answer;
    const text = raw.toString('latin1');
    const final = Buffer.from(text.slice(text.indexOf('\r\n\r\n') + 4), 'latin1');
    expect(parseHttpResponse(final).status).toBe(200);
    expect(checkOf('/checked/continue')?.body).toBe('12345');
    const got = await receivedAt('/checked/continue');
    expect(got.body.toString()).toBe('12345');
    expect(got.headers.expect).toBeUndefined();
  });
});

describe('response headers on allow', () => {
  test('gRPC response_headers_to_add: add, overwrite-if-exists, add-if-absent on the upstream response', async () => {
    const r = await wp.http(X, STRICT, { path: '/checked/headers' });
    expect(r.status).toBe(200);
    expect(r.headers['x-authz-note']).toBe('checked');
    expect(r.headers['content-type']).toBe('text/x-authz');
    expect(r.headers['x-absent']).toBeUndefined();
    expect(r.headers['x-if-absent']).toBe('yes');
  });

  test('HTTP provider: only the headers matching headersToDownstreamOnAllow', async () => {
    const r = await wp.http(X, HTTPP, { path: '/checked/http' });
    expect(r.status).toBe(200);
    expect(r.headers['x-down-a']).toBe('1');
    expect(r.headers['x-other']).toBeUndefined();
  });
});
