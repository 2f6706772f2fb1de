/**
 * Bootstrap configuration: defaults, deep freezing, located parse errors, CLI overrides and file
 * loading. Error cases mark the expected line with `#!`.
 */
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { defaultBootstrap, loadBootstrap, overrideBootstrap, parseBootstrap, type BootstrapConfig } from '../../../src/config/bootstrap.ts';
import { caught } from '../../helpers/config-error.ts';

const FILE = 'waypoint.yaml';
const MiB = 1024 * 1024;


/** Line (1-based) holding the `#!` marker. */
const markedLine = (text: string): number => {
  const i = text.split('\n').findIndex((l) => l.includes('#!'));
  if (i < 0) throw new Error('test case has no #! marker');
  return i + 1;
};

const at = (cfg: unknown, path: string): unknown => path.split('.').reduce<unknown>((o, k) => (o as Record<string, unknown>)[k], cfg);

describe('defaults', () => {
  const cases: { path: string; value: unknown; why: string }[] = [
    { path: 'listeners.hbone', value: '0.0.0.0:15008', why: 'HBONE port of Istio waypoints / ztunnel' },
    { path: 'listeners.admin', value: '127.0.0.1:15020', why: 'admin on loopback, Istio agent port' },
    { path: 'listeners.readiness', value: '0.0.0.0:15021', why: 'Istio status port' },
    { path: 'upstream.hbonePort', value: 15008, why: "the destination's ztunnel inbound" },
    { path: 'upstream.loadBalancer', value: 'LEAST_REQUEST', why: "Istio's waypoint default" },
    { path: 'upstream.connectTimeoutMs', value: 10_000, why: 'ztunnel connect timeout' },
    { path: 'upstream.maxStreamsPerConnection', value: 100, why: 'ztunnel POOL_MAX_STREAMS_PER_CONNECTION' },
    { path: 'upstream.idleTimeoutMs', value: 300_000, why: 'ztunnel pool idle release' },
    { path: 'upstream.connectTimeoutEjectionMs', value: 30_000, why: "Envoy's base_ejection_time" },
    { path: 'http2.initialStreamWindowSize', value: 256 * 1024, why: 'bounds what one stalled stream holds (istio/istio#59887)' },
    { path: 'http2.initialConnectionWindowSize', value: 16 * MiB, why: 'ztunnel/Envoy connection window' },
    { path: 'http2.maxFrameSize', value: 1 * MiB, why: 'large frames for bulk tunnels' },
    { path: 'http2.maxConcurrentStreams', value: 200, why: "ztunnel inbound's; twice a ztunnel client's 100, as Node counts just-closed streams" },
    { path: 'http.protocolDetectionTimeoutMs', value: 15_000, why: "Envoy's listener_filters_timeout on Istio's waypoint" },
    { path: 'http2.keepaliveIntervalMs', value: 10_000, why: 'PING every 10 s' },
    { path: 'http2.keepaliveTimeoutMs', value: 20_000, why: '20 s PING timeout' },
    { path: 'upstream.connectResponseTimeoutMs', value: 10_000, why: "the destination ztunnel's own connect budget" },
    { path: 'http2.maxHeaderCount', value: 100, why: "Envoy's max_headers_count" },
    { path: 'http2.streamResetBurst', value: 10_000, why: 'tunnels may all end with RST_STREAM' },
    { path: 'http2.streamResetRate', value: 1_000, why: 'tunnels may all end with RST_STREAM' },
    { path: 'http2.prematureResetMinStreamLifetimeMs', value: 1_000, why: "Envoy's premature_reset_min_stream_lifetime_seconds" },
    { path: 'http2.prematureResetTotalStreamCount', value: 500, why: "Envoy's premature_reset_total_stream_count" },
    { path: 'http2.maxSessionInvalidFrames', value: 1_000, why: "Node's default" },
    { path: 'http2.maxSessionRejectedStreams', value: 100, why: "Node's default" },
    { path: 'limits.tlsHandshakeTimeoutMs', value: 10_000, why: 'no 120 s handshakes (Node default)' },
    { path: 'limits.maxConnectionsPerPeer', value: 1_000, why: 'ztunnel opens one connection per 100 streams' },
    { path: 'limits.peerStreamRate', value: 2_000, why: 'a rapid-reset attacker costs at most this' },
    { path: 'identity.certTtl', value: '24h', why: 'Istio workload cert lifetime' },
    { path: 'drain.timeoutMs', value: 5_000, why: 'drain budget on SIGTERM' },
    { path: 'drain.delayMs', value: 5_000, why: "Istio's terminationDrainDuration: accept while endpoints are removed" },
  ];
  test.each(cases)('$path defaults to $value ($why)', ({ path, value }) => {
    expect(at(defaultBootstrap(), path)).toEqual(value);
  });

  test('the filter chain defaults to Istio waypoint\'s: peer metadata, authz, stats, router', () => {
    expect(defaultBootstrap().filters).toEqual([
      { name: 'istio.peer_metadata' },
      { name: 'istio.tracing' },
      { name: 'istio.authz' },
      { name: 'istio.stats' },
      { name: 'envoy.filters.http.router' },
    ]);
  });

  test('the stream window fits in the connection window, and the session memory cap exceeds both', () => {
    const h = defaultBootstrap().http2;
    expect(h.initialStreamWindowSize).toBeLessThanOrEqual(h.initialConnectionWindowSize);
    expect(h.maxSessionMemoryMb * MiB).toBeGreaterThan(h.initialConnectionWindowSize);
  });

  const sources: { name: string; get: () => BootstrapConfig }[] = [
    { name: 'defaultBootstrap()', get: () => defaultBootstrap() },
    { name: 'an empty file', get: () => parseBootstrap('', FILE) },
    { name: 'a comment-only file', get: () => parseBootstrap('# nothing\n', FILE) },
    { name: 'loadBootstrap(undefined)', get: () => loadBootstrap(undefined) },
    { name: 'empty sections', get: () => parseBootstrap('listeners: {}\nhttp2: {}\nupstream: {}\n', FILE) },
  ];
  test.each(sources)('$name gives the defaults', ({ get }) => {
    expect(get()).toEqual(defaultBootstrap());
  });

  test.each(sources)('$name is deep-frozen', ({ get }) => {
    const cfg = get();
    expect(Object.isFrozen(cfg)).toBe(true);
    for (const section of Object.values(cfg)) expect(Object.isFrozen(section)).toBe(true);
    expect(Object.isFrozen(cfg.filters[0])).toBe(true);
    expect(() => {
      (cfg.listeners as { hbone: string }).hbone = '1.2.3.4:1';
    }).toThrow(TypeError);
    expect(() => (cfg.filters as unknown[]).push({ name: 'x' })).toThrow(TypeError);
  });
});

describe('parseBootstrap', () => {
  test('values from the file are used and unset siblings keep their defaults', () => {
    const cfg = parseBootstrap(
      `listeners:
  hbone: "[::]:15008"
  readiness: ""
upstream:
  loadBalancer: ROUND_ROBIN
http2:
  maxFrameSize: 16384
filters:
  - name: istio.stats
    config: {a: 1}
  - name: envoy.filters.http.router
`,
      FILE,
    );
    expect(cfg.listeners).toEqual({ hbone: '[::]:15008', admin: '127.0.0.1:15020', readiness: '' });
    expect(cfg.upstream.loadBalancer).toBe('ROUND_ROBIN');
    expect(cfg.upstream.hbonePort).toBe(15008);
    expect(cfg.http2.maxFrameSize).toBe(16_384);
    expect(cfg.http2.initialStreamWindowSize).toBe(256 * 1024);
    expect(cfg.filters).toEqual([{ name: 'istio.stats', config: { a: 1 } }, { name: 'envoy.filters.http.router' }]);
    expect(Object.isFrozen(cfg.filters[0].config)).toBe(true);
  });

  const errors: { name: string; yaml: string; field?: string; message: RegExp }[] = [
    {
      name: 'YAML syntax error',
      yaml: `drain:
  timeoutMs: 5
listeners: a: b #!
`,
      message: /Nested mappings/,
    },
    {
      name: 'wrong type',
      yaml: `http2:
  keepaliveIntervalMs: 1
  maxFrameSize: big #!
`,
      field: 'http2.maxFrameSize',
      message: /expected number, received string/,
    },
    {
      name: 'non-integer',
      yaml: `upstream:
  connectTimeoutMs: 1.5 #!
`,
      field: 'upstream.connectTimeoutMs',
      message: /expected int/,
    },
    {
      name: 'maxFrameSize below the HTTP/2 minimum',
      yaml: `http2:
  maxFrameSize: 100 #!
`,
      field: 'http2.maxFrameSize',
      message: />=16384/,
    },
    {
      name: 'maxFrameSize above the HTTP/2 maximum',
      yaml: `http2:
  initialStreamWindowSize: 65535
  maxFrameSize: 16777216 #!
`,
      field: 'http2.maxFrameSize',
      message: /<=16777215/,
    },
    {
      name: 'window below 65535',
      yaml: `http2:
  initialConnectionWindowSize: 1024 #!
`,
      field: 'http2.initialConnectionWindowSize',
      message: />=65535/,
    },
    {
      name: 'port out of range',
      yaml: `upstream:
  hbonePort: 70000 #!
`,
      field: 'upstream.hbonePort',
      message: /<=65535/,
    },
    {
      name: 'negative timeout',
      yaml: `drain:
  timeoutMs: -1 #!
`,
      field: 'drain.timeoutMs',
      message: />=0/,
    },
    {
      name: 'unknown load balancer',
      yaml: `upstream:
  loadBalancer: RANDOM #!
`,
      field: 'upstream.loadBalancer',
      message: /LEAST_REQUEST.*ROUND_ROBIN/,
    },
    {
      name: 'listen address without a port',
      yaml: `listeners:
  hbone: 0.0.0.0:15008
  admin: localhost #!
`,
      field: 'listeners.admin',
      message: /expected ADDR:PORT/,
    },
    {
      name: 'listen address with a six-digit port',
      yaml: `listeners:
  hbone: 0.0.0.0:150080 #!
`,
      field: 'listeners.hbone',
      message: /expected ADDR:PORT/,
    },
    {
      name: 'unbracketed IPv6 listen address',
      yaml: `listeners:
  readiness: "::1:15021" #!
`,
      field: 'listeners.readiness',
      message: /expected ADDR:PORT|Invalid input/,
    },
    {
      name: 'empty filter list',
      yaml: `drain: {}
filters: [] #!
`,
      field: 'filters',
      message: />=1 items/,
    },
    {
      name: 'filter without a name',
      yaml: `filters:
  - name: envoy.filters.http.router
  - config: {} #!
`,
      field: 'filters[1].name',
      message: /expected string/,
    },
    {
      name: 'a section of the wrong type',
      yaml: `listeners: 15008 #!
`,
      field: 'listeners',
      message: /expected object/,
    },
  ];
  test.each(errors)('$name: ConfigError with file, line and field', ({ yaml, field, message }) => {
    const err = caught(() => parseBootstrap(yaml, FILE));
    expect(err.location.file).toBe(FILE);
    expect(err.location.line).toBe(markedLine(yaml));
    expect(err.location.field).toBe(field);
    expect(err.message).toMatch(message);
    expect(String(err)).toMatch(new RegExp(`^${FILE}:${markedLine(yaml)}: `));
  });

  // Strict schema: unknown keys are refused. The error names the key and the file; see the
  // `test.fails` below for the line/field it should carry.
  const unknown: { name: string; yaml: string }[] = [
    { name: 'top level', yaml: 'drain:\n  timeoutMs: 5\nbogus: 1 #!\n' },
    { name: 'in a section', yaml: 'listeners:\n  hbone: 0.0.0.0:15008\n  bogus: 1 #!\n' },
    { name: 'in a filter entry', yaml: 'filters:\n  - name: envoy.filters.http.router\n    bogus: 1 #!\n' },
  ];
  test.each(unknown)('unknown key ($name) is a ConfigError naming the key and the file', ({ yaml }) => {
    const err = caught(() => parseBootstrap(yaml, FILE));
    expect(err.location.file).toBe(FILE);
    expect(err.location.line).toBeGreaterThanOrEqual(1);
    expect(err.message).toMatch(/Unrecognized key: "bogus"/);
  });

  // BUG (src/config/bootstrap.ts parseBootstrap): for zod's `unrecognized_keys` issue the path is
  // the parent object, so `line` points at the parent mapping (line 1 for a top-level key) and
  // `field` is the parent path ('' at top level) instead of the unknown key. Flip to `test.each`
  // once the key is appended to the path.
  test.each(unknown)('unknown key ($name) is located at its own line and field', ({ yaml }) => {
    const err = caught(() => parseBootstrap(yaml, FILE));
    expect(err.location.line).toBe(markedLine(yaml));
    expect(err.location.field).toMatch(/(^|\.)bogus$/);
  });
});

describe('accessLog', () => {
  test('unset by default: both fields follow MeshConfig (accessLogFile, accessLogEncoding)', () => {
    expect(defaultBootstrap().accessLog).toEqual({});
    expect(parseBootstrap('accessLog: {}\n', FILE).accessLog).toEqual({});
  });

  test('file and encoding are read; each may be given alone; "" (off) is kept, not treated as unset', () => {
    expect(parseBootstrap('accessLog:\n  file: /dev/stdout\n  encoding: JSON\n', FILE).accessLog).toEqual({ file: '/dev/stdout', encoding: 'JSON' });
    expect(parseBootstrap('accessLog:\n  encoding: TEXT\n', FILE).accessLog).toEqual({ encoding: 'TEXT' });
    expect(parseBootstrap('accessLog:\n  file: ""\n', FILE).accessLog).toEqual({ file: '' });
  });

  const bad: { name: string; yaml: string; field: string; message: RegExp }[] = [
    { name: 'unknown encoding', yaml: 'accessLog:\n  encoding: YAML #!\n', field: 'accessLog.encoding', message: /TEXT.*JSON/ },
    { name: 'file not a string', yaml: 'accessLog:\n  file: 7 #!\n', field: 'accessLog.file', message: /expected string/ },
  ];
  test.each(bad)('$name is a located ConfigError', ({ yaml, field, message }) => {
    const err = caught(() => parseBootstrap(yaml, FILE));
    expect(err.location).toEqual({ file: FILE, line: markedLine(yaml), field });
    expect(err.message).toMatch(message);
  });

  test('unknown keys are refused (strict)', () => {
    expect(caught(() => parseBootstrap('accessLog:\n  format: x\n', FILE)).message).toMatch(/Unrecognized key: "format"/);
  });

  test('overrideBootstrap merges accessLog like any section', () => {
    const base = parseBootstrap('accessLog:\n  encoding: JSON\n', FILE);
    expect(overrideBootstrap(base, { accessLog: { file: '/tmp/x.log' } }).accessLog).toEqual({ file: '/tmp/x.log', encoding: 'JSON' });
  });
});

describe('overrideBootstrap', () => {
  const base = parseBootstrap(
    `listeners:
  hbone: 10.0.0.1:15008
  admin: 127.0.0.1:9000
upstream:
  hbonePort: 16008
  loadBalancer: ROUND_ROBIN
filters:
  - name: istio.peer_metadata
  - name: istio.stats
  - name: envoy.filters.http.router
`,
    FILE,
  );

  test('undefined values inside a section do not override; defined ones do; siblings are kept', () => {
    const cfg = overrideBootstrap(base, { listeners: { hbone: undefined, admin: '127.0.0.1:9100', readiness: undefined } });
    expect(cfg.listeners).toEqual({ hbone: '10.0.0.1:15008', admin: '127.0.0.1:9100', readiness: '0.0.0.0:15021' });
  });

  test('an undefined section does not reset it to its defaults', () => {
    const cfg = overrideBootstrap(base, { upstream: undefined, filters: undefined });
    expect(cfg.upstream.hbonePort).toBe(16008);
    expect(cfg.upstream.loadBalancer).toBe('ROUND_ROBIN');
    expect(cfg.filters).toEqual(base.filters);
  });

  test('a partial section merges into the base section', () => {
    const cfg = overrideBootstrap(base, { upstream: { connectTimeoutMs: 500 } });
    expect(cfg.upstream).toEqual({ ...base.upstream, connectTimeoutMs: 500 });
  });

  test('arrays replace the base array instead of merging by index', () => {
    const cfg = overrideBootstrap(base, { filters: [{ name: 'envoy.filters.http.router' }] });
    expect(cfg.filters).toEqual([{ name: 'envoy.filters.http.router' }]);
  });

  test('an empty string disables the readiness listener', () => {
    expect(overrideBootstrap(base, { listeners: { readiness: '' } }).listeners.readiness).toBe('');
  });

  test('the result is deep-frozen and the base is left unchanged', () => {
    const before = structuredClone(base);
    const cfg = overrideBootstrap(base, { drain: { timeoutMs: 1 }, filters: [{ name: 'envoy.filters.http.router', config: { a: [1] } }] });
    expect(cfg.drain.timeoutMs).toBe(1);
    expect(Object.isFrozen(cfg)).toBe(true);
    expect(Object.isFrozen(cfg.drain)).toBe(true);
    expect(Object.isFrozen((cfg.filters[0].config as { a: number[] }).a)).toBe(true);
    expect(base).toEqual(before);
  });

  const invalid: { name: string; patch: Record<string, unknown>; field: string }[] = [
    { name: 'out-of-range value', patch: { http2: { maxFrameSize: 1 } }, field: 'http2.maxFrameSize' },
    { name: 'bad listen address', patch: { listeners: { hbone: 'nowhere' } }, field: 'listeners.hbone' },
    { name: 'wrong type', patch: { upstream: { hbonePort: '15008' } }, field: 'upstream.hbonePort' },
    { name: 'empty filter list', patch: { filters: [] }, field: 'filters' },
    { name: 'unknown section', patch: { bogus: { a: 1 } }, field: 'bogus' },
  ];
  test.each(invalid)('an invalid override ($name) throws a ConfigError on $field', ({ patch, field }) => {
    const err = caught(() => overrideBootstrap(base, patch));
    expect(err.location.field).toBe(field);
    expect(err.location.file).toBeUndefined();
  });
});

describe('loadBootstrap', () => {
  let dir: string;
  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'waypoint-bootstrap-'));
  });
  afterAll(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  test('a missing file throws a ConfigError naming the file', () => {
    const file = join(dir, 'missing.yaml');
    const err = caught(() => loadBootstrap(file));
    expect(err.location.file).toBe(file);
    expect(err.message).toMatch(/cannot read bootstrap config/);
    expect(err.message).toMatch(/ENOENT/);
  });

  test('a readable file is parsed', async () => {
    const file = join(dir, 'ok.yaml');
    await writeFile(file, 'drain:\n  timeoutMs: 42\n');
    const cfg = loadBootstrap(file);
    expect(cfg.drain.timeoutMs).toBe(42);
    expect(Object.isFrozen(cfg)).toBe(true);
  });

  test('errors in a file carry its path and line', async () => {
    const file = join(dir, 'bad.yaml');
    await writeFile(file, 'http2:\n  maxFrameSize: 100\n');
    const err = caught(() => loadBootstrap(file));
    expect(err.location).toEqual({ file, line: 2, field: 'http2.maxFrameSize' });
  });
});

describe('durations', () => {
  test('a duration beyond what Node timers can wait (2^31-1 ms) is refused with file, line and field', () => {
    const err = caught(() => parseBootstrap('http:\n  requestTimeoutMs: 3000000000\n', 'w.yaml'));
    expect(err.location).toMatchObject({ file: 'w.yaml', line: 2, field: 'http.requestTimeoutMs' });
    expect(err.message).toContain('2147483647');
    expect(parseBootstrap('http:\n  requestTimeoutMs: 2147483647\n', 'w.yaml').http.requestTimeoutMs).toBe(2147483647);
  });
});
