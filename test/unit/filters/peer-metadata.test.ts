/**
 * `istio.peer_metadata` on fake contexts over a compiled mesh snapshot: each discovery method and
 * their order, IPv4-mapped source addresses, the certificate identity fallback, propagation of the
 * waypoint's own metadata, header stripping, malformed headers and baggage, and config.
 */
import os from 'node:os';
import type { IncomingHttpHeaders } from 'node:http2';
import fc from 'fast-check';
import { describe, expect, test } from 'vitest';
import { createPeerMetadataFilter, parsePeerMetadataConfig, peerMetadataFactory, workloadAt } from '../../../filters/peer-metadata/index.ts';
import { peerBaggage, selfMetadata } from '../../../filters/peer-metadata/self.ts';
import { formatBaggage } from '../../../src/peer/baggage.ts';
import { parseBaggage } from '../../../src/peer/baggage-parse.ts';
import { DOWNSTREAM_PEER, EMPTY_PEER, REQUEST_DOWNSTREAM_PEER, TCP_UPSTREAM_PEER, UPSTREAM_PEER, downstreamPeerOf, sourceWorkloadAt, type PeerInfo } from '../../../src/peer/peer-info.ts';
import { decodePeerMetadata, encodePeerMetadata, PEER_METADATA_HEADER, PEER_METADATA_ID_HEADER } from '../../../src/peer/peer-metadata-header.ts';
import { FilterChain, FilterRegistry, HeaderList, type ConnectInfo, type ConnectionContext, type Filter, type StreamContext } from '../../../src/pipeline/index.ts';
import { compileMesh } from '../../../src/state/compile.ts';
import type { Endpoint, MeshSnapshot } from '../../../src/state/index.ts';
import { caught } from '../../helpers/config-error.ts';
import { ISTIO_124_HEADER, ISTIO_124_PEER } from '../peer/fixtures.ts';
import { FilterHarness, MeshStub, filterEnv } from '../../helpers/filter-harness.ts';
import { INFO, terminal } from '../pipeline/fakes.ts';

const MESH = `apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: { name: waypoint, namespace: demo }
spec:
  gatewayClassName: istio-waypoint
  listeners: [{ name: mesh, port: 15008, protocol: HBONE }]
---
apiVersion: v1
kind: Namespace
metadata: { name: demo, labels: { istio.io/use-waypoint: waypoint } }
---
apiVersion: v1
kind: Service
metadata: { name: echo, namespace: demo }
spec:
  clusterIP: 10.96.0.10
  selector: { app: echo }
  ports: [{ name: http, port: 8080, targetPort: 8080 }]
---
apiVersion: v1
kind: Pod
metadata: { name: echo-1, namespace: demo, labels: { app: echo, version: v1 } }
spec: { serviceAccountName: echo }
status: { podIP: 10.0.1.11 }
---
apiVersion: v1
kind: Pod
metadata: { name: client, namespace: demo, labels: { app: client } }
spec: { serviceAccountName: client }
status: { podIP: 10.0.0.1 }
---
apiVersion: v1
kind: Pod
metadata: { name: v6client, namespace: demo, labels: { app: v6client } }
spec: { serviceAccountName: client }
status: { podIP: "fd00::20" }
`;

const WAYPOINT_POD = `---
apiVersion: v1
kind: Pod
metadata:
  name: waypoint-5d9f-abcde
  namespace: demo
  labels:
    gateway.networking.k8s.io/gateway-name: waypoint
    pod-template-hash: 5d9f
    service.istio.io/canonical-name: waypoint
    service.istio.io/canonical-revision: latest
  ownerReferences: [{ apiVersion: apps/v1, kind: ReplicaSet, name: waypoint-5d9f, controller: true }]
spec: { serviceAccountName: waypoint }
status: { podIP: 10.0.0.5 }
`;

const snap = compileMesh({ text: MESH, file: 'mesh.yaml' });
const env = filterEnv({ mesh: snap });
const CERT = INFO.peer.uri;
const ECHO_ID = 'spiffe://cluster.local/ns/demo/sa/echo';
const WAYPOINT_ID = 'spiffe://cluster.local/ns/demo/sa/waypoint';

const UNKNOWN: PeerInfo = EMPTY_PEER;

const CLIENT = {
  name: 'client',
  namespace: 'demo',
  cluster: 'Kubernetes',
  workload: 'client',
  type: 'pod',
  service: 'client',
  revision: 'latest',
  identity: CERT,
};
const ECHO = { name: 'echo-1', namespace: 'demo', workload: 'echo-1', type: 'pod', service: 'echo', revision: 'v1', app: 'echo', version: 'v1', identity: ECHO_ID };

function echoEndpoint(mesh: MeshSnapshot = snap): Endpoint {
  const target = mesh.resolveTarget('10.96.0.10', 8080);
  if (target?.kind !== 'service') throw new Error('no echo service');
  return target.service.endpoints.get(8080)![0];
}

/** A filter for `config` (raw, parsed like the registry does) over `mesh`. */
function make(config?: unknown, mesh: MeshSnapshot = snap): { filter: Filter; chain: FilterChain } {
  const filter = createPeerMetadataFilter(parsePeerMetadataConfig(config), filterEnv({ mesh }));
  return { filter, chain: new FilterChain([filter, terminal('router', [], [])]) };
}

function connection(info: Partial<ConnectInfo> = {}, mesh: MeshSnapshot = snap): ConnectionContext {
  return new FilterHarness([], mesh).connection({ info, mesh });
}

function stream(chain: FilterChain, conn: ConnectionContext, headers: Record<string, string> = {}): StreamContext {
  return new FilterHarness(chain, conn.mesh).stream(conn, { headers });
}

/** One request through every phase the chain has: connection, request headers, upstream request, response headers. */
function exchange(
  chain: FilterChain,
  opts: { info?: Partial<ConnectInfo>; request?: Record<string, string>; response?: string[]; endpoint?: Endpoint | null; connectHeaders?: IncomingHttpHeaders; mesh?: MeshSnapshot } = {},
) {
  const conn = connection(opts.info, opts.mesh);
  chain.runConnection(conn);
  const s = stream(chain, conn, opts.request);
  chain.runRequestHeaders(s);
  // What the router sends upstream: the stream's header list after the request phases.
  const upstream = s.requestHeaders;
  chain.runUpstreamRequest(s, upstream);
  if (opts.endpoint !== null) s.endpoint = opts.endpoint ?? echoEndpoint(opts.mesh);
  s.upstreamConnectHeaders = opts.connectHeaders;
  const response = new HeaderList([...(opts.response ?? [])]);
  s.responseCode = 200;
  chain.runResponseHeaders(s, response);
  return { conn, stream: s, upstream, response };
}

describe('defaults (Istio waypoint: workload discovery both ways, no propagation)', () => {
  test('downstream = the workload at the tunnel source IP, upstream = the chosen endpoint workload', () => {
    const { chain } = make();
    const { conn, stream: s } = exchange(chain);
    expect(conn.get(DOWNSTREAM_PEER)).toMatchObject(CLIENT);
    expect(downstreamPeerOf(s)).toBe(conn.get(DOWNSTREAM_PEER));
    expect(s.get(UPSTREAM_PEER)).toMatchObject({ ...ECHO, cluster: 'Kubernetes' });
  });

  test('only the phases the defaults need are implemented; x-envoy-peer-metadata is neither believed nor passed on', () => {
    const { filter, chain } = make();
    expect(Object.keys(filter).sort()).toEqual(['name', 'onConnection', 'onRequestHeaders', 'onResponseHeaders', 'onUpstreamConnected']);
    const fromClient = { [PEER_METADATA_HEADER]: ISTIO_124_HEADER, [PEER_METADATA_ID_HEADER]: 'sidecar~1.2.3.4~x.y~y.svc.cluster.local', 'x-keep': 'k' };
    const { stream: s, upstream, response } = exchange(chain, { request: fromClient, response: ['X-Envoy-Peer-Metadata', ISTIO_124_HEADER, 'x-keep', 'k'] });
    // Not believed: the peers still come from mesh state.
    expect(downstreamPeerOf(s)).toMatchObject(CLIENT);
    expect(s.get(UPSTREAM_PEER)).toMatchObject(ECHO);
    // The waypoint is the trust boundary: stripped toward the app and toward the client.
    expect(upstream.raw).toEqual(['x-keep', 'k']);
    expect(response.raw).toEqual(['x-keep', 'k']);
  });

  test('stripIncomingPeerMetadata: false (debugging) lets them pass untouched, still not believed', () => {
    const { filter, chain } = make({ stripIncomingPeerMetadata: false });
    expect(Object.keys(filter).sort()).toEqual(['name', 'onConnection', 'onResponseHeaders', 'onUpstreamConnected']);
    const fromClient = { [PEER_METADATA_HEADER]: ISTIO_124_HEADER, [PEER_METADATA_ID_HEADER]: 'sidecar~1.2.3.4~x.y~y.svc.cluster.local' };
    const { stream: s, upstream, response } = exchange(chain, { request: fromClient, response: [PEER_METADATA_HEADER, ISTIO_124_HEADER] });
    expect(downstreamPeerOf(s)).toMatchObject(CLIENT);
    expect(s.get(UPSTREAM_PEER)).toMatchObject(ECHO);
    expect(upstream.get(PEER_METADATA_HEADER)).toBe(ISTIO_124_HEADER);
    expect(upstream.get(PEER_METADATA_ID_HEADER)).toBe(fromClient[PEER_METADATA_ID_HEADER]);
    expect(response.get(PEER_METADATA_HEADER)).toBe(ISTIO_124_HEADER);
  });

  test('the PeerInfo of a workload is built once per workload (no allocation per tunnel or request)', () => {
    const { chain } = make();
    const a = exchange(chain);
    const b = exchange(chain);
    expect(b.conn.get(DOWNSTREAM_PEER)).toBe(a.conn.get(DOWNSTREAM_PEER));
    expect(b.stream.get(UPSTREAM_PEER)).toBe(a.stream.get(UPSTREAM_PEER));
  });

  test('IPv4-mapped IPv6 and uncompressed IPv6 source addresses are normalised before the lookup (A3)', () => {
    const { chain } = make();
    for (const addr of ['::ffff:10.0.0.1', '::FFFF:a00:1', '0:0:0:0:0:ffff:10.0.0.1']) {
      expect(exchange(chain, { info: { downstreamAddress: addr } }).conn.get(DOWNSTREAM_PEER), addr).toMatchObject(CLIENT);
    }
    expect(exchange(chain, { info: { downstreamAddress: 'fd00:0:0:0:0:0:0:20' } }).conn.get(DOWNSTREAM_PEER)).toMatchObject({ name: 'v6client' });
    expect(workloadAt(snap, '::ffff:10.0.1.11')?.name).toBe('echo-1');
    expect(workloadAt(snap, 'not-an-ip')).toBeUndefined();
    expect(workloadAt(snap, '::ffff:10.9.9.9')).toBeUndefined();
  });

  test('an unknown source is known by its certificate only; the rest stays unknown', () => {
    const { chain } = make();
    const { conn } = exchange(chain, { info: { downstreamAddress: '10.9.9.9' } });
    expect(conn.get(DOWNSTREAM_PEER)).toEqual({ ...UNKNOWN, identity: CERT });
  });

  test('a workload at the source address counts only with the certificate identity it has (an east-west gateway, a borrowed address)', () => {
    const { chain } = make({ downstreamDiscovery: ['workload_discovery', 'baggage'] });
    const other = 'spiffe://cluster.local/ns/istio-system/sa/istio-eastwestgateway';
    const peer = { ...INFO.peer, uri: other };
    expect(exchange(chain, { info: { peer } }).conn.get(DOWNSTREAM_PEER)).toEqual({ ...UNKNOWN, identity: other });
    expect(sourceWorkloadAt(snap, '10.0.0.1', other)).toBeUndefined();
    expect(sourceWorkloadAt(snap, '::ffff:10.0.0.1', CERT)?.name).toBe('client');
    expect(sourceWorkloadAt(snap, '10.0.0.1', '')).toBeUndefined();
    // The next method decides: the CONNECT's baggage.
    const down = exchange(chain, { info: { peer, baggage: 'k8s.namespace.name=demo,k8s.deployment.name=web,service.name=web' } }).conn.get(DOWNSTREAM_PEER);
    expect(down).toMatchObject({ workload: 'web', service: 'web', identity: other });
  });

  test('no endpoint (local reply before one was picked): no upstream peer', () => {
    const { chain } = make();
    expect(exchange(chain, { endpoint: null }).stream.get(UPSTREAM_PEER)).toBeUndefined();
  });

  test('TCP tunnels: the upstream peer is the connected endpoint workload', () => {
    const { chain } = make();
    const conn = connection();
    conn.endpoint = echoEndpoint();
    chain.runUpstreamConnected(conn);
    expect(conn.get(TCP_UPSTREAM_PEER)).toMatchObject(ECHO);
  });

  test('workload-addressed traffic (pod IP, no VIP) gets both peers (H4)', () => {
    const mesh = compileMesh({ text: MESH.replace('metadata: { name: waypoint, namespace: demo }', 'metadata: { name: waypoint, namespace: demo, labels: { istio.io/waypoint-for: all } }'), file: 'm.yaml' });
    const target = mesh.resolveTarget('10.0.1.11', 8080);
    expect(target?.kind).toBe('workload');
    const { chain } = make(undefined, mesh);
    const ep: Endpoint = { workload: mesh.workloadByIp('10.0.1.11')!, address: '10.0.1.11', targetPort: 8080, tunnel: 'HBONE', authority: '10.0.1.11:8080' };
    const { conn, stream: s } = exchange(chain, { mesh, endpoint: ep, info: { targetIp: '10.0.1.11', authority: '10.0.1.11:8080' } });
    expect(conn.get(DOWNSTREAM_PEER)).toMatchObject(CLIENT);
    expect(s.get(UPSTREAM_PEER)).toMatchObject(ECHO);
  });
});

describe('baggage discovery', () => {
  const ztunnelBaggage = 'k8s.cluster.name=C2,k8s.namespace.name=other,k8s.deployment.name=web,service.name=web,service.version=v7';

  test('downstream: the CONNECT baggage, first in the list, wins over workload discovery; identity from the certificate', () => {
    const { chain } = make({ downstreamDiscovery: ['baggage', 'workload_discovery'] });
    const { conn } = exchange(chain, { info: { baggage: ztunnelBaggage } });
    expect(conn.get(DOWNSTREAM_PEER)).toEqual({
      ...UNKNOWN,
      cluster: 'C2',
      namespace: 'other',
      workload: 'web',
      type: 'deployment',
      service: 'web',
      app: 'web',
      revision: 'v7',
      version: 'v7',
      identity: CERT,
    });
  });

  test('downstream: no baggage, or baggage naming nothing known, falls through to workload discovery', () => {
    const { chain } = make({ downstreamDiscovery: ['baggage', 'workload_discovery'] });
    for (const baggage of ['', 'foo=bar', ',,,', 'k8s.namespace.name=']) {
      expect(exchange(chain, { info: { baggage } }).conn.get(DOWNSTREAM_PEER), baggage).toMatchObject(CLIENT);
    }
  });

  test('downstream: workload discovery first wins; baggage is used when the source IP is unknown', () => {
    const { chain } = make({ downstreamDiscovery: ['workload_discovery', 'baggage'] });
    expect(exchange(chain, { info: { baggage: ztunnelBaggage } }).conn.get(DOWNSTREAM_PEER)).toMatchObject(CLIENT);
    expect(exchange(chain, { info: { baggage: ztunnelBaggage, downstreamAddress: '10.9.9.9' } }).conn.get(DOWNSTREAM_PEER)).toMatchObject({ workload: 'web', namespace: 'other', identity: CERT });
  });

  test("upstream: the destination ztunnel's CONNECT response baggage, identity from the endpoint; parsed once per CONNECT", () => {
    const { chain } = make({ upstreamDiscovery: ['baggage'] });
    const echo = snap.workloadByIp('10.0.1.11')!;
    const connectHeaders: IncomingHttpHeaders = { baggage: formatBaggage(echo) };
    const a = exchange(chain, { connectHeaders }).stream.get(UPSTREAM_PEER);
    expect(a).toEqual({ ...UNKNOWN, cluster: 'Kubernetes', namespace: 'demo', workload: 'echo-1', type: 'pod', service: 'echo', app: 'echo', revision: 'v1', version: 'v1', identity: ECHO_ID });
    expect(exchange(chain, { connectHeaders }).stream.get(UPSTREAM_PEER)).toBe(a);
    // No CONNECT headers (plain TCP endpoint, local reply) or no baggage: nothing.
    expect(exchange(chain).stream.get(UPSTREAM_PEER)).toBeUndefined();
    expect(exchange(chain, { connectHeaders: {} }).stream.get(UPSTREAM_PEER)).toBeUndefined();
  });

  test('upstream order: [baggage, workload_discovery] falls back to the endpoint when the baggage is missing or junk', () => {
    const { chain } = make({ upstreamDiscovery: ['baggage', 'workload_discovery'] });
    expect(exchange(chain, { connectHeaders: { baggage: ';;;=,' } }).stream.get(UPSTREAM_PEER)).toMatchObject(ECHO);
    expect(exchange(chain, { connectHeaders: { baggage: 'service.name=fromztunnel' } }).stream.get(UPSTREAM_PEER)).toMatchObject({ name: '', service: 'fromztunnel', identity: ECHO_ID });
  });

  test('TCP tunnels, istio_headers: the peer a sidecar sent over istio-peer-exchange, identity from the endpoint', () => {
    const { chain } = make({ upstreamDiscovery: ['istio_headers', 'workload_discovery'] });
    const conn = connection();
    conn.endpoint = echoEndpoint();
    chain.runUpstreamConnected(conn);
    expect(conn.get(TCP_UPSTREAM_PEER)).toMatchObject(ECHO);
    const exchanged = connection();
    exchanged.endpoint = echoEndpoint();
    exchanged.upstreamExchangePeer = Object.freeze({ ...UNKNOWN, namespace: 'demo', workload: 'sidecar-app' });
    chain.runUpstreamConnected(exchanged);
    expect(exchanged.get(TCP_UPSTREAM_PEER)).toEqual({ ...UNKNOWN, namespace: 'demo', workload: 'sidecar-app', identity: ECHO_ID });
  });

  test('TCP tunnels: the upstream CONNECT baggage', () => {
    const { chain } = make({ upstreamDiscovery: ['baggage', 'workload_discovery'] });
    const conn = connection();
    conn.endpoint = echoEndpoint();
    conn.upstreamConnectHeaders = { baggage: 'k8s.namespace.name=demo,k8s.pod.name=echo-1,service.name=echo-z' };
    chain.runUpstreamConnected(conn);
    expect(conn.get(TCP_UPSTREAM_PEER)).toMatchObject({ name: '', service: 'echo-z', identity: ECHO_ID });
  });
});

describe('istio_headers discovery', () => {
  const mx = { [PEER_METADATA_HEADER]: ISTIO_124_HEADER, [PEER_METADATA_ID_HEADER]: 'sidecar~10.1.2.3~productpage.bookinfo~bookinfo.svc.cluster.local' };

  test('downstream [istio_headers, workload_discovery]: a request header overrides the tunnel peer for that request only, and is removed', () => {
    const { filter, chain } = make({ downstreamDiscovery: ['istio_headers', 'workload_discovery'] });
    expect(typeof filter.onRequestHeaders).toBe('function');
    const conn = connection();
    chain.runConnection(conn);
    expect(conn.get(DOWNSTREAM_PEER)).toMatchObject(CLIENT);
    const withHeaders = stream(chain, conn, { ...mx, 'x-other': '1' });
    chain.runRequestHeaders(withHeaders);
    expect(downstreamPeerOf(withHeaders)).toEqual({ ...ISTIO_124_PEER, identity: CERT });
    // Removed in the request phase: no later filter, route or upstream sees them.
    expect(withHeaders.requestHeaders.raw).toEqual(['x-other', '1']);
    // The next request on the same tunnel without headers: the tunnel's peer.
    const plain = stream(chain, conn);
    chain.runRequestHeaders(plain);
    expect(plain.get(REQUEST_DOWNSTREAM_PEER)).toBeUndefined();
    expect(downstreamPeerOf(plain)).toMatchObject(CLIENT);
  });

  test('a header peer without IDENTITY gets the client certificate identity', () => {
    const { chain } = make({ downstreamDiscovery: ['istio_headers'] });
    const header = encodePeerMetadata({ ...UNKNOWN, namespace: 'hdr', workload: 'w' });
    const { stream: s, conn } = exchange(chain, { request: { [PEER_METADATA_HEADER]: header } });
    expect(downstreamPeerOf(s)).toMatchObject({ namespace: 'hdr', workload: 'w', identity: CERT });
    // Nothing else configured: the tunnel peer is the certificate alone.
    expect(conn.get(DOWNSTREAM_PEER)).toEqual({ ...UNKNOWN, identity: CERT });
  });

  test('downstream [workload_discovery, istio_headers]: headers are consulted only when workload discovery failed, removed either way', () => {
    const { chain } = make({ downstreamDiscovery: ['workload_discovery', 'istio_headers'] });
    const known = exchange(chain, { request: mx });
    expect(downstreamPeerOf(known.stream)).toMatchObject(CLIENT);
    expect(known.upstream.get(PEER_METADATA_HEADER)).toBeUndefined();
    expect(known.upstream.get(PEER_METADATA_ID_HEADER)).toBeUndefined();
    const unknown = exchange(chain, { request: mx, info: { downstreamAddress: '10.9.9.9' } });
    expect(downstreamPeerOf(unknown.stream)).toEqual({ ...ISTIO_124_PEER, identity: CERT });
  });

  test('upstream [istio_headers, workload_discovery]: the response header wins and is removed; without it, the endpoint', () => {
    const { chain } = make({ upstreamDiscovery: ['istio_headers', 'workload_discovery'] });
    const a = exchange(chain, { response: [PEER_METADATA_HEADER, ISTIO_124_HEADER, PEER_METADATA_ID_HEADER, 'x', 'content-type', 'text/plain'] });
    expect(a.stream.get(UPSTREAM_PEER)).toEqual({ ...ISTIO_124_PEER, identity: ECHO_ID });
    expect(a.response.raw).toEqual(['content-type', 'text/plain']);
    expect(exchange(chain).stream.get(UPSTREAM_PEER)).toMatchObject(ECHO);
  });

  test('an upstream header peer without IDENTITY gets the endpoint identity', () => {
    const { chain } = make({ upstreamDiscovery: ['istio_headers'] });
    const header = encodePeerMetadata({ ...UNKNOWN, namespace: 'demo', workload: 'sidecar-app' });
    expect(exchange(chain, { response: [PEER_METADATA_HEADER, header] }).stream.get(UPSTREAM_PEER)).toMatchObject({ workload: 'sidecar-app', identity: ECHO_ID });
  });

  test('an upstream header peer claiming another IDENTITY gets the endpoint identity it was verified as', () => {
    const { chain } = make({ upstreamDiscovery: ['istio_headers'] });
    const forged = encodePeerMetadata({ ...UNKNOWN, namespace: 'kube-system', workload: 'forged', identity: 'spiffe://cluster.local/ns/kube-system/sa/admin' });
    expect(exchange(chain, { response: [PEER_METADATA_HEADER, forged] }).stream.get(UPSTREAM_PEER)).toMatchObject({ workload: 'forged', identity: ECHO_ID });
  });

  test('repeated header values: the first is used', () => {
    const { chain } = make({ downstreamDiscovery: ['istio_headers'] });
    const { stream: s } = exchange(chain, { request: { [PEER_METADATA_HEADER]: `${ISTIO_124_HEADER}, ${encodePeerMetadata({ ...UNKNOWN, namespace: 'second' })}` } });
    expect(downstreamPeerOf(s)).toEqual({ ...ISTIO_124_PEER, identity: CERT });
  });

  test('a downstream header peer claiming another IDENTITY gets the client certificate identity', () => {
    const { chain } = make({ downstreamDiscovery: ['istio_headers'] });
    const forged = encodePeerMetadata({ ...UNKNOWN, namespace: 'kube-system', workload: 'forged', identity: 'spiffe://cluster.local/ns/kube-system/sa/admin' });
    expect(downstreamPeerOf(exchange(chain, { request: { [PEER_METADATA_HEADER]: forged } }).stream)).toMatchObject({ workload: 'forged', identity: CERT });
  });
});

describe('propagation of the waypoint itself', () => {
  test('upstream istio_headers + baggage: the waypoint Deployment as Istio generates it, replacing what the client sent', () => {
    const { filter, chain } = make({ upstreamPropagation: ['istio_headers', 'baggage'] });
    expect(typeof filter.onUpstreamRequest).toBe('function');
    const { upstream } = exchange(chain, { request: { [PEER_METADATA_HEADER]: ISTIO_124_HEADER, baggage: 'k8s.namespace.name=forged' } });
    const sent = decodePeerMetadata(upstream.get(PEER_METADATA_HEADER)!);
    expect(sent.ok && sent.peer).toEqual({
      ...UNKNOWN,
      name: os.hostname(),
      namespace: 'demo',
      cluster: 'Kubernetes',
      workload: 'waypoint',
      type: 'deployment',
      service: 'waypoint',
      revision: 'latest',
      app: 'waypoint',
      version: 'latest',
      identity: WAYPOINT_ID,
      labels: { app: 'waypoint', version: 'latest', 'service.istio.io/canonical-name': 'waypoint', 'service.istio.io/canonical-revision': 'latest' },
    });
    expect(upstream.raw.filter((_, i) => i % 2 === 0 && upstream.raw[i] === PEER_METADATA_HEADER)).toHaveLength(1);
    // The pod IP is unknown: no node id.
    expect(upstream.get(PEER_METADATA_ID_HEADER)).toBeUndefined();
    expect(upstream.get('baggage')).toBe(`k8s.deployment.name=waypoint,service.name=waypoint,service.version=latest,k8s.namespace.name=demo,k8s.cluster.name=Kubernetes,k8s.instance.name=${os.hostname()}`);
    expect(parseBaggage(upstream.get('baggage'))).toMatchObject({ namespace: 'demo', workload: 'waypoint', type: 'deployment', service: 'waypoint' });
  });

  test("the waypoint's own Pod, when the mesh lists it (by host name or Istio's gateway-name label), gives its name and Envoy's node id", () => {
    const mesh = compileMesh({ text: MESH + WAYPOINT_POD, file: 'm.yaml' });
    expect(selfMetadata(mesh, 'waypoint-5d9f-abcde')).toEqual(selfMetadata(mesh, 'some-other-host'));
    // Without the Pod: the host name as pod name, no node id; an unusable host name is left out.
    expect(selfMetadata(snap, 'wp-host')).toMatchObject({ id: '', peer: { name: 'wp-host', workload: 'waypoint' } });
    expect(selfMetadata(snap, 'a~b')).toMatchObject({ id: '', peer: { name: '', workload: 'waypoint', identity: WAYPOINT_ID } });
    const self = selfMetadata(mesh);
    expect(self.id).toBe('waypoint~10.0.0.5~waypoint-5d9f-abcde.demo~demo.svc.cluster.local');
    expect(self.peer).toMatchObject({ name: 'waypoint-5d9f-abcde', namespace: 'demo', workload: 'waypoint', type: 'deployment', service: 'waypoint', revision: 'latest', identity: WAYPOINT_ID });
    const { chain } = make({ upstreamPropagation: ['istio_headers'] }, mesh);
    const { upstream } = exchange(chain, { mesh });
    expect(upstream.get(PEER_METADATA_ID_HEADER)).toBe(self.id);
    expect(upstream.get(PEER_METADATA_HEADER)).toBe(self.metadata);
  });

  test('self metadata follows mesh updates (computed once per snapshot)', () => {
    const holder = new MeshStub(snap);
    const filter = createPeerMetadataFilter(parsePeerMetadataConfig({ upstreamPropagation: ['istio_headers'] }), { ...env, mesh: holder });
    const chain = new FilterChain([filter, terminal('router', [], [])]);
    expect(exchange(chain).upstream.get(PEER_METADATA_ID_HEADER)).toBeUndefined();
    holder.current = compileMesh({ text: MESH + WAYPOINT_POD, file: 'm.yaml', version: 2 });
    expect(exchange(chain, { mesh: holder.current }).upstream.get(PEER_METADATA_ID_HEADER)).toMatch(/^waypoint~10\.0\.0\.5~/);
  });

  test('downstream istio_headers only when the request carried them, each header on its own (Envoy rule)', () => {
    const mesh = compileMesh({ text: MESH + WAYPOINT_POD, file: 'm.yaml' });
    const { chain } = make({ downstreamDiscovery: ['istio_headers', 'workload_discovery'], downstreamPropagation: ['istio_headers'] }, mesh);
    const none = exchange(chain, { mesh });
    expect(none.response.get(PEER_METADATA_HEADER)).toBeUndefined();
    expect(none.response.get(PEER_METADATA_ID_HEADER)).toBeUndefined();
    const both = exchange(chain, { mesh, request: { [PEER_METADATA_HEADER]: ISTIO_124_HEADER, [PEER_METADATA_ID_HEADER]: 'sidecar~1~p.ns~ns.svc.cluster.local' } });
    expect(decodePeerMetadata(both.response.get(PEER_METADATA_HEADER)!)).toMatchObject({ ok: true, peer: { workload: 'waypoint' } });
    expect(both.response.get(PEER_METADATA_ID_HEADER)).toMatch(/^waypoint~10\.0\.0\.5~/);
    const idOnly = exchange(chain, { mesh, request: { [PEER_METADATA_ID_HEADER]: 'sidecar~1~p.ns~ns.svc.cluster.local' } });
    expect(idOnly.response.get(PEER_METADATA_HEADER)).toBeUndefined();
    expect(idOnly.response.get(PEER_METADATA_ID_HEADER)).toMatch(/^waypoint~/);
  });

  test('downstream baggage: every response says who the waypoint is', () => {
    const { chain } = make({ downstreamPropagation: ['baggage'] });
    expect(exchange(chain).response.get('baggage')).toBe(peerBaggage(selfMetadata(snap).peer));
  });

  test("peerBaggage writes Envoy's keys and order, app.* only when they differ", () => {
    expect(peerBaggage({ ...UNKNOWN, workload: 'w', service: 's', app: 'a', revision: 'r', version: 'r', namespace: 'n', name: 'p', region: 'eu', availabilityZone: 'eu-1' })).toBe(
      'k8s.pod.name=w,service.name=s,app.name=a,service.version=r,k8s.namespace.name=n,k8s.instance.name=p,cloud.region=eu,cloud.availability_zone=eu-1',
    );
    expect(peerBaggage(UNKNOWN)).toBe('');
  });
});

describe('stripIncomingPeerMetadata', () => {
  test('removes x-envoy-peer-metadata* from requests going upstream and responses going downstream', () => {
    const { chain } = make({ stripIncomingPeerMetadata: true });
    const { upstream, response, stream: s } = exchange(chain, {
      request: { [PEER_METADATA_HEADER]: ISTIO_124_HEADER, [PEER_METADATA_ID_HEADER]: 'x', 'X-Keep': 'k' },
      response: ['X-Envoy-Peer-Metadata', ISTIO_124_HEADER, 'X-Envoy-Peer-Metadata-Id', 'y', 'x-keep', 'k'],
    });
    expect(upstream.raw).toEqual(['X-Keep', 'k']);
    expect(response.raw).toEqual(['x-keep', 'k']);
    // Stripping is not believing.
    expect(downstreamPeerOf(s)).toMatchObject(CLIENT);
    expect(s.get(UPSTREAM_PEER)).toMatchObject(ECHO);
  });

  test('with propagation, only the waypoint’s own headers leave', () => {
    const { chain } = make({ stripIncomingPeerMetadata: true, upstreamPropagation: ['istio_headers'] });
    const { upstream } = exchange(chain, { request: { [PEER_METADATA_HEADER]: ISTIO_124_HEADER, [PEER_METADATA_ID_HEADER]: 'forged' } });
    expect(upstream.raw).toEqual([PEER_METADATA_HEADER, selfMetadata(snap).metadata]);
  });
});

describe('malformed input never throws and degrades to the next method (H5)', () => {
  const badBaggage = [
    '',
    'k=',
    'noequals',
    ',,,,',
    'k8s.namespace.name=a;prop=1;other',
    'k8s.namespace.name=%41%42,service.name=%zz',
    'k8s.namespace.name=caf\u00e9,service.name=\u00ff\u00fe',
    'k8s.namespace.name=a,k8s.namespace.name=b,k8s.namespace.name=',
    Array.from({ length: 200 }, (_, i) => `k${i}=v${i}`).join(','),
    `service.name=${'x'.repeat(8192)}`,
    'x'.repeat(70_000),
    '=,==,=a,a==b',
  ];
  const badHeaders = ['!!!', 'AAAA', 'CgwKBkxBQkVMUxICKgAKEwoJTkFNRVNQQUNFEgYaBGRlbW', 'Cg==', '====', 'A'.repeat(100_000), '\u00ff\u0000', ' '];

  test.each(badBaggage.map((b) => [b.slice(0, 40), b]))('CONNECT baggage %j', (_, baggage) => {
    const { chain } = make({ downstreamDiscovery: ['baggage', 'workload_discovery'], upstreamDiscovery: ['baggage', 'workload_discovery'] });
    const { conn, stream: s } = exchange(chain, { info: { baggage }, connectHeaders: { baggage } });
    const down = conn.get(DOWNSTREAM_PEER)!;
    expect(down.identity).toBe(CERT);
    // Either the baggage said something (kept as is) or workload discovery answered.
    if (down.name !== 'client') expect(down).toEqual({ ...parseBaggage(baggage), identity: CERT });
    expect(s.get(UPSTREAM_PEER)!.identity).toBe(ECHO_ID);
  });

  test.each(badHeaders.map((h) => [h.slice(0, 40), h]))('x-envoy-peer-metadata %j', (_, value) => {
    const { chain } = make({ downstreamDiscovery: ['istio_headers', 'workload_discovery'], upstreamDiscovery: ['istio_headers', 'workload_discovery'] });
    const { stream: s, upstream, response } = exchange(chain, { request: { [PEER_METADATA_HEADER]: value }, response: [PEER_METADATA_HEADER, value] });
    expect(downstreamPeerOf(s)).toMatchObject(CLIENT);
    expect(s.get(UPSTREAM_PEER)).toMatchObject(ECHO);
    expect(upstream.get(PEER_METADATA_HEADER)).toBeUndefined();
    expect(response.get(PEER_METADATA_HEADER)).toBeUndefined();
  });

  test('any baggage and header strings (property): peers always set, never a throw', () => {
    const { chain } = make({
      downstreamDiscovery: ['istio_headers', 'baggage', 'workload_discovery'],
      upstreamDiscovery: ['istio_headers', 'baggage', 'workload_discovery'],
      downstreamPropagation: ['istio_headers', 'baggage'],
      upstreamPropagation: ['istio_headers', 'baggage'],
    });
    fc.assert(
      fc.property(fc.string({ unit: 'binary', maxLength: 300 }), fc.string({ maxLength: 300 }), (baggage, header) => {
        const { conn, stream: s } = exchange(chain, { info: { baggage }, request: { [PEER_METADATA_HEADER]: header }, response: [PEER_METADATA_HEADER, header], connectHeaders: { baggage } });
        expect(conn.get(DOWNSTREAM_PEER)?.identity).toBe(CERT);
        expect(downstreamPeerOf(s)).toBeDefined();
        expect(s.get(UPSTREAM_PEER)).toBeDefined();
      }),
      { numRuns: 300 },
    );
  });

  test('decoded header values are cached: the same value gives the same peer object', () => {
    const { chain } = make({ downstreamDiscovery: ['istio_headers'] });
    const a = downstreamPeerOf(exchange(chain, { request: { [PEER_METADATA_HEADER]: ISTIO_124_HEADER } }).stream);
    const b = downstreamPeerOf(exchange(chain, { request: { [PEER_METADATA_HEADER]: ISTIO_124_HEADER } }).stream);
    expect(a).toEqual({ ...ISTIO_124_PEER, identity: CERT });
    expect(b).toBe(a);
  });

  test('many distinct header values (cache evictions) are each decoded right', () => {
    const { chain } = make({ downstreamDiscovery: ['istio_headers'] });
    for (let i = 0; i < 3000; i++) {
      const { stream: s } = exchange(chain, { request: { [PEER_METADATA_HEADER]: encodePeerMetadata({ ...UNKNOWN, namespace: `ns${i}` }) } });
      expect(downstreamPeerOf(s)!.namespace).toBe(`ns${i}`);
    }
  });
});

describe('config', () => {
  test('absent config = Istio waypoint defaults', () => {
    expect(parsePeerMetadataConfig(undefined)).toEqual({
      downstreamDiscovery: ['workload_discovery'],
      upstreamDiscovery: ['workload_discovery'],
      downstreamPropagation: [],
      upstreamPropagation: [],
      stripIncomingPeerMetadata: true,
    });
    expect(Object.isFrozen(parsePeerMetadataConfig({}))).toBe(true);
    expect(Object.isFrozen(parsePeerMetadataConfig({}).downstreamDiscovery)).toBe(true);
  });

  test("Istio's one-key object form is accepted; empty lists switch discovery off", () => {
    const c = parsePeerMetadataConfig({ downstreamDiscovery: [{ workload_discovery: {} }, { baggage: null }], upstreamDiscovery: [], upstreamPropagation: [{ istio_headers: {} }] });
    expect(c.downstreamDiscovery).toEqual(['workload_discovery', 'baggage']);
    expect(c.upstreamPropagation).toEqual(['istio_headers']);
    const { filter } = make({ downstreamDiscovery: [], upstreamDiscovery: [], stripIncomingPeerMetadata: false });
    expect(Object.keys(filter)).toEqual(['name']);
  });

  test.each([
    [{ downstreamDiscovery: ['wds'] }, /downstreamDiscovery\[0\]: unknown discovery method "wds"/],
    [{ upstreamDiscovery: ['workload_discovery', 'workload_discovery'] }, /upstreamDiscovery\[1\]: discovery method workload_discovery is listed twice/],
    [{ upstreamPropagation: ['workload_discovery'] }, /upstreamPropagation\[0\]: unknown propagation method "workload_discovery"/],
    [{ downstreamDiscovery: 'workload_discovery' }, /downstreamDiscovery/],
    [{ downstreamDiscovery: [{ istio_headers: { skip: true } }] }, /downstreamDiscovery\[0\]/],
    [{ stripIncomingPeerMetadata: 'yes' }, /stripIncomingPeerMetadata/],
    [{ sharedWithUpstream: true }, /sharedWithUpstream/],
    ['on', /expected object/i],
  ])('bad config %j', (raw, message) => {
    expect(() => parsePeerMetadataConfig(raw)).toThrow(message);
  });

  test('through the registry: a config error names the filter entry', () => {
    const registry = new FilterRegistry().register(peerMetadataFactory).register({ name: 'envoy.filters.http.router', parseConfig: () => ({}), create: () => terminal('envoy.filters.http.router', [], []) });
    const err = caught(() => registry.build([{ name: 'istio.peer_metadata', config: { upstreamDiscovery: ['nope'] } }, { name: 'envoy.filters.http.router' }], env));
    expect(err.location.field).toBe('filters[0].config');
    expect(err.message).toMatch(/upstreamDiscovery\[0\]: unknown discovery method "nope"/);
    expect(registry.build([{ name: 'istio.peer_metadata' }, { name: 'envoy.filters.http.router' }], env).filters.map((f) => f.name)).toEqual(['istio.peer_metadata', 'envoy.filters.http.router']);
  });
});
