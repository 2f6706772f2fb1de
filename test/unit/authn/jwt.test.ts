/**
 * RequestAuthentication end to end on the authenticator: tokens signed here with `jose`, key sets
 * served over HTTP on loopback (127.0.172.x), Envoy's statuses and bodies, token locations, header
 * outputs, several issuers, and the JWKS cache (refresh, rotation, outage).
 */
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { log } from '../../../src/util/log.ts';
import { claimMatcher, requestPrincipalMatcher } from '../../../src/authz/jwt.ts';
import { headersFromRaw } from '../../../src/authz/headers.ts';
import { RequestAuthn, type AuthnResult } from '../../../src/authn/index.ts';
import { HTTPBIN, meshWith, now, ra, req, signingKey, startJwksServer, targetOf, token, TO_WAYPOINT, type SigningKey } from './fixtures.ts';

// Expected failures (JWKS outages, invalid resources, failed checks) log warnings; keep the output readable.
log.level = 'silent';

const ISS = 'https://issuer.example.com';
const ISS2 = 'testing@secure.istio.io';

let jwks: Awaited<ReturnType<typeof startJwksServer>>;
let k1: SigningKey;
let k2: SigningKey;
let rogue: SigningKey;
let ec: SigningKey;

beforeAll(async () => {
  jwks = await startJwksServer('127.0.172.10', 8080);
  k1 = await signingKey('k1');
  k2 = await signingKey('k2');
  rogue = await signingKey('k1'); // same kid as k1, different key
  ec = await signingKey('ec1', 'ES256');
  jwks.state.keys = [k1.jwk];
});
afterAll(async () => {
  await jwks?.close();
});

/** An authenticator for httpbin with `rules` attached to the waypoint. */
function authnWith(rules: object[], opts: ConstructorParameters<typeof RequestAuthn>[0] = {}) {
  const authn = new RequestAuthn({ cooldownMs: 0, ...opts });
  const snap = meshWith([ra('jwt', { targetRefs: TO_WAYPOINT, jwtRules: rules })], [authn.part]);
  const verifier = authn.forTarget(snap, targetOf(snap));
  if (!verifier) throw new Error('expected an authenticator');
  return verifier;
}

const bearer = (t: string) => ['authorization', `Bearer ${t}`];

function failed(r: AuthnResult) {
  if (r.ok) throw new Error(`expected a failure, got ${JSON.stringify(r)}`);
  return r;
}
function passed(r: AuthnResult) {
  if (!r.ok) throw new Error(`expected success, got ${r.status} ${r.body}`);
  return r;
}

describe('one issuer, remote JWKS, default locations', () => {
  const rule = () => ({ issuer: ISS, jwksUri: jwks.uri, audiences: ['httpbin'] });

  test('a valid Bearer token: principal <iss>/<sub>, claims, the engine\'s JWT shape; token stripped', async () => {
    const v = authnWith([rule()]);
    const t = await token(k1, { iss: ISS, sub: 'alice', aud: 'httpbin', groups: ['eng', 'ops'], scope: 'read write' });
    const r = passed(await v.authenticate(req([...bearer(t), 'x-other', '1'])));
    expect(r.principal).toBe(`${ISS}/alice`);
    expect(r.claims).toMatchObject({ sub: 'alice', groups: ['eng', 'ops'] });
    expect(r.headers.remove).toEqual(['authorization']);
    expect(r.headers.set).toEqual([]);
    // What the policy engine reads from it.
    expect(requestPrincipalMatcher(`${ISS}/alice`)(r.jwt)).toBe(true);
    expect(requestPrincipalMatcher(`${ISS}/bob`)(r.jwt)).toBe(false);
    expect(claimMatcher(['groups'], ['ops'])(r.jwt)).toBe(true);
    expect(claimMatcher(['scope'], ['write'])(r.jwt)).toBe(true);
  });

  test('no token: passes without identity (left to the policies), and the JWKS is not even fetched', async () => {
    const v = authnWith([rule()]);
    const before = jwks.state.fetches;
    const r = passed(await v.authenticate(req(['x-other', '1'])));
    expect(r).toMatchObject({ principal: undefined, jwt: undefined, claims: undefined, headers: { remove: [], set: [] } });
    expect(jwks.state.fetches).toBe(before);
  });

  test('expired: 401 `Jwt is expired` with a Bearer challenge; within the 60 s skew it passes', async () => {
    const v = authnWith([rule()]);
    const old = await token(k1, { iss: ISS, sub: 'a', aud: 'httpbin', exp: now() - 120 });
    const r = failed(await v.authenticate(req(bearer(old), { path: '/x?y=1' })));
    expect(r).toEqual({
      ok: false,
      status: 401,
      reason: 'Jwt is expired',
      body: 'Jwt is expired',
      headers: [['www-authenticate', 'Bearer realm="http://httpbin.foo:8000/x?y=1", error="invalid_token"']],
      details: 'jwt_authn_access_denied{Jwt_is_expired}',
    });
    const justExpired = await token(k1, { iss: ISS, sub: 'a', aud: 'httpbin', exp: now() - 30 });
    expect((await v.authenticate(req(bearer(justExpired)))).ok).toBe(true);
  });

  test('not yet valid (nbf beyond the skew): 401 `Jwt not yet valid`', async () => {
    const v = authnWith([rule()]);
    const early = await token(k1, { iss: ISS, sub: 'a', aud: 'httpbin', nbf: now() + 600 });
    expect(failed(await v.authenticate(req(bearer(early))))).toMatchObject({ status: 401, body: 'Jwt not yet valid' });
  });

  test('wrong issuer: 401 `Jwt issuer is not configured`', async () => {
    const v = authnWith([rule()]);
    const t = await token(k1, { iss: 'https://evil.example.com', sub: 'a', aud: 'httpbin' });
    expect(failed(await v.authenticate(req(bearer(t))))).toMatchObject({ status: 401, body: 'Jwt issuer is not configured' });
  });

  test('wrong audience: 403 `Audiences in Jwt are not allowed`; scheme and trailing slash are ignored when comparing', async () => {
    const v = authnWith([{ ...rule(), audiences: ['https://httpbin.foo/'] }]);
    const wrong = await token(k1, { iss: ISS, sub: 'a', aud: ['other'] });
    expect(failed(await v.authenticate(req(bearer(wrong))))).toMatchObject({ status: 403, body: 'Audiences in Jwt are not allowed' });
    const noAud = await token(k1, { iss: ISS, sub: 'a' });
    expect(failed(await v.authenticate(req(bearer(noAud))))).toMatchObject({ status: 403 });
    const same = await token(k1, { iss: ISS, sub: 'a', aud: ['x', 'httpbin.foo'] });
    expect((await v.authenticate(req(bearer(same)))).ok).toBe(true);
  });

  test('signed by another key with the same kid: 401 `Jwt verification fails`', async () => {
    const v = authnWith([rule()]);
    const forged = await token(rogue, { iss: ISS, sub: 'a', aud: 'httpbin' });
    expect(failed(await v.authenticate(req(bearer(forged))))).toMatchObject({ status: 401, body: 'Jwt verification fails' });
  });

  test('not a JWT: 401 with the parse status', async () => {
    const v = authnWith([rule()]);
    expect(failed(await v.authenticate(req(bearer('abc.def'))))).toMatchObject({ body: 'Jwt is not in the form of Header.Payload.Signature' });
    const noneAlg = `${Buffer.from('{"alg":"none"}').toString('base64url')}.${Buffer.from('{}').toString('base64url')}.sig`;
    expect(failed(await v.authenticate(req(bearer(noneAlg))))).toMatchObject({ body: 'Jwt header [alg] field value is invalid' });
  });

  test('the default `access_token` query parameter; the token is removed from the path', async () => {
    const v = authnWith([rule()]);
    const t = await token(k1, { iss: ISS, sub: 'q', aud: 'httpbin' });
    const r = passed(await v.authenticate(req([], { path: `/p?a=1&access_token=${t}&b=2` })));
    expect(r.principal).toBe(`${ISS}/q`);
    expect(r.path).toBe('/p?a=1&b=2');
  });

  test('CORS preflights pass without looking at tokens', async () => {
    const v = authnWith([rule()]);
    const r = await v.authenticate(req(['origin', 'https://a.example', 'access-control-request-method', 'GET', ...bearer('garbage')], { method: 'OPTIONS' }));
    expect(r).toMatchObject({ ok: true, principal: undefined });
  });
});

describe('token locations and outputs', () => {
  test('fromHeaders with a prefix: only that header is read, the token after the prefix', async () => {
    const v = authnWith([{ issuer: ISS, jwksUri: jwks.uri, fromHeaders: [{ name: 'X-Jwt-Assertion', prefix: 'Token ' }] }]);
    const t = await token(k1, { iss: ISS, sub: 'h' });
    const r = passed(await v.authenticate(req(['x-jwt-assertion', `Token ${t}`])));
    expect(r.principal).toBe(`${ISS}/h`);
    expect(r.headers.remove).toEqual(['x-jwt-assertion']);
    // A Bearer token is not in this rule's locations: nothing to validate.
    const r2 = passed(await v.authenticate(req(bearer(t))));
    expect(r2.principal).toBeUndefined();
    // Without the prefix the header carries no token for this rule.
    expect(passed(await v.authenticate(req(['x-jwt-assertion', t]))).principal).toBeUndefined();
  });

  test('fromParams and fromCookies', async () => {
    const v = authnWith([{ issuer: ISS, jwksUri: jwks.uri, fromParams: ['my_token'], fromCookies: ['session'] }]);
    const t = await token(k1, { iss: ISS, sub: 'p' });
    const byParam = passed(await v.authenticate(req([], { path: `/p?my_token=${t}` })));
    expect(byParam).toMatchObject({ principal: `${ISS}/p`, path: '/p' });
    const byCookie = passed(await v.authenticate(req(['cookie', `a=b; session=${t}`])));
    expect(byCookie.principal).toBe(`${ISS}/p`);
    expect(byCookie.headers.remove).toEqual([]); // Envoy leaves cookies alone
    const bad = failed(await v.authenticate(req(['cookie', 'session=x.y.z'])));
    expect(bad.status).toBe(401);
  });

  test('forwardOriginalToken keeps the token', async () => {
    const v = authnWith([{ issuer: ISS, jwksUri: jwks.uri, forwardOriginalToken: true }]);
    const t = await token(k1, { iss: ISS, sub: 'f' });
    expect(passed(await v.authenticate(req(bearer(t)))).headers.remove).toEqual([]);
  });

  test('outputPayloadToHeader and outputClaimToHeaders; a client cannot forge those headers', async () => {
    const v = authnWith([
      {
        issuer: ISS,
        jwksUri: jwks.uri,
        outputPayloadToHeader: 'x-jwt-payload',
        outputClaimToHeaders: [
          { header: 'x-jwt-sub', claim: 'sub' },
          { header: 'x-jwt-team', claim: 'org.team' },
          { header: 'x-jwt-groups', claim: 'groups' },
          { header: 'x-jwt-missing', claim: 'nope' },
        ],
      },
    ]);
    const t = await token(k1, { iss: ISS, sub: 'o', org: { team: 'blue' }, groups: ['a', 'b'] });
    const r = passed(await v.authenticate(req([...bearer(t), 'x-jwt-payload', 'forged'])));
    const set = new Map(r.headers.set);
    expect(JSON.parse(Buffer.from(set.get('x-jwt-payload')!, 'base64url').toString())).toMatchObject({ iss: ISS, sub: 'o' });
    expect(set.get('x-jwt-payload')).toBe(t.split('.')[1]);
    expect(set.get('x-jwt-sub')).toBe('o');
    expect(set.get('x-jwt-team')).toBe('blue');
    expect(set.get('x-jwt-groups')).toBe('a,b');
    expect(set.has('x-jwt-missing')).toBe(false);
    expect(r.headers.remove).toEqual(expect.arrayContaining(['x-jwt-payload', 'x-jwt-sub', 'x-jwt-team', 'authorization']));
    // No token: the forged headers are still removed.
    const none = passed(await v.authenticate(req(['x-jwt-sub', 'admin'])));
    expect(none.headers.remove).toContain('x-jwt-sub');
    expect(none.headers.set).toEqual([]);
  });

  test('spaceDelimitedClaims reach the engine', async () => {
    const v = authnWith([{ issuer: ISS, jwksUri: jwks.uri, spaceDelimitedClaims: ['roles'] }]);
    const t = await token(k1, { iss: ISS, sub: 's', roles: 'admin viewer' });
    const r = passed(await v.authenticate(req(bearer(t))));
    expect(r.jwt?.spaceDelimitedClaims).toEqual(['roles']);
    expect(claimMatcher(['roles'], ['viewer'])(r.jwt)).toBe(true);
  });
});

describe('several issuers', () => {
  const rules = () => [
    { issuer: ISS, jwksUri: jwks.uri },
    { issuer: ISS2, jwks: JSON.stringify({ keys: [ec.jwk] }) },
  ];

  test('a token of either issuer passes (inline JWKS for the second, ES256)', async () => {
    const v = authnWith(rules());
    expect(passed(await v.authenticate(req(bearer(await token(ec, { iss: ISS2, sub: 'e' })))))).toMatchObject({ principal: `${ISS2}/e` });
    expect(passed(await v.authenticate(req(bearer(await token(k1, { iss: ISS, sub: 'r' })))))).toMatchObject({ principal: `${ISS}/r` });
  });

  test('an unknown issuer: 401 `Jwt issuer is not configured`; a bad token of a known one: its own error', async () => {
    const v = authnWith(rules());
    const stranger = await token(k1, { iss: 'https://stranger', sub: 'x' });
    expect(failed(await v.authenticate(req(bearer(stranger))))).toMatchObject({ body: 'Jwt issuer is not configured' });
    const expired = await token(ec, { iss: ISS2, sub: 'x', exp: now() - 3600 });
    expect(failed(await v.authenticate(req(bearer(expired))))).toMatchObject({ body: 'Jwt is expired' });
  });
});

describe('JWKS cache', () => {
  test('key rotation: a token with a new kid triggers a re-fetch and passes', async () => {
    jwks.state.keys = [k1.jwk];
    const v = authnWith([{ issuer: ISS, jwksUri: `${jwks.uri}?rotation` }], { cooldownMs: 0 });
    expect((await v.authenticate(req(bearer(await token(k1, { iss: ISS, sub: 'a' })))))).toMatchObject({ ok: true });
    jwks.state.keys = [k2.jwk];
    const before = jwks.state.fetches;
    const r = await v.authenticate(req(bearer(await token(k2, { iss: ISS, sub: 'b' }))));
    expect(r).toMatchObject({ ok: true, principal: `${ISS}/b` });
    expect(jwks.state.fetches).toBe(before + 1);
    jwks.state.keys = [k1.jwk];
  });

  test('within the cooldown a kid miss is not re-fetched: `Jwks doesn\'t have key to match kid or alg from Jwt`', async () => {
    jwks.state.keys = [k1.jwk];
    const v = authnWith([{ issuer: ISS, jwksUri: `${jwks.uri}?cooldown` }], { cooldownMs: 60_000 });
    await v.authenticate(req(bearer(await token(k1, { iss: ISS, sub: 'a' }))));
    jwks.state.keys = [k2.jwk];
    const before = jwks.state.fetches;
    const r = failed(await v.authenticate(req(bearer(await token(k2, { iss: ISS, sub: 'b' })))));
    expect(r.body).toBe("Jwks doesn't have key to match kid or alg from Jwt");
    expect(jwks.state.fetches).toBe(before);
    jwks.state.keys = [k1.jwk];
  });

  test('cached keys are re-fetched after cacheMaxAgeMs', async () => {
    jwks.state.keys = [k1.jwk];
    const v = authnWith([{ issuer: ISS, jwksUri: `${jwks.uri}?maxage` }], { cacheMaxAgeMs: 100, cooldownMs: 60_000 });
    const t = await token(k1, { iss: ISS, sub: 'a' });
    const start = jwks.state.fetches;
    await v.authenticate(req(bearer(t)));
    await v.authenticate(req(bearer(t)));
    expect(jwks.state.fetches).toBe(start + 1);
    await new Promise((r) => setTimeout(r, 150));
    await v.authenticate(req(bearer(t)));
    expect(jwks.state.fetches).toBe(start + 2);
  });

  test('JWKS outage: tokens fail with `Jwks remote fetch is failed`, requests without one pass; stale keys are kept', async () => {
    jwks.state.keys = [k1.jwk];
    jwks.state.fail = true;
    try {
      const v = authnWith([{ issuer: ISS, jwksUri: `${jwks.uri}?outage` }], { cacheMaxAgeMs: 50 });
      const t = await token(k1, { iss: ISS, sub: 'a' });
      expect(failed(await v.authenticate(req(bearer(t))))).toMatchObject({ status: 401, body: 'Jwks remote fetch is failed' });
      expect((await v.authenticate(req([]))).ok).toBe(true);
      jwks.state.fail = false;
      expect((await v.authenticate(req(bearer(t)))).ok).toBe(true);
      jwks.state.fail = true;
      await new Promise((r) => setTimeout(r, 80)); // keys now stale, the re-fetch fails
      expect((await v.authenticate(req(bearer(t)))).ok).toBe(true);
    } finally {
      jwks.state.fail = false;
    }
  });

  test('no jwks and no jwksUri: OpenID discovery from the issuer', async () => {
    jwks.state.keys = [k1.jwk];
    const v = authnWith([{ issuer: jwks.base }]);
    const r = await v.authenticate(req(bearer(await token(k1, { iss: jwks.base, sub: 'd' }))));
    expect(r).toMatchObject({ ok: true, principal: `${jwks.base}/d` });
  });
});

describe('attachment and validation', () => {
  test('selector and namespace-wide RequestAuthentications are not the waypoint\'s; Service targetRefs only apply to that service', () => {
    const authn = new RequestAuthn();
    const snap = meshWith(
      [
        ra('by-selector', { selector: { matchLabels: { app: 'httpbin' } }, jwtRules: [{ issuer: 'sel' }] }),
        ra('ns-wide', { jwtRules: [{ issuer: 'ns' }] }),
        ra('for-httpbin', { targetRefs: [{ kind: 'Service', group: '', name: 'httpbin' }], jwtRules: [{ issuer: 'svc', jwks: JSON.stringify({ keys: [] }) }] }),
      ],
      [authn.part],
    );
    expect(authn.forTarget(snap, targetOf(snap, HTTPBIN))?.rules.map((r) => r.issuer)).toEqual(['svc']);
    expect(authn.forTarget(snap, targetOf(snap, { ip: '127.0.172.101', port: 8000 }))).toBeUndefined();
  });

  test('waypoint-wide and service rules combine, sorted by issuer', () => {
    const authn = new RequestAuthn();
    const snap = meshWith(
      [ra('wide', { targetRefs: TO_WAYPOINT, jwtRules: [{ issuer: 'zeta' }] }), ra('svc', { targetRefs: [{ kind: 'Service', name: 'httpbin' }], jwtRules: [{ issuer: 'alpha' }] })],
      [authn.part],
    );
    expect(authn.forTarget(snap, targetOf(snap, HTTPBIN))?.rules.map((r) => r.issuer)).toEqual(['alpha', 'zeta']);
    expect(authn.forTarget(snap, targetOf(snap, { ip: '127.0.172.101', port: 8000 }))?.rules.map((r) => r.issuer)).toEqual(['zeta']);
  });

  test.each([
    [{ targetRefs: TO_WAYPOINT, jwtRules: [{ audiences: ['a'] }] }, 'spec.jwtRules[0].issuer', 'issuer must be set'],
    [{ targetRefs: TO_WAYPOINT, jwtRules: [{ issuer: 'x', jwksUri: 'ftp://keys' }] }, 'spec.jwtRules[0].jwksUri', 'scheme must be http or https'],
    [{ targetRefs: TO_WAYPOINT, jwtRules: [{ issuer: 'x', jwks: '{not json' }] }, 'spec.jwtRules[0].jwks', 'jwks parse error'],
    [{ targetRefs: TO_WAYPOINT, jwtRules: [{ issuer: 'x', fromHeaders: [{ prefix: 'Bearer ' }] }] }, 'spec.jwtRules[0].fromHeaders[0].name', 'must be non-empty'],
    [{ targetRefs: TO_WAYPOINT, jwtRules: [{ issuer: 'x', fromParams: [''] }] }, 'spec.jwtRules[0].fromParams[0]', 'must be non-empty'],
    [{ targetRefs: TO_WAYPOINT, selector: { matchLabels: { a: 'b' } }, jwtRules: [] }, 'spec', 'only one of selector, targetRef or targetRefs'],
    [{ targetRefs: [{ kind: 'Pod', name: 'p' }], jwtRules: [] }, 'spec.targetRefs[0]', 'targetRef must be to one of'],
  ])('invalid: %j → %s', (spec, field, message) => {
    const snap = meshWith([ra('bad', spec)]);
    try {
      RequestAuthn.validate(snap);
      throw new Error('expected a ConfigError');
    } catch (err) {
      expect(String(err)).toContain(`RequestAuthentication/foo/bad: field ${field}: `);
      expect(String(err)).toContain(message);
    }
    // Compiled into a snapshot, it refuses the whole snapshot with the same error.
    let refused: unknown;
    try {
      meshWith([ra('bad', spec)], [new RequestAuthn().part]);
    } catch (err) {
      refused = err;
    }
    expect(String(refused)).toContain(`authn-test.yaml:`);
    expect(String(refused)).toContain(`RequestAuthentication/foo/bad: field ${field}: `);
    expect(String(refused)).toContain(message);
  });

  test('HeaderLookup joins repeated Authorization values; the first Bearer token is read up to the comma', async () => {
    jwks.state.keys = [k1.jwk];
    const v = authnWith([{ issuer: ISS, jwksUri: jwks.uri }]);
    const t = await token(k1, { iss: ISS, sub: 'c' });
    const r = await v.authenticate({ method: 'GET', path: '/', host: 'h', headers: headersFromRaw(['authorization', `Bearer ${t}`, 'authorization', 'Basic xyz']) });
    expect(r).toMatchObject({ ok: true, principal: `${ISS}/c` });
  });
});
