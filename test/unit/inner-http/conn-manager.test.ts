/**
 * The connection manager's part of a request (src/inner-http/conn-manager.ts): the head read from
 * Node's request (pseudo-headers to fields, one header list without hop-by-hop headers), the
 * checks run before any filter with Envoy's statuses, flags and details, the request id, the stat
 * prefix, the path normalization hook, and the answers to codec errors. End to end (access log and
 * metrics of refusals and codec errors): test/integration/codec-errors.test.ts.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { describe, expect, test } from 'vitest';
import { admitRequest, codecError, requestHead, type ConnManagerOptions } from '../../../src/inner-http/conn-manager.ts';
import { ConnectionContext, FilterChain, StreamContext, type RequestHead } from '../../../src/pipeline/index.ts';
import type { MeshSnapshot, Target } from '../../../src/state/types.ts';
import { entryFromStream } from '../../../src/telemetry/access-log.ts';
import { INFO, terminal } from '../pipeline/fakes.ts';

const SERVICE = { kind: 'service', port: { port: 80 }, service: { hostname: 'web.demo.svc.cluster.local' } } as unknown as Target;
const CHAIN = new FilterChain([terminal('router', [], [])]);
const OPTS: ConnManagerOptions = { rejectHttp10: false };

function h1(method: string, url: string, raw: string[], version = '1.1'): IncomingMessage {
  return { httpVersion: version, method, url, rawHeaders: raw } as unknown as IncomingMessage;
}
function h2(raw: string[]): IncomingMessage {
  return { httpVersion: '2.0', rawHeaders: raw } as unknown as IncomingMessage;
}
function stream(req: IncomingMessage, target: Target = SERVICE, head: RequestHead = requestHead(req)): StreamContext {
  return new StreamContext(new ConnectionContext(INFO, {} as MeshSnapshot, target, 'HTTP'), CHAIN, req, {} as ServerResponse, head);
}

describe('requestHead', () => {
  test('HTTP/1.1: method and target as received, Host is the authority, hop-by-hop headers (and those named in Connection) dropped, TE kept only as trailers, case kept', () => {
    const head = requestHead(h1('GET', '/p?q', ['Host', 'Web:80', 'Connection', 'keep-alive, X-Hop', 'X-Hop', '1', 'Keep-Alive', 't=5', 'X-Keep', 'a', 'TE', 'trailers']));
    expect(head).toMatchObject({ protocol: 'HTTP/1.1', method: 'GET', path: '/p?q', authority: 'Web:80' });
    // TE is hop-by-hop but kept as `trailers` (Envoy's HCM sanitizes it so).
    expect(head.headers.raw).toEqual(['Host', 'Web:80', 'X-Keep', 'a', 'te', 'trailers']);
    expect(requestHead(h1('GET', '/', ['Host', 'w', 'TE', 'gzip, deflate'])).headers.raw).toEqual(['Host', 'w']);
  });

  test('HTTP/1.0 without Host: empty authority', () => {
    expect(requestHead(h1('GET', '/', [], '1.0'))).toMatchObject({ protocol: 'HTTP/1.0', authority: '' });
  });

  test('HTTP/2: pseudo-headers become fields and leave the list; :authority wins over a host field', () => {
    const head = requestHead(h2([':method', 'POST', ':scheme', 'http', ':path', '/svc/M', ':authority', 'web:80', 'host', 'other', 'content-type', 'application/grpc', 'te', 'trailers']));
    expect(head).toMatchObject({ protocol: 'HTTP/2', method: 'POST', path: '/svc/M', authority: 'web:80' });
    expect(head.headers.raw).toEqual(['host', 'other', 'content-type', 'application/grpc', 'te', 'trailers']);
    expect(requestHead(h2([':method', 'GET', ':path', '/', 'host', 'h'])).authority).toBe('h');
  });

  test('gRPC is known from the head (HTTP/2 and application/grpc, not gRPC-Web)', () => {
    const grpc = (ct: string) => stream(h2([':method', 'POST', ':path', '/s/M', ':authority', 'a', 'content-type', ct])).isGrpc;
    expect([grpc('application/grpc'), grpc('application/grpc+proto'), grpc('application/grpc-web'), grpc('text/plain')]).toEqual([true, true, false, false]);
    expect(stream(h1('POST', '/s/M', ['host', 'a', 'content-type', 'application/grpc'])).isGrpc).toBe(false);
  });
});

describe('admitRequest: refusals (status, flag, details, connection closed after)', () => {
  const cases: { name: string; req: IncomingMessage; opts?: ConnManagerOptions; expected: [number, string, string, boolean] }[] = [
    { name: 'HTTP/1.0 when refused: 426', req: h1('GET', '/', ['host', 'a'], '1.0'), opts: { rejectHttp10: true }, expected: [426, 'DPE', 'http1.0_not_allowed', true] },
    { name: 'a lower-case HTTP/2 method', req: h2([':method', 'get', ':path', '/', ':authority', 'a']), expected: [400, 'DPE', 'invalid_method', true] },
    { name: 'two Host headers', req: h1('GET', '/', ['host', 'a', 'Host', 'b']), expected: [400, 'DPE', 'duplicate_host_header', true] },
    { name: 'HTTP/1.1 without Host', req: h1('GET', '/', []), expected: [400, 'DPE', 'missing_host_header', true] },
    { name: 'HTTP/2 without :authority or host', req: h2([':method', 'GET', ':path', '/']), expected: [400, 'DPE', 'missing_host_header', true] },
    { name: 'an asterisk-form target', req: h1('OPTIONS', '*', ['host', 'a']), expected: [400, 'DPE', 'invalid_request_target', true] },
    { name: 'an absolute-form target of another scheme', req: h1('GET', 'ftp://a/b', ['host', 'a']), expected: [400, 'DPE', 'invalid_request_target', true] },
    { name: 'an absolute-form target without authority', req: h1('GET', 'http:///b', ['host', 'a']), expected: [400, 'DPE', 'invalid_request_target', true] },
    { name: 'an HTTP/2 :path that is not origin-form', req: h2([':method', 'OPTIONS', ':path', '*', ':authority', 'a']), expected: [400, 'DPE', 'invalid_request_target', true] },
  ];
  test.each(cases)('$name', ({ req, opts, expected }) => {
    const s = stream(req);
    const r = admitRequest(s, opts ?? OPTS);
    expect(r && [r.status, r.flag, r.details, r.close]).toEqual(expected);
    // The request id is set before any refusal, so the refusal's log line carries it.
    expect(s.requestId).toMatch(/^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
  });

  const admitted: { name: string; req: IncomingMessage }[] = [
    { name: 'HTTP/1.1 with one Host', req: h1('GET', '/x', ['Host', 'a']) },
    { name: 'HTTP/1.0 without Host (accepted by default)', req: h1('GET', '/x', [], '1.0') },
    { name: 'HTTP/2 with :authority', req: h2([':method', 'DELETE', ':path', '/x', ':authority', 'a']) },
    { name: 'an extension method in upper case', req: h1('PURGE', '/x', ['host', 'a']) },
  ];
  test.each(admitted)('admitted: $name', ({ req }) => {
    expect(admitRequest(stream(req), OPTS)).toBeUndefined();
  });
});

describe('admitRequest: what it sets', () => {
  test('an absolute-form target: origin-form path, the URI authority as authority and Host, both as sent; the access log shows them', () => {
    const s = stream(h1('GET', 'HTTP://Other.Example:81/p/../admin?q=1', ['Host', 'web', 'x-a', '1']));
    expect(admitRequest(s, OPTS)).toBeUndefined();
    expect([s.path, s.authority, s.requestHeaders.getAll('host')]).toEqual(['/p/../admin?q=1', 'Other.Example:81', ['Other.Example:81']]);
    expect(stream(h1('GET', 'http://a?x', ['host', 'a'])).path).toBe('http://a?x');
    const q = stream(h1('GET', 'http://a?x', ['host', 'a']));
    admitRequest(q, OPTS);
    expect(q.path).toBe('/?x');
    const e = entryFromStream(s);
    expect([e.path, e.authority]).toEqual(['/p/../admin?q=1', 'Other.Example:81']);
  });

  test('x-request-id: the client one is kept (and not added twice); otherwise a UUID v4 is added to the headers', () => {
    const kept = stream(h1('GET', '/', ['host', 'a', 'X-Request-Id', 'abc']));
    admitRequest(kept, OPTS);
    expect([kept.requestId, kept.requestHeaders.getAll('x-request-id')]).toEqual(['abc', ['abc']]);
    const made = stream(h1('GET', '/', ['host', 'a']));
    admitRequest(made, OPTS);
    expect(made.requestId).toMatch(/^[0-9a-f-]{36}$/);
    expect(made.requestHeaders.getAll('x-request-id')).toEqual([made.requestId]);
    const other = stream(h1('GET', '/', ['host', 'a']));
    admitRequest(other, OPTS);
    expect(other.requestId).not.toBe(made.requestId);
  });

  test('the stat prefix is the HTTP chain of the tunnel target (inbound cluster name; encap for workloads)', () => {
    const svc = stream(h1('GET', '/', ['host', 'a']));
    admitRequest(svc, OPTS);
    expect(svc.statPrefix).toBe('inbound-vip|80|http|web.demo.svc.cluster.local');
    const wl = stream(h1('GET', '/', ['host', 'a']), { kind: 'workload' } as unknown as Target);
    admitRequest(wl, OPTS);
    expect(wl.statPrefix).toBe('encap');
  });

  test('the path normalization hook sees the origin-form target; its result becomes the path; undefined refuses with 400 path_normalization_failed (no flag, connection kept)', () => {
    const seen: string[] = [];
    const opts: ConnManagerOptions = {
      rejectHttp10: false,
      normalizePath: (target) => {
        seen.push(target);
        return target.includes('%00') ? undefined : target.replace('/./', '/');
      },
    };
    const ok = stream(h1('GET', 'http://a/x/./y?z', ['host', 'a']));
    expect(admitRequest(ok, opts)).toBeUndefined();
    expect([seen, ok.path]).toEqual([['/x/./y?z'], '/x/y?z']);
    const bad = stream(h1('GET', '/bad%00', ['host', 'a']));
    const r = admitRequest(bad, opts);
    expect(r && [r.status, r.flag, r.details, r.close]).toEqual([400, '-', 'path_normalization_failed', false]);
    // Not called for a request already refused.
    admitRequest(stream(h1('GET', '*', ['host', 'a'])), opts);
    expect(seen).toEqual(['/x/./y?z', '/bad%00']);
  });
});

describe('codecError', () => {
  const e = (code: string) => Object.assign(new Error(code), { code });
  test.each([
    ['HPE_HEADER_OVERFLOW', { status: 431, details: 'http1.headers_too_large' }],
    ['HPE_INVALID_METHOD', { status: 400, details: 'http1.codec_error' }],
    ['HPE_INVALID_CONSTANT', { status: 400, details: 'http1.codec_error' }],
    ['HPE_UNEXPECTED_CONTENT_LENGTH', { status: 400, details: 'http1.codec_error' }],
    ['HPE_CLOSED_CONNECTION', undefined],
    ['ECONNRESET', undefined],
    ['', undefined],
  ])('%s → %o', (code, expected) => {
    expect(codecError(e(code))).toEqual(expected);
  });
});
