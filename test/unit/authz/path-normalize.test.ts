/**
 * Path normalization and its bypasses (istio/istio#27409,
 * envoyproxy/envoy#6435 / CVE-2019-9901): DENY `/admin` and `/admin/*`, otherwise allow; each
 * attack path is normalized as Envoy does for the mesh's mode, the decision is taken on the
 * normalized path, and that same path (plus the query) is what the backend receives.
 *
 * Case handling, deliberately: Istio matches paths case-sensitively, so `/ADMIN` is not denied by
 * a `/admin` rule; whether the backend serves it as `/admin` is the backend's business.
 * Path parameters, deliberately: Envoy does not strip `;params`, so `/admin;x=1` is not `/admin`
 * and escapes an exact `/admin` rule (a `/admin*` prefix catches it).
 */
import { describe, expect, test } from 'vitest';

import { canonicalizePath, normalizeRequestPath, type PathNormalization } from '../../../src/authz/path-normalize.ts';
import { engine, wp } from './mesh.ts';

const denyAdmin = [wp('deny-admin', 'DENY', [{ to: [{ operation: { paths: ['/admin', '/admin/*'] } }] }])];

interface I4Row {
  readonly sent: string;
  readonly mode: PathNormalization;
  /** What the backend receives; undefined: rejected with 400 before authz. */
  readonly upstream: string | undefined;
  readonly decision?: 'ALLOW' | 'DENY';
}

const I4: readonly I4Row[] = [
  { sent: '/admin;x=1', mode: 'BASE', upstream: '/admin;x=1', decision: 'ALLOW' },
  { sent: '/public/../admin', mode: 'BASE', upstream: '/admin', decision: 'DENY' },
  { sent: '/./admin', mode: 'BASE', upstream: '/admin', decision: 'DENY' },
  { sent: '//admin', mode: 'BASE', upstream: '//admin', decision: 'ALLOW' },
  { sent: '//admin', mode: 'MERGE_SLASHES', upstream: '/admin', decision: 'DENY' },
  { sent: '/admin%2fsecret', mode: 'BASE', upstream: '/admin%2fsecret', decision: 'ALLOW' },
  { sent: '/admin%2fsecret', mode: 'DECODE_AND_MERGE_SLASHES', upstream: '/admin/secret', decision: 'DENY' },
  { sent: '/%61dmin', mode: 'BASE', upstream: '/admin', decision: 'DENY' },
  { sent: '/admin/..;/admin', mode: 'BASE', upstream: '/admin/..;/admin', decision: 'DENY' },
  { sent: '/admin%00', mode: 'BASE', upstream: undefined },
  { sent: '/admin?x=1', mode: 'BASE', upstream: '/admin?x=1', decision: 'DENY' },
  { sent: '/ADMIN', mode: 'BASE', upstream: '/ADMIN', decision: 'ALLOW' },
  { sent: '/admin', mode: 'NONE', upstream: '/admin', decision: 'DENY' },
  { sent: '/public/../admin', mode: 'NONE', upstream: '/public/../admin', decision: 'ALLOW' },
];

describe('pitfall I4: DENY /admin and /admin/*, otherwise allow', () => {
  const engines = new Map<PathNormalization, ReturnType<typeof engine>>();
  const engineFor = (mode: PathNormalization) => {
    let e = engines.get(mode);
    if (!e) engines.set(mode, (e = engine(denyAdmin, { pathNormalization: mode })));
    return e;
  };

  for (const row of I4) {
    const outcome = row.upstream === undefined ? '400 before authz' : `${row.decision}, backend gets ${row.upstream}`;
    test(`${row.sent} (${row.mode}) → ${outcome}`, () => {
      const e = engineFor(row.mode);
      expect(e.authz.pathNormalization).toBe(row.mode);
      const n = e.authz.normalizePath(row.sent);
      if (row.upstream === undefined) {
        expect(n).toBeUndefined();
        return;
      }
      expect(n?.forward).toBe(row.upstream);
      expect(e.http({ path: n!.path }).decision).toBe(row.decision);
    });
  }

  test('/admin;x=1 is caught by a prefix rule /admin*', () => {
    const e = engine([wp('deny-admin', 'DENY', [{ to: [{ operation: { paths: ['/admin*'] } }] }])]);
    expect(e.http({ path: e.authz.normalizePath('/admin;x=1')!.path })).toEqual({ decision: 'DENY', policy: 'ns[foo]-policy[deny-admin]-rule[0]' });
  });
});

describe('BASE normalization (Envoy normalize_path = Chromium canonicalizer)', () => {
  test.each([
    ['/a/b/../c', '/a/c'],
    ['/a/./b/.', '/a/b/'],
    ['/a/b/..', '/a/'],
    ['/..', '/'],
    ['/../../x', '/x'],
    ['/a/%2e%2E/b', '/b'],
    ['/a/.%2e/b', '/b'],
    ['/a/..x/b', '/a/..x/b'],
    ['/a/.x', '/a/.x'],
    ['/a\\b\\..\\c', '/a/c'],
    ['\\a', '/a'],
    ['a/b', '/a/b'],
    ['', '/'],
    ['/%7e%5F%2d%30%41', '/~_-0A'],
    ['/%2f%5c%25%3b', '/%2f%5c%25%3b'],
    ['/a b"<>^`{|}', '/a%20b%22%3C%3E%5E%60%7B%7C%7D'],
    ['/caf\u00e9', '/caf%E9'],
    ['/\u20ac', '/%E2%82%AC'],
    ['/%zz', '/%zz'],
    ['/%%30%30', '/%2500'],
  ])('%s → %s', (input, output) => {
    expect(canonicalizePath(input)).toBe(output);
  });

  test('NUL, literal or escaped, fails (400)', () => {
    expect(canonicalizePath('/a\u0000b')).toBeUndefined();
    expect(canonicalizePath('/a%00')).toBeUndefined();
    expect(normalizeRequestPath('/a%00?x', 'MERGE_SLASHES')).toBeUndefined();
  });

  test('a canonical path is returned as is (fast path)', () => {
    const p = '/api/v1/items;page=2';
    expect(canonicalizePath(p)).toBe(p);
  });

  test('the query is neither normalized nor matched, and is forwarded', () => {
    expect(normalizeRequestPath('/a/../b?x=/../%00&y', 'BASE')).toEqual({ path: '/b', forward: '/b?x=/../%00&y' });
    expect(normalizeRequestPath('/a/../b?q', 'NONE')).toEqual({ path: '/a/../b', forward: '/a/../b?q' });
  });

  test('MERGE_SLASHES and DECODE_AND_MERGE_SLASHES', () => {
    expect(normalizeRequestPath('/a//b///c/', 'MERGE_SLASHES')?.path).toBe('/a/b/c/');
    expect(normalizeRequestPath('/a%2F..%2Fb', 'DECODE_AND_MERGE_SLASHES')?.path).toBe('/b');
    expect(normalizeRequestPath('/a%5Cb', 'DECODE_AND_MERGE_SLASHES')?.path).toBe('/a/b');
    expect(normalizeRequestPath('/a%2F..%2Fb', 'MERGE_SLASHES')?.path).toBe('/a%2F..%2Fb');
  });
});

describe('mesh setting', () => {
  test('default is BASE; an unknown mode is a config error', () => {
    expect(engine([]).authz.pathNormalization).toBe('BASE');
    expect(engine([], { pathNormalization: 'DEFAULT' }).authz.pathNormalization).toBe('BASE');
    expect(() => engine([], { pathNormalization: 'SLASHY' })).toThrow(/pathNormalization.normalization|must be one of/);
  });
});
