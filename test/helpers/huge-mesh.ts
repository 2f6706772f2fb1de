/**
 * A generated mesh file of `services` Services with `podsPerService` ready Pods each (one
 * namespace served by the waypoint `big/waypoint`), plus one AuthorizationPolicy, HTTPRoute and
 * DestinationRule: the size of a large cluster, for reload and compile-time measurements.
 * Addresses are 10.x (never dialed: only parsed).
 */
export function hugeMesh(services: number, podsPerService: number): string {
  const docs: string[] = [
    'apiVersion: v1\nkind: Namespace\nmetadata:\n  name: big\n  labels: { istio.io/use-waypoint: waypoint }',
    'apiVersion: gateway.networking.k8s.io/v1\nkind: Gateway\nmetadata: { name: waypoint, namespace: big }\nspec:\n  gatewayClassName: istio-waypoint\n  listeners: [{ name: mesh, port: 15008, protocol: HBONE }]',
  ];
  for (let s = 0; s < services; s++) {
    docs.push(
      `apiVersion: v1\nkind: Service\nmetadata:\n  name: svc-${s}\n  namespace: big\nspec:\n  clusterIP: 10.${96 + (s >> 16)}.${(s >> 8) & 255}.${s & 255}\n  selector:\n    app: app-${s}\n  ports:\n  - name: http\n    port: 80\n    targetPort: 8080`,
    );
    for (let p = 0; p < podsPerService; p++) {
      const n = s * podsPerService + p;
      docs.push(
        `apiVersion: v1\nkind: Pod\nmetadata:\n  name: app-${s}-${p}\n  namespace: big\n  labels:\n    app: app-${s}\n    pod-template-hash: abc${s}\nspec:\n  serviceAccountName: sa-${s}\n  nodeName: node-${n % 50}\n  containers:\n  - name: app\n    ports:\n    - name: http\n      containerPort: 8080\nstatus:\n  podIP: 10.${(n >> 16) + 1}.${(n >> 8) & 255}.${n & 255}\n  conditions:\n  - type: Ready\n    status: "True"`,
      );
    }
  }
  docs.push(
    'apiVersion: security.istio.io/v1\nkind: AuthorizationPolicy\nmetadata: { name: allow-big, namespace: big }\nspec:\n  targetRefs: [{ group: gateway.networking.k8s.io, kind: Gateway, name: waypoint }]\n  rules: [{ from: [{ source: { namespaces: [big] } }] }]',
    'apiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\nmetadata: { name: svc-0, namespace: big }\nspec:\n  parentRefs: [{ group: "", kind: Service, name: svc-0, port: 80 }]\n  rules: [{ backendRefs: [{ name: svc-1, port: 80 }] }]',
    'apiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata: { name: svc-2, namespace: big }\nspec:\n  host: svc-2.big.svc.cluster.local\n  trafficPolicy: { loadBalancer: { consistentHash: { useSourceIp: true } } }',
  );
  return `${docs.join('\n---\n')}\n`;
}
