/** The waypoint's own description for the TCP metadata exchange (src/peer/self-peer.ts). */
import { describe, expect, test } from 'vitest';

import { waypointSelf } from '../../../src/peer/self-peer.ts';
import { compileMesh } from '../../../src/state/compile.ts';

const GATEWAY = `apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: { name: wp, namespace: infra }
spec: { gatewayClassName: istio-waypoint }
`;

describe('waypointSelf', () => {
  test('without its own Pod in the mesh: described from the Gateway, node id from pod name and IP', () => {
    const self = waypointSelf(compileMesh({ text: GATEWAY, file: 'm.yaml' }), { pod: 'wp-5d8f-x2', ip: '10.1.2.3' });
    expect(self.nodeId).toBe('waypoint~10.1.2.3~wp-5d8f-x2.infra~infra.svc.cluster.local');
    expect(self.peer).toMatchObject({
      name: 'wp-5d8f-x2',
      namespace: 'infra',
      cluster: 'Kubernetes',
      workload: 'wp',
      type: 'deployment',
      service: 'wp',
      revision: 'latest',
      identity: 'spiffe://cluster.local/ns/infra/sa/wp',
    });
    expect(self.peer.labels).toMatchObject({ 'gateway.networking.k8s.io/gateway-name': 'wp', 'service.istio.io/canonical-name': 'wp' });
  });

  test('its own Pod in the mesh (same name, Gateway namespace) describes it', () => {
    const mesh = compileMesh({
      text: `${GATEWAY}---
apiVersion: v1
kind: Pod
metadata: { name: wp-5d8f-x2, namespace: infra, labels: { service.istio.io/canonical-revision: r9 } }
spec: { serviceAccountName: wp }
status: { podIP: 10.1.2.3 }
`,
      file: 'm.yaml',
    });
    const self = waypointSelf(mesh, { pod: 'wp-5d8f-x2', ip: '10.1.2.3' });
    expect(self.peer).toMatchObject({ name: 'wp-5d8f-x2', namespace: 'infra', revision: 'r9', type: 'pod' });
  });

  test('an unusable pod name is a TypeError', () => {
    expect(() => waypointSelf(compileMesh({ text: GATEWAY, file: 'm.yaml' }), { pod: 'a~b', ip: '10.1.2.3' })).toThrow(TypeError);
  });
});
