/**
 * The access log end to end: a request through tunnel → waypoint → endpoint writes one Istio line.
 * Three topologies: the bootstrap override (JSON, 127.0.50.x), MeshConfig `accessLogFile` edited
 * in the watched mesh file at runtime (on, then off, 127.0.51.x), and a TCP tunnel (127.0.52.x).
 */
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, test, vi } from 'vitest';
import { parseHttpResponse, readAll } from '../helpers/hbone-client.ts';
import { openEntry, startTestTopology, type TestTopology } from '../helpers/topology.ts';

let dir: string;
beforeAll(() => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'wp-access-log-it-'));
});
afterAll(() => {
  fs.rmSync(dir, { recursive: true, force: true });
});

const readLines = (file: string): string[] => (fs.existsSync(file) ? fs.readFileSync(file, 'utf8').split('\n').filter(Boolean) : []);

/** One raw HTTP/1.1 request through the topology's entry; resolves with the status. */
async function get(topo: TestTopology, target: string): Promise<number> {
  const socket = await openEntry(topo);
  socket.write(`GET ${target} HTTP/1.1\r\nHost: echo.demo.svc.cluster.local\r\nUser-Agent: wp-access-log-test\r\nConnection: close\r\n\r\n`);
  return parseHttpResponse(await readAll(socket)).status;
}

describe('bootstrap override (JSON)', () => {
  const file = () => path.join(dir, 'override.log');
  let topo: TestTopology;
  beforeAll(async () => {
    topo = await startTestTopology(50, { bootstrap: { accessLog: { file: file(), encoding: 'JSON' } } });
  });
  afterAll(async () => {
    await topo?.close();
  });

  test('one JSON line per request with Istio fields', async () => {
    expect(await get(topo, '/hello?x=1')).toBe(200);
    const [line] = await vi.waitFor(() => {
      const l = readLines(file());
      expect(l.length).toBe(1);
      return l;
    });
    const e = JSON.parse(line);
    expect(e).toMatchObject({
      method: 'GET',
      path: '/hello?x=1',
      protocol: 'HTTP/1.1',
      response_code: 200,
      response_flags: '-',
      authority: 'echo.demo.svc.cluster.local',
      user_agent: 'wp-access-log-test',
      downstream_local_address: '127.0.50.100:80',
      route_name: 'default',
      response_code_details: 'via_upstream',
      upstream_cluster: 'inbound-vip|80|http|echo.demo.svc.cluster.local',
      bytes_received: 0,
    });
    expect(e.request_id).toMatch(/^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/);
    expect(e.bytes_sent).toBeGreaterThan(0);
    expect(e.upstream_service_time).toMatch(/^\d+$/);
    expect(Number(e.upstream_service_time)).toBeLessThanOrEqual(e.duration);
    expect(e.upstream_host).toMatch(/^127\.0\.50\.1[12]:8080$/);
    expect(e.downstream_remote_address).toMatch(/^127\.0\.50\.50:\d+$/);
    expect(typeof e.duration).toBe('number');
    expect(new Date(e.start_time).getTime()).toBeGreaterThan(Date.now() - 60_000);
  });
});

describe('MeshConfig accessLogFile, changed at runtime', () => {
  const file = () => path.join(dir, 'mesh.log');
  let topo: TestTopology;
  beforeAll(async () => {
    topo = await startTestTopology(51);
  });
  afterAll(async () => {
    await topo?.close();
  });

  /** Rewrite the `istio` ConfigMap's MeshConfig in the watched mesh file and wait for the reload. */
  async function setMeshConfig(extra: string, expectFile: string): Promise<void> {
    const text = fs.readFileSync(topo.meshFile, 'utf8').replace(/(  mesh: \|\n    trustDomain: cluster\.local\n)(    access.*\n)*/, `$1${extra}`);
    fs.writeFileSync(topo.meshFile, text);
    await vi.waitFor(() => expect(topo.waypoint!.mesh.current.meshConfig.accessLogFile).toBe(expectFile), { timeout: 5000 });
  }

  test('off by default, on after the edit (TEXT), off again after removing it', async () => {
    expect(topo.waypoint!.mesh.current.meshConfig.accessLogFile).toBe('');
    expect(await get(topo, '/before')).toBe(200);

    await setMeshConfig(`    accessLogFile: ${file()}\n`, file());
    expect(await get(topo, '/during')).toBe(200);
    const [line] = await vi.waitFor(() => {
      const l = readLines(file());
      expect(l.length).toBe(1);
      return l;
    });
    // Istio's TEXT line: [start] "GET /during HTTP/1.1" 200 - <details> - "-" <rx> <tx> <ms> <svc ms> "-" "<ua>" "<id>" "<authority>" "<upstream>" ...
    expect(line).toMatch(
      /^\[\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z\] "GET \/during HTTP\/1\.1" 200 - via_upstream - "-" 0 [1-9]\d* \d+ \d+ "-" "wp-access-log-test" "[0-9a-f-]{36}" "echo\.demo\.svc\.cluster\.local" "127\.0\.51\.1[12]:8080" inbound-vip\|80\|http\|echo\.demo\.svc\.cluster\.local - 127\.0\.51\.100:80 127\.0\.51\.50:\d+ - default$/,
    );

    await setMeshConfig('', '');
    expect(await get(topo, '/after')).toBe(200);
    // Give an (unwanted) line time to land, then check nothing was added.
    await new Promise((r) => setTimeout(r, 200));
    expect(readLines(file()).length).toBe(1);
  });
});

describe('TCP tunnel', () => {
  const file = () => path.join(dir, 'tcp.log');
  let topo: TestTopology;
  let server: net.Server;
  beforeAll(async () => {
    topo = await startTestTopology(52, { portName: 'tcp', backends: false, podIps: ['127.0.52.11'], bootstrap: { accessLog: { file: file() } } });
    server = net.createServer({ allowHalfOpen: true }, (sock) => {
      sock.on('data', (c) => sock.write(c));
      sock.on('end', () => sock.end());
    });
    await new Promise<void>((r) => server.listen(8080, '127.0.52.11', r));
  });
  afterAll(async () => {
    server?.close();
    await topo?.close();
  });

  test('one TCP line per relayed tunnel', async () => {
    const socket = net.connect({ port: topo.entry.port, host: topo.entry.host, allowHalfOpen: true });
    await new Promise((r) => socket.once('connect', r));
    socket.end('ping\n');
    expect((await readAll(socket)).toString()).toBe('ping\n');
    await vi.waitFor(() => expect(readLines(file()).length).toBe(1), { timeout: 5000 });
    const line = readLines(file())[0];
    expect(line).toMatch(
      /^\[[^\]]+\] "- - -" 0 - - - "-" 5 5 \d+ - "-" "-" "-" "-" "127\.0\.52\.11:8080" inbound-vip\|80\|tcp\|echo\.demo\.svc\.cluster\.local - 127\.0\.52\.100:80 127\.0\.52\.50:\d+ - -$/,
    );
  });
});
