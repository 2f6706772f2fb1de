/**
 * The source workload of a tunnel is the workload at its source address only when that
 * workload's identity is the client certificate's (over HBONE, read in istio_requests_total):
 *  - an east-west gateway forwarding another workload's tunnel (the gateway's address, the
 *    original client's certificate) is not `source_workload`;
 *  - a client presenting the gateway's certificate from a pod's address is not that pod;
 *  - then the CONNECT's baggage names the source when `baggage` discovery follows, else the
 *    source is `unknown` (namespace and principal still from the certificate);
 *  - an ordinary client (its own address and certificate) is still found by address.
 * Addresses: 127.0.216.x (gateway Pod at .60).
 */
import { afterAll, beforeAll, expect, test } from 'vitest';
import { connect, exchange, hboneSession, type ClientIdentity } from '../helpers/hbone-client.ts';
import { samplesOf, scrape } from '../helpers/prometheus.ts';
import { TestCa } from '../helpers/identity.ts';
import { pod } from '../helpers/mesh.ts';
import { addToMesh, startTestTopology, type TestTopology } from '../helpers/topology.ts';

const NET = 216;
const CLIENT_IP = `127.0.${NET}.50`;
const GATEWAY_IP = `127.0.${NET}.60`;
const CLIENT_ID = 'spiffe://cluster.local/ns/demo/sa/client';
const GATEWAY_ID = 'spiffe://cluster.local/ns/istio-system/sa/istio-eastwestgateway';

let topo: TestTopology;
const ids = new Map<string, ClientIdentity>();

beforeAll(async () => {
  topo = await startTestTopology(NET, {
    bootstrap: {
      filters: [{ name: 'istio.peer_metadata', config: { downstreamDiscovery: ['workload_discovery', 'baggage'] } }, { name: 'istio.stats' }, { name: 'envoy.filters.http.router' }],
    },
  });
  await addToMesh(
    topo,
    pod({ name: 'eastwest-gw', namespace: 'istio-system', labels: { app: 'istio-eastwestgateway' }, sa: 'istio-eastwestgateway', ip: GATEWAY_IP }),
  );
  expect(topo.waypoint!.mesh.current.workloadByIp(GATEWAY_IP)?.identity).toBe(GATEWAY_ID);
  const ca = await TestCa.load(topo.caDir);
  for (const uri of [CLIENT_ID, GATEWAY_ID]) ids.set(uri, await ca.identity(uri));
});

afterAll(async () => {
  await topo?.close();
});

/** One GET over a raw HBONE CONNECT from `from`, presenting `identity`, with optional CONNECT headers. */
async function request(from: string, identity: string, path: string, connectHeaders: Record<string, string> = {}): Promise<number> {
  const session = await hboneSession(`127.0.${NET}.1`, topo.waypoint!.addresses.hbone.port, ids.get(identity)!, { localAddress: from });
  try {
    const { status, stream } = await connect(session, `127.0.${NET}.100:80`, connectHeaders);
    expect(status).toBe(200);
    return (await exchange(stream, path)).status;
  } finally {
    session.close();
  }
}

/** The source labels of every istio_requests_total series whose principal is `principal`. */
async function sources(principal: string) {
  const all = samplesOf(await scrape(topo.waypoint!.addresses.admin), 'istio_requests_total');
  return all
    .filter((s) => s.labels.source_principal === principal)
    .map((s) => ({
      source_workload: s.labels.source_workload,
      source_canonical_service: s.labels.source_canonical_service,
      source_workload_namespace: s.labels.source_workload_namespace,
      source_app: s.labels.source_app,
      source_cluster: s.labels.source_cluster,
      value: s.value,
    }));
}

test("an east-west gateway's address with the original client's certificate: not the gateway; baggage names the source when sent", async () => {
  expect(await request(GATEWAY_IP, CLIENT_ID, '/via-gw')).toBe(200);
  expect(await sources(CLIENT_ID)).toEqual([
    { source_workload: 'unknown', source_canonical_service: 'unknown', source_workload_namespace: 'demo', source_app: 'unknown', source_cluster: 'unknown', value: 1 },
  ]);
  // The source ztunnel's baggage travels inside the forwarded CONNECT.
  const baggage = 'k8s.cluster.name=remote,k8s.namespace.name=demo,k8s.deployment.name=remote-app,service.name=remote-app,service.version=v2';
  expect(await request(GATEWAY_IP, CLIENT_ID, '/via-gw-baggage', { baggage })).toBe(200);
  expect(await sources(CLIENT_ID)).toContainEqual({ source_workload: 'remote-app', source_canonical_service: 'remote-app', source_workload_namespace: 'demo', source_app: 'remote-app', source_cluster: 'remote', value: 1 });
  expect((await sources(CLIENT_ID)).map((s) => s.source_workload)).not.toContain('eastwest-gw');
});

test("the gateway's certificate from a pod's address: not that pod", async () => {
  expect(await request(CLIENT_IP, GATEWAY_ID, '/borrowed')).toBe(200);
  expect(await sources(GATEWAY_ID)).toEqual([
    { source_workload: 'unknown', source_canonical_service: 'unknown', source_workload_namespace: 'istio-system', source_app: 'unknown', source_cluster: 'unknown', value: 1 },
  ]);
});

test('an ordinary client (its own address and certificate) is found by address', async () => {
  expect(await request(CLIENT_IP, CLIENT_ID, '/own')).toBe(200);
  expect(await sources(CLIENT_ID)).toContainEqual({ source_workload: 'client', source_canonical_service: 'client', source_workload_namespace: 'demo', source_app: 'client', source_cluster: 'Kubernetes', value: 1 });
});
