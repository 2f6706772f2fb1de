/**
 * The waypoint is the trust boundary for Istio's peer-metadata headers (`x-envoy-peer-metadata`,
 * `x-envoy-peer-metadata-id`), end to end over HBONE (client → tunnel role → waypoint → inbound
 * role → app that also sends its own):
 *  - by default a client's never reach the app and an app's never reach the client, and neither
 *    changes `istio_requests_total` (the peers come from mesh state);
 *  - `stripIncomingPeerMetadata: false` (debugging) lets them pass both ways, still not believed;
 *  - only with `istio_headers` discovery configured does a request's header name the source
 *    workload in the metrics (the principal still comes from the certificate), and it is removed.
 * The topologies run one after another on 127.0.215.x.
 */
import http from 'node:http';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { encodePeerMetadata, EMPTY_PEER, PEER_METADATA_HEADER, PEER_METADATA_ID_HEADER } from '../../src/peer/index.ts';
import { samplesOf, scrape } from '../helpers/prometheus.ts';
import { startTestTopology, type TestTopology } from '../helpers/topology.ts';

const NET = 215;
const CLIENT_ID = 'spiffe://cluster.local/ns/demo/sa/client';
/** What a client claims to be (and an app about itself): another namespace, an admin identity. */
const FORGED = encodePeerMetadata({ ...EMPTY_PEER, name: 'forged-0', namespace: 'kube-system', workload: 'forged', type: 'deployment', service: 'forged', app: 'forged', identity: 'spiffe://cluster.local/ns/kube-system/sa/admin' });
const FORGED_ID = 'sidecar~10.9.9.9~forged-0.kube-system~kube-system.svc.cluster.local';

/** Apps on the pod IPs: answer with the request headers they saw, and metadata of their own. */
async function startApps(): Promise<http.Server[]> {
  const apps: http.Server[] = [];
  for (const [i, ip] of [`127.0.${NET}.11`, `127.0.${NET}.12`].entries()) {
    const app = http.createServer((req, res) => {
      const body = JSON.stringify(req.headers);
      res.writeHead(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body), 'x-served-by': `echo-${i + 1}`, [PEER_METADATA_HEADER]: FORGED, [PEER_METADATA_ID_HEADER]: FORGED_ID });
      res.end(body);
    });
    app.keepAliveTimeout = 0;
    await new Promise<void>((r) => app.listen(8080, ip, r));
    apps.push(app);
  }
  return apps;
}

/** GET through the topology's entry with forged peer metadata; the app's view of the request and the client's of the response. */
function forgedGet(topo: TestTopology, path: string): Promise<{ status: number; appSaw: Record<string, string>; clientSaw: http.IncomingHttpHeaders }> {
  return new Promise((resolve, reject) => {
    http
      .get({ host: topo.entry.host, port: topo.entry.port, path, agent: false, headers: { [PEER_METADATA_HEADER]: FORGED, [PEER_METADATA_ID_HEADER]: FORGED_ID, 'x-keep': 'k' } }, (r) => {
        let body = '';
        r.on('data', (c) => (body += c));
        r.on('end', () => resolve({ status: r.statusCode!, appSaw: JSON.parse(body), clientSaw: r.headers }));
      })
      .on('error', reject);
  });
}

/** The `istio_requests_total` series of the topology's waypoint (labels of interest only). */
async function requestSeries(topo: TestTopology) {
  const all = samplesOf(await scrape(topo.waypoint!.addresses.admin), 'istio_requests_total');
  return all.map((s) => ({
    source_workload: s.labels.source_workload,
    source_workload_namespace: s.labels.source_workload_namespace,
    source_principal: s.labels.source_principal,
    source_canonical_service: s.labels.source_canonical_service,
    destination_workload: s.labels.destination_workload,
    destination_principal: s.labels.destination_principal,
    value: s.value,
  }));
}

function withTopology(peerMetadata: Record<string, unknown> | undefined) {
  const ctx = {} as { topo: TestTopology; apps: http.Server[] };
  beforeAll(async () => {
    ctx.apps = await startApps();
    ctx.topo = await startTestTopology(NET, {
      backends: false,
      bootstrap: { filters: [{ name: 'istio.peer_metadata', ...(peerMetadata ? { config: peerMetadata } : {}) }, { name: 'istio.stats' }, { name: 'envoy.filters.http.router' }] },
    });
  });
  afterAll(async () => {
    for (const a of ctx.apps ?? []) a.closeAllConnections();
    for (const a of ctx.apps ?? []) a.close();
    await ctx.topo?.close();
  });
  return ctx;
}

describe('defaults: stripped both ways, never believed', () => {
  const ctx = withTopology(undefined);

  test("a client's peer metadata never reaches the app, an app's never reaches the client", async () => {
    const r = await forgedGet(ctx.topo, '/strip');
    expect(r.status).toBe(200);
    expect(r.appSaw[PEER_METADATA_HEADER]).toBeUndefined();
    expect(r.appSaw[PEER_METADATA_ID_HEADER]).toBeUndefined();
    expect(r.clientSaw[PEER_METADATA_HEADER]).toBeUndefined();
    expect(r.clientSaw[PEER_METADATA_ID_HEADER]).toBeUndefined();
    // Other headers pass as ever.
    expect(r.appSaw['x-keep']).toBe('k');
    expect(r.clientSaw['x-served-by']).toMatch(/^echo-[12]$/);
  });

  test('istio_requests_total takes the peers from mesh state, not from the headers', async () => {
    await forgedGet(ctx.topo, '/stats');
    const series = await requestSeries(ctx.topo);
    expect(series.length).toBeGreaterThan(0);
    for (const s of series) {
      expect(s).toMatchObject({ source_workload: 'client', source_workload_namespace: 'demo', source_principal: CLIENT_ID, source_canonical_service: 'client', destination_principal: 'spiffe://cluster.local/ns/demo/sa/echo' });
      expect(s.destination_workload).toMatch(/^echo-[12]$/);
    }
  });
});

describe('stripIncomingPeerMetadata: false (debugging): passed both ways, still not believed', () => {
  const ctx = withTopology({ stripIncomingPeerMetadata: false });

  test('the headers cross the waypoint untouched; the metrics still name the mesh-state peers', async () => {
    const r = await forgedGet(ctx.topo, '/pass');
    expect(r.status).toBe(200);
    expect(r.appSaw[PEER_METADATA_HEADER]).toBe(FORGED);
    expect(r.appSaw[PEER_METADATA_ID_HEADER]).toBe(FORGED_ID);
    expect(r.clientSaw[PEER_METADATA_HEADER]).toBe(FORGED);
    expect(r.clientSaw[PEER_METADATA_ID_HEADER]).toBe(FORGED_ID);
    for (const s of await requestSeries(ctx.topo)) expect(s).toMatchObject({ source_workload: 'client', source_principal: CLIENT_ID });
  });
});

describe('istio_headers discovery configured: the request header names the source, and is consumed', () => {
  const ctx = withTopology({ downstreamDiscovery: ['istio_headers', 'workload_discovery'], upstreamDiscovery: ['workload_discovery'], stripIncomingPeerMetadata: false });

  test('source_* from the header (principal from the certificate); removed toward the app', async () => {
    const r = await forgedGet(ctx.topo, '/believe');
    expect(r.status).toBe(200);
    // Read by discovery, hence removed (Envoy's rule), even with stripping off.
    expect(r.appSaw[PEER_METADATA_HEADER]).toBeUndefined();
    expect(r.appSaw[PEER_METADATA_ID_HEADER]).toBeUndefined();
    // Upstream discovery does not read headers: with stripping off, the app's pass.
    expect(r.clientSaw[PEER_METADATA_HEADER]).toBe(FORGED);
    const series = await requestSeries(ctx.topo);
    expect(series).toHaveLength(1);
    // The namespace label follows the certificate (as Istio's stats read it), not the header.
    expect(series[0]).toMatchObject({ source_workload: 'forged', source_canonical_service: 'forged', source_workload_namespace: 'demo', source_principal: CLIENT_ID });
  });
});
