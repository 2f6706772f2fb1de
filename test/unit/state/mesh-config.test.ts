import { describe, expect, test } from 'vitest';

import { ConfigError } from '../../../src/util/errors.ts';
import { DEFAULT_MESH_CONFIG, parseMeshConfig } from '../../../src/state/mesh-config.ts';
import { DEFAULT_TELEMETRY_CONFIG } from '../../../src/state/telemetry-config.ts';
import { caught } from '../../helpers/config-error.ts';


describe('parseMeshConfig', () => {
  test('defaults', () => {
    expect(DEFAULT_MESH_CONFIG).toEqual({
      trustDomain: 'cluster.local',
      trustDomainAliases: [],
      rootNamespace: 'istio-system',
      accessLogFile: '',
      accessLogEncoding: 'TEXT',
      telemetry: DEFAULT_TELEMETRY_CONFIG,
      raw: {},
    });
    expect(parseMeshConfig('', { file: 'm.yaml' })).toBe(DEFAULT_MESH_CONFIG);
    expect(parseMeshConfig('# nothing\n', { file: 'm.yaml' })).toBe(DEFAULT_MESH_CONFIG);
  });

  test('reads the typed fields and keeps the rest raw', () => {
    const m = parseMeshConfig(
      'trustDomain: corp.example\ntrustDomainAliases: [old.example, legacy.example]\nrootNamespace: mesh-root\nextensionProviders:\n- name: authz\n',
    );
    expect(m.trustDomain).toBe('corp.example');
    expect(m.trustDomainAliases).toEqual(['old.example', 'legacy.example']);
    expect(m.rootNamespace).toBe('mesh-root');
    expect(m.raw.extensionProviders).toEqual([{ name: 'authz' }]);
    expect(Object.isFrozen(m.raw.extensionProviders)).toBe(true);
  });

  test('access log: off and TEXT unless accessLogFile / accessLogEncoding say otherwise (Istio defaults)', () => {
    const off = parseMeshConfig('trustDomain: x\n');
    expect([off.accessLogFile, off.accessLogEncoding]).toEqual(['', 'TEXT']);
    const on = parseMeshConfig('accessLogFile: /dev/stdout\naccessLogEncoding: JSON\n');
    expect([on.accessLogFile, on.accessLogEncoding]).toEqual(['/dev/stdout', 'JSON']);
    const explicitOff = parseMeshConfig('accessLogFile: ""\naccessLogEncoding: TEXT\n');
    expect([explicitOff.accessLogFile, explicitOff.accessLogEncoding]).toEqual(['', 'TEXT']);
    const err = caught(() => parseMeshConfig('accessLogFile: /dev/stdout\naccessLogEncoding: YAML\n', { file: 'mesh.yaml' }));
    expect(err.location).toEqual({ file: 'mesh.yaml', line: 2, field: 'accessLogEncoding' });
    expect(err.message).toContain('must be TEXT or JSON, got "YAML"');
    expect(caught(() => parseMeshConfig('accessLogFile: 7\n', { file: 'mesh.yaml' })).location.field).toBe('accessLogFile');
  });

  test('empty trustDomain falls back to cluster.local', () => {
    expect(parseMeshConfig('trustDomain: ""\n').trustDomain).toBe('cluster.local');
  });

  test('accepts a whole istio ConfigMap and reports lines inside data.mesh', () => {
    const cm = 'apiVersion: v1\nkind: ConfigMap\nmetadata: {name: istio, namespace: istio-system}\ndata:\n  mesh: |\n    trustDomain: a.example\n';
    expect(parseMeshConfig(cm, { file: 'cm.yaml' }).trustDomain).toBe('a.example');
    const bad = cm.replace('trustDomain: a.example', 'accessLogFile: /dev/stdout\n    rootNamespace: {a: 1}');
    const err = caught(() => parseMeshConfig(bad, { file: 'cm.yaml' }));
    expect(err.location).toEqual({ file: 'cm.yaml', line: 7, field: 'data.mesh.rootNamespace' });
    expect(err.toString()).toBe('cm.yaml:7: field data.mesh.rootNamespace: MeshConfig rootNamespace must be a string, got {"a":1}');
  });

  test('type errors carry the location', () => {
    const err = caught(() => parseMeshConfig('trustDomain: x\ntrustDomainAliases:\n- ok\n- 7\n', { file: 'mesh.yaml' }));
    expect(err.location).toEqual({ file: 'mesh.yaml', line: 4, field: 'trustDomainAliases[1]' });
    expect(err.message).toContain('must be a string, got 7');
  });

  test('syntax errors and non-mappings', () => {
    const syntax = caught(() => parseMeshConfig('trustDomain: [a\n', { file: 'mesh.yaml' }));
    expect(syntax.message).toMatch(/^MeshConfig YAML syntax error/);
    expect(syntax.location.file).toBe('mesh.yaml');
    expect(syntax.location.line).toBeGreaterThanOrEqual(1);
    const scalar = caught(() => parseMeshConfig('just a string\n', { file: 'mesh.yaml' }));
    expect(scalar.message).toBe('MeshConfig must be a YAML mapping');
    expect(scalar.location).toEqual({ file: 'mesh.yaml', line: 1 });
  });

  test('line offsets when embedded at a given line', () => {
    const err = caught(() => parseMeshConfig('a: 1\ntrustDomain: 5\n', { file: 'f.yaml', line: 20, object: 'ConfigMap/x/istio', field: 'data.mesh' }));
    expect(err.location).toEqual({ file: 'f.yaml', line: 21, object: 'ConfigMap/x/istio', field: 'data.mesh.trustDomain' });
  });
});

describe('telemetry fields (extensionProviders, defaultProviders, tracing defaults)', () => {
  test('typed providers, Istio defaults, and errors that name the line', () => {
    const m = parseMeshConfig(
      'enableTracing: true\ndefaultConfig:\n  meshId: mesh-1\n  tracing: { sampling: 250, customTags: { env: { literal: { value: prod } } } }\nextensionProviders:\n- name: otel\n  opentelemetry: { service: otel.obs.svc.cluster.local, port: 4317, grpc: { timeout: 3s } }\n- name: log\n  envoyFileAccessLog: { logFormat: { text: "%RESPONSE_CODE% %REQ(:PATH)%" } }\n',
    );
    const t = m.telemetry;
    expect(t.enableTracing).toBe(true);
    expect(t.tracingSampling).toBe(1); // over 100 is 1, as istiod
    expect(t.meshId).toBe('mesh-1');
    expect(t.tracingCustomTags).toEqual({ env: { kind: 'literal', value: 'prod' } });
    expect(t.defaultProviders).toEqual({ tracing: [], metrics: ['prometheus'], accessLogging: [] });
    expect(t.extensionProviders.map((p) => `${p.name}:${p.kind}`)).toEqual(['prometheus:prometheus', 'envoy:envoyFileAccessLog', 'otel:opentelemetry', 'log:envoyFileAccessLog']);
    expect(t.extensionProviders[2]).toMatchObject({ opentelemetry: { protocol: 'grpc', timeoutMs: 3000, port: 4317 } });
    expect(t.extensionProviders[3]).toMatchObject({ envoyFileAccessLog: { path: '/dev/stdout', format: { kind: 'text' } } });
    expect(String(caught(() => parseMeshConfig('extensionProviders:\n- name: a\n  opentelemetry: { service: x, port: 0 }\n', { file: 'm.yaml' })))).toBe(
      'm.yaml:3: field extensionProviders[0].opentelemetry.port: MeshConfig extensionProviders[0].opentelemetry.port must be 1-65535',
    );
    expect(String(caught(() => parseMeshConfig('extensionProviders:\n- name: a\n  prometheus: {}\n- name: a\n  prometheus: {}\n')))).toContain('duplicate provider name "a"');
    expect(String(caught(() => parseMeshConfig('extensionProviders:\n- name: a\n  envoyFileAccessLog: { logFormat: { text: "%DYNAMIC_METADATA(x)%" } }\n')))).toContain(
      'unsupported command operator %DYNAMIC_METADATA(x)%',
    );
  });

  test('providers of the kinds the waypoint reads are strict: a misspelled field or kind is refused at its line, Istio\'s other kinds are kept', () => {
    const err = (text: string) => String(caught(() => parseMeshConfig(text, { file: 'm.yaml' })));
    // Not "port must be a port number, got undefined": the misspelling is named.
    expect(err('extensionProviders:\n- name: otel\n  opentelemetry:\n    service: c\n    prot: 4318\n')).toBe(
      'm.yaml:5: field extensionProviders[0].opentelemetry.prot: MeshConfig extensionProviders[0].opentelemetry.prot unknown field "prot"',
    );
    expect(err('extensionProviders:\n- name: otel\n  opentelemetry: { service: c, port: 4318, http: { path: /v1/traces, timout: 2s } }\n')).toContain('field extensionProviders[0].opentelemetry.http.timout: MeshConfig extensionProviders[0].opentelemetry.http.timout unknown field "timout"');
    expect(err('extensionProviders:\n- name: log\n  envoyFileAccessLog: { path: /dev/stdout, logFormat: { txt: x } }\n')).toContain('unknown field "txt"');
    expect(err('extensionProviders:\n- name: p\n  prometheus: { port: 1 }\n')).toContain('unknown field "port"');
    // A misspelled kind left the provider kindless and tracing silently off.
    expect(err('extensionProviders:\n- name: p\n  prometheus: {}\n- name: otel\n  opentelemtry:\n    service: c\n    port: 4318\n')).toMatch(
      /^m\.yaml:5: field extensionProviders\[1\]\.opentelemtry: MeshConfig extensionProviders\[1\]\.opentelemtry unknown field "opentelemtry": not an extension provider kind \(Istio's are envoyExtAuthzHttp, .*opentelemetry, /,
    );
    const kept = parseMeshConfig('extensionProviders:\n- name: z\n  zipkin: { service: z, port: 9411, enable64bitTraceId: true }\n- name: sw\n  skywalking: { service: s, port: 11800 }\n- name: authz\n  envoyExtAuthzHttp: { service: a, port: 80 }\n');
    expect(kept.telemetry.extensionProviders.slice(2).map((p) => (p.kind === 'other' ? p.otherKind : p.kind))).toEqual(['zipkin', 'skywalking', 'envoyExtAuthzHttp']);
  });
});
