/**
 * Where a MeshConfig opentelemetry provider's spans go, as the exporter dials it and as the
 * "tracing: exporting spans" log line shows it: OTLP/HTTP with its configured path, OTLP/gRPC by address.
 */
import { expect, test } from 'vitest';
import { otlpEndpoint } from '../../../src/tracing/runtime.ts';

const provider = { service: 'obs/otel.example', host: 'otel.example', port: 4318, path: '/api/otlp/traces', timeoutMs: undefined, headers: {}, maxTagLength: 0, environmentResource: false };

test('OTLP/HTTP: the URL carries the configured path; OTLP/gRPC: the address', () => {
  expect(otlpEndpoint({ ...provider, protocol: 'http' })).toBe('http://otel.example:4318/api/otlp/traces');
  expect(otlpEndpoint({ ...provider, protocol: 'http', path: 'v1/traces' })).toBe('http://otel.example:4318/v1/traces');
  expect(otlpEndpoint({ ...provider, protocol: 'grpc', port: 4317 })).toBe('grpc://otel.example:4317');
});
