/** Request hash keys: header (sorted multi-values), cookie (existing or generated with Set-Cookie), source IP, query parameter. */
import { describe, expect, test } from 'vitest';
import { HeaderList, type StreamContext } from '../../../src/pipeline/index.ts';
import { GENERATED_COOKIE, hashRequestOf } from '../../../src/router/attempt-endpoint.ts';
import { cookieValue, queryParameter, requestHash as hashOf } from '../../../src/upstream/hash-policy.ts';
import type { HashKey } from '../../../src/routing/traffic-policy.ts';
import { uint64ToHex, xxHash64 } from '../../../src/upstream/xxhash.ts';

function stream(o: { headers?: Record<string, string | string[]>; path?: string; forwarded?: string; client?: string; port?: number } = {}) {
  const slots = new Map<unknown, unknown>();
  return {
    requestHeaders: new HeaderList(Object.entries(o.headers ?? {}).flatMap(([n, v]) => (Array.isArray(v) ? v.flatMap((x) => [n, x]) : [n, v]))),
    path: o.path ?? '/',
    forwardPath: undefined,
    authority: 'svc.demo',
    method: 'GET',
    conn: { info: { forwarded: o.forwarded ?? '', downstreamAddress: o.client ?? '10.1.1.1', downstreamPort: o.port ?? 40000, targetIp: '10.96.0.1', targetPort: 80 } },
    set: (slot: unknown, v: unknown) => slots.set(slot, v),
    get: (slot: unknown) => slots.get(slot),
  } as unknown as StreamContext;
}

/** The hash of a request as the router computes it (the stream's values passed in). */
const requestHash = (key: HashKey, s: StreamContext) => hashOf(key, hashRequestOf(s));

describe('header', () => {
  test('hashes the value; absent header: no hash', () => {
    expect(requestHash({ kind: 'header', name: 'x-user' }, stream({ headers: { 'x-user': 'alice' } }))).toBe(xxHash64('alice'));
    expect(requestHash({ kind: 'header', name: 'x-user' }, stream())).toBeUndefined();
  });
  test('several values hash the same in any order', () => {
    const a = requestHash({ kind: 'header', name: 'x-k' }, stream({ headers: { 'x-k': ['b', 'a'] } }));
    const b = requestHash({ kind: 'header', name: 'x-k' }, stream({ headers: { 'x-k': ['a', 'b'] } }));
    expect(a).toBe(b);
    expect(a).not.toBe(xxHash64('a'));
  });
});

describe('cookie', () => {
  test('an existing cookie is hashed (quotes removed); nothing is generated', () => {
    const s = stream({ headers: { cookie: 'a=1; session="abc"; b=2' } });
    expect(requestHash({ kind: 'cookie', name: 'session', path: '/', ttlMs: 10_000 }, s)).toBe(xxHash64('abc'));
    expect(s.get(GENERATED_COOKIE)).toBeUndefined();
  });
  test('absent with a ttl: generated from the connection addresses, Set-Cookie as Envoy writes it', () => {
    const s = stream({ client: '10.1.1.1', port: 40000 });
    const h = requestHash({ kind: 'cookie', name: 'session', path: '/app', ttlMs: 3_600_000 }, s);
    const value = uint64ToHex(xxHash64('10.1.1.1:4000010.96.0.1:80'));
    expect(h).toBe(xxHash64(value));
    expect(s.get(GENERATED_COOKIE)).toBe(`session="${value}"; Max-Age=3600; Path=/app; HttpOnly`);
  });
  test('a zero ttl makes a session cookie (no Max-Age); no ttl: no cookie and no hash', () => {
    const s = stream();
    requestHash({ kind: 'cookie', name: 'c', path: '', ttlMs: 0 }, s);
    expect(s.get(GENERATED_COOKIE)).toMatch(/^c="[0-9a-f]{16}"; HttpOnly$/);
    const t = stream();
    expect(requestHash({ kind: 'cookie', name: 'c', path: '', ttlMs: undefined }, t)).toBeUndefined();
    expect(t.get(GENERATED_COOKIE)).toBeUndefined();
  });
  test('cookieValue reads several Cookie headers', () => {
    expect(cookieValue(['x=1', 'y=2; z=3'], 'z')).toBe('3');
    expect(cookieValue('x=1', 'y')).toBeUndefined();
  });
});

test('source IP: the Forwarded client when ztunnel sent one, else the tunnel peer', () => {
  expect(requestHash({ kind: 'sourceIp' }, stream({ client: '10.1.1.1' }))).toBe(xxHash64('10.1.1.1'));
  expect(requestHash({ kind: 'sourceIp' }, stream({ client: '10.1.1.1', forwarded: 'for=10.2.2.2' }))).toBe(xxHash64('10.2.2.2'));
});

test('query parameter: the first value, undecoded; absent: no hash', () => {
  expect(queryParameter('/p?a=1&user=bob&user=eve', 'user')).toBe('bob');
  expect(queryParameter('/p?user=a%20b', 'user')).toBe('a%20b');
  expect(queryParameter('/p', 'user')).toBeUndefined();
  expect(requestHash({ kind: 'queryParameter', name: 'user' }, stream({ path: '/x?user=bob' }))).toBe(xxHash64('bob'));
  expect(requestHash({ kind: 'queryParameter', name: 'user' }, stream({ path: '/x' }))).toBeUndefined();
});
