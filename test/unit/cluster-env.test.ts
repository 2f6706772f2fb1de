/**
 * The settings of `waypoint run --cluster` from the pod's environment (Istio's waypoint template)
 * and the flags: defaults, PROXY_CONFIG's discoveryAddress, the node, and a clear error naming
 * each variable that is missing or invalid.
 */
import { describe, expect, test } from 'vitest';
import { clusterSettingsFromEnv } from '../../src/app.ts';

const POD = { POD_NAME: 'waypoint-7d9-abc', POD_NAMESPACE: 'shop', INSTANCE_IP: '10.1.2.3', SERVICE_ACCOUNT: 'waypoint' };

describe('clusterSettingsFromEnv', () => {
  test("Istio's defaults when only the downward-API variables are set", () => {
    expect(clusterSettingsFromEnv({}, POD)).toEqual({
      podName: 'waypoint-7d9-abc',
      podNamespace: 'shop',
      instanceIp: '10.1.2.3',
      serviceAccount: 'waypoint',
      clusterId: 'Kubernetes',
      network: '',
      caAddress: 'istiod.istio-system.svc:15012',
      discoveryAddress: 'istiod.istio-system.svc:15012',
      trustDomain: undefined,
      tokenFile: '/var/run/secrets/tokens/istio-token',
      rootCertFile: '/var/run/secrets/istio/root-cert.pem',
      gateway: 'shop/waypoint',
      node: { id: 'waypoint~10.1.2.3~waypoint-7d9-abc.shop~shop.svc.cluster.local', metadata: { NAME: 'waypoint-7d9-abc', NAMESPACE: 'shop', INSTANCE_IPS: '10.1.2.3', NODE_NAME: '' } },
    });
  });

  test('every variable and flag given', () => {
    const s = clusterSettingsFromEnv(
      { tokenFile: '/t', rootCert: '/r.pem', gateway: 'infra/edge' },
      {
        ...POD,
        ISTIO_META_CLUSTER_ID: 'east',
        ISTIO_META_NETWORK: 'net-1',
        CA_ADDR: 'istiod-ca.istio-system.svc:15012',
        PROXY_CONFIG: JSON.stringify({ discoveryAddress: 'istiod-rev.istio-system.svc:15012', concurrency: 2 }),
        TRUST_DOMAIN: 'example.org',
      },
    );
    expect(s).toMatchObject({
      clusterId: 'east',
      network: 'net-1',
      caAddress: 'istiod-ca.istio-system.svc:15012',
      discoveryAddress: 'istiod-rev.istio-system.svc:15012',
      trustDomain: 'example.org',
      tokenFile: '/t',
      rootCertFile: '/r.pem',
      gateway: 'infra/edge',
    });
    expect(s.node.metadata).toMatchObject({ CLUSTER_ID: 'east', NETWORK: 'net-1' });
  });

  test.each([
    [{ ...POD, POD_NAME: undefined }, 'environment variable POD_NAME (fieldRef metadata.name) not set'],
    [{ ...POD, POD_NAMESPACE: '', SERVICE_ACCOUNT: ' ' }, 'environment variables POD_NAMESPACE (fieldRef metadata.namespace), SERVICE_ACCOUNT (fieldRef spec.serviceAccountName) not set'],
    [{ ...POD, INSTANCE_IP: 'pod-ip' }, 'INSTANCE_IP "pod-ip" is not an IP address'],
    [{ ...POD, CA_ADDR: 'istiod' }, 'CA_ADDR: invalid istiod address "istiod"'],
    [{ ...POD, PROXY_CONFIG: '{"discoveryAddress": 15012}' }, 'PROXY_CONFIG discoveryAddress must be a non-empty host:port string, got 15012'],
    [{ ...POD, PROXY_CONFIG: '[]' }, 'PROXY_CONFIG must be a JSON object'],
    [{ ...POD, PROXY_CONFIG: '{"discoveryAddress": "istiod:0"}' }, 'PROXY_CONFIG discoveryAddress: invalid istiod address "istiod:0"'],
  ])('%j → %s', (env, message) => {
    expect(() => clusterSettingsFromEnv({}, env)).toThrow(message);
  });

  test('--gateway must be NAMESPACE/NAME', () => {
    expect(() => clusterSettingsFromEnv({ gateway: 'waypoint' }, POD)).toThrow('--gateway "waypoint": expected NAMESPACE/NAME');
  });
});
