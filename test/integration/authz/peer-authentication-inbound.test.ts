/**
 * PeerAuthentication on the `waypoint inbound` role's plaintext listeners, over real sockets
 * (istio/istio architecture/ambient/peer-authentication.md): STRICT closes a plaintext client before the app is dialed, PERMISSIVE relays it,
 * a port-level exception is honoured, a policy change applies to the next connection, and HBONE
 * CONNECTs are never refused by PeerAuthentication. Addresses: 127.0.187.x only.
 */
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { stringify } from 'yaml';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';

import { LocalCa } from '../../../src/identity/ca.ts';
import { WorkloadCertificate } from '../../../src/identity/workload-certificate.ts';
import { INBOUND_PARTS, InboundRole } from '../../../src/ztunnel/inbound.ts';
import { compileMesh } from '../../../src/state/compile.ts';
import type { MeshSnapshot } from '../../../src/state/types.ts';
import { connect, hboneSession, readAll } from '../../helpers/hbone-client.ts';
import { identityFrom, spiffe } from '../../helpers/identity.ts';
import { closeServer, listen } from '../../helpers/servers.ts';

const POD = '127.0.187.1'; // the pod IP: HBONE listener and plaintext listeners
const APP = '127.0.187.2'; // where the app listens (--forward)

function mesh(...policies: object[]): MeshSnapshot {
  const docs = [
    {
      apiVersion: 'gateway.networking.k8s.io/v1',
      kind: 'Gateway',
      metadata: { name: 'waypoint', namespace: 'foo' },
      spec: { gatewayClassName: 'istio-waypoint', listeners: [{ name: 'mesh', port: 15008, protocol: 'HBONE' }] },
    },
    { apiVersion: 'v1', kind: 'Namespace', metadata: { name: 'foo' } },
    { apiVersion: 'v1', kind: 'Pod', metadata: { name: 'web', namespace: 'foo', labels: { app: 'web' } }, spec: { serviceAccountName: 'web' }, status: { podIP: POD } },
    ...policies,
  ];
  return compileMesh({ text: docs.map((d) => stringify(d)).join('---\n'), file: 'pa-inbound-test.yaml', parts: INBOUND_PARTS });
}

const pa = (ns: string, name: string, spec: object) => ({ apiVersion: 'security.istio.io/v1', kind: 'PeerAuthentication', metadata: { name, namespace: ns }, spec });

/** Send `ping` over plain TCP, half-close, read until the end: the echoed bytes, or '' when refused. */
function plain(port: number): Promise<{ data: string; error?: string }> {
  return new Promise((resolve) => {
    const chunks: Buffer[] = [];
    const s = net.connect({ host: POD, port, allowHalfOpen: true });
    s.on('connect', () => s.end('ping'));
    s.on('data', (c: Buffer) => chunks.push(c));
    s.on('error', (e: NodeJS.ErrnoException) => resolve({ data: Buffer.concat(chunks).toString(), error: e.code }));
    s.on('close', () => resolve({ data: Buffer.concat(chunks).toString() }));
  });
}

describe('waypoint inbound --plaintext with PeerAuthentication', () => {
  let dir: string;
  let cert: WorkloadCertificate;
  let inbound: InboundRole;
  const apps: net.Server[] = [];
  const appSockets = new Set<net.Socket>();
  let appConnections = 0;
  const state: { current: MeshSnapshot | undefined } = { current: undefined };

  beforeAll(async () => {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'wp-pa-inbound-'));
    const ca = await LocalCa.init(dir, 'cluster.local');
    cert = await WorkloadCertificate.start(ca, 'spiffe://cluster.local/ns/foo/sa/web', 3_600_000);
    for (const port of [8080, 9090]) {
      const srv = net.createServer({ allowHalfOpen: true }, (s) => {
        appConnections++;
        appSockets.add(s);
        s.on('error', () => undefined);
        s.pipe(s);
      });
      apps.push(await listen(srv, APP, port));
    }
    inbound = await InboundRole.start({ listen: `${POD}:15008`, certificate: cert, forward: APP, mesh: state, plaintext: [`${POD}:8080`, `${POD}:9090`] });
  });

  afterAll(async () => {
    await inbound?.close();
    for (const a of apps) await closeServer(a, appSockets);
    cert?.close();
    fs.rmSync(dir, { recursive: true, force: true });
  });

  test('listeners are bound where asked', () => {
    expect(inbound.plaintextAddresses.map((a) => `${a.address}:${a.port}`)).toEqual([`${POD}:8080`, `${POD}:9090`]);
  });

  test('no mesh state / no PeerAuthentication: PERMISSIVE, plaintext relayed to the app on the same port', async () => {
    state.current = undefined;
    expect(await plain(8080)).toEqual({ data: 'ping' });
    state.current = mesh();
    expect(await plain(9090)).toEqual({ data: 'ping' });
  });

  test('mesh-wide STRICT: a plaintext client is closed and the app is never dialed', async () => {
    state.current = mesh(pa('istio-system', 'default', { mtls: { mode: 'STRICT' } }));
    const before = appConnections;
    const r = await plain(8080);
    expect(r.data).toBe('');
    expect(appConnections).toBe(before);
  });

  test('namespace PERMISSIVE under a mesh STRICT lets it through; DISABLE behaves as PERMISSIVE', async () => {
    state.current = mesh(pa('istio-system', 'default', { mtls: { mode: 'STRICT' } }), pa('foo', 'default', { mtls: { mode: 'PERMISSIVE' } }));
    expect(await plain(8080)).toEqual({ data: 'ping' });
    state.current = mesh(pa('istio-system', 'default', { mtls: { mode: 'STRICT' } }), pa('foo', 'web', { selector: { matchLabels: { app: 'web' } }, mtls: { mode: 'DISABLE' } }));
    expect(await plain(8080)).toEqual({ data: 'ping' });
  });

  test('port-level override: STRICT workload with port 9090 PERMISSIVE', async () => {
    state.current = mesh(pa('foo', 'web', { selector: { matchLabels: { app: 'web' } }, mtls: { mode: 'STRICT' }, portLevelMtls: { 9090: { mode: 'PERMISSIVE' } } }));
    expect((await plain(8080)).data).toBe('');
    expect(await plain(9090)).toEqual({ data: 'ping' });
  });

  test('port-level STRICT under a PERMISSIVE mesh', async () => {
    state.current = mesh(pa('istio-system', 'default', { mtls: { mode: 'PERMISSIVE' } }), pa('foo', 'web', { selector: { matchLabels: { app: 'web' } }, portLevelMtls: { 9090: { mode: 'STRICT' } } }));
    expect(await plain(8080)).toEqual({ data: 'ping' });
    expect((await plain(9090)).data).toBe('');
  });

  test('HBONE is always mTLS: a STRICT workload still accepts CONNECTs', async () => {
    state.current = mesh(pa('istio-system', 'default', { mtls: { mode: 'STRICT' } }));
    const session = await hboneSession(POD, 15008, await identityFrom(dir, spiffe('demo', 'sleep')));
    try {
      const { status, stream } = await connect(session, `${POD}:8080`);
      expect(status).toBe(200);
      stream.end('hbone');
      expect((await readAll(stream)).toString()).toBe('hbone');
    } finally {
      session.close();
    }
  });
});
