/**
 * Shared pieces of the tracing tests: a loopback topology whose mesh carries MeshConfig
 * telemetry settings and Telemetry objects, one HTTP/1.1 GET through a tunnel entry (the echo
 * app answers with the headers it got), and waiting for spans at the in-process collector.
 */
import net from 'node:net';
import { stringify } from 'yaml';
import { expect, vi } from 'vitest';
import { topologyMesh, type TopologyOptions } from '../../../src/demo/topology.ts';
import { parseHttpResponse, readAll } from '../../helpers/hbone-client.ts';
import { meshText, type Doc } from '../../helpers/mesh.ts';
import type { OtlpReceiver, ReceivedSpan } from '../../helpers/otlp-receiver.ts';
import { startTestTopology, type TestTopology } from '../../helpers/topology.ts';

// Spans leave the waypoint's batch at once rather than after the SDK's 5 s (read when a collector starts).
process.env.OTEL_BSP_SCHEDULE_DELAY = '10';

/** Start a topology in 127.0.<n>.x whose MeshConfig also holds `meshConfig` and whose mesh has `docs`. */
export async function tracedTopology(n: number, meshConfig: object, docs: readonly Doc[], extra: Partial<TopologyOptions> = {}): Promise<TestTopology> {
  const b = `127.0.${n}`;
  const base: TopologyOptions = { dir: '', waypointIp: `${b}.1`, vip: `${b}.100`, podIps: [`${b}.11`], clientIp: `${b}.50`, tunnelListen: `${b}.50:0`, admin: `${b}.1:0`, ...extra };
  const extraConfig = stringify(meshConfig, { lineWidth: 0 })
    .split('\n')
    .filter(Boolean)
    .map((l) => `    ${l}\n`)
    .join('');
  const mesh = topologyMesh(base).replace('    trustDomain: cluster.local\n', `    trustDomain: cluster.local\n${extraConfig}`);
  if (mesh.indexOf(extraConfig) < 0) throw new Error('tracedTopology: the MeshConfig block moved');
  return startTestTopology(n, { podIps: base.podIps, ...extra, meshText: docs.length ? `${mesh}---\n${meshText(...docs)}` : mesh });
}

/** An `opentelemetry` extension provider toward the receiver. */
export function otelProvider(name: string, host: string, port: number, http: boolean, more: object = {}): object {
  return { name, opentelemetry: { service: host, port, ...(http ? { http: { path: '/v1/traces' } } : {}), ...more } };
}

/** What a GET through a tunnel entry returned: status, and the request headers the echo app saw. */
export interface Seen {
  readonly status: number;
  readonly headers: Record<string, string>;
}

/** One HTTP/1.1 GET through the plain-TCP entry at `entry` with extra request headers. */
export async function get(entry: { host: string; port: number }, path: string, headers: Record<string, string> = {}): Promise<Seen> {
  const socket = net.connect(entry.port, entry.host);
  await new Promise((r) => socket.once('connect', r));
  const extra = Object.entries(headers)
    .map(([k, v]) => `${k}: ${v}\r\n`)
    .join('');
  socket.write(`GET ${path} HTTP/1.1\r\nHost: echo.demo.svc.cluster.local\r\nUser-Agent: tracing-test\r\n${extra}Connection: close\r\n\r\n`);
  const r = parseHttpResponse(await readAll(socket));
  const json = r.headers['content-type'] === 'application/json' ? (JSON.parse(r.body.toString()) as { headers: Record<string, string> }) : { headers: {} };
  return { status: r.status, headers: json.headers };
}

/** The spans of trace `traceId`, once `count` have arrived. */
export async function spansOf(rx: OtlpReceiver, traceId: string, count = 1): Promise<ReceivedSpan[]> {
  return vi.waitFor(
    () => {
      const got = rx.spans.filter((s) => s.traceId === traceId);
      expect(got.length).toBeGreaterThanOrEqual(count);
      return got;
    },
    { timeout: 5000, interval: 20 },
  );
}

/** Parse a `traceparent` value. */
export function traceparent(v: string | undefined): { traceId: string; spanId: string; sampled: boolean } {
  const m = /^00-([0-9a-f]{32})-([0-9a-f]{16})-(0[01])$/.exec(v ?? '');
  if (!m) throw new Error(`not a traceparent: ${JSON.stringify(v)}`);
  return { traceId: m[1], spanId: m[2], sampled: m[3] === '01' };
}

/** A fresh random trace id / span id (the client's span). */
export const randomHex = (bytes: number): string => Buffer.from(Array.from({ length: bytes }, () => Math.floor(Math.random() * 256))).toString('hex');

