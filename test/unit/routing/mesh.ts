/**
 * Mesh snapshots for the routing unit tests: namespace `shop` (served by the waypoint) with
 * Services `web` (ports 80 http, 8080 http) and `web-v2`, `api` in `other` (not served), and
 * whatever routes a test appends.
 */
import { DESTINATION_RULES, ROUTES } from '../../../src/routing/index.ts';
import { MeshStore } from '../../../src/state/store.ts';
import type { MeshSnapshot, Target } from '../../../src/state/types.ts';

export const BASE = `apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: { name: waypoint, namespace: shop }
spec: { gatewayClassName: istio-waypoint }
---
apiVersion: v1
kind: Namespace
metadata: { name: shop, labels: { istio.io/use-waypoint: waypoint } }
---
apiVersion: v1
kind: Service
metadata: { name: web, namespace: shop }
spec:
  clusterIP: 10.0.0.1
  selector: { app: web }
  ports: [{ name: http, port: 80, targetPort: 8080 }, { name: http-admin, port: 8080 }]
---
apiVersion: v1
kind: Service
metadata: { name: web-v2, namespace: shop }
spec:
  clusterIP: 10.0.0.2
  selector: { app: web-v2 }
  ports: [{ name: http, port: 80, targetPort: 8080 }]
---
apiVersion: v1
kind: Service
metadata: { name: api, namespace: other }
spec:
  clusterIP: 10.0.0.3
  selector: { app: api }
  ports: [{ name: grpc, port: 9090 }]
`;

/** A snapshot of BASE plus `extra` YAML documents, with its routes and DestinationRules compiled. */
export function mesh(extra = ''): MeshSnapshot {
  return MeshStore.fromText(extra ? `${BASE}---\n${extra}` : BASE, { parts: [ROUTES, DESTINATION_RULES] }).current;
}

/** The target of `ip:port` in `snap`. */
export function target(snap: MeshSnapshot, ip = '10.0.0.1', port = 80): Target & { kind: 'service' } {
  const t = snap.resolveTarget(ip, port);
  if (!t || t.kind !== 'service') throw new Error(`no service target at ${ip}:${port}`);
  return t;
}

/** An HTTPRoute document. */
export function httpRoute(name: string, spec: string, namespace = 'shop', extraMeta = ''): string {
  return `apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: { name: ${name}, namespace: ${namespace}${extraMeta} }
spec:
${spec}
`;
}
