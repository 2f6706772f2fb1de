import { describe, expect, test } from 'vitest';

import { isHttpProtocol, parseProtocol, portProtocol } from '../../../src/state/protocol.ts';
import type { PortProtocol } from '../../../src/state/types.ts';

describe('portProtocol', () => {
  test.each<[string, string | undefined, PortProtocol]>([
    ['http', undefined, 'HTTP'],
    ['http-api', undefined, 'HTTP'],
    ['HTTP-API', undefined, 'HTTP'],
    ['http2', undefined, 'HTTP2'],
    ['http2-web', undefined, 'HTTP2'],
    ['grpc', undefined, 'GRPC'],
    ['grpc-api', undefined, 'GRPC'],
    ['grpc-web', undefined, 'GRPC-Web'],
    ['grpc-web-ui', undefined, 'GRPC-Web'],
    ['GRPC-Web', undefined, 'GRPC-Web'],
    ['https', undefined, 'HTTPS'],
    ['tcp-db', undefined, 'TCP'],
    ['tls', undefined, 'TLS'],
    ['mongo', undefined, 'Mongo'],
    ['redis-cache', undefined, 'Redis'],
    ['mysql', undefined, 'MySQL'],
    ['udp-dns', undefined, 'UDP'],
    ['web', undefined, 'UNKNOWN'],
    ['', undefined, 'UNKNOWN'],
    ['httpx', undefined, 'UNKNOWN'],
    // appProtocol wins over the name, entirely
    ['tcp', 'http', 'HTTP'],
    ['http', 'tcp', 'TCP'],
    ['http', 'something-else', 'UNKNOWN'],
    ['web', 'kubernetes.io/h2c', 'HTTP2'],
    ['web', 'kubernetes.io/ws', 'HTTP'],
    ['web', 'kubernetes.io/wss', 'HTTPS'],
    ['web', 'grpc', 'GRPC'],
    ['web', 'GRPC-WEB', 'GRPC-Web'],
    ['http', '', 'HTTP'],
  ])('name %j appProtocol %j → %s', (name, appProtocol, expected) => {
    expect(portProtocol(name, appProtocol)).toBe(expected);
  });

  test('transport UDP wins', () => {
    expect(portProtocol('http', undefined, { transport: 'UDP' })).toBe('UDP');
    expect(portProtocol('http', undefined, { transport: 'TCP' })).toBe('HTTP');
  });

  test('undeclared protocol on a well-known port is TCP', () => {
    expect(portProtocol('db', undefined, { port: 3306 })).toBe('TCP');
    expect(portProtocol('dns', undefined, { port: 53 })).toBe('TCP');
    expect(portProtocol('db', undefined, { port: 3307 })).toBe('UNKNOWN');
    expect(portProtocol('http', undefined, { port: 3306 })).toBe('HTTP');
  });
});

test('parseProtocol reads exact names only', () => {
  expect(parseProtocol('HTTP')).toBe('HTTP');
  expect(parseProtocol('tls')).toBe('TLS');
  expect(parseProtocol('http-foo')).toBe('UNKNOWN');
  expect(parseProtocol('')).toBe('UNKNOWN');
});

test.each<[PortProtocol, boolean]>([
  ['HTTP', true],
  ['HTTP2', true],
  ['GRPC', true],
  ['GRPC-Web', true],
  ['HTTPS', false],
  ['TCP', false],
  ['TLS', false],
  ['UNKNOWN', false],
  ['Redis', false],
])('isHttpProtocol(%s) = %s', (p, expected) => {
  expect(isHttpProtocol(p)).toBe(expected);
});
