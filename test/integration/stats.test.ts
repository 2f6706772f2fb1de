/**
 * `istio.stats` end to end (pitfalls H1, H2): real traffic through tunnel → waypoint → inbound →
 * app, then a scrape of `/stats/prometheus` on the admin port, each `istio_*` series compared
 * with its full expected label set written out here. HTTP and a failed request (no endpoint,
 * 503 UH), gRPC with a non-OK status and message counts, a TCP session (bytes equal to what
 * moved, closed only after both directions ended), Istio's labels without the peer filter, and
 * label sets that stay bounded under random paths and headers.
 * Addresses: 127.0.110.x – 127.0.113.x.
 */
import fs from 'node:fs';
import net from 'node:net';
import v8 from 'node:v8';
import vm from 'node:vm';
import * as grpc from '@grpc/grpc-js';
import { request } from 'undici';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { ENVOY_DEFAULT_BUCKETS } from '../../filters/stats/index.ts';
import { samplesOf, scrape, type Sample } from '../helpers/prometheus.ts';
import { startTestTopology, type TestTopology } from '../helpers/topology.ts';

const FILTERS = [{ name: 'istio.peer_metadata' }, { name: 'istio.stats', config: { tcpReportingDurationMs: 200 } }, { name: 'envoy.filters.http.router' }];

/** The client pod of the test topology (`Pod client`, label app=client, sa client, no owner). */
const SOURCE = {
  reporter: 'waypoint',
  source_workload: 'client',
  source_canonical_service: 'client',
  source_canonical_revision: 'latest',
  source_workload_namespace: 'demo',
  source_principal: 'spiffe://cluster.local/ns/demo/sa/client',
  source_app: 'client',
  source_version: 'latest',
  source_cluster: 'Kubernetes',
};
/** Pod echo-1 (labels app=echo, version=v1, sa echo, no owner) behind Service echo. */
const DEST = {
  destination_workload: 'echo-1',
  destination_workload_namespace: 'demo',
  destination_principal: 'spiffe://cluster.local/ns/demo/sa/echo',
  destination_app: 'echo',
  destination_version: 'v1',
  destination_service: 'echo.demo.svc.cluster.local',
  destination_canonical_service: 'echo',
  destination_canonical_revision: 'v1',
  destination_service_name: 'echo',
  destination_service_namespace: 'demo',
  destination_cluster: 'Kubernetes',
};
/** No endpoint answered: only the service is known. */
const NO_DEST = {
  destination_workload: 'unknown',
  destination_workload_namespace: 'unknown',
  destination_principal: 'unknown',
  destination_app: 'unknown',
  destination_version: 'unknown',
  destination_service: 'echo.demo.svc.cluster.local',
  destination_canonical_service: 'unknown',
  destination_canonical_revision: 'unknown',
  destination_service_name: 'echo',
  destination_service_namespace: 'demo',
  destination_cluster: 'unknown',
};
const HTTP_ORDER = [...Object.keys(SOURCE), ...Object.keys(DEST), 'request_protocol', 'response_code', 'grpc_response_status', 'response_flags', 'connection_security_policy'];
const TCP_ORDER = [...Object.keys(SOURCE), ...Object.keys(DEST), 'request_protocol', 'response_flags', 'connection_security_policy'];

function http(code: string, flags: string, dest: Record<string, string> = DEST, src: Record<string, string> = SOURCE): Record<string, string> {
  return { ...src, ...dest, request_protocol: 'http', response_code: code, grpc_response_status: '', response_flags: flags, connection_security_policy: 'mutual_tls' };
}

/** Every istio_* series except histogram buckets and sums (checked on their own), sorted: [name, labels, value]. */
function series(samples: Sample[]): [string, Record<string, string>, number][] {
  return samples
    .filter((s) => !s.name.endsWith('_bucket') && !s.name.endsWith('_sum'))
    .map((s): [string, Record<string, string>, number] => [s.name, s.labels, s.value])
    .sort((a, b) => (a[0] + JSON.stringify(a[1])).localeCompare(b[0] + JSON.stringify(b[1])));
}

function sorted(rows: [string, Record<string, string>, number][]): [string, Record<string, string>, number][] {
  return [...rows].sort((a, b) => (a[0] + JSON.stringify(a[1])).localeCompare(b[0] + JSON.stringify(b[1])));
}

const BUILD: [string, Record<string, string>, number] = ['istio_build', { component: 'proxy', tag: 'unknown' }, 1];

/** The three request histograms of one label set, as `series` lists them (`_count`). */
function histograms(labels: Record<string, string>, count: number): [string, Record<string, string>, number][] {
  return ['istio_request_bytes_count', 'istio_request_duration_milliseconds_count', 'istio_response_bytes_count'].map((n) => [n, labels, count]);
}

function sumOf(samples: Sample[], name: string, labels: Record<string, string>): number | undefined {
  return samples.find((s) => s.name === name && JSON.stringify(s.labels) === JSON.stringify(labels))?.value;
}

// ---------------------------------------------------------------------------------------------

describe('HTTP through peer_metadata + stats', () => {
  let topo: TestTopology;
  let base: string;
  beforeAll(async () => {
    topo = await startTestTopology(110, { podIps: ['127.0.110.11'], bootstrap: { filters: FILTERS } });
    base = `http://${topo.entry.host}:${topo.entry.port}`;
  });
  afterAll(async () => {
    await topo?.close();
  });

  const admin = () => topo.waypoint!.addresses.admin;
  let received = 0;

  test('requests, bytes and durations with the full label set (pitfall H1)', async () => {
    for (let i = 0; i < 3; i++) {
      const res = await request(`${base}/hello/${i}`);
      expect(res.statusCode).toBe(200);
      received += (await res.body.arrayBuffer()).byteLength;
    }
    const body = Buffer.alloc(1000, 'x');
    const post = await request(`${base}/upload`, { method: 'POST', body });
    expect(post.statusCode).toBe(200);
    expect((await post.body.arrayBuffer()).byteLength).toBe(1000);
    received += 1000;

    const all = samplesOf(await scrape(admin()), 'istio_');
    const ok = http('200', '-');
    expect(series(all)).toEqual(sorted([BUILD, ['istio_requests_total', ok, 4], ...histograms(ok, 4)]));
    expect(all.find((s) => s.name === 'istio_requests_total')!.order).toEqual(HTTP_ORDER);
    // Body bytes: the POST's 1000 up; what the client read down.
    expect(sumOf(all, 'istio_request_bytes_sum', ok)).toBe(1000);
    expect(sumOf(all, 'istio_response_bytes_sum', ok)).toBe(received);
    // Envoy's default buckets, cumulative, ending at the count.
    const buckets = all.filter((s) => s.name === 'istio_request_duration_milliseconds_bucket');
    expect(buckets.map((b) => b.labels.le)).toEqual([...ENVOY_DEFAULT_BUCKETS.map(String), '+Inf']);
    for (const b of buckets) expect(b.labels).toEqual({ ...ok, le: b.labels.le });
    expect(buckets.at(-1)!.value).toBe(4);
  });

  test('random paths and headers add no series and do not grow the heap', async () => {
    const gc = (() => {
      v8.setFlagsFromString('--expose-gc');
      return vm.runInNewContext('gc') as () => void;
    })();
    const burst = async (n: number) => {
      const workers = Array.from({ length: 8 }, async (_, w) => {
        for (let i = w; i < n; i += 8) {
          const r = `${Math.random().toString(36).slice(2)}${i}`;
          const res = await request(`${base}/${r}?${r}=${r}`, { headers: { 'x-random': r, 'user-agent': `ua-${r}`, host: `${r}.example`, baggage: `k8s.deployment.name=${r}` } });
          expect(res.statusCode).toBe(200);
          await res.body.dump();
        }
      });
      await Promise.all(workers);
    };
    await burst(500);
    const before = samplesOf(await scrape(admin()), 'istio_');
    gc();
    const heapBefore = v8.getHeapStatistics().used_heap_size;
    await burst(5000);
    gc();
    const heapAfter = v8.getHeapStatistics().used_heap_size;
    const after = samplesOf(await scrape(admin()), 'istio_');
    // (Compared by set difference: a failing run names a few new series instead of diffing thousands.)
    const key = (s: Sample) => s.name + JSON.stringify(s.labels);
    const known = new Set(before.map(key));
    expect(after.map(key).filter((k) => !known.has(k)).slice(0, 3)).toEqual([]);
    expect(after.length).toBe(before.length);
    expect(sumOf(after, 'istio_requests_total', http('200', '-'))).toBe(sumOf(before, 'istio_requests_total', http('200', '-'))! + 5000);
    // 5000 new label sets would hold several MB (25 labels × 4 metrics each); bounded ones hold nothing.
    expect(heapAfter - heapBefore).toBeLessThan(4 * 1024 * 1024);
  }, 120_000);

  test('a request with no endpoint: 503 UH, destination unknown but the service', async () => {
    const text = fs.readFileSync(topo.meshFile, 'utf8').replaceAll('  podIP: "127.0.110.1', '  conditions: [{ type: Ready, status: "False" }]\n  podIP: "127.0.110.1');
    const updated = new Promise<void>((resolve) => topo.waypoint!.mesh.subscribe(() => resolve()));
    fs.writeFileSync(topo.meshFile, text);
    await updated;
    const res = await request(`${base}/uh`);
    expect(res.statusCode).toBe(503);
    await res.body.dump();
    const all = samplesOf(await scrape(admin()), 'istio_');
    const uh = http('503', 'UH', NO_DEST);
    expect(series(all).filter((s) => s[1].response_code === '503')).toEqual(sorted([['istio_requests_total', uh, 1], ...histograms(uh, 1)]));
  });
});

// ---------------------------------------------------------------------------------------------

describe('gRPC through peer_metadata + stats', () => {
  const id = (b: Buffer) => b;
  const method = (name: string, responseStream: boolean) => ({
    path: `/test.Echo/${name}`,
    requestStream: false,
    responseStream,
    requestSerialize: id,
    requestDeserialize: id,
    responseSerialize: id,
    responseDeserialize: id,
  });
  const definition = { unary: method('Unary', false), fail: method('Fail', false), serverStream: method('ServerStream', true) };
  let topo: TestTopology;
  let server: grpc.Server;
  let client: grpc.Client & Record<string, (...args: unknown[]) => unknown>;

  beforeAll(async () => {
    topo = await startTestTopology(111, { portName: 'grpc', backends: false, podIps: ['127.0.111.11'], bootstrap: { filters: FILTERS } });
    server = new grpc.Server();
    server.addService(definition as unknown as grpc.ServiceDefinition, {
      unary: (call: grpc.ServerUnaryCall<Buffer, Buffer>, cb: grpc.sendUnaryData<Buffer>) => cb(null, call.request),
      fail: (_call: grpc.ServerUnaryCall<Buffer, Buffer>, cb: grpc.sendUnaryData<Buffer>) => cb({ code: grpc.status.PERMISSION_DENIED, details: 'nope' }),
      serverStream: (call: grpc.ServerWritableStream<Buffer, Buffer>) => {
        for (let i = 0; i < 7; i++) call.write(Buffer.from(String(i)));
        call.end();
      },
    });
    await new Promise<void>((resolve, reject) => server.bindAsync('127.0.111.11:8080', grpc.ServerCredentials.createInsecure(), (err) => (err ? reject(err) : resolve())));
    const Client = grpc.makeGenericClientConstructor(definition as unknown as grpc.ServiceDefinition, 'Echo');
    client = new Client(`${topo.entry.host}:${topo.entry.port}`, grpc.credentials.createInsecure()) as unknown as typeof client;
  });
  afterAll(async () => {
    client?.close();
    server?.forceShutdown();
    await topo?.close();
  });

  const unary = (name: string) =>
    new Promise<grpc.ServiceError | null>((resolve) => (client[name] as (b: Buffer, cb: (e: grpc.ServiceError | null) => void) => void).call(client, Buffer.from('m'), (err) => resolve(err)));

  test('OK and PERMISSION_DENIED calls: protocol grpc, grpc_response_status, message counts', async () => {
    for (let i = 0; i < 3; i++) expect(await unary('unary')).toBeNull();
    expect((await unary('fail'))?.code).toBe(grpc.status.PERMISSION_DENIED);
    const call = (client.serverStream as (b: Buffer) => grpc.ClientReadableStream<Buffer>).call(client, Buffer.from('go'));
    let got = 0;
    call.on('data', () => got++);
    expect((await new Promise<grpc.StatusObject>((resolve) => call.on('status', resolve))).code).toBe(grpc.status.OK);
    expect(got).toBe(7);

    // The last call's completion runs when its response closes: poll until all five are counted.
    let all: Sample[] = [];
    await expect
      .poll(async () => {
        all = samplesOf(await scrape(topo.waypoint!.addresses.admin), 'istio_');
        return all.filter((s) => s.name === 'istio_requests_total').reduce((n, s) => n + s.value, 0);
      }, { timeout: 5000 })
      .toBe(5);
    const g = (status: string) => ({ ...SOURCE, ...DEST, request_protocol: 'grpc', response_code: '200', grpc_response_status: status, response_flags: '-', connection_security_policy: 'mutual_tls' });
    const peers = { ...SOURCE, ...DEST };
    expect(series(all)).toEqual(
      sorted([
        BUILD,
        ['istio_requests_total', g('0'), 4],
        ['istio_requests_total', g('7'), 1],
        ...histograms(g('0'), 4),
        ...histograms(g('7'), 1),
        // One message per request (3 unary, 1 failed, 1 stream request); 3 + 0 + 7 answers.
        ['istio_request_messages_total', peers, 5],
        ['istio_response_messages_total', peers, 10],
      ]),
    );
    expect(all.find((s) => s.name === 'istio_request_messages_total')!.order).toEqual([...Object.keys(SOURCE), ...Object.keys(DEST)]);
  });
});

// ---------------------------------------------------------------------------------------------

describe('TCP through peer_metadata + stats (pitfall H2)', () => {
  let topo: TestTopology;
  let app: net.Server;
  /** Lets the app end its side once the test has looked at the half-closed state. */
  let release: () => void = () => {};
  const released = new Promise<void>((r) => (release = r));

  beforeAll(async () => {
    topo = await startTestTopology(112, { portName: 'tcp', backends: false, podIps: ['127.0.112.11'], bootstrap: { filters: FILTERS } });
    app = net.createServer({ allowHalfOpen: true }, (sock) => {
      sock.on('data', (c) => sock.write(c.toString().toUpperCase()));
      sock.on('end', () => void released.then(() => sock.end('BYE\n')));
    });
    await new Promise<void>((r) => app.listen(8080, '127.0.112.11', r));
  });
  afterAll(async () => {
    release();
    app?.close();
    await topo?.close();
  });

  test('opened at connect, bytes reported while open and at close equal to the bytes moved, closed after both directions ended', async () => {
    const admin = topo.waypoint!.addresses.admin;
    const tcp = { ...SOURCE, ...DEST, request_protocol: 'tcp', response_flags: '-', connection_security_policy: 'mutual_tls' };
    const counters = async () => {
      const all = samplesOf(await scrape(admin), 'istio_tcp_');
      return { all, v: Object.fromEntries(all.map((s) => [s.name.replace(/^istio_tcp_|_total$/g, ''), s.value])) };
    };
    const socket = net.connect({ port: topo.entry.port, host: topo.entry.host, allowHalfOpen: true });
    const chunks: Buffer[] = [];
    socket.on('data', (c: Buffer) => chunks.push(c));
    const ended = new Promise<void>((r) => socket.once('end', r));
    socket.write('hello\n');
    await expect.poll(() => Buffer.concat(chunks).toString(), { timeout: 5000 }).toBe('HELLO\n');

    // Periodic report (every 200 ms here, Istio's 5 s by default) while the tunnel is open.
    await expect.poll(async () => (await counters()).v, { timeout: 5000 }).toEqual({ connections_opened: 1, connections_closed: 0, sent_bytes: 6, received_bytes: 6 });

    // The client half-closes; the app still has to answer and end: not closed yet.
    socket.end('world\n');
    await expect.poll(() => Buffer.concat(chunks).toString(), { timeout: 5000 }).toBe('HELLO\nWORLD\n');
    await expect.poll(async () => (await counters()).v, { timeout: 5000 }).toEqual({ connections_opened: 1, connections_closed: 0, sent_bytes: 12, received_bytes: 12 });

    release();
    await ended;
    expect(Buffer.concat(chunks).toString()).toBe('HELLO\nWORLD\nBYE\n');
    await expect.poll(async () => (await counters()).v.connections_closed, { timeout: 5000 }).toBe(1);
    const { all } = await counters();
    expect(series(all)).toEqual(
      sorted([
        ['istio_tcp_connections_closed_total', tcp, 1],
        ['istio_tcp_connections_opened_total', tcp, 1],
        // Exactly the bytes that moved: 12 from the client, 16 to it.
        ['istio_tcp_received_bytes_total', tcp, 12],
        ['istio_tcp_sent_bytes_total', tcp, 16],
      ]),
    );
    expect(all[0].order).toEqual(TCP_ORDER);
  });
});

// ---------------------------------------------------------------------------------------------

describe('stats without peer_metadata', () => {
  let topo: TestTopology;
  beforeAll(async () => {
    topo = await startTestTopology(113, { podIps: ['127.0.113.11'], bootstrap: { filters: [{ name: 'istio.stats' }, { name: 'envoy.filters.http.router' }] } });
  });
  afterAll(async () => {
    await topo?.close();
  });

  test("Istio's labels without peer info: unknown, latest, namespace and principal from the client certificate", async () => {
    const res = await request(`http://${topo.entry.host}:${topo.entry.port}/`);
    expect(res.statusCode).toBe(200);
    await res.body.dump();
    const all = samplesOf(await scrape(topo.waypoint!.addresses.admin), 'istio_');
    const labels = http(
      '200',
      '-',
      { ...NO_DEST },
      {
        reporter: 'waypoint',
        source_workload: 'unknown',
        source_canonical_service: 'unknown',
        source_canonical_revision: 'latest',
        source_workload_namespace: 'demo',
        source_principal: 'spiffe://cluster.local/ns/demo/sa/client',
        source_app: 'unknown',
        source_version: 'unknown',
        source_cluster: 'unknown',
      },
    );
    expect(series(all)).toEqual(sorted([BUILD, ['istio_requests_total', labels, 1], ...histograms(labels, 1)]));
  });
});

describe('an endpoint outside the mesh (istio.io/dataplane-mode: none; address 127.0.54.x)', () => {
  let topo: TestTopology;
  beforeAll(async () => {
    topo = await startTestTopology(54, { podIps: ['127.0.54.11'], bootstrap: { filters: FILTERS } });
  });
  afterAll(async () => {
    await topo?.close();
  });

  test('plain TCP proves no identity: destination_principal is unknown, the rest comes from the workload', async () => {
    await Promise.all(topo.inbounds.map((i) => i.close(50)));
    const text = fs.readFileSync(topo.meshFile, 'utf8').replaceAll('labels: { app: echo, version: v1 }', 'labels: { app: echo, version: v1, istio.io/dataplane-mode: none }');
    const updated = new Promise<void>((resolve) => topo.waypoint!.mesh.subscribe(() => resolve()));
    fs.writeFileSync(topo.meshFile, text);
    await updated;
    expect([...topo.waypoint!.mesh.current.services[0].endpoints.values()][0].map((e) => e.tunnel)).toEqual(['NONE']);

    const res = await request(`http://${topo.entry.host}:${topo.entry.port}/plain`);
    expect(res.statusCode).toBe(200);
    await res.body.arrayBuffer();
    const all = samplesOf(await scrape(topo.waypoint!.addresses.admin), 'istio_requests_total');
    expect(series(all)).toEqual([['istio_requests_total', http('200', '-', { ...DEST, destination_principal: 'unknown' }), 1]]);
  });
});
