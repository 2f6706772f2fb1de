/** Upstream failures → status, Envoy response flag and details (one table for HTTP, upgrades and TCP). */
import { describe, expect, test } from 'vitest';
import { HboneConnectError } from '../../../src/hbone/pool.ts';
import { LOCAL_REPLY_STATUS } from '../../../src/pipeline/response-flags.ts';
import { UpstreamOverflowError } from '../../../src/upstream/cluster-state.ts';
import { CONNECT_FAILURE, CONNECTION_OVERFLOW, isConnectFailure, NO_HEALTHY_UPSTREAM, PER_TRY_TIMEOUT, RESPONSE_TIMEOUT, upstreamFailure } from '../../../src/upstream/failure.ts';
import { UpstreamResetError } from '../../../src/upstream/h2-upstream.ts';

const coded = (code: string, name = 'Error') => Object.assign(new Error(code), { code, name });

describe('upstreamFailure', () => {
  test.each<[string, Error, boolean, number, string, string]>([
    ['HBONE CONNECT refused', new HboneConnectError('CONNECT', 'refused', 503), false, 503, 'UF', 'upstream_reset_before_response_started{connection_failure}'],
    ['TCP refused', coded('ECONNREFUSED'), false, 503, 'UF', 'upstream_reset_before_response_started{connection_failure}'],
    ['undici connect timeout', coded('UND_ERR_CONNECT_TIMEOUT'), false, 503, 'UF', 'upstream_reset_before_response_started{connection_failure}'],
    ['circuit breaker', new UpstreamOverflowError('c', 'max_requests', 1), false, 503, 'UO', 'upstream_reset_before_response_started{overflow}'],
    ['header overflow', coded('UND_ERR_HEADERS_OVERFLOW'), false, 502, 'UPE', 'upstream_reset_before_response_started{protocol_error}'],
    ['HTTP parse error', coded('HPE_INVALID_CONSTANT'), false, 502, 'UPE', 'upstream_reset_before_response_started{protocol_error}'],
    ['aborted', coded('UND_ERR_ABORTED'), false, 500, 'DC', 'downstream_remote_disconnect'],
    ['REFUSED_STREAM', new UpstreamResetError('r', 7, false), false, 503, 'UR', 'upstream_reset_before_response_started{remote_refused_stream_reset}'],
    ['RST_STREAM after headers', new UpstreamResetError('r', 2, true), true, 503, 'UR', 'upstream_reset_after_response_started{remote_reset}'],
    ['session gone (rst 0)', new UpstreamResetError('r', 0, false), false, 503, 'UC', 'upstream_reset_before_response_started{connection_termination}'],
    ['socket closed mid-response', coded('UND_ERR_SOCKET'), true, 503, 'UC', 'upstream_reset_after_response_started{connection_termination}'],
  ])('%s', (_name, err, started, status, flag, details) => {
    expect(upstreamFailure(err, started)).toEqual({ status, flag, details });
  });

  test('statuses are the local-reply table of their flag', () => {
    for (const f of [NO_HEALTHY_UPSTREAM, CONNECTION_OVERFLOW, CONNECT_FAILURE, RESPONSE_TIMEOUT, PER_TRY_TIMEOUT]) expect(f.status).toBe(LOCAL_REPLY_STATUS[f.flag]);
    expect([NO_HEALTHY_UPSTREAM.flag, CONNECTION_OVERFLOW.flag, CONNECT_FAILURE.flag]).toEqual(['UH', 'UO', 'UF']);
  });

  test('timeouts: 504 UT, with Envoy details for the route and the per-try timeout', () => {
    expect(RESPONSE_TIMEOUT).toEqual({ status: 504, flag: 'UT', details: 'response_timeout' });
    expect(PER_TRY_TIMEOUT).toEqual({ status: 504, flag: 'UT', details: 'upstream_per_try_timeout' });
  });

  test('connect failures are the ones nothing was sent on', () => {
    expect(isConnectFailure(coded('EHOSTUNREACH'))).toBe(true);
    expect(isConnectFailure(coded('ECONNRESET'))).toBe(false);
    expect(isConnectFailure(new UpstreamResetError('r', 7, false))).toBe(false);
  });
});
