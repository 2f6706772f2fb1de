/**
 * The declared istiod messages against golden bytes written out by hand from the upstream field
 * numbers (test/fixtures/istiod/*.hex): each message encodes to exactly those bytes and decodes
 * back to the same message — a wrong field number, type, packing or oneof shows here.
 */
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { create, fromBinary, toBinary, type DescMessage, type MessageInitShape } from '@bufbuild/protobuf';
import { anyPack } from '@bufbuild/protobuf/wkt';
import { expect, test } from 'vitest';
import { wdsProto, xdsProto } from '../../../src/istiod/index.ts';

const FIXTURES = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../fixtures/istiod');
const ip = (...b: number[]) => new Uint8Array(b);
const ADDRESS = 'type.googleapis.com/istio.workload.Address';

function golden(name: string): string {
  return fs
    .readFileSync(path.join(FIXTURES, `${name}.hex`), 'utf8')
    .split('\n')
    .map((l) => l.replace(/#.*/, ''))
    .join('')
    .replace(/\s+/g, '');
}

const cases: [string, DescMessage, MessageInitShape<DescMessage>][] = [
  [
    'address-workload',
    wdsProto.AddressSchema,
    {
      type: {
        case: 'workload',
        value: {
          uid: 'u1',
          name: 'a',
          namespace: 'ns',
          addresses: [ip(10, 0, 0, 1)],
          tunnelProtocol: wdsProto.TunnelProtocolValue.HBONE,
          serviceAccount: 'sa',
          waypoint: { destination: { case: 'hostname', value: { namespace: 'ns', hostname: 'wp' } }, hboneMtlsPort: 15008 },
          status: wdsProto.WorkloadStatusValue.UNHEALTHY,
          services: { 'ns/h': { ports: [{ servicePort: 80, targetPort: 8080 }] } },
          capacity: 2,
        },
      },
    } satisfies MessageInitShape<typeof wdsProto.AddressSchema>,
  ],
  [
    'address-service',
    wdsProto.AddressSchema,
    {
      type: {
        case: 'service',
        value: {
          name: 's',
          namespace: 'ns',
          hostname: 's.ns.svc.cluster.local',
          addresses: [{ address: ip(10, 96, 0, 1) }, { address: ip(240, 240, 0, 0), length: 16 }],
          ports: [{ servicePort: 80, targetPort: 8080, appProtocol: wdsProto.AppProtocolValue.HTTP11 }],
          waypoint: { destination: { case: 'address', value: { address: ip(10, 0, 0, 9) } }, hboneMtlsPort: 15008 },
          loadBalancing: { routingPreference: [wdsProto.LbScopeValue.NETWORK, wdsProto.LbScopeValue.ZONE], mode: wdsProto.LbModeValue.FAILOVER, healthPolicy: wdsProto.LbHealthPolicyValue.ALLOW_ALL },
          ipFamilies: wdsProto.IpFamiliesValue.IPV4_ONLY,
        },
      },
    } satisfies MessageInitShape<typeof wdsProto.AddressSchema>,
  ],
  [
    'delta-request-initial',
    xdsProto.DeltaDiscoveryRequestSchema,
    { node: { id: 'x', metadata: { NAME: 'p' } }, typeUrl: ADDRESS, initialResourceVersions: { a: '1' } } satisfies MessageInitShape<typeof xdsProto.DeltaDiscoveryRequestSchema>,
  ],
  ['delta-request-ack', xdsProto.DeltaDiscoveryRequestSchema, { typeUrl: ADDRESS, responseNonce: 'n3' } satisfies MessageInitShape<typeof xdsProto.DeltaDiscoveryRequestSchema>],
  [
    'delta-request-nack',
    xdsProto.DeltaDiscoveryRequestSchema,
    { typeUrl: ADDRESS, responseNonce: 'n3', errorDetail: { code: 13, message: 'bad: x' } } satisfies MessageInitShape<typeof xdsProto.DeltaDiscoveryRequestSchema>,
  ],
  [
    'delta-response',
    xdsProto.DeltaDiscoveryResponseSchema,
    {
      resources: [{ version: 'v1', name: 'ns/s', resource: anyPack(wdsProto.AddressSchema, create(wdsProto.AddressSchema, { type: { case: 'service', value: { name: 's' } } })) }],
      typeUrl: ADDRESS,
      nonce: 'n1',
      removedResources: ['gone'],
    } satisfies MessageInitShape<typeof xdsProto.DeltaDiscoveryResponseSchema>,
  ],
  ['ca-request', xdsProto.IstioCertificateRequestSchema, { csr: 'CSR', validityDuration: 86400n, metadata: { k: 'v' } } satisfies MessageInitShape<typeof xdsProto.IstioCertificateRequestSchema>],
  ['ca-response', xdsProto.IstioCertificateResponseSchema, { certChain: ['L', 'I', 'R'] } satisfies MessageInitShape<typeof xdsProto.IstioCertificateResponseSchema>],
];

test.each(cases)('%s: encodes to the golden bytes and decodes back', (name, schema, init) => {
  const message = create(schema, init);
  const hex = golden(name);
  expect(Buffer.from(toBinary(schema, message)).toString('hex')).toBe(hex);
  expect(fromBinary(schema, new Uint8Array(Buffer.from(hex, 'hex')))).toEqual(message);
});

test('every fixture has its case', () => {
  const files = fs.readdirSync(FIXTURES).filter((f) => f.endsWith('.hex')).map((f) => f.slice(0, -4)).sort();
  expect(files).toEqual(cases.map(([n]) => n).sort());
});
