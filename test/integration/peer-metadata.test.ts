/**
 * `istio.peer_metadata` end to end on loopback (client → tunnel role → waypoint → inbound role →
 * echo pod), read by a recording filter at stream / tunnel completion:
 *  - defaults (workload discovery): the downstream peer is the client pod, the upstream peer the
 *    echo pod that answered; traffic addressed to a pod IP (no VIP) gets both peers (H4);
 *  - baggage discovery both ways: the source ztunnel's CONNECT baggage, and the baggage the
 *    destination ztunnel (inbound role) answers its CONNECT with, for HTTP and for a TCP tunnel;
 *  - upstream propagation: the pod receives `x-envoy-peer-metadata` describing the waypoint;
 *  - the inbound role answers each CONNECT with its workload's `baggage`.
 * Addresses: 127.0.100.x (defaults) and 127.0.101.x (baggage).
 */
import fs from 'node:fs';
import http from 'node:http';
import net from 'node:net';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { decodePeerMetadata, PEER_METADATA_HEADER } from '../../src/peer/peer-metadata-header.ts';
import { connect, hboneSession } from '../helpers/hbone-client.ts';
import { identityFrom } from '../helpers/identity.ts';
import { servicePort } from '../helpers/mesh.ts';
import { RECORDER, recorder } from '../helpers/recorder.ts';
import { addEntry, addToMesh, echoService, startTestTopology, type TestTopology } from '../helpers/topology.ts';

const CLIENT_ID = 'spiffe://cluster.local/ns/demo/sa/client';
const ECHO_ID = 'spiffe://cluster.local/ns/demo/sa/echo';

function get(host: string, port: number, path: string): Promise<{ status: number; servedBy: string; body: string }> {
  return new Promise((resolve, reject) => {
    http
      .get({ host, port, path, agent: false }, (r) => {
        let body = '';
        r.on('data', (c) => (body += c));
        r.on('end', () => resolve({ status: r.statusCode!, servedBy: String(r.headers['x-served-by']), body }));
      })
      .on('error', reject);
  });
}

/** The echo pods' workload peer fields from mesh state (Pods `echo-N`, app echo, version v1). */
function echoPod(name: string) {
  return { name, namespace: 'demo', cluster: 'Kubernetes', workload: name, type: 'pod', service: 'echo', revision: 'v1', app: 'echo', version: 'v1', identity: ECHO_ID };
}

describe('defaults: workload discovery (127.0.100.x)', () => {
  let topo: TestTopology;
  const rec = recorder();
  const closers: (() => Promise<unknown>)[] = [];

  beforeAll(async () => {
    topo = await startTestTopology(100, {
      extraFilters: [rec.factory],
      bootstrap: { filters: [{ name: 'istio.peer_metadata' }, { name: RECORDER }, { name: 'envoy.filters.http.router' }] },
    });
  });

  afterAll(async () => {
    for (const c of closers.reverse()) await c().catch(() => {});
    await topo?.close();
  });

  test('downstream peer = the client pod, upstream peer = the echo pod that answered', async () => {
    const res = await get(topo.entry.host, topo.entry.port, '/wds');
    expect(res.status).toBe(200);
    const r = await rec.find('/wds');
    expect(r.down).toMatchObject({ name: 'client', namespace: 'demo', cluster: 'Kubernetes', workload: 'client', type: 'pod', service: 'client', app: 'client', revision: 'latest', identity: CLIENT_ID });
    expect(r.up).toMatchObject(echoPod(res.servedBy));
    // The pod that answered is the endpoint the router chose.
    const ip = r.upstreamHost.split(':')[0];
    expect(topo.waypoint!.mesh.current.workloadByIp(ip)?.name).toBe(res.servedBy);
  });

  test('the inbound role (destination ztunnel) answers each CONNECT with its workload baggage', async () => {
    const session = await hboneSession('127.0.100.11', topo.inbounds[0].address.port, await identityFrom(topo.caDir));
    try {
      const { status, headers, stream } = await connect(session, '127.0.100.11:8080');
      expect(status).toBe(200);
      expect(headers.baggage).toBe('k8s.cluster.name=Kubernetes,k8s.namespace.name=demo,k8s.pod.name=echo-1,service.name=echo,service.version=v1');
      stream.close();
    } finally {
      session.close();
    }
  });

  test('traffic addressed to a pod IP (no VIP) still gets both peers (H4)', async () => {
    const mesh = fs.readFileSync(topo.meshFile, 'utf8').replace('metadata: { name: waypoint, namespace: demo }', 'metadata: { name: waypoint, namespace: demo, labels: { istio.io/waypoint-for: all } }');
    fs.writeFileSync(topo.meshFile, mesh);
    await topo.waypoint!.mesh.reload();
    expect(topo.waypoint!.mesh.current.resolveTarget('127.0.100.12', 8080)?.kind).toBe('workload');
    const entry = await addEntry(topo, '127.0.100.12:8080');
    closers.push(entry.close);
    const res = await get(entry.host, entry.port, '/pod-ip');
    expect(res).toMatchObject({ status: 200, servedBy: 'echo-2' });
    const r = await rec.find('/pod-ip');
    expect(r.down).toMatchObject({ name: 'client', namespace: 'demo', workload: 'client', identity: CLIENT_ID });
    expect(r.up).toMatchObject(echoPod('echo-2'));
  });
});

describe('baggage discovery both ways, upstream propagation (127.0.101.x)', () => {
  let topo: TestTopology;
  const rec = recorder();
  const closers: (() => Promise<unknown>)[] = [];
  /** What a peer learned from ztunnel baggage looks like: no pod name (ztunnel sends none), identity from the certificate. */
  const fromBaggage = (workload: string, identity: string, service: string, revision: string) => ({
    name: '',
    namespace: 'demo',
    cluster: 'Kubernetes',
    workload,
    type: 'pod',
    service,
    revision,
    identity,
  });

  beforeAll(async () => {
    topo = await startTestTopology(101, {
      extraFilters: [rec.factory],
      bootstrap: {
        filters: [
          { name: 'istio.peer_metadata', config: { downstreamDiscovery: ['baggage'], upstreamDiscovery: ['baggage'], upstreamPropagation: ['istio_headers'] } },
          { name: RECORDER },
          { name: 'envoy.filters.http.router' },
        ],
      },
    });
  });

  afterAll(async () => {
    for (const c of closers.reverse()) await c().catch(() => {});
    await topo?.close();
  });

  test('HTTP: downstream from the CONNECT baggage, upstream from the destination ztunnel answer; the pod sees the waypoint metadata', async () => {
    const res = await get(topo.entry.host, topo.entry.port, '/bag');
    expect(res.status).toBe(200);
    const r = await rec.find('/bag');
    expect(r.down).toMatchObject(fromBaggage('client', CLIENT_ID, 'client', 'latest'));
    expect(r.up).toMatchObject(fromBaggage(res.servedBy, ECHO_ID, 'echo', 'v1'));
    const seen = JSON.parse(res.body).headers as Record<string, string>;
    const sent = decodePeerMetadata(seen[PEER_METADATA_HEADER]);
    expect(sent.ok && sent.peer).toMatchObject({ namespace: 'demo', workload: 'waypoint', type: 'deployment', service: 'waypoint', identity: 'spiffe://cluster.local/ns/demo/sa/waypoint' });
  });

  test('TCP tunnel: the upstream peer from the baggage of the upstream CONNECT answer', async () => {
    await addToMesh(topo, echoService('echo-tcp', '127.0.101.101', servicePort('tcp', 9000, 8080)));
    const entry = await addEntry(topo, '127.0.101.101:9000');
    closers.push(entry.close);
    const raw = await new Promise<string>((resolve, reject) => {
      const s = net.connect(entry.port, entry.host, () => s.write('GET /tcp HTTP/1.1\r\nHost: echo\r\nConnection: close\r\n\r\n'));
      let acc = '';
      s.on('data', (c) => (acc += c));
      s.once('end', () => resolve(acc));
      s.once('error', reject);
    });
    const servedBy = /x-served-by: (echo-\d)/i.exec(raw)?.[1];
    expect(servedBy).toMatch(/^echo-\d$/);
    const t = await rec.tunnel({ authority: '127.0.101.101:9000', inner: 'TCP' });
    expect(t.down).toMatchObject(fromBaggage('client', CLIENT_ID, 'client', 'latest'));
    expect(t.up).toMatchObject(fromBaggage(servedBy!, ECHO_ID, 'echo', 'v1'));
  });
});
