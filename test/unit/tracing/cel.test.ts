/**
 * The CEL subset of Telemetry filter expressions and tag values: what Istio's docs show compiles
 * and evaluates as CEL does (errors absorbed by && / ||), anything else is refused when compiled.
 */
import { describe, expect, test } from 'vitest';
import { CEL_ERROR, CelCompileError, compileCel } from '../../../src/tracing/index.ts';
import { ConnectionContext, HeaderList, type StreamContext } from '../../../src/pipeline/index.ts';
import { INFO } from '../pipeline/fakes.ts';

const conn = Object.assign(Object.create(ConnectionContext.prototype) as ConnectionContext, {
  id: 7,
  info: { ...INFO, targetIp: '10.0.0.5', targetPort: 8080, downstreamAddress: '10.0.0.9', downstreamPort: 40000 },
  upstreamHost: '',
  upstreamCluster: '',
});

function stream(o: Partial<StreamContext> & { headers?: string[] } = {}): StreamContext {
  return {
    conn,
    method: 'GET',
    path: '/v1beta3/items?x=1',
    forwardPath: undefined,
    authority: 'web.demo',
    protocol: 'HTTP/1.1',
    requestHeaders: new HeaderList(o.headers ?? ['user-agent', 'curl/8', 'x-a', '1', 'x-a', '2']),
    requestId: 'rid',
    responseCode: 503,
    responseCodeDetails: 'upstream_reset',
    grpcStatus: '',
    bytesReceived: 3,
    bytesSent: 10,
    upstreamHost: '10.0.0.11:8080',
    upstreamCluster: 'inbound-vip|80|http|web.demo.svc.cluster.local',
    ...o,
  } as unknown as StreamContext;
}

const run = (expr: string, s: StreamContext | undefined = stream()) => compileCel(expr, ['bool', 'string', 'int']).evaluate(conn, s);

describe('what Istio documents', () => {
  test('response.code >= 400 (access log filter)', () => {
    const e = compileCel('response.code >= 400', ['bool']);
    expect(e.evaluate(conn, stream())).toBe(true);
    expect(e.evaluate(conn, stream({ responseCode: 200 }))).toBe(false);
    // No response code (a TCP tunnel has no request): an error, so no line.
    expect(e.evaluate(conn, undefined)).toBe(CEL_ERROR);
  });

  test("connection.mtls && request.url_path.contains('v1beta3')", () => {
    expect(run("connection.mtls && request.url_path.contains('v1beta3')")).toBe(true);
    expect(run("connection.mtls && request.url_path.contains('x=1')")).toBe(false); // url_path has no query
    expect(run("request.path.endsWith('x=1')")).toBe(true);
  });

  test('tag values: request.host, string(destination.port), headers', () => {
    expect(run('request.host')).toBe('web.demo');
    expect(run('string(destination.port)')).toBe('8080');
    expect(run("request.headers['X-A']")).toBe('1,2');
    expect(run("request.headers['missing']")).toBe(CEL_ERROR);
    expect(run("has(request.headers['missing'])")).toBe(false);
    expect(run("has(request.headers['user-agent'])")).toBe(true);
  });

  test('errors are absorbed where CEL absorbs them', () => {
    expect(run("request.headers['missing'] == 'x' || response.code == 503")).toBe(true);
    expect(run("request.headers['missing'] == 'x' && response.code == 200")).toBe(false);
    expect(run("request.headers['missing'] == 'x' && response.code == 503")).toBe(CEL_ERROR);
    expect(run("response.code == 503 || request.headers['missing'] == 'x'")).toBe(true);
    expect(run("response.code == 200 && request.headers['missing'] == 'x'")).toBe(false);
    expect(run("!(response.code < 500) && request.method != 'POST'")).toBe(true);
  });
});

describe('refused when compiled', () => {
  test.each([
    ["response.code >= '400'", 'compares int with string'],
    ['request.foo == 1', 'unknown attribute request.foo'],
    ["response.duration > duration('2s')", 'unknown attribute response.duration'],
    ['size(request.path) > 3', 'unsupported function size() (supported: has(), string(), and the methods startsWith(), endsWith(), contains())'],
    ["timestamp('2024-01-01T00:00:00Z') > 1", 'unsupported function timestamp()'],
    ['response.code + 1 > 3', 'unsupported CEL'],
    ["request.path.matches('^/a')", 'unsupported member'],
    ['response.code >= 4.5', 'unsupported member'],
    ['', 'empty expression'],
  ])('%s', (expr, why) => {
    expect(() => compileCel(expr, ['bool'])).toThrow(CelCompileError);
    expect(() => compileCel(expr, ['bool'])).toThrow(why);
  });

  test('a filter must be a bool, a tag value a string or an int', () => {
    expect(() => compileCel('request.host', ['bool'])).toThrow('is a string; this field needs bool');
    expect(() => compileCel('response.code >= 400', ['string', 'int'])).toThrow('is a bool');
  });
});
