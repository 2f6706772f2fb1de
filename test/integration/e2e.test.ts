/**
 * The waypoint's main job end to end, on real sockets: a Node HTTP client → tunnel role →
 * waypoint (HBONE in, filter chain, router) → inbound roles (HBONE out) → echo backends.
 * Addresses: 127.0.21.x.
 */
import { afterAll, beforeAll, expect, test } from 'vitest';
import { request } from 'undici';
import { FilterStatus, sendLocalReply, type FilterFactory } from '../../src/pipeline/index.ts';
import { openEntry, startTestTopology, type TestTopology } from '../helpers/topology.ts';
import { exchange, parseHttpResponse, readAll } from '../helpers/hbone-client.ts';

const seen: string[] = [];
const connectHeaders: { forwarded: string; baggage: string; traceparent: string }[] = [];
/** A test filter that denies `/deny` with a local reply and stamps every upstream request. */
const testFilter: FilterFactory<{ header: string }> = {
  name: 'test.deny_path',
  parseConfig: (raw) => ({ header: (raw as { header?: string } | undefined)?.header ?? 'x-test-filter' }),
  create: (config) => ({
    name: 'test.deny_path',
    onRequestHeaders(stream) {
      seen.push(`${stream.req.method} ${stream.req.url} peer=${stream.conn.info.peer.uri}`);
      const { forwarded, baggage, traceparent } = stream.conn.info;
      connectHeaders.push({ forwarded, baggage, traceparent });
      if (stream.req.url === '/deny') {
        sendLocalReply(stream, 403, 'denied by test filter', '-', 'test_denied');
        return FilterStatus.StopAndReply;
      }
      return FilterStatus.Continue;
    },
    onUpstreamRequest(_stream, headers) {
      headers.set(config.header, 'seen');
    },
    onResponseHeaders(stream, headers) {
      headers.set('x-upstream-host', stream.upstreamHost || 'none');
    },
  }),
};

let topo: TestTopology;
let base: string;

beforeAll(async () => {
  topo = await startTestTopology(21, {
    extraFilters: [testFilter as FilterFactory<unknown>],
    bootstrap: { filters: [{ name: 'test.deny_path', config: { header: 'x-test-filter' } }, { name: 'envoy.filters.http.router' }] },
  });
  base = `http://${topo.entry.host}:${topo.entry.port}`;
});
afterAll(async () => {
  await topo?.close();
});

test('GET through tunnel → waypoint → inbound → backend', async () => {
  const res = await request(`${base}/hello?x=1`, { headers: { host: 'echo.demo.svc.cluster.local' } });
  expect(res.statusCode).toBe(200);
  const body = (await res.body.json()) as { pod: string; url: string; headers: Record<string, string> };
  expect(body.url).toBe('/hello?x=1');
  expect(body.headers.host).toBe('echo.demo.svc.cluster.local');
  expect(body.headers['x-test-filter']).toBe('seen');
  expect(['echo-1', 'echo-2']).toContain(body.pod);
  expect(res.headers['x-upstream-host']).toMatch(/^127\.0\.21\.1[12]:8080$/);
  expect(seen.some((s) => s.startsWith('GET /hello?x=1 peer=spiffe://cluster.local/ns/demo/sa/client'))).toBe(true);
});

test("the tunnel's CONNECT carries ztunnel's forwarded, baggage and traceparent headers, kept on the connection", async () => {
  await (await request(`${base}/headers`)).body.dump();
  const h = connectHeaders[connectHeaders.length - 1];
  expect(h.forwarded).toMatch(/^for="127\.0\.21\.50:\d+"$/);
  expect(h.traceparent).toMatch(/^00-[0-9a-f]{32}-[0-9a-f]{16}-00$/);
  // The client pod (owner of the tunnel's --bind address) as ztunnel describes it.
  expect(h.baggage).toBe('k8s.cluster.name=Kubernetes,k8s.namespace.name=demo,k8s.pod.name=client,service.name=client,service.version=latest');
});

test('requests are spread over both endpoints', async () => {
  const pods = new Set<string>();
  for (let i = 0; i < 40 && pods.size < 2; i++) {
    const res = await request(`${base}/lb`);
    pods.add(String(res.headers['x-served-by']));
    await res.body.dump();
  }
  expect([...pods].sort()).toEqual(['echo-1', 'echo-2']);
});

test('POST body is streamed to the backend and back', async () => {
  const payload = Buffer.alloc(256 * 1024, 'a');
  const res = await request(`${base}/upload`, { method: 'POST', body: payload, headers: { 'content-type': 'application/octet-stream' } });
  expect(res.statusCode).toBe(200);
  const echoed = Buffer.from(await res.body.arrayBuffer());
  expect(echoed.equals(payload)).toBe(true);
});

test('a filter can answer locally; response-header filters still run', async () => {
  const res = await request(`${base}/deny`);
  expect(res.statusCode).toBe(403);
  expect(await res.body.text()).toBe('denied by test filter');
  expect(res.headers['x-upstream-host']).toBe('none');
});

test('keep-alive: several requests on one client connection', async () => {
  const socket = await openEntry(topo);
  const responses: string[] = [];
  for (let i = 0; i < 3; i++) responses.push(JSON.parse((await exchange(socket, `/ka/${i}`)).body).url);
  socket.destroy();
  expect(responses).toEqual(['/ka/0', '/ka/1', '/ka/2']);
});

test('a client that half-closes right after its request still gets the full response (pitfall B3)', async () => {
  const socket = await openEntry(topo);
  socket.end('GET /half-close HTTP/1.1\r\nhost: echo\r\nconnection: close\r\n\r\n');
  const res = parseHttpResponse(await readAll(socket));
  expect(res.status).toBe(200);
  expect(JSON.parse(res.body.toString()).url).toBe('/half-close');
});

test('hop-by-hop headers do not reach the backend', async () => {
  const socket = await openEntry(topo);
  socket.end('GET /hop HTTP/1.1\r\nhost: echo\r\nx-drop-me: 1\r\nconnection: close, x-drop-me\r\nkeep-alive: timeout=5\r\nx-keep: yes\r\n\r\n');
  const res = parseHttpResponse(await readAll(socket));
  expect(res.status).toBe(200);
  const body = JSON.parse(res.body.toString()) as { headers: Record<string, string> };
  expect(body.headers['x-keep']).toBe('yes');
  expect(body.headers['x-drop-me']).toBeUndefined();
  expect(body.headers['keep-alive']).toBeUndefined();
});

test('admin server answers readiness, config_dump and stats', async () => {
  const admin = topo.waypoint!.addresses.admin;
  const a = `http://${admin.address}:${admin.port}`;
  expect((await request(`${a}/healthz/ready`)).statusCode).toBe(200);
  const dump = (await (await request(`${a}/config_dump`)).body.json()) as { mesh: unknown; certificate: { identity: string } };
  expect(dump.certificate.identity).toBe('spiffe://cluster.local/ns/demo/sa/waypoint');
  const stats = await (await request(`${a}/stats/prometheus`)).body.text();
  expect(stats).toContain('process_cpu_user_seconds_total');
});
