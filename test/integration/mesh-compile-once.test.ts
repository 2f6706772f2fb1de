/**
 * One compile per published snapshot, none on the request path: a real topology (tunnel →
 * waypoint → inbound roles → echo backends) whose mesh has one resource of every kind an engine
 * compiles (AuthorizationPolicy, RequestAuthentication, HTTPRoute, DestinationRule, NetworkPolicy,
 * an ext_authz provider). Each engine's per-resource parser is counted: serving many requests must
 * not move any count, and a reload moves each by exactly one compile per store that publishes it.
 * The DestinationRule's cluster state is created once and carried across the reload.
 * Addresses: 127.0.220.x.
 */
import fs from 'node:fs';
import { request } from 'undici';
import { afterAll, beforeAll, expect, test, vi } from 'vitest';
import { startTestTopology, type TestTopology } from '../helpers/topology.ts';

const counts = vi.hoisted(() => ({ policy: 0, requestAuthn: 0, route: 0, destinationRule: 0, networkPolicy: 0, provider: 0, clusterState: 0 }));

vi.mock(import('../../src/authz/policy.ts'), async (load) => {
  const m = await load();
  return { ...m, parsePolicy: (...a: Parameters<typeof m.parsePolicy>) => (counts.policy++, m.parsePolicy(...a)) };
});
vi.mock(import('../../src/authn/request-authentication.ts'), async (load) => {
  const m = await load();
  return { ...m, parseRequestAuthentication: (...a: Parameters<typeof m.parseRequestAuthentication>) => (counts.requestAuthn++, m.parseRequestAuthentication(...a)) };
});
vi.mock(import('../../src/routing/route-parse.ts'), async (load) => {
  const m = await load();
  return { ...m, parseRoute: (...a: Parameters<typeof m.parseRoute>) => (counts.route++, m.parseRoute(...a)) };
});
vi.mock(import('../../src/routing/destination-rule-schema.ts'), async (load) => {
  const m = await load();
  const schema = m.DestinationRuleSpecSchema;
  const safeParse: typeof schema.safeParse = (...a) => (counts.destinationRule++, schema.safeParse(...a));
  return { ...m, DestinationRuleSpecSchema: new Proxy(schema, { get: (t, p) => (p === 'safeParse' ? safeParse : Reflect.get(t, p)) }) };
});
vi.mock(import('../../src/netpol/policy.ts'), async (load) => {
  const m = await load();
  return { ...m, parseNetworkPolicy: (...a: Parameters<typeof m.parseNetworkPolicy>) => (counts.networkPolicy++, m.parseNetworkPolicy(...a)) };
});
vi.mock(import('../../src/ext-authz/config.ts'), async (load) => {
  const m = await load();
  return { ...m, parseProviderSettings: (...a: Parameters<typeof m.parseProviderSettings>) => (counts.provider++, m.parseProviderSettings(...a)) };
});
vi.mock(import('../../src/upstream/cluster-state.ts'), async (load) => {
  const m = await load();
  class CountedClusterState extends m.ClusterState {
    constructor(...a: ConstructorParameters<typeof m.ClusterState>) {
      super(...a);
      counts.clusterState++;
    }
  }
  return { ...m, ClusterState: CountedClusterState };
});

const NET = 220;
const IP = (n: number) => `127.0.${NET}.${n}`;

/** One resource of every kind an engine compiles; `label` changes the file without changing what it means. */
const policies = (label: string) => `---
apiVersion: v1
kind: ConfigMap
metadata: { name: istio, namespace: istio-system, labels: { rev: "${label}" } }
data:
  mesh: |
    trustDomain: cluster.local
    extensionProviders:
    - name: ext
      envoyExtAuthzHttp: { service: echo.demo.svc.cluster.local, port: 80 }
---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: { name: allow-demo, namespace: demo }
spec:
  targetRefs: [{ group: gateway.networking.k8s.io, kind: Gateway, name: waypoint }]
  rules: [{ from: [{ source: { namespaces: [demo] } }] }]
---
apiVersion: security.istio.io/v1
kind: RequestAuthentication
metadata: { name: jwt, namespace: demo }
spec:
  targetRefs: [{ group: gateway.networking.k8s.io, kind: Gateway, name: waypoint }]
  jwtRules: [{ issuer: https://issuer.example, jwks: '{"keys":[]}' }]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: { name: echo, namespace: demo }
spec:
  parentRefs: [{ group: "", kind: Service, name: echo, port: 80 }]
  rules: [{ backendRefs: [{ name: echo, port: 80 }] }]
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: { name: echo, namespace: demo }
spec:
  host: echo.demo.svc.cluster.local
  trafficPolicy: { loadBalancer: { simple: ROUND_ROBIN }, outlierDetection: { consecutive5xxErrors: 3 } }
---
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: { name: echo, namespace: demo }
spec:
  podSelector: { matchLabels: { app: echo } }
  ingress: [{ from: [{ podSelector: { matchLabels: { app: client } } }] }]
`;

let topo: TestTopology;
let base: string;
let mesh: string;

beforeAll(async () => {
  topo = await startTestTopology(NET, { bootstrap: { networkPolicy: { enforceOnOriginalIdentity: true } } });
  base = `http://${topo.entry.host}:${topo.entry.port}`;
  // The topology's mesh without its first document (the istio ConfigMap, which `policies` replaces).
  const text = fs.readFileSync(topo.meshFile, 'utf8');
  mesh = text.slice(text.indexOf('\n---\n') + 5);
  await apply(policies('1'), 2);
}, 30_000);
afterAll(async () => {
  await topo?.close();
});

/** Write the mesh file with `extra`, and wait until both stores (waypoint, inbound roles) publish `version`. */
async function apply(extra: string, version: number): Promise<void> {
  fs.writeFileSync(topo.meshFile, `${extra}---\n${mesh}`);
  await topo.waypoint!.mesh.reload();
  await topo.roleMesh.reload();
  expect(topo.waypoint!.mesh.current.version).toBe(version);
  expect(topo.roleMesh.current.version).toBe(version);
}

async function requests(n: number): Promise<void> {
  for (let i = 0; i < n; i += 10) {
    const batch = await Promise.all(
      Array.from({ length: 10 }, async (_, j) => {
        const res = await request(`${base}/r/${i + j}`, { headers: { host: 'echo.demo.svc.cluster.local' } });
        await res.body.dump();
        return res.statusCode;
      }),
    );
    expect(batch).toEqual(Array(10).fill(200));
  }
}

test('many requests compile nothing; a reload compiles each part once per store; cluster state is created once and carried', async () => {
  // Version 2 has every kind: each parser ran once per store that compiles its kind (AuthorizationPolicy
  // and NetworkPolicy: the waypoint's and the inbound roles' stores; the rest: the waypoint's only).
  const once = { policy: 2, requestAuthn: 1, route: 1, destinationRule: 1, networkPolicy: 2, provider: 1, clusterState: 1 };
  const before = { ...counts };
  await requests(60);
  expect(counts).toEqual(before);
  // The policies applied (the requests were routed, balanced and admitted under them).
  expect(topo.waypoint!.configDump()).toMatchObject({ routing: { acceptedRoutes: ['HTTPRoute/demo/echo'], clusters: [{ source: 'DestinationRule/demo/echo' }] } });

  await apply(policies('2'), 3);
  const after = { ...counts };
  for (const [k, n] of Object.entries(once)) expect(after[k as keyof typeof counts] - before[k as keyof typeof counts], k).toBe(k === 'clusterState' ? 0 : n);
  await requests(60);
  expect(counts).toEqual(after);
  // The same cluster state serves both versions (counts, ejections, positions carry over).
  expect(counts.clusterState).toBe(once.clusterState);
}, 30_000);
