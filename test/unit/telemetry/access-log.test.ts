/**
 * The access log: golden TEXT and JSON lines (Istio's EnvoyTextLogFormat / EnvoyJSONLogFormatIstio)
 * for a proxied request, a local reply, a TCP tunnel and IPv6 addresses; the file sink; and the
 * filter (override vs. live MeshConfig, TCP-only connection lines, last to run, never throws).
 */
import { spawnSync } from 'node:child_process';
import { mkdtemp, readFile, rm, stat } from 'node:fs/promises';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, test, vi } from 'vitest';
import { ConnectionContext, FilterChain, sendLocalReply, type ConnectInfo, type Filter, type StreamContext } from '../../../src/pipeline/index.ts';
import type { MeshConfig, MeshSnapshot, Target } from '../../../src/state/types.ts';
import { DEFAULT_MESH_CONFIG } from '../../../src/state/mesh-config.ts';
import {
  AccessLogFilter,
  AccessLogSink,
  AccessLogSinks,
  entryFromConnection,
  entryFromStream,
  formatJson,
  formatText,
  type AccessLogOverride,
} from '../../../src/telemetry/access-log.ts';
import { log } from '../../../src/util/log.ts';
import { INFO, fakeStream, terminal } from '../pipeline/fakes.ts';

const START = Date.UTC(2025, 0, 2, 3, 4, 5, 678); // 2025-01-02T03:04:05.678Z
const T0 = 1000; // monotonic ms at start
const CLUSTER = 'inbound-vip|80|http|echo.demo.svc.cluster.local';

/** Test-only: set a readonly field the constructor filled from the clock. */
function pin<T extends object>(o: T, fields: Partial<Record<keyof T, unknown>>): T {
  for (const [k, v] of Object.entries(fields)) Object.defineProperty(o, k, { value: v, writable: true });
  return o;
}

function request(method: string, url: string, headers: Record<string, string>, httpVersion = '1.1'): IncomingMessage {
  return { httpVersion, method, url, headers } as unknown as IncomingMessage;
}

/** A response stand-in good enough for sendLocalReply (respond → writeHead → end). */
function response(): ServerResponse {
  return { headersSent: false, destroyed: false, writeHead() {}, end() {} } as unknown as ServerResponse;
}

const chain = new FilterChain([terminal('router', [], [])]);

function connection(info: ConnectInfo = INFO): ConnectionContext {
  return pin(new ConnectionContext(info, {} as MeshSnapshot, {} as Target, 'HTTP'), { startTime: START, startMonotonic: T0 });
}

/** A proxied GET that got 200 from 10.244.0.11:8080. */
function proxiedGet(conn = connection()): StreamContext {
  const s = fakeStream(
    chain,
    request('GET', '/api/v1?x=1', {
      host: 'echo.demo.svc.cluster.local',
      'user-agent': 'curl/8.5.0',
      'x-forwarded-for': '10.0.0.9',
      'x-request-id': 'from-client',
    }),
    response(),
    conn,
  );
  pin(s, { startTime: START, startMonotonic: T0 });
  s.requestId = 'f21ebd42-6770-4aa5-88d4-e56118165a7d';
  s.responseCode = 200;
  s.responseCodeDetails = 'via_upstream';
  s.bytesReceived = 12;
  s.bytesSent = 345;
  s.upstreamHost = '10.244.0.11:8080';
  s.upstreamCluster = CLUSTER;
  s.upstreamResponseMonotonic = T0 + 4.9;
  return s;
}

describe('formatting (golden lines)', () => {
  test('a proxied request, TEXT', () => {
    expect(formatText(entryFromStream(proxiedGet(), T0 + 12.7))).toBe(
      '[2025-01-02T03:04:05.678Z] "GET /api/v1?x=1 HTTP/1.1" 200 - via_upstream - "-" 12 345 12 4 "10.0.0.9" "curl/8.5.0" ' +
        `"f21ebd42-6770-4aa5-88d4-e56118165a7d" "echo.demo.svc.cluster.local" "10.244.0.11:8080" ${CLUSTER} - 10.96.0.10:8080 10.0.0.1:40000 - default\n`,
    );
  });

  test('a proxied request, JSON: Istio keys sorted, numbers as numbers, unknown as null, request_id', () => {
    const line = formatJson(entryFromStream(proxiedGet(), T0 + 12.7));
    expect(line).toBe(
      '{"authority":"echo.demo.svc.cluster.local","bytes_received":12,"bytes_sent":345,"connection_termination_details":null,' +
        '"downstream_local_address":"10.96.0.10:8080","downstream_remote_address":"10.0.0.1:40000","duration":12,"method":"GET",' +
        '"path":"/api/v1?x=1","protocol":"HTTP/1.1","request_id":"f21ebd42-6770-4aa5-88d4-e56118165a7d","requested_server_name":null,' +
        '"response_code":200,"response_code_details":"via_upstream","response_flags":"-","route_name":"default",' +
        `"start_time":"2025-01-02T03:04:05.678Z","upstream_cluster":"${CLUSTER}","upstream_host":"10.244.0.11:8080",` +
        '"upstream_local_address":null,"upstream_service_time":"4","upstream_transport_failure_reason":null,' +
        '"user_agent":"curl/8.5.0","x_forwarded_for":"10.0.0.9"}\n',
    );
    // Exactly the key set of Istio's EnvoyJSONLogFormatIstio.
    expect(Object.keys(JSON.parse(line)).sort()).toEqual(
      [
        'start_time', 'route_name', 'method', 'path', 'protocol', 'response_code', 'response_flags', 'response_code_details',
        'connection_termination_details', 'bytes_received', 'bytes_sent', 'duration', 'upstream_service_time', 'x_forwarded_for',
        'user_agent', 'request_id', 'authority', 'upstream_host', 'upstream_cluster', 'upstream_local_address',
        'downstream_local_address', 'downstream_remote_address', 'requested_server_name', 'upstream_transport_failure_reason',
      ].sort(),
    );
  });

  test('the client x-request-id is used when the router has not set one; absent headers print - / null', () => {
    const s = fakeStream(chain, request('POST', '/p', { host: 'h', 'x-request-id': 'abc' }), response(), connection());
    pin(s, { startTime: START, startMonotonic: T0 });
    const e = entryFromStream(s, T0);
    expect(e.requestId).toBe('abc');
    expect(formatText(e)).toContain('"-" "-" "abc" "h" "-"');
    expect(JSON.parse(formatJson(e))).toMatchObject({ user_agent: null, x_forwarded_for: null, upstream_service_time: null, upstream_host: null, response_code: 0 });
  });

  test('a local reply with flags (503 UH, no upstream host), TEXT and JSON', () => {
    const s = fakeStream(chain, request('GET', '/', { host: 'echo' }), response(), connection());
    pin(s, { startTime: START, startMonotonic: T0 });
    s.requestId = 'r-1';
    sendLocalReply(s, undefined, undefined, 'UH', 'no_healthy_upstream');
    s.addFlag('DC');
    expect(formatText(entryFromStream(s, T0 + 1))).toBe(
      '[2025-01-02T03:04:05.678Z] "GET / HTTP/1.1" 503 UH,DC no_healthy_upstream - "-" 0 19 1 - "-" "-" "r-1" "echo" "-" - - 10.96.0.10:8080 10.0.0.1:40000 - default\n',
    );
    expect(JSON.parse(formatJson(entryFromStream(s, T0 + 1)))).toMatchObject({
      response_code: 503,
      response_flags: 'UH,DC',
      response_code_details: 'no_healthy_upstream',
      bytes_sent: 19,
      upstream_host: null,
      upstream_cluster: null,
      route_name: 'default',
    });
  });

  test('no route (NR): route name unknown; details with spaces are kept positional as Envoy does', () => {
    // (An absolute-form target reaches the log in origin form: the connection manager converts it, test/unit/inner-http.)
    const s = fakeStream(chain, request('GET', '/x?y', { host: 'echo.demo' }, '1.0'), response(), connection());
    pin(s, { startTime: START, startMonotonic: T0 });
    sendLocalReply(s, 404, '', 'NR', 'route not found');
    const e = entryFromStream(s, T0);
    expect(e.routeName).toBeNull();
    expect(e.responseCodeDetails).toBe('route_not_found');
    expect(formatText(e)).toMatch(/^\[2025-01-02T03:04:05\.678Z\] "GET \/x\?y HTTP\/1\.0" 404 NR route_not_found - "-" 0 0 0 - /);
    expect(formatText(e).endsWith(' - -\n')).toBe(true);
  });

  test('a TCP tunnel: Envoy tcp_proxy line (method/path/protocol -, response code 0)', () => {
    const c = connection();
    c.innerProtocol = 'TCP';
    c.bytesReceived = 100;
    c.bytesSent = 2000;
    c.upstreamHost = '10.244.0.11:5432';
    c.upstreamCluster = 'inbound-vip|5432|tcp|db.demo.svc.cluster.local';
    const e = entryFromConnection(c, T0 + 1500.9);
    expect(formatText(e)).toBe(
      '[2025-01-02T03:04:05.678Z] "- - -" 0 - - - "-" 100 2000 1500 - "-" "-" "-" "-" "10.244.0.11:5432" ' +
        'inbound-vip|5432|tcp|db.demo.svc.cluster.local - 10.96.0.10:8080 10.0.0.1:40000 - -\n',
    );
    expect(formatJson(e)).toBe(
      '{"authority":null,"bytes_received":100,"bytes_sent":2000,"connection_termination_details":null,' +
        '"downstream_local_address":"10.96.0.10:8080","downstream_remote_address":"10.0.0.1:40000","duration":1500,"method":null,' +
        '"path":null,"protocol":null,"request_id":null,"requested_server_name":null,"response_code":0,"response_code_details":null,' +
        '"response_flags":"-","route_name":null,"start_time":"2025-01-02T03:04:05.678Z",' +
        '"upstream_cluster":"inbound-vip|5432|tcp|db.demo.svc.cluster.local","upstream_host":"10.244.0.11:5432",' +
        '"upstream_local_address":null,"upstream_service_time":null,"upstream_transport_failure_reason":null,"user_agent":null,' +
        '"x_forwarded_for":null}\n',
    );
  });

  test('a refused / failed TCP tunnel carries its flags and refusal details', () => {
    const c = connection();
    c.reject(403, 'rbac_access_denied_matched_policy[none]');
    c.responseFlags = 'UF';
    const e = entryFromConnection(c, T0);
    expect(formatText(e)).toContain('"- - -" 0 UF - rbac_access_denied_matched_policy[none] "-" 0 0 0 - ');
    expect(JSON.parse(formatJson(e)).connection_termination_details).toBe('rbac_access_denied_matched_policy[none]');
  });

  test('IPv6 addresses print as [v6]:port', () => {
    const info: ConnectInfo = { ...INFO, downstreamAddress: 'fd00::20', downstreamPort: 41000, targetIp: 'fd00::10', targetPort: 8080, authority: '[fd00::10]:8080' };
    const s = proxiedGet(connection(info));
    s.upstreamHost = '[fd00::11]:8080';
    const text = formatText(entryFromStream(s, T0 + 12.7));
    expect(text).toContain('"[fd00::11]:8080" ');
    expect(text.endsWith(` ${CLUSTER} - [fd00::10]:8080 [fd00::20]:41000 - default\n`)).toBe(true);
    const tcp = JSON.parse(formatJson(entryFromConnection(connection(info), T0)));
    expect([tcp.downstream_local_address, tcp.downstream_remote_address]).toEqual(['[fd00::10]:8080', '[fd00::20]:41000']);
  });
});

let dir: string;
beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), 'wp-access-log-'));
});
afterEach(async () => {
  vi.restoreAllMocks();
  await rm(dir, { recursive: true, force: true });
});

const lines = async (file: string): Promise<string[]> => (await readFile(file, 'utf8')).split('\n').filter(Boolean);

describe('AccessLogSink', () => {
  test('appends lines to the file; close() flushes everything queued', async () => {
    const file = join(dir, 'a.log');
    const sink = new AccessLogSink(file, log);
    for (let i = 0; i < 20_000; i++) sink.write(`line ${i}\n`);
    await sink.close();
    const got = await lines(file);
    expect(got.length).toBe(20_000);
    expect(got[19_999]).toBe('line 19999');
    // Append, not truncate.
    const again = new AccessLogSink(file, log);
    again.write('more\n');
    await again.close();
    expect((await lines(file)).length).toBe(20_001);
  });

  test('/dev/stdout writes to the process stdout (fd 1); close() flushes before exit', () => {
    const mod = new URL('../../../src/telemetry/access-log.ts', import.meta.url).href;
    const script = `const { AccessLogSink } = await import(${JSON.stringify(mod)});
      const s = new AccessLogSink('/dev/stdout', { warn() {}, debug() {} });
      for (let i = 0; i < 5000; i++) s.write('line ' + i + '\\n');
      await s.close();
      process.exit(0);`;
    const r = spawnSync(process.execPath, ['--input-type=module', '-e', script], { encoding: 'utf8', timeout: 20_000 });
    expect(r.stderr).toBe('');
    const out = r.stdout.split('\n').filter(Boolean);
    expect(out.length).toBe(5000);
    expect(out[4999]).toBe('line 4999');
  });

  test('an unopenable path never throws: the sink turns broken and drops lines', async () => {
    const warn = vi.spyOn(log, 'warn').mockImplementation(() => undefined);
    const sink = new AccessLogSink(join(dir, 'missing-dir', 'a.log'), log);
    sink.write('x\n');
    await vi.waitFor(() => expect(sink.broken).toBe(true));
    sink.write('y\n');
    await sink.close();
    expect(warn).toHaveBeenCalledTimes(1);
  });
});

/** A mesh stand-in whose MeshConfig the test can swap, as a watched mesh file does. */
function meshWith(m: Partial<MeshConfig>): { current: MeshSnapshot; set(m: Partial<MeshConfig>): void } {
  const holder = {
    current: { meshConfig: { ...DEFAULT_MESH_CONFIG, ...m } } as unknown as MeshSnapshot,
    set(next: Partial<MeshConfig>) {
      holder.current = { meshConfig: { ...DEFAULT_MESH_CONFIG, ...next } } as unknown as MeshSnapshot;
    },
  };
  return holder;
}

function filter(mesh: { current: MeshSnapshot }, override: AccessLogOverride = {}): { f: AccessLogFilter; sinks: AccessLogSinks } {
  const sinks = new AccessLogSinks(log);
  return { f: new AccessLogFilter({ override, mesh, sinks, log }), sinks };
}

const exists = (p: string) => stat(p).then(() => true, () => false);

describe('AccessLogFilter', () => {
  test('off by default (MeshConfig accessLogFile "")', async () => {
    const { f, sinks } = filter(meshWith({}));
    const use = vi.spyOn(sinks, 'use');
    f.onStreamComplete(proxiedGet());
    await sinks.close();
    expect(use).not.toHaveBeenCalled();
  });

  test('follows the live MeshConfig: on, encoding change, file change, off — without restart', async () => {
    const a = join(dir, 'a.log');
    const b = join(dir, 'b.log');
    const mesh = meshWith({ accessLogFile: a });
    const { f, sinks } = filter(mesh);
    f.onStreamComplete(proxiedGet());
    mesh.set({ accessLogFile: a, accessLogEncoding: 'JSON' });
    f.onStreamComplete(proxiedGet());
    mesh.set({ accessLogFile: b, accessLogEncoding: 'JSON' });
    f.onStreamComplete(proxiedGet());
    mesh.set({ accessLogFile: '' });
    f.onStreamComplete(proxiedGet());
    await sinks.close();
    const inA = await lines(a);
    expect(inA.length).toBe(2);
    expect(inA[0]).toMatch(/^\[2025-01-02T03:04:05\.678Z\] "GET \/api\/v1\?x=1 HTTP\/1\.1" 200 /);
    expect(JSON.parse(inA[1]).response_code).toBe(200);
    expect((await lines(b)).map((l) => JSON.parse(l).method)).toEqual(['GET']);
  });

  test('the bootstrap override wins field by field; file "" turns the log off whatever MeshConfig says', async () => {
    const meshFile = join(dir, 'mesh.log');
    const own = join(dir, 'own.log');
    const mesh = meshWith({ accessLogFile: meshFile, accessLogEncoding: 'TEXT' });

    const enc = filter(mesh, { encoding: 'JSON' });
    enc.f.onStreamComplete(proxiedGet());
    await enc.sinks.close();
    expect(JSON.parse((await lines(meshFile))[0]).path).toBe('/api/v1?x=1');

    const file = filter(mesh, { file: own });
    file.f.onStreamComplete(proxiedGet());
    await file.sinks.close();
    expect((await lines(own))[0]).toMatch(/^\[/);

    const off = filter(mesh, { file: '' });
    const use = vi.spyOn(off.sinks, 'use');
    off.f.onStreamComplete(proxiedGet());
    await off.sinks.close();
    expect(use).not.toHaveBeenCalled();
    expect((await lines(meshFile)).length).toBe(1);
  });

  test('connection lines only for TCP tunnels and refused tunnels', async () => {
    const file = join(dir, 'tcp.log');
    const { f, sinks } = filter(meshWith({ accessLogFile: file }));
    const http = connection();
    http.innerProtocol = 'HTTP/1.1';
    f.onConnectionComplete(http);
    const tcp = connection();
    tcp.innerProtocol = 'TCP';
    tcp.upstreamHost = '10.244.0.11:5432';
    f.onConnectionComplete(tcp);
    const refused = connection();
    refused.reject(503, 'no_filter_chain_match');
    f.onConnectionComplete(refused);
    await sinks.close();
    const got = await lines(file);
    expect(got.length).toBe(2);
    expect(got[0]).toContain('"- - -" 0 - - - "-" 0 0 ');
    expect(got[0]).toContain('"10.244.0.11:5432"');
    expect(got[1]).toContain(' no_filter_chain_match ');
  });

  test('first in the chain, so it logs after the other filters completed (flags they set are in the line)', async () => {
    const file = join(dir, 'order.log');
    const { f, sinks } = filter(meshWith({ accessLogFile: file }));
    const late: Filter = {
      name: 'test.sets_flag',
      onStreamComplete(s) {
        s.addFlag('UAEX');
      },
    };
    const c = new FilterChain([f, late, terminal('router', [], [])]);
    const s = fakeStream(c, request('GET', '/', { host: 'h' }), response(), connection());
    c.completeStream(s);
    await sinks.close();
    expect((await lines(file))[0]).toMatch(/" 0 UAEX - - "-" /);
  });

  test('never throws: a broken stream or an unwritable file is swallowed', async () => {
    const { f, sinks } = filter(meshWith({ accessLogFile: join(dir, 'nope', 'x.log') }));
    vi.spyOn(log, 'warn').mockImplementation(() => undefined);
    const debug = vi.spyOn(log, 'debug');
    const broken = proxiedGet();
    Object.defineProperty(broken, 'requestHeaders', { value: undefined });
    expect(() => f.onStreamComplete(broken)).not.toThrow();
    expect(debug).toHaveBeenCalledWith(expect.objectContaining({ err: expect.any(TypeError) }), 'access log: request line failed');
    for (let i = 0; i < 3; i++) expect(() => f.onStreamComplete(proxiedGet())).not.toThrow();
    await sinks.close();
    expect(await exists(join(dir, 'nope'))).toBe(false);
  });

  test('after close, lines are dropped and no file is reopened', async () => {
    const file = join(dir, 'closed.log');
    const { f, sinks } = filter(meshWith({ accessLogFile: file }));
    await sinks.close();
    f.onStreamComplete(proxiedGet());
    expect(await exists(file)).toBe(false);
  });
});
