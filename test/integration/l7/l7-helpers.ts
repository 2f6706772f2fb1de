/**
 * Shared pieces of the L7 tests (test/integration/l7): a recording filter (what the router did
 * per request), extra plain-TCP entries (tunnel roles) toward other authorities of a topology,
 * a client identity for raw HBONE CONNECTs, and mesh edits applied to the running waypoint.
 */
import fs from 'node:fs';
import net from 'node:net';
import type { Duplex } from 'node:stream';
import { LocalCa } from '../../../src/identity/ca.ts';
import { WorkloadCertificate } from '../../../src/identity/workload-certificate.ts';
import { FilterStatus, type FilterFactory } from '../../../src/pipeline/filter.ts';
import { TunnelRole } from '../../../src/ztunnel/tunnel.ts';
import type { ClientIdentity } from '../../helpers/hbone-client.ts';
import type { TestTopology } from '../../helpers/topology.ts';

/** One finished inner request as the chain saw it. */
export interface Rec {
  readonly path: string;
  readonly code: number;
  readonly flags: string;
  readonly details: string;
  readonly attempts: number;
  readonly upstreamHost: string;
  readonly protocol: string;
  readonly requestId: string;
}

/** A filter recording each stream at completion; `filters` goes in the bootstrap, `factory` in extraFilters. */
export function recorder() {
  const streams: Rec[] = [];
  const tunnels: { protocol: string; inner: string }[] = [];
  const factory: FilterFactory<unknown> = {
    name: 'test.l7rec',
    parseConfig: () => ({}),
    create: () => ({
      name: 'test.l7rec',
      onConnection: () => FilterStatus.Continue,
      onStreamComplete(s) {
        streams.push({
          path: s.path,
          code: s.responseCode,
          flags: s.responseFlags,
          details: s.responseCodeDetails,
          attempts: s.attempts,
          upstreamHost: s.upstreamHost,
          protocol: s.protocol,
          requestId: s.requestId,
        });
      },
      onConnectionComplete(c) {
        tunnels.push({ protocol: c.protocol, inner: c.innerProtocol });
      },
    }),
  };
  /** The record of the request whose path is `path` (waits until it completed). */
  const find = async (path: string, timeoutMs = 5000): Promise<Rec> => {
    const end = Date.now() + timeoutMs;
    for (;;) {
      const r = streams.find((s) => s.path === path);
      if (r) return r;
      if (Date.now() > end) throw new Error(`no completed stream for ${path}; have ${streams.map((s) => s.path).join(' ')}`);
      await sleep(10);
    }
  };
  return { factory, streams, tunnels, find, filters: [{ name: 'test.l7rec' }, { name: 'envoy.filters.http.router' }] };
}

export const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

/** A client workload identity (`ns/demo/sa/client`) from the topology's CA, for raw CONNECTs. */
export async function clientIdentity(topo: TestTopology): Promise<ClientIdentity> {
  const ca = await LocalCa.load(topo.caDir);
  const leaf = await ca.issue('spiffe://cluster.local/ns/demo/sa/client', 3600_000);
  return { certPem: leaf.certPem, keyPem: leaf.keyPem, caPem: ca.rootCertPem };
}

/**
 * Another plain-TCP entry into the topology's waypoint (a source ztunnel stand-in) whose
 * CONNECTs carry `authority`, bound to the client pod IP `127.0.<net>.50`. Closed by the returned close().
 */
export async function extraEntry(topo: TestTopology, net4: number, authority: string): Promise<{ host: string; port: number; close(): Promise<void> }> {
  const ca = await LocalCa.load(topo.caDir);
  const cert = await WorkloadCertificate.start(ca, 'spiffe://cluster.local/ns/demo/sa/client', 3600_000);
  const tunnel = await TunnelRole.start({
    listen: `127.0.${net4}.50:0`,
    to: `127.0.${net4}.1:${topo.waypoint!.addresses.hbone.port}`,
    authority,
    certificate: cert,
    expectSan: 'spiffe://cluster.local/ns/demo/sa/waypoint',
    bind: `127.0.${net4}.50`,
    mesh: topo.waypoint!.mesh,
  });
  return {
    host: tunnel.address.address,
    port: tunnel.address.port,
    close: async () => {
      await tunnel.close();
      cert.close();
    },
  };
}

/** Append YAML documents to the topology's mesh file and make the waypoint apply them now. */
export async function addToMesh(topo: TestTopology, yaml: string): Promise<void> {
  const text = fs.readFileSync(topo.meshFile, 'utf8');
  fs.writeFileSync(topo.meshFile, `${text}---\n${yaml}`);
  await topo.waypoint!.mesh.reload();
}

/** A Service in namespace demo selecting the topology's pods (`app: echo`). */
export function serviceYaml(name: string, vip: string, portName: string, port: number, targetPort: number): string {
  return `apiVersion: v1
kind: Service
metadata: { name: ${name}, namespace: demo }
spec:
  clusterIP: "${vip}"
  selector: { app: echo }
  ports: [{ name: ${portName}, port: ${port}, targetPort: ${targetPort} }]
`;
}

/** Listen a net/http/http2 server on `ip:port`. */
export function listen(server: net.Server, ip: string, port: number): Promise<void> {
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, ip, () => {
      server.off('error', reject);
      resolve();
    });
  });
}

/** Close a server and every connection it holds. */
export function closeServer(server: net.Server & { closeAllConnections?: () => void }, sockets?: Set<net.Socket>): Promise<void> {
  server.closeAllConnections?.();
  for (const s of sockets ?? []) s.destroy();
  return new Promise((r) => server.close(() => r()));
}

/** Track a server's sockets (for a hard close). */
export function track(server: net.Server): Set<net.Socket> {
  const set = new Set<net.Socket>();
  server.on('connection', (s: net.Socket) => {
    set.add(s);
    s.once('close', () => set.delete(s));
  });
  return set;
}

/**
 * A server-first backend (MySQL/SMTP style): writes an ~80-byte greeting on accept, then answers
 * the client's first line with `reply:<line>` and closes.
 */
export function serverFirst(): { server: net.Server; sockets: Set<net.Socket>; greeting: string } {
  const greeting = `220 server-first.example ESMTP ready ${'x'.repeat(40)}\r\n`;
  const server = net.createServer({ allowHalfOpen: true }, (s) => {
    s.on('error', () => {});
    s.write(greeting);
    let acc = '';
    s.on('data', (c: Buffer) => {
      acc += c.toString();
      const eol = acc.indexOf('\n');
      if (eol >= 0) s.end(`reply:${acc.slice(0, eol).trim()}\r\n`);
    });
  });
  return { server, sockets: track(server), greeting };
}

/**
 * Drive the G1 exchange on `socket` (a plain TCP connection or a CONNECT stream): wait for the
 * greeting without sending anything, reply, then read until the end. Resolves with what was seen.
 */
export function serverFirstExchange(socket: Duplex, greetingLength: number): Promise<{ greeting: string; rest: string; ended: boolean }> {
  return new Promise((resolve, reject) => {
    let acc = '';
    let greeting: string | undefined;
    socket.on('data', (c: Buffer) => {
      acc += c.toString();
      if (greeting === undefined && acc.length >= greetingLength) {
        greeting = acc.slice(0, greetingLength);
        acc = acc.slice(greetingLength);
        socket.write('HELO client\r\n');
      }
    });
    socket.once('end', () => resolve({ greeting: greeting ?? '', rest: acc, ended: true }));
    socket.once('error', reject);
  });
}
