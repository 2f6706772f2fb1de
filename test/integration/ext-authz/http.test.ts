/**
 * ext_authz over HTTP (`envoyExtAuthzHttp`) against a real HTTP server on loopback: what the check
 * request carries (method, prefixed path, original Host, default and included headers, additional
 * headers, body), how 200 / other statuses / 5xx / timeouts turn into outcomes, and each header
 * list. Addresses: 127.0.171.x.
 */
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { log } from '../../../src/util/log.ts';
import { ExtAuthzClient } from '../../../src/ext-authz/index.ts';
import type { CheckInput } from '../../../src/ext-authz/types.ts';
import type { MeshSnapshot } from '../../../src/state/types.ts';
import { meshOf, plainDial, serviceWithPod, startHttpAuthz, type HttpReply, type SeenHttp } from './helpers.ts';

// Expected failures (JWKS outages, invalid resources, failed checks) log warnings; keep the output readable.
log.level = 'silent';

const NET = '127.0.171';
const POD = `${NET}.11`;
const HANG_POD = `${NET}.12`;

const httpProvider = (name: string, extra: object = {}, service = 'authz-http.foo.svc.cluster.local') => ({
  name,
  envoyExtAuthzHttp: { service, port: 8000, ...extra },
});

const mesh: MeshSnapshot = meshOf(
  [
    httpProvider('full', {
      pathPrefix: '/check',
      timeout: '2s',
      includeRequestHeadersInCheck: ['x-ext-authz', 'x-include-*', '*-suffix'],
      includeAdditionalHeadersInCheck: { 'x-ext-authz-additional': 'added', 'x-ext-authz': 'overridden' },
      headersToUpstreamOnAllow: ['x-user', 'x-ext-authz-*'],
      headersToDownstreamOnAllow: ['x-resp-*'],
      headersToDownstreamOnDeny: ['x-deny-*'],
    }),
    httpProvider('bare'),
    httpProvider('bare-open', { failOpen: true }),
    httpProvider('bare-500', { statusOnError: '500' }),
    httpProvider('hang', { timeout: '0.25s' }, 'authz-hang.foo.svc.cluster.local'),
    httpProvider('hang-open', { timeout: '0.25s', failOpen: true }, 'authz-hang.foo.svc.cluster.local'),
    httpProvider('body', { includeRequestBodyInCheck: { maxRequestBytes: 5, allowPartialMessage: true }, includeRequestHeadersInCheck: ['x-envoy-auth-partial-body'] }),
  ],
  [...serviceWithPod('authz-http', `${NET}.100`, POD, 8000, { portName: 'http' }), ...serviceWithPod('authz-hang', `${NET}.101`, HANG_POD, 8000, { portName: 'http' })],
);

function scripted(req: SeenHttp): HttpReply {
  const mode = (req.headers['authorization'] as string | undefined) ?? 'allow';
  switch (mode) {
    case 'deny':
      return { status: 401, headers: { 'x-deny-reason': 'no token', 'www-authenticate': 'Bearer', 'x-other': 'hidden', 'content-type': 'text/plain' }, body: 'denied by http authz' };
    case 'fail':
      return { status: 503, body: 'overloaded' };
    default:
      return {
        status: 200,
        headers: {
          'x-user': 'bob',
          'x-ext-authz-check-result': 'allowed',
          'x-not-listed': 'dropped',
          'x-resp-note': 'hello',
          'x-envoy-auth-headers-to-remove': 'x-secret, Cookie',
        },
      };
  }
}

const input = (over: Partial<NonNullable<CheckInput['http']>> = {}): CheckInput => ({
  source: { address: '127.0.171.50', port: 40000, principal: 'spiffe://cluster.local/ns/foo/sa/sleep' },
  destination: { address: '127.0.171.200', port: 8000 },
  http: {
    method: 'PUT',
    path: '/items/7?q=a%20b',
    host: 'httpbin.foo:8000',
    headers: ['x-ext-authz', 'original', 'x-include-me', '1', 'my-suffix', '2', 'x-not-included', '3', 'cookie', 'c=1'],
    ...over,
  },
});

let server: Awaited<ReturnType<typeof startHttpAuthz>>;
let hang: Awaited<ReturnType<typeof startHttpAuthz>>;
const client = new ExtAuthzClient({ dial: plainDial(), idleTimeoutMs: 5_000 });

beforeAll(async () => {
  server = await startHttpAuthz(POD, 8000, scripted);
  hang = await startHttpAuthz(HANG_POD, 8000, () => ({ status: 200, hang: true }));
});
afterAll(async () => {
  await client.close();
  await server?.close();
  await hang?.close();
});

describe('HTTP provider', () => {
  test('the check request: original method, pathPrefix + path, original Host, default + included + additional headers', async () => {
    await client.check(mesh, 'full', input({ headers: [...(input().http!.headers), 'authorization', 'allow'] }));
    const seen = server.seen.at(-1)!;
    expect(seen.method).toBe('PUT');
    expect(seen.url).toBe('/check/items/7?q=a%20b');
    expect(seen.headers.host).toBe('httpbin.foo:8000');
    expect(seen.headers['authorization']).toBe('allow');
    expect(seen.headers['x-include-me']).toBe('1');
    expect(seen.headers['my-suffix']).toBe('2');
    expect(seen.headers['x-not-included']).toBeUndefined();
    expect(seen.headers['cookie']).toBeUndefined();
    expect(seen.headers['x-ext-authz']).toBe('overridden');
    expect(seen.headers['x-ext-authz-additional']).toBe('added');
    expect(seen.headers['content-length']).toBe('0');
    expect(seen.body.toString()).toBe('');
  });

  test('200: allowed; listed headers set upstream, listed ones added downstream, x-envoy-auth-headers-to-remove honoured', async () => {
    const out = await client.check(mesh, 'full', input());
    expect(out).toEqual({
      allow: true,
      reason: 'ok',
      headersToUpstream: [
        { name: 'x-user', value: 'bob', action: 'set' },
        { name: 'x-ext-authz-check-result', value: 'allowed', action: 'set' },
      ],
      headersToRemove: ['x-secret', 'cookie'],
      headersToDownstream: [{ name: 'x-resp-note', value: 'hello', action: 'add' }],
    });
  });

  test('without header lists a 200 changes nothing', async () => {
    const out = await client.check(mesh, 'bare', input());
    expect(out).toMatchObject({ allow: true, headersToUpstream: [], headersToDownstream: [], headersToRemove: ['x-secret', 'cookie'] });
  });

  test('a non-200, non-5xx status denies with that status and body; headersToDownstreamOnDeny filters (plus WWW-Authenticate)', async () => {
    const out = await client.check(mesh, 'full', input({ headers: ['authorization', 'deny'] }));
    expect(out).toMatchObject({ allow: false, status: 401, body: 'denied by http authz', reason: 'denied', responseFlag: 'UAEX', details: 'ext_authz_denied' });
    if (out.allow) throw new Error('unreachable');
    const names = out.headers.map(([n]) => n).sort();
    expect(names).toEqual(['www-authenticate', 'x-deny-reason']);
  });

  test('without headersToDownstreamOnDeny every answer header goes back (no Host, no framing headers)', async () => {
    const out = await client.check(mesh, 'bare', input({ headers: ['authorization', 'deny'] }));
    if (out.allow) throw new Error('expected a denial');
    const names = out.headers.map(([n]) => n);
    expect(names).toEqual(expect.arrayContaining(['x-deny-reason', 'www-authenticate', 'x-other', 'content-type', 'date']));
    expect(names).not.toContain('content-length');
    expect(names).not.toContain('connection');
  });

  test('a 5xx answer is an error: 403, the configured statusOnError, or allowed with failOpen', async () => {
    const fail = input({ headers: ['authorization', 'fail'] });
    expect(await client.check(mesh, 'bare', fail)).toMatchObject({ allow: false, status: 403, body: '', reason: 'error' });
    expect(await client.check(mesh, 'bare-500', fail)).toMatchObject({ allow: false, status: 500, reason: 'error' });
    expect(await client.check(mesh, 'bare-open', fail)).toMatchObject({ allow: true, reason: 'failed-open' });
  });

  test('a hanging server times out: error, or allowed with failOpen', async () => {
    const t0 = Date.now();
    const out = await client.check(mesh, 'hang', input());
    expect(Date.now() - t0).toBeGreaterThanOrEqual(230);
    expect(out).toMatchObject({ allow: false, status: 403, reason: 'error' });
    expect(out.allow === false && out.error).toMatch(/250 ms/);
    expect(await client.check(mesh, 'hang-open', input())).toMatchObject({ allow: true, reason: 'failed-open' });
  });

  test('includeRequestBodyInCheck: the body (cut at maxRequestBytes) with its content-length, partial flag', async () => {
    await client.check(mesh, 'body', input({ body: { data: Buffer.from('0123456789') } }));
    const seen = server.seen.at(-1)!;
    expect(seen.body.toString()).toBe('01234');
    expect(seen.headers['content-length']).toBe('5');
    expect(seen.headers['x-envoy-auth-partial-body']).toBe('true');
  });

  test('an HTTP provider cannot check a TCP connection: error path', async () => {
    const out = await client.check(mesh, 'bare', { source: { address: '127.0.171.50', port: 1 }, destination: { address: '127.0.171.200', port: 2 } });
    expect(out).toMatchObject({ allow: false, reason: 'error' });
  });
});
