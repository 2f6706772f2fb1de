/**
 * ext_authz provider settings (MeshConfig `extensionProviders`) and the outcome mapping, without
 * sockets: defaults, durations, header-list matching, validation, and Envoy's header actions.
 */
import { create } from '@bufbuild/protobuf';
import { describe, expect, test } from 'vitest';
import { applyHeaderMutations, outcomeFromCheckResponse } from '../../../src/ext-authz/check-response.ts';
import { headerListMatcher, parseDurationMs, parseProviderSettings } from '../../../src/ext-authz/config.ts';
import { CheckResponseSchema } from '../../../src/ext-authz/proto.ts';

describe('provider settings', () => {
  test('defaults: timeout 600 s (Istio), statusOnError 403, failOpen false, no body', () => {
    expect(parseProviderSettings({ name: 'a', envoyExtAuthzGrpc: { service: 'x.ns.svc.cluster.local', port: 9000 } })).toEqual({
      kind: 'grpc',
      name: 'a',
      service: 'x.ns.svc.cluster.local',
      port: 9000,
      timeoutMs: 600_000,
      failOpen: false,
      statusOnError: 403,
    });
  });

  test('not an ext_authz provider: undefined', () => {
    expect(parseProviderSettings({ name: 'z', zipkin: { service: 'z', port: 9411 } })).toBeUndefined();
  });

  test.each([
    ['0.5s', 500],
    ['10s', 10_000],
    ['0.0001s', 1],
    ['1.250s', 1_250],
    [2, 2_000],
  ])('duration %j → %d ms', (text, ms) => {
    expect(parseDurationMs(text, 'timeout')).toBe(ms);
  });

  test.each(['500ms', '1m', '-1s', 'soon', ''])('duration %j is rejected (protobuf JSON durations end in s)', (text) => {
    expect(() => parseDurationMs(text, 'timeout')).toThrow(/timeout must be a duration/);
  });

  test.each([
    [{ port: 0 }, /port must be in the range/],
    [{ service: '' }, /service must not be empty/],
    [{ statusOnError: 'teapot' }, /invalid statusOnError/],
    [{ statusOnError: '42' }, /invalid statusOnError/],
    [{ pathPrefix: 'check' }, /pathPrefix must begin with/],
    [{ includeRequestHeadersInCheck: ['*'] }, /single wildcard/],
    [{ includeRequestBodyInCheck: { maxRequestBytes: -1 } }, /maxRequestBytes/],
  ])('HTTP provider %j is rejected', (extra, message) => {
    expect(() => parseProviderSettings({ name: 'h', envoyExtAuthzHttp: { service: 's.ns.svc.cluster.local', port: 80, ...extra } })).toThrow(message);
  });

  test('header lists: exact, prefix*, *suffix, case-insensitive; deprecated includeHeadersInCheck only as a fallback', () => {
    const m = headerListMatcher(['X-Exact', 'x-pre-*', '*-suf'], 'f')!;
    expect(['x-exact', 'x-pre-', 'x-pre-abc', 'a-suf', '-suf'].every(m)).toBe(true);
    expect(['x-exact2', 'x-pr', 'suf', 'a-sufx'].some(m)).toBe(false);
    expect(headerListMatcher([], 'f')).toBeUndefined();
    const s = parseProviderSettings({ name: 'h', envoyExtAuthzHttp: { service: 's', port: 80, includeHeadersInCheck: ['old'] } });
    expect(s?.kind === 'http' && s.includeRequestHeaders?.('old')).toBe(true);
    const both = parseProviderSettings({ name: 'h', envoyExtAuthzHttp: { service: 's', port: 80, includeHeadersInCheck: ['old'], includeRequestHeadersInCheck: ['new'] } });
    expect(both?.kind === 'http' && [both.includeRequestHeaders?.('new'), both.includeRequestHeaders?.('old')]).toEqual([true, false]);
  });

  test('additional headers are sorted by name (as istiod emits them)', () => {
    const s = parseProviderSettings({ name: 'h', envoyExtAuthzHttp: { service: 's', port: 80, includeAdditionalHeadersInCheck: { 'x-b': '2', 'X-A': '1' } } });
    expect(s?.kind === 'http' && s.additionalHeaders).toEqual([
      ['x-a', '1'],
      ['x-b', '2'],
    ]);
  });
});

describe('gRPC CheckResponse → outcome', () => {
  test('append_action and the deprecated append map to Envoy\'s header actions', () => {
    const res = create(CheckResponseSchema, {
      httpResponse: {
        case: 'okResponse',
        value: {
          headers: [
            { header: { key: 'a', value: '1' } },
            { header: { key: 'b', value: '2' }, appendAction: 1 },
            { header: { key: 'c', value: '3' }, appendAction: 2 },
            { header: { key: 'd', value: '4' }, appendAction: 3 },
            { header: { key: 'e', value: '5' }, append: true },
            { header: { key: 'f', value: '6' }, append: false },
          ],
          responseHeadersToAdd: [{ header: { key: 'g', value: '7' }, append: true }],
        },
      },
    });
    const out = outcomeFromCheckResponse(res);
    expect(out.allow && out.headersToUpstream.map((m) => `${m.name}:${m.action}`)).toEqual(['a:add', 'b:add-if-absent', 'c:set', 'd:overwrite-if-exists', 'e:append', 'f:set']);
    expect(out.allow && out.headersToDownstream).toEqual([{ name: 'g', value: '7', action: 'add' }]);
  });

  test('status unset is OK (code 0)', () => {
    expect(outcomeFromCheckResponse(create(CheckResponseSchema, {})).allow).toBe(true);
  });

  test('applyHeaderMutations', () => {
    const base: [string, string][] = [
      ['x', '1'],
      ['y', '1'],
    ];
    expect(
      applyHeaderMutations(base, [
        { name: 'x', value: '2', action: 'append' },
        { name: 'y', value: '2', action: 'set' },
        { name: 'z', value: '1', action: 'overwrite-if-exists' },
        { name: 'w', value: '1', action: 'add-if-absent' },
        { name: 'w', value: '2', action: 'add-if-absent' },
        { name: 'v', value: '1', action: 'add' },
        { name: 'v', value: '2', action: 'add' },
      ]),
    ).toEqual([
      ['x', '1,2'],
      ['y', '2'],
      ['w', '1'],
      ['v', '1'],
      ['v', '2'],
    ]);
  });
});
