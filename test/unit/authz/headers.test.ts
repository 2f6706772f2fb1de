/**
 * The engine's view of request headers (src/authz/headers.ts): one value per header field, as
 * `request.headers[...]` conditions test them since GHSA-ghc4-35x6-crw5, the comma-joined string
 * for callers that read one, and cookie crumbs as one value.
 */
import { describe, expect, test } from 'vitest';
import { headersFromRaw } from '../../../src/authz/index.ts';

describe('headersFromRaw', () => {
  const h = headersFromRaw(['X-Role', 'user', 'accept', '*/*', 'x-role', 'admin', 'x-one', 'a,b', 'Cookie', 'a=1', 'cookie', 'b=2']);

  test('each field of a name is its own value, in arrival order; names compare case-insensitively', () => {
    expect(h.values('x-role')).toEqual(['user', 'admin']);
    expect(h.values('x-one')).toEqual(['a,b']);
    expect(h.values('x-missing')).toBeUndefined();
  });

  test('get joins the fields with "," (no space)', () => {
    expect(h.get('x-role')).toBe('user,admin');
    expect(h.get('x-missing')).toBeUndefined();
  });

  test('cookie crumbs are one value joined with "; " (RFC 9113 §8.2.3)', () => {
    expect(h.values('cookie')).toEqual(['a=1; b=2']);
    expect(h.get('cookie')).toBe('a=1; b=2');
  });
});
