import { create, toBinary } from '@bufbuild/protobuf';
import { StructSchema, ValueSchema } from '@bufbuild/protobuf/wkt';
import type { Value } from '@bufbuild/protobuf/wkt';
import { describe, expect, test } from 'vitest';
import { EMPTY_PEER, type PeerInfo } from '../../../src/peer/peer-info.ts';
import {
  MAX_PEER_METADATA_BASE64,
  decodePeerMetadata,
  encodePeerMetadata,
  nodeId,
} from '../../../src/peer/peer-metadata-header.ts';
import { ownerOf, workloadTypeFromOwner } from '../../../src/peer/peer-struct.ts';
import {
  ISTIO_114_HEADER,
  ISTIO_120_GATEWAY_HEADER,
  ISTIO_124_HEADER,
  ISTIO_124_PEER,
  MINIMAL_HEADER,
  MINIMAL_HEX,
} from './fixtures.ts';

const EMPTY: PeerInfo = EMPTY_PEER;

function decodeOk(value: string): PeerInfo {
  const result = decodePeerMetadata(value);
  if (!result.ok) throw new Error(`expected ok, got ${result.error}`);
  return result.peer;
}

/** A header value for a Struct built in the test (string values, LABELS as a nested struct). */
function headerOf(fields: Record<string, string | Value | Record<string, string | Value>>): string {
  const toValue = (v: string | Value | Record<string, string | Value>): Value => {
    if (typeof v === 'string') return create(ValueSchema, { kind: { case: 'stringValue', value: v } });
    if ('$typeName' in v) return v as Value;
    const inner = Object.fromEntries(Object.entries(v).map(([k, x]) => [k, toValue(x)]));
    return create(ValueSchema, { kind: { case: 'structValue', value: create(StructSchema, { fields: inner }) } });
  };
  const struct = create(StructSchema, {
    fields: Object.fromEntries(Object.entries(fields).map(([k, v]) => [k, toValue(v)])),
  });
  return Buffer.from(toBinary(StructSchema, struct)).toString('base64');
}

describe('encode', () => {
  test('is byte-identical to C++ protobuf deterministic serialization (Istio ≥ 1.24 keys)', () => {
    expect(encodePeerMetadata(ISTIO_124_PEER)).toBe(ISTIO_124_HEADER);
  });

  test('omits empty values but always writes LABELS, like Envoy (hand-built wire bytes)', () => {
    expect(Buffer.from(MINIMAL_HEADER, 'base64').toString('hex')).toBe(MINIMAL_HEX);
    expect(encodePeerMetadata({ ...EMPTY, namespace: 'demo' })).toBe(MINIMAL_HEADER);
  });

  test('writes OWNER only for a known workload type', () => {
    const withType = decodeOk(encodePeerMetadata({ ...EMPTY, namespace: 'ns', workload: 'w', type: 'cronjob' }));
    expect(withType.type).toBe('cronjob');
    const bytes = Buffer.from(encodePeerMetadata({ ...EMPTY, namespace: 'ns', workload: 'w', type: 'statefulset' }), 'base64');
    expect(bytes.includes('OWNER')).toBe(false);
  });

  test('does not copy arbitrary pod labels (Envoy only sends configured additional_labels)', () => {
    const bytes = Buffer.from(encodePeerMetadata({ ...ISTIO_124_PEER, labels: { team: 'a' } }), 'base64');
    expect(bytes.includes('team')).toBe(false);
  });

});

describe('decode', () => {
  test('Istio ≥ 1.24 header from C++ protobuf', () => {
    expect(decodeOk(ISTIO_124_HEADER)).toEqual(ISTIO_124_PEER);
  });

  test('unpadded base64 and surrounding whitespace are accepted', () => {
    expect(ISTIO_124_HEADER.endsWith('=')).toBe(true);
    expect(decodeOk(ISTIO_124_HEADER.replace(/=+$/, ''))).toEqual(ISTIO_124_PEER);
    expect(decodeOk(` \t${ISTIO_124_HEADER} `)).toEqual(ISTIO_124_PEER);
    expect(decodeOk(MINIMAL_HEADER.slice(0, -1)).namespace).toBe('demo');
  });

  test('round trip of a full peer (labels come back as the four Istio writes)', () => {
    const peer: PeerInfo = {
      ...ISTIO_124_PEER,
      type: 'job',
      labels: {},
    };
    expect(decodeOk(encodePeerMetadata(peer))).toEqual({
      ...peer,
      labels: {
        app: 'productpage',
        version: 'v1',
        'service.istio.io/canonical-name': 'productpage',
        'service.istio.io/canonical-revision': 'v1',
      },
    });
  });

  test('Istio 1.14 sidecar header (≤ 1.18 key set: APP_CONTAINERS, INSTANCE_IPS, ISTIO_VERSION, MESH_ID)', () => {
    const peer = decodeOk(ISTIO_114_HEADER);
    expect(peer).toMatchObject({
      name: 'reviews-v3-58b6479b-62rv5',
      namespace: 'default',
      cluster: 'Kubernetes',
      workload: 'reviews-v3',
      type: 'deployment',
      service: 'reviews',
      revision: 'v3',
      app: 'reviews',
      version: 'v3',
      identity: '',
      region: '',
      availabilityZone: '',
    });
    expect(peer.labels).toEqual({
      app: 'reviews',
      'pod-template-hash': '58b6479b',
      'security.istio.io/tlsMode': 'istio',
      'service.istio.io/canonical-name': 'reviews',
      'service.istio.io/canonical-revision': 'v3',
      version: 'v3',
    });
  });

  test('Istio 1.20 gateway header (all pod labels, extras ignored)', () => {
    const peer = decodeOk(ISTIO_120_GATEWAY_HEADER);
    expect(peer).toMatchObject({
      name: 'istio-ingressgateway-7db5d74887-9f47v',
      namespace: 'istio-system',
      workload: 'istio-ingressgateway',
      type: 'deployment',
      service: 'istio-ingressgateway',
      revision: 'latest',
      app: 'istio-ingressgateway',
      version: '',
    });
    expect(peer.labels['istio.io/rev']).toBe('default');
    expect(Object.keys(peer.labels)).toHaveLength(11);
  });

  test('app / version prefer app.kubernetes.io/* over app / version (any order)', () => {
    const peer = decodeOk(
      headerOf({
        LABELS: { app: 'plain', 'app.kubernetes.io/name': 'qualified', version: 'v0', 'app.kubernetes.io/version': '1.2' },
      }),
    );
    expect(peer.app).toBe('qualified');
    expect(peer.version).toBe('1.2');
    expect(peer.service).toBe('');
    const fallback = decodeOk(headerOf({ LABELS: { app: 'plain', version: 'v0' } }));
    expect([fallback.app, fallback.version]).toEqual(['plain', 'v0']);
  });

  test('any subset of keys; non-string values and a non-struct LABELS read as unknown', () => {
    expect(decodeOk(headerOf({ CLUSTER_ID: 'c1' }))).toEqual({ ...EMPTY, cluster: 'c1' });
    const number = create(ValueSchema, { kind: { case: 'numberValue', value: 3 } });
    const peer = decodeOk(headerOf({ NAME: number, NAMESPACE: 'ns', LABELS: 'app=x', PLATFORM_METADATA: { gcp_project: 'p' } }));
    expect(peer).toEqual({ ...EMPTY, namespace: 'ns' });
    const mixedLabels = decodeOk(headerOf({ LABELS: { app: number, team: 't' } }));
    expect(mixedLabels.labels).toEqual({ team: 't' });
    expect(mixedLabels.app).toBe('');
  });

  test('a label named __proto__ is kept as data', () => {
    const peer = decodeOk(headerOf({ LABELS: { ['__proto__']: 'x', app: 'a' } }));
    expect(Object.getOwnPropertyDescriptor(peer.labels, '__proto__')?.value).toBe('x');
    expect(peer.app).toBe('a');
  });

  test.each([
    ['empty', ''],
    ['blank', '   '],
    ['junk character', 'Cg$K'],
    ['URL-safe alphabet', 'Cg-_'],
    ['impossible length', 'CgwKB'],
    ['bad padding', 'Cg=='.slice(0, 3)],
    ['padding inside', 'Cg==Cg=='],
    ['three pad characters', 'C==='],
  ])('%s is an error', (_name, value) => {
    const result = decodePeerMetadata(value);
    expect(result.ok).toBe(false);
  });

  test('truncated protobuf is an error, not a partial peer', () => {
    const bytes = Buffer.from(ISTIO_124_HEADER, 'base64');
    const result = decodePeerMetadata(bytes.subarray(0, bytes.length - 3).toString('base64'));
    expect(result).toMatchObject({ ok: false, error: expect.stringContaining('protobuf') });
  });

  test('oversized value is refused before decoding', () => {
    const big = 'A'.repeat(MAX_PEER_METADATA_BASE64 + 4);
    expect(decodePeerMetadata(big)).toEqual({ ok: false, error: 'value too large' });
    // At the limit it gets past the size check to the protobuf parser (all-zero bytes: tag 0 is invalid).
    expect(decodePeerMetadata('A'.repeat(MAX_PEER_METADATA_BASE64))).toMatchObject({
      ok: false,
      error: expect.stringContaining('protobuf'),
    });
  });

  test('a long whitespace run does not cause quadratic work', () => {
    const start = performance.now();
    const result = decodePeerMetadata(`${' '.repeat(MAX_PEER_METADATA_BASE64 - 1)}A`);
    expect(result.ok).toBe(false);
    expect(performance.now() - start).toBeLessThan(200);
  });
});

describe('OWNER', () => {
  test.each([
    ['kubernetes://apis/apps/v1/namespaces/ns/deployments/web', 'deployment'],
    ['kubernetes://apis/apps/v1/namespaces/ns/pods/web-1', 'pod'],
    ['kubernetes://apis/apps/v1/namespaces/ns/jobs/j', 'job'],
    ['kubernetes://apis/apps/v1/namespaces/ns/cronjobs/c', 'cronjob'],
    ['kubernetes://apis/apps/v1/namespaces/ns/replicasets/web-5d6f', ''],
    ['kubernetes://apis/apps/v1/namespaces/ns/statefulsets/db', ''],
    ['kubernetes://apis/apps/v1/namespaces/ns/deployment/web', ''],
    ['short', ''],
    ['/', ''],
    ['', ''],
  ])('%j → %j', (owner, type) => {
    expect(workloadTypeFromOwner(owner)).toBe(type);
  });

  test('ownerOf is Istio’s form and inverts workloadTypeFromOwner', () => {
    expect(ownerOf('demo', 'deployment', 'web')).toBe('kubernetes://apis/apps/v1/namespaces/demo/deployments/web');
    expect(ownerOf('demo', 'replicaset', 'web')).toBeUndefined();
    for (const type of ['pod', 'deployment', 'job', 'cronjob']) {
      expect(workloadTypeFromOwner(ownerOf('ns', type, 'w')!)).toBe(type);
    }
  });
});

describe('nodeId', () => {
  test('Envoy node id of a waypoint', () => {
    expect(nodeId({ ip: '10.0.0.5', pod: 'waypoint-7d9f-abcde', namespace: 'demo' })).toBe(
      'waypoint~10.0.0.5~waypoint-7d9f-abcde.demo~demo.svc.cluster.local',
    );
  });

  test('type, cluster domain and IPv6', () => {
    expect(nodeId({ ip: 'fd00::5', pod: 'p', namespace: 'n', type: 'sidecar', clusterDomain: 'corp.local' })).toBe(
      'sidecar~fd00::5~p.n~n.svc.corp.local',
    );
  });

  test.each([
    [{ ip: '', pod: 'p', namespace: 'n' }],
    [{ ip: '1.2.3.4', pod: 'p~x', namespace: 'n' }],
    [{ ip: '1.2.3.4', pod: 'p', namespace: '' }],
  ])('rejects %j', (parts) => {
    expect(() => nodeId(parts)).toThrow(TypeError);
  });
});
