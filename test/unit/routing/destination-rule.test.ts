/**
 * DestinationRule compilation: Istio's validation (refused with the rule and field named), which
 * rule applies to a service (namespace precedence, most specific host, short names, exportTo,
 * merging), and how a policy maps to the upstream's (defaults, portLevelSettings, hash keys).
 * The mesh: waypoint in `foo` (root namespace istio-system), Services httpbin (8000, 9000),
 * other (8000) in foo, and bar/remote (8000), all served.
 */
import { stringify } from 'yaml';
import { describe, expect, test } from 'vitest';
import { ConfigError } from '../../../src/util/errors.ts';
import { compileDestinationRules, DESTINATION_RULES, destinationRulesFor } from '../../../src/routing/destination-rule.ts';
import { compileMesh, compileMeshStepwise } from '../../../src/state/compile.ts';
import { PartCompileError } from '../../../src/state/parts.ts';
import type { MeshPart, MeshSnapshot } from '../../../src/state/types.ts';
import { runNow } from '../../../src/util/slices.ts';

const service = (name: string, ns: string, ip: string, ports: object[]) => ({
  apiVersion: 'v1',
  kind: 'Service',
  metadata: { name, namespace: ns },
  spec: { clusterIP: ip, selector: { app: name }, ports },
});

function meshText(rules: readonly object[]): string {
  const objects = [
    { apiVersion: 'v1', kind: 'ConfigMap', metadata: { name: 'istio', namespace: 'istio-system' }, data: { mesh: 'trustDomain: cluster.local\n' } },
    {
      apiVersion: 'gateway.networking.k8s.io/v1',
      kind: 'Gateway',
      metadata: { name: 'waypoint', namespace: 'foo' },
      spec: { gatewayClassName: 'istio-waypoint', listeners: [{ name: 'mesh', port: 15008, protocol: 'HBONE' }] },
    },
    { apiVersion: 'v1', kind: 'Namespace', metadata: { name: 'foo', labels: { 'istio.io/use-waypoint': 'waypoint' } } },
    { apiVersion: 'v1', kind: 'Namespace', metadata: { name: 'bar', labels: { 'istio.io/use-waypoint': 'waypoint', 'istio.io/use-waypoint-namespace': 'foo' } } },
    service('httpbin', 'foo', '127.53.200.10', [
      { name: 'http', port: 8000 },
      { name: 'http-admin', port: 9000 },
    ]),
    service('other', 'foo', '127.53.200.11', [{ name: 'http', port: 8000 }]),
    service('remote', 'bar', '127.53.200.12', [{ name: 'http', port: 8000 }]),
    ...rules,
  ];
  return objects.map((o) => stringify(o)).join('---\n');
}

function mesh(rules: readonly object[], parts: readonly MeshPart<unknown>[] = []): MeshSnapshot {
  return compileMesh({ text: meshText(rules), file: 'dr-test.yaml', parts });
}

/** Why the store refuses a mesh with `rules` (the DestinationRules part's refusal), or undefined. */
function reloadRefusal(rules: readonly object[]): string | undefined {
  try {
    runNow(compileMeshStepwise({ text: meshText(rules), file: 'dr-test.yaml', parts: [DESTINATION_RULES] }));
    return undefined;
  } catch (err) {
    if (err instanceof PartCompileError) return err.reason;
    throw err;
  }
}

const dr = (name: string, spec: object, ns = 'foo', apiVersion = 'networking.istio.io/v1') => ({ apiVersion, kind: 'DestinationRule', metadata: { name, namespace: ns }, spec });

const HTTPBIN = 'foo/httpbin.foo.svc.cluster.local|8000';
const ADMIN = 'foo/httpbin.foo.svc.cluster.local|9000';
const OTHER = 'foo/other.foo.svc.cluster.local|8000';
const REMOTE = 'bar/remote.bar.svc.cluster.local|8000';

function refused(spec: object): ConfigError {
  try {
    compileDestinationRules(mesh([dr('bad', spec)]));
  } catch (err) {
    expect(err).toBeInstanceOf(ConfigError);
    return err as ConfigError;
  }
  throw new Error('the rule was accepted');
}

describe('validation (refused, naming the rule and field)', () => {
  const cases: { name: string; spec: object; field: string; message: RegExp }[] = [
    { name: 'negative http2MaxRequests', spec: { host: 'httpbin', trafficPolicy: { connectionPool: { http: { http2MaxRequests: -1 } } } }, field: 'spec.trafficPolicy.connectionPool.http.http2MaxRequests', message: /non-negative/ },
    { name: 'negative maxConnections', spec: { host: 'httpbin', trafficPolicy: { connectionPool: { tcp: { maxConnections: -5 } } } }, field: 'spec.trafficPolicy.connectionPool.tcp.maxConnections', message: /non-negative/ },
    { name: 'empty connection pool', spec: { host: 'httpbin', trafficPolicy: { connectionPool: {} } }, field: 'spec.trafficPolicy.connectionPool', message: /at least one field/ },
    { name: 'empty traffic policy', spec: { host: 'httpbin', trafficPolicy: {} }, field: 'spec.trafficPolicy', message: /at least one field/ },
    { name: 'cookie without a name', spec: { host: 'httpbin', trafficPolicy: { loadBalancer: { consistentHash: { httpCookie: { ttl: '10s' } } } } }, field: 'spec.trafficPolicy.loadBalancer.consistentHash.httpCookie.name', message: /name required/ },
    { name: 'two hash keys', spec: { host: 'httpbin', trafficPolicy: { loadBalancer: { consistentHash: { httpHeaderName: 'x', useSourceIp: true } } } }, field: 'spec.trafficPolicy.loadBalancer.consistentHash', message: /only one of/ },
    { name: 'simple and consistentHash', spec: { host: 'httpbin', trafficPolicy: { loadBalancer: { simple: 'RANDOM', consistentHash: { useSourceIp: true } } } }, field: 'spec.trafficPolicy.loadBalancer', message: /only one of simple or consistentHash/ },
    { name: 'maglev table not prime', spec: { host: 'httpbin', trafficPolicy: { loadBalancer: { consistentHash: { useSourceIp: true, maglev: { tableSize: 1000 } } } } }, field: 'spec.trafficPolicy.loadBalancer.consistentHash.maglev.tableSize', message: /prime/ },
    { name: 'PASSTHROUGH', spec: { host: 'httpbin', trafficPolicy: { loadBalancer: { simple: 'PASSTHROUGH' } } }, field: 'spec.trafficPolicy.loadBalancer.simple', message: /PASSTHROUGH .* not supported/ },
    { name: 'unknown simple', spec: { host: 'httpbin', trafficPolicy: { loadBalancer: { simple: 'FASTEST' } } }, field: 'spec.trafficPolicy.loadBalancer.simple', message: /must be one of/ },
    { name: 'duration below 1ms', spec: { host: 'httpbin', trafficPolicy: { outlierDetection: { interval: '500us' } } }, field: 'spec.trafficPolicy.outlierDetection.interval', message: /greater than 1ms/ },
    { name: 'maxEjectionPercent over 100', spec: { host: 'httpbin', trafficPolicy: { outlierDetection: { maxEjectionPercent: 101 } } }, field: 'spec.trafficPolicy.outlierDetection.maxEjectionPercent', message: /0\.\.100/ },
    { name: 'port-level entry without a port', spec: { host: 'httpbin', trafficPolicy: { portLevelSettings: [{ loadBalancer: { simple: 'RANDOM' } }] } }, field: 'spec.trafficPolicy.portLevelSettings[0].port', message: /valid port/ },
    { name: 'invalid host', spec: { host: 'bad_host!' }, field: 'spec.host', message: /invalid/ },
    { name: 'missing host', spec: {}, field: 'spec.host', message: /required/ },
    { name: 'duplicate subsets', spec: { host: 'httpbin', subsets: [{ name: 'v1' }, { name: 'v1' }] }, field: 'spec.subsets[1].name', message: /duplicate subset/ },
    { name: 'invalid subset traffic policy', spec: { host: 'httpbin', subsets: [{ name: 'v1', trafficPolicy: { connectionPool: { http: { maxRetries: -1 } } } }] }, field: 'spec.subsets[0].trafficPolicy.connectionPool.http.maxRetries', message: /non-negative/ },
    { name: 'exportTo * with others', spec: { host: 'httpbin', exportTo: ['*', 'bar'] }, field: 'spec.exportTo', message: /both public/ },
    // Unknown fields are named (the CRD's structural schema refuses them), not reported as an empty policy.
    { name: 'unknown field in trafficPolicy', spec: { host: 'httpbin', trafficPolicy: { connectionPol: { tcp: { maxConnections: 1 } } } }, field: 'spec.trafficPolicy.connectionPol', message: /^unknown field "connectionPol"$/ },
    { name: 'unknown field deep in connectionPool', spec: { host: 'httpbin', trafficPolicy: { connectionPool: { http: { http2MaxRequest: 10 } } } }, field: 'spec.trafficPolicy.connectionPool.http.http2MaxRequest', message: /unknown field "http2MaxRequest"/ },
    { name: 'unknown field in a port-level entry', spec: { host: 'httpbin', trafficPolicy: { portLevelSettings: [{ port: { number: 8000 }, outlierDetections: {} }] } }, field: 'spec.trafficPolicy.portLevelSettings[0].outlierDetections', message: /unknown field "outlierDetections"/ },
    { name: 'unknown field in spec', spec: { host: 'httpbin', trafficPolicies: {} }, field: 'spec.trafficPolicies', message: /unknown field "trafficPolicies"/ },
    { name: 'unknown field in a subset', spec: { host: 'httpbin', subsets: [{ name: 'v1', label: { v: '1' } }] }, field: 'spec.subsets[0].label', message: /unknown field "label"/ },
    // Integers by their proto type (API:networking/v1alpha3/destination_rule.proto).
    { name: 'http2MaxRequests beyond int32', spec: { host: 'httpbin', trafficPolicy: { connectionPool: { http: { http2MaxRequests: 1099511627776 } } } }, field: 'spec.trafficPolicy.connectionPool.http.http2MaxRequests', message: /invalid value for int32 field: 1099511627776/ },
    { name: 'maxConnections beyond int32', spec: { host: 'httpbin', trafficPolicy: { connectionPool: { tcp: { maxConnections: 2147483648 } } } }, field: 'spec.trafficPolicy.connectionPool.tcp.maxConnections', message: /int32/ },
    { name: 'maxEjectionPercent beyond int32', spec: { host: 'httpbin', trafficPolicy: { outlierDetection: { maxEjectionPercent: 4294967396 } } }, field: 'spec.trafficPolicy.outlierDetection.maxEjectionPercent', message: /int32/ },
    { name: 'consecutive5xxErrors beyond uint32', spec: { host: 'httpbin', trafficPolicy: { outlierDetection: { consecutive5xxErrors: 4294967296 } } }, field: 'spec.trafficPolicy.outlierDetection.consecutive5xxErrors', message: /less than or equal to 4294967295/ },
    { name: 'negative consecutiveGatewayErrors', spec: { host: 'httpbin', trafficPolicy: { outlierDetection: { consecutiveGatewayErrors: -1 } } }, field: 'spec.trafficPolicy.outlierDetection.consecutiveGatewayErrors', message: /greater than or equal to 0/ },
    { name: 'tcpKeepalive probes beyond uint32', spec: { host: 'httpbin', trafficPolicy: { connectionPool: { tcp: { tcpKeepalive: { probes: 2 ** 32 } } } } }, field: 'spec.trafficPolicy.connectionPool.tcp.tcpKeepalive.probes', message: /less than or equal/ },
    { name: 'negative ring size (uint64)', spec: { host: 'httpbin', trafficPolicy: { loadBalancer: { consistentHash: { useSourceIp: true, ringHash: { minimumRingSize: -5 } } } } }, field: 'spec.trafficPolicy.loadBalancer.consistentHash.ringHash.minimumRingSize', message: /non-negative integer/ },
    { name: 'useClientProtocol with UPGRADE', spec: { host: 'httpbin', trafficPolicy: { connectionPool: { http: { h2UpgradePolicy: 'UPGRADE', useClientProtocol: true } } } }, field: 'spec.trafficPolicy.connectionPool.http.useClientProtocol', message: /must not be true when H2UpgradePolicy is UPGRADE/ },
    { name: 'a string where an integer goes', spec: { host: 'httpbin', trafficPolicy: { connectionPool: { tcp: { maxConnections: 'ten' } } } }, field: 'spec.trafficPolicy.connectionPool.tcp.maxConnections', message: /integer/ },
  ];
  test.each(cases)('$name', ({ spec, field, message }) => {
    const err = refused(spec);
    expect(err.location.object).toBe('DestinationRule/foo/bad');
    expect(err.location.field).toBe(field);
    // The file and the line of the field (or of its nearest existing parent) in the mesh file.
    expect(err.location.file).toBe('dr-test.yaml');
    expect(err.location.line).toBeGreaterThan(30);
    expect(err.message).toMatch(message);
  });

  test('a reload with an invalid rule is refused with a reason; a valid one is accepted', () => {
    expect(reloadRefusal([dr('bad', { host: 'httpbin', trafficPolicy: { connectionPool: { tcp: { maxConnections: -1 } } } })])).toMatch(/invalid destination rule: dr-test.yaml:\d+: .*DestinationRule\/foo\/bad/);
    expect(reloadRefusal([dr('ok', { host: 'httpbin', trafficPolicy: { loadBalancer: { simple: 'RANDOM' } } })])).toBeUndefined();
  });

  test('every field of the proto is known: a rule using all of them is accepted', () => {
    const policy = {
      loadBalancer: { simple: 'ROUND_ROBIN', localityLbSetting: { distribute: [{ from: 'r/z/*', to: { 'r/z/*': 100 } }], failover: [{ from: 'r', to: 's' }], failoverPriority: ['x'], enabled: true }, warmupDurationSecs: '10s', warmup: { duration: '10s', minimumPercent: 10, aggression: 1.5 } },
      connectionPool: {
        tcp: { maxConnections: 2147483647, connectTimeout: '1s', tcpKeepalive: { probes: 3, time: '10s', interval: '5s' }, maxConnectionDuration: '1h', idleTimeout: '0s' },
        http: { http1MaxPendingRequests: 1, http2MaxRequests: 2147483647, maxRequestsPerConnection: 1, maxRetries: 3, idleTimeout: '10s', h2UpgradePolicy: 'DO_NOT_UPGRADE', useClientProtocol: true, maxConcurrentStreams: 100 },
      },
      outlierDetection: { consecutiveErrors: 5, splitExternalLocalOriginErrors: true, consecutiveLocalOriginFailures: 4294967295, consecutiveGatewayErrors: 0, consecutive5xxErrors: 5, interval: '1s', baseEjectionTime: '30s', maxEjectionPercent: 100, minHealthPercent: 0 },
      tls: { mode: 'ISTIO_MUTUAL', subjectAltNames: ['a'], sni: 'x', insecureSkipVerify: false, credentialName: 'c', clientCertificate: 'a', privateKey: 'b', caCertificates: 'c', caCrl: 'd' },
    };
    const spec = {
      host: 'httpbin',
      trafficPolicy: { ...policy, portLevelSettings: [{ port: { number: 9000 }, ...policy }], tunnel: { protocol: 'CONNECT', targetHost: 'h', targetPort: 8080 }, proxyProtocol: { version: 'V2' } },
      subsets: [{ name: 'v1', labels: { version: 'v1' }, trafficPolicy: { loadBalancer: { consistentHash: { httpCookie: { name: 'c', path: '/', ttl: '0s' }, maglev: { tableSize: 65537 } } } } }],
      exportTo: ['*'],
    };
    const c = compileDestinationRules(mesh([dr('all', spec)]));
    expect(c.policies.get(HTTPBIN)!.connectionPool.maxRequests).toBe(2147483647);
  });

  test('consistentHash without a key is accepted (Envoy picks at random), as Istio accepts it', () => {
    const c = compileDestinationRules(mesh([dr('h', { host: 'httpbin', trafficPolicy: { loadBalancer: { consistentHash: {} } } })]));
    expect(c.policies.get(HTTPBIN)!.loadBalancer.consistentHash!.key).toEqual({ kind: 'none' });
  });

  test('v1beta1 and v1alpha3 rules are read too; other groups are not', () => {
    for (const v of ['networking.istio.io/v1beta1', 'networking.istio.io/v1alpha3']) {
      expect(compileDestinationRules(mesh([dr('r', { host: 'httpbin', trafficPolicy: { loadBalancer: { simple: 'RANDOM' } } }, 'foo', v)])).policies.has(HTTPBIN)).toBe(true);
    }
  });
});

describe('which rule applies', () => {
  const simple = (name: string, host: string, lb: string, ns = 'foo', extra: object = {}) => dr(name, { host, trafficPolicy: { loadBalancer: { simple: lb } }, ...extra }, ns);
  const lbOf = (snap: MeshSnapshot, key: string) => compileDestinationRules(snap).policies.get(key)?.loadBalancer.simple;

  test('a short host is relative to the rule namespace; a FQDN works; other services get nothing', () => {
    const c = compileDestinationRules(mesh([simple('a', 'httpbin', 'RANDOM'), simple('b', 'other.foo.svc.cluster.local', 'ROUND_ROBIN')]));
    expect(c.policies.get(HTTPBIN)!.loadBalancer.simple).toBe('RANDOM');
    expect(c.policies.get(HTTPBIN)!.source).toBe('DestinationRule/foo/a');
    expect(c.policies.get(OTHER)!.loadBalancer.simple).toBe('ROUND_ROBIN');
    expect(c.policies.has(REMOTE)).toBe(false);
    // `httpbin.foo` has dots, so it is not expanded and matches nothing (as in Istio).
    expect(compileDestinationRules(mesh([simple('c', 'httpbin.foo', 'RANDOM')])).policies.size).toBe(0);
  });

  test('the exact host beats a wildcard; the longer wildcard beats the shorter', () => {
    const snap = mesh([simple('all', '*', 'RANDOM'), simple('ns', '*.foo.svc.cluster.local', 'ROUND_ROBIN'), simple('one', 'httpbin', 'LEAST_REQUEST')]);
    expect(lbOf(snap, HTTPBIN)).toBe('LEAST_REQUEST');
    expect(lbOf(snap, OTHER)).toBe('ROUND_ROBIN');
    expect(lbOf(snap, REMOTE)).toBe('RANDOM');
  });

  test("a rule in the waypoint's namespace wins over the service namespace's and the root namespace's", () => {
    const host = 'remote.bar.svc.cluster.local';
    expect(lbOf(mesh([simple('root', host, 'RANDOM', 'istio-system'), simple('svc', host, 'ROUND_ROBIN', 'bar'), simple('wp', host, 'LEAST_REQUEST', 'foo')]), REMOTE)).toBe('LEAST_REQUEST');
    expect(lbOf(mesh([simple('root', host, 'RANDOM', 'istio-system'), simple('svc', host, 'ROUND_ROBIN', 'bar')]), REMOTE)).toBe('ROUND_ROBIN');
    expect(lbOf(mesh([simple('root', host, 'RANDOM', 'istio-system')]), REMOTE)).toBe('RANDOM');
  });

  test("exportTo: a service-namespace rule not exported to the waypoint's namespace does not apply", () => {
    const host = 'remote.bar.svc.cluster.local';
    expect(lbOf(mesh([simple('svc', host, 'ROUND_ROBIN', 'bar', { exportTo: ['.'] })]), REMOTE)).toBeUndefined();
    expect(lbOf(mesh([simple('svc', host, 'ROUND_ROBIN', 'bar', { exportTo: ['foo'] })]), REMOTE)).toBe('ROUND_ROBIN');
    expect(lbOf(mesh([simple('svc', host, 'ROUND_ROBIN', 'bar', { exportTo: ['other-ns'] }), simple('root', host, 'RANDOM', 'istio-system')]), REMOTE)).toBe('RANDOM');
  });

  test('rules for one host in one namespace merge: the first traffic policy wins', () => {
    const c = compileDestinationRules(mesh([dr('subsets-only', { host: 'httpbin', subsets: [{ name: 'v1', labels: { v: '1' } }] }), simple('second', 'httpbin', 'RANDOM'), simple('third', 'httpbin', 'ROUND_ROBIN')]));
    expect(c.policies.get(HTTPBIN)!.loadBalancer.simple).toBe('RANDOM');
    expect(c.policies.get(HTTPBIN)!.source).toBe('DestinationRule/foo/second');
  });

  test('rules with a workloadSelector (sidecar rules) are not applied by the waypoint', () => {
    expect(compileDestinationRules(mesh([simple('sel', 'httpbin', 'RANDOM', 'foo', { workloadSelector: { matchLabels: { app: 'x' } } })])).policies.size).toBe(0);
  });
});

describe('policy mapping', () => {
  test('defaults: limits unlimited, outlier detection only when present, with Envoy/Istio defaults', () => {
    const c = compileDestinationRules(mesh([dr('r', { host: 'httpbin', trafficPolicy: { outlierDetection: {} } })]));
    const p = c.policies.get(HTTPBIN)!;
    expect(p.connectionPool.maxRequests).toBe(Infinity);
    expect(p.loadBalancer).toEqual({ simple: 'LEAST_REQUEST', consistentHash: undefined });
    expect(p.outlierDetection).toEqual({ consecutive5xx: 5, consecutiveGatewayFailure: 0, intervalMs: 10_000, baseEjectionTimeMs: 30_000, maxEjectionPercent: 10, minHealthPercent: 0 });
    expect(compileDestinationRules(mesh([dr('r', { host: 'httpbin', trafficPolicy: { loadBalancer: { simple: 'RANDOM' } } })])).policies.get(HTTPBIN)!.outlierDetection).toBeUndefined();
  });

  test('the bootstrap algorithm applies when a rule sets none', () => {
    const c = compileDestinationRules(mesh([dr('r', { host: 'httpbin', trafficPolicy: { connectionPool: { tcp: { maxConnections: 3 } } } })]), 'ROUND_ROBIN');
    expect(c.policies.get(HTTPBIN)!.loadBalancer.simple).toBe('ROUND_ROBIN');
  });

  test('connection pool fields map to limits (ms for durations)', () => {
    const c = compileDestinationRules(
      mesh([
        dr('r', {
          host: 'httpbin',
          trafficPolicy: {
            connectionPool: {
              tcp: { maxConnections: 7, connectTimeout: '250ms' },
              http: { http1MaxPendingRequests: 2, http2MaxRequests: 3, maxRequestsPerConnection: 4, maxRetries: 5, idleTimeout: '1m30s' },
            },
          },
        }),
      ]),
    );
    expect(c.policies.get(HTTPBIN)!.connectionPool).toEqual({
      maxConnections: 7,
      connectTimeoutMs: 250,
      maxPendingRequests: 2,
      maxRequests: 3,
      maxRetries: 5,
      maxRequestsPerConnection: 4,
      idleTimeoutMs: 90_000,
    });
  });

  test('portLevelSettings replace the policy for their port (no inheritance); other ports keep the top level', () => {
    const c = compileDestinationRules(
      mesh([
        dr('r', {
          host: 'httpbin',
          trafficPolicy: {
            loadBalancer: { simple: 'ROUND_ROBIN' },
            connectionPool: { http: { http2MaxRequests: 10 } },
            portLevelSettings: [{ port: { number: 9000 }, loadBalancer: { simple: 'RANDOM' } }],
          },
        }),
      ]),
    );
    expect(c.policies.get(HTTPBIN)!.loadBalancer.simple).toBe('ROUND_ROBIN');
    expect(c.policies.get(HTTPBIN)!.connectionPool.maxRequests).toBe(10);
    expect(c.policies.get(ADMIN)!.loadBalancer.simple).toBe('RANDOM');
    expect(c.policies.get(ADMIN)!.connectionPool.maxRequests).toBe(Infinity);
  });

  test('hash keys: header (lower-cased), cookie with ttl, source IP, query parameter; ring size and maglev', () => {
    const key = (ch: object) => compileDestinationRules(mesh([dr('r', { host: 'httpbin', trafficPolicy: { loadBalancer: { consistentHash: ch } } })])).policies.get(HTTPBIN)!.loadBalancer.consistentHash!;
    expect(key({ httpHeaderName: 'X-User' })).toEqual({ key: { kind: 'header', name: 'x-user' }, algorithm: 'RING_HASH', minimumRingSize: 1024, tableSize: 65537 });
    expect(key({ httpCookie: { name: 's', path: '/', ttl: '0s' } }).key).toEqual({ kind: 'cookie', name: 's', path: '/', ttlMs: 0 });
    expect(key({ useSourceIp: true }).key).toEqual({ kind: 'sourceIp' });
    expect(key({ httpQueryParameterName: 'u', ringHash: { minimumRingSize: 2048 } })).toMatchObject({ key: { kind: 'queryParameter', name: 'u' }, minimumRingSize: 2048 });
    expect(key({ useSourceIp: true, maglev: { tableSize: 251 } })).toMatchObject({ algorithm: 'MAGLEV', tableSize: 251 });
    expect(key({ useSourceIp: true, minimumRingSize: '4096' })).toMatchObject({ algorithm: 'RING_HASH', minimumRingSize: 4096 });
  });

  test('forTarget: the policy of a resolved target; the default (key "") for others; compiled once, with the snapshot', () => {
    const snap = mesh([dr('r', { host: 'httpbin', trafficPolicy: { loadBalancer: { simple: 'RANDOM' } } })], [DESTINATION_RULES]);
    const c = destinationRulesFor(snap);
    expect(destinationRulesFor(snap)).toBe(c);
    expect(c.forTarget(snap.resolveTarget('127.53.200.10', 8000)!).key).toBe(HTTPBIN);
    expect(c.forTarget(snap.resolveTarget('127.53.200.11', 8000)!).key).toBe('');
  });
});
