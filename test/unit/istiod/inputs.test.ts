/**
 * What the istiod layer reads and refuses: the xDS node from the pod's environment, istiod's
 * address, and the WDS resources refused (NACKed) with what is wrong with them.
 */
import { create, toBinary, type MessageInitShape } from '@bufbuild/protobuf';
import { anyPack } from '@bufbuild/protobuf/wkt';
import { describe, expect, test } from 'vitest';
import { ipFromBytes, nodeMetadataFromEnv, parseIstiodAddress, wdsProto, xdsNode, xdsNodeFromEnv, xdsProto } from '../../../src/istiod/index.ts';
import { decodeAddressResource } from '../../../src/istiod/wds-resource.ts';
import { ipBytes } from '../../helpers/fake-istiod.ts';

describe('xDS node', () => {
  const env = { INSTANCE_IP: '10.0.0.5', POD_NAME: 'waypoint-0', POD_NAMESPACE: 'apps', NODE_NAME: 'n1', ISTIO_META_CLUSTER_ID: 'east', ISTIO_META_NETWORK: 'net-a', ISTIO_METAJSON_LABELS: '{"app":"waypoint"}', ISTIO_METAJSON_BAD: '{nope', OTHER: 'x' };

  test('id and ztunnel-style metadata from the environment; the node type is a setting', () => {
    expect(xdsNodeFromEnv(env)).toEqual({
      id: 'waypoint~10.0.0.5~waypoint-0.apps~apps.svc.cluster.local',
      metadata: { NAME: 'waypoint-0', NAMESPACE: 'apps', INSTANCE_IPS: '10.0.0.5', NODE_NAME: 'n1', CLUSTER_ID: 'east', NETWORK: 'net-a', LABELS: { app: 'waypoint' } },
    });
    expect(xdsNodeFromEnv(env, 'router').id).toBe('router~10.0.0.5~waypoint-0.apps~apps.svc.cluster.local');
    expect(nodeMetadataFromEnv({ ISTIO_META_X: 'y' })).toEqual({ X: 'y' });
  });

  test('missing or malformed parts are named', () => {
    expect(() => xdsNodeFromEnv({ POD_NAME: 'p' })).toThrow('xDS node: environment variables INSTANCE_IP, POD_NAMESPACE not set');
    expect(() => xdsNode({ instanceIp: '10.0.0.1', podName: 'a~b', podNamespace: 'ns' })).toThrow('POD_NAME must be a non-empty string without "~"');
  });
});

test("istiod's address: host:port, ip:port, [ipv6]:port", () => {
  expect(parseIstiodAddress('istiod.istio-system.svc:15012')).toEqual({ host: 'istiod.istio-system.svc', port: 15012 });
  expect(parseIstiodAddress('10.0.0.1:15012')).toEqual({ host: '10.0.0.1', port: 15012 });
  expect(parseIstiodAddress('[fd00::1]:15012')).toEqual({ host: 'fd00::1', port: 15012 });
  for (const bad of ['istiod', 'istiod:0', 'istiod:70000', 'fd00::1:15012', '[nope]:1', 'https://istiod:15012']) {
    expect(() => parseIstiodAddress(bad), bad).toThrow(/invalid istiod address/);
  }
});

test('IPs from WDS bytes: 4 or 16 bytes, normalised; anything else is no IP', () => {
  expect(ipFromBytes(ipBytes('10.1.2.3'))).toBe('10.1.2.3');
  expect(ipFromBytes(ipBytes('fd00:0:0:0:0:0:0:1'))).toBe('fd00::1');
  expect(ipFromBytes(ipBytes('::ffff:10.0.0.7'))).toBe('10.0.0.7');
  expect(ipFromBytes(new Uint8Array([1, 2, 3]))).toBeUndefined();
});

describe('WDS resources refused', () => {
  const resource = (address: MessageInitShape<typeof wdsProto.AddressSchema>) =>
    create(xdsProto.ResourceSchema, { name: 'r', version: '1', resource: anyPack(wdsProto.AddressSchema, create(wdsProto.AddressSchema, address)) });
  const workload = (w: MessageInitShape<typeof wdsProto.WorkloadSchema>) => resource({ type: { case: 'workload', value: { uid: 'u', ...w } } });
  const service = (s: MessageInitShape<typeof wdsProto.ServiceSchema>) => resource({ type: { case: 'service', value: { namespace: 'ns', hostname: 'h', ...s } } });
  const refusal = (r: ReturnType<typeof resource>) => {
    try {
      decodeAddressResource(r);
      return 'accepted';
    } catch (err) {
      return (err as Error).message;
    }
  };

  test('valid workloads and services pass', () => {
    expect(decodeAddressResource(workload({ addresses: [ipBytes('10.0.0.1')] })).kind).toBe('workload');
    expect(decodeAddressResource(service({ addresses: [{ address: ipBytes('fd00::1'), length: 64 }] })).kind).toBe('service');
  });

  test.each([
    ['no payload', create(xdsProto.ResourceSchema, { name: 'r' }), 'no resource in the xDS payload'],
    ['another type', create(xdsProto.ResourceSchema, { name: 'r', resource: { typeUrl: 'type.googleapis.com/x.Y', value: new Uint8Array() } }), 'resource of type "type.googleapis.com/x.Y", expected type.googleapis.com/istio.workload.Address'],
    ['undecodable', create(xdsProto.ResourceSchema, { name: 'r', resource: { typeUrl: 'type.googleapis.com/istio.workload.Address', value: new Uint8Array([0x0a, 0x05, 0x01]) } }), /^cannot be decoded: /],
    ['an empty Address', resource({}), 'Address holds neither a workload nor a service'],
    ['a workload without uid', resource({ type: { case: 'workload', value: { name: 'a' } } }), 'workload without uid'],
    ['a 5-byte address', workload({ addresses: [new Uint8Array(5)] }), 'an address is 5 bytes (an IP address is 4 or 16)'],
    ['an unknown tunnel protocol', workload({ tunnelProtocol: 7 }), 'tunnel_protocol has unknown value 7'],
    ['an unknown status', workload({ status: 3 }), 'status has unknown value 3'],
    ['a waypoint without destination', workload({ waypoint: { hboneMtlsPort: 15008 } }), 'waypoint has no destination (hostname or address)'],
    ['a bad network gateway address', workload({ networkGateway: { destination: { case: 'address', value: { address: new Uint8Array(2) } } } }), 'network_gateway: an address is 2 bytes (an IP address is 4 or 16)'],
    ['a services key without /', workload({ services: { nohost: { ports: [] } } }), 'services key "nohost" is not namespace/hostname'],
    ['a service port 0 in services', workload({ services: { 'ns/h': { ports: [{ servicePort: 0 }] } } }), 'services[ns/h] service_port 0 is not a port number'],
    ['a service without hostname', resource({ type: { case: 'service', value: { namespace: 'ns' } } }), 'service without namespace or hostname'],
    ['a too long prefix', service({ addresses: [{ address: ipBytes('10.0.0.0'), length: 33 }] }), 'addresses: prefix length 33 is too long for 10.0.0.0'],
    ['a target port over 65535', service({ ports: [{ servicePort: 80, targetPort: 70000 }] }), 'target_port 70000 is not a port number'],
    ['an unknown LB mode', service({ loadBalancing: { mode: 9 } }), 'load_balancing.mode has unknown value 9'],
    ['an unknown IP family', service({ ipFamilies: 4 }), 'ip_families has unknown value 4'],
    ['a weighted waypoint without destination', service({ weightedWaypoints: [{ weight: 1 }] }), 'weighted_waypoints entry has no destination'],
  ])('%s', (_what, r, reason) => {
    if (typeof reason === 'string') expect(refusal(r)).toBe(reason);
    else expect(refusal(r)).toMatch(reason);
  });

  test('an unknown visibility or app protocol is not refused (ztunnel falls back too)', () => {
    expect(refusal(service({ visibility: 5, ports: [{ servicePort: 80, targetPort: 80, appProtocol: 42 }] }))).toBe('accepted');
    expect(toBinary(wdsProto.AddressSchema, create(wdsProto.AddressSchema, {})).length).toBe(0);
  });
});
