/**
 * Workloads that run an Istio sidecar (Pods annotated `sidecar.istio.io/status`) are reached with
 * the `SIDECAR` transport, whatever their `istio.io/dataplane-mode` labels say.
 */
import { describe, expect, test } from 'vitest';

import { tunnelProtocol } from '../../../src/state/attachment.ts';
import { compileMesh } from '../../../src/state/compile.ts';

const MESH = `apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: { name: waypoint, namespace: demo }
spec: { gatewayClassName: istio-waypoint }
---
apiVersion: v1
kind: Namespace
metadata: { name: demo, labels: { istio.io/use-waypoint: waypoint } }
---
apiVersion: v1
kind: Namespace
metadata: { name: legacy, labels: { istio.io/dataplane-mode: none } }
---
apiVersion: v1
kind: Service
metadata: { name: web, namespace: demo }
spec:
  clusterIP: 10.96.0.1
  selector: { app: web }
  ports: [{ name: http, port: 80, targetPort: 8080 }]
---
apiVersion: v1
kind: Pod
metadata:
  name: web-sidecar
  namespace: demo
  labels: { app: web }
  annotations: { sidecar.istio.io/status: '{"initContainers":["istio-init"],"containers":["istio-proxy"]}' }
status: { podIP: 10.0.0.1 }
---
apiVersion: v1
kind: Pod
metadata:
  name: web-sidecar-optout
  namespace: demo
  labels: { app: web, istio.io/dataplane-mode: none }
  annotations: { sidecar.istio.io/status: '{}' }
status: { podIP: 10.0.0.2 }
---
apiVersion: v1
kind: Pod
metadata: { name: web-ambient, namespace: demo, labels: { app: web } }
status: { podIP: 10.0.0.3 }
---
apiVersion: v1
kind: Pod
metadata: { name: web-plain, namespace: demo, labels: { app: web, istio.io/dataplane-mode: none }, annotations: { other: x } }
status: { podIP: 10.0.0.4 }
---
apiVersion: v1
kind: Pod
metadata:
  name: old-app
  namespace: legacy
  annotations: { sidecar.istio.io/status: '{}' }
status: { podIP: 10.0.0.5 }
`;

describe('SIDECAR tunnel protocol', () => {
  const snap = compileMesh({ text: MESH, file: 'mesh.yaml' });
  const tunnelOf = (name: string) => snap.workloads.find((w) => w.name === name)?.tunnelProtocol;

  test('the sidecar.istio.io/status annotation selects SIDECAR, overriding dataplane-mode labels of the Pod and its namespace', () => {
    expect(tunnelOf('web-sidecar')).toBe('SIDECAR');
    expect(tunnelOf('web-sidecar-optout')).toBe('SIDECAR');
    expect(tunnelOf('old-app')).toBe('SIDECAR');
  });

  test('without the annotation the labels decide as before', () => {
    expect(tunnelOf('web-ambient')).toBe('HBONE');
    expect(tunnelOf('web-plain')).toBe('NONE');
  });

  test('endpoints carry the workload tunnel protocol', () => {
    const eps = snap.services.find((s) => s.name === 'web')!.endpoints.get(80)!;
    expect(Object.fromEntries(eps.map((e) => [e.workload.name, e.tunnel]))).toEqual({
      'web-sidecar': 'SIDECAR',
      'web-sidecar-optout': 'SIDECAR',
      'web-ambient': 'HBONE',
      'web-plain': 'NONE',
    });
  });

  test('tunnelProtocol: any value of the annotation counts, labels are ignored then', () => {
    expect(tunnelProtocol({}, {}, { 'sidecar.istio.io/status': '' })).toBe('SIDECAR');
    expect(tunnelProtocol({ 'istio.io/dataplane-mode': 'none' }, {}, { 'sidecar.istio.io/status': '{}' })).toBe('SIDECAR');
    expect(tunnelProtocol({}, { 'istio.io/dataplane-mode': 'none' }, { 'sidecar.istio.io/inject': 'true' })).toBe('NONE');
    expect(tunnelProtocol({}, {})).toBe('HBONE');
  });
});
