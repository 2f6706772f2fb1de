/**
 * Clients and peers that misbehave: resets mid-response, silence, ambiguous requests. Nothing may
 * stay pinned upstream and every bad request gets a clear answer. Addresses: 127.0.32.x.
 */
import fs from 'node:fs';
import http from 'node:http';
import http2 from 'node:http2';
import { afterAll, beforeAll, expect, test } from 'vitest';
import { connect, exchange, hboneSession, parseHttpResponse, readAll, type ClientIdentity } from '../helpers/hbone-client.ts';
import { identityFrom } from '../helpers/identity.ts';
import { openEntry, startTestTopology, type TestTopology } from '../helpers/topology.ts';

let topo: TestTopology;
let client: ClientIdentity;
let apps: http.Server[] = [];
/** Upstream requests whose response closed, by path (the backend saw the cancel). */
const closedUpstream: string[] = [];
const received: { url: string; host: string }[] = [];

beforeAll(async () => {
  topo = await startTestTopology(32, { backends: false, bootstrap: { http: { streamIdleTimeoutMs: 400 } } });
  apps = await Promise.all(
    ['127.0.32.11', '127.0.32.12'].map(
      (ip) =>
        new Promise<http.Server>((resolve) => {
          const s = http.createServer((req, res) => {
            received.push({ url: req.url ?? '', host: req.headers.host ?? '' });
            res.once('close', () => closedUpstream.push(req.url ?? ''));
            if (req.url === '/endless') {
              // Stream forever, as fast as the client takes it.
              const chunk = Buffer.alloc(64 * 1024, 'z');
              const pump = () => {
                while (!res.destroyed && res.write(chunk));
                if (!res.destroyed) res.once('drain', pump);
              };
              pump();
              return;
            }
            if (req.url === '/never') return; // never answers
            res.end(`ok ${req.url}`);
          });
          s.listen(8080, ip, () => resolve(s));
        }),
    ),
  );
  client = await identityFrom(topo.caDir);
});
afterAll(async () => {
  for (const a of apps) {
    a.closeAllConnections();
    a.close();
  }
  await topo?.close();
});

test('a client that resets its tunnel mid-download gets the upstream request cancelled', async () => {
  const session = await hboneSession('127.0.32.1', topo.waypoint!.addresses.hbone.port, client);
  try {
    const { stream } = await connect(session, '127.0.32.100:80');
    stream.write('GET /endless HTTP/1.1\r\nhost: echo\r\n\r\n');
    let got = 0;
    await new Promise<void>((resolve) => {
      stream.on('data', (c: Buffer) => {
        got += c.length;
        if (got > 100_000) {
          stream.pause();
          resolve();
        }
      });
    });
    // destroy(): RST_STREAM while the waypoint's writes to us are back-pressured.
    stream.destroy();
    await expect.poll(() => closedUpstream.includes('/endless'), { timeout: 10_000 }).toBe(true);
  } finally {
    session.close();
  }
});

test('a request whose upstream never answers gets 408 after the stream idle timeout and is cancelled upstream', async () => {
  const socket = await openEntry(topo);
  socket.write('GET /never HTTP/1.1\r\nhost: echo\r\n\r\n');
  const res = parseHttpResponse(await readAll(socket));
  expect(res.status).toBe(408);
  expect(res.body.toString()).toBe('stream timeout');
  await expect.poll(() => closedUpstream.includes('/never'), { timeout: 10_000 }).toBe(true);
});

test('HTTP/1.1 without Host is answered 400 and not forwarded', async () => {
  const socket = await openEntry(topo);
  socket.end('GET /no-host HTTP/1.1\r\n\r\n');
  expect(parseHttpResponse(await readAll(socket)).status).toBe(400);
  expect(received.some((r) => r.url === '/no-host')).toBe(false);
});

test('adding a second waypoint Gateway does not stop later mesh updates', async () => {
  const before = topo.waypoint!.mesh.current.version;
  const other = '---\napiVersion: gateway.networking.k8s.io/v1\nkind: Gateway\nmetadata: { name: other, namespace: demo }\nspec: { gatewayClassName: istio-waypoint }\n';
  const updated = new Promise<void>((resolve) => topo.waypoint!.mesh.subscribe(() => resolve()));
  fs.writeFileSync(topo.meshFile, fs.readFileSync(topo.meshFile, 'utf8') + other);
  await updated;
  expect(topo.waypoint!.mesh.current.version).toBeGreaterThan(before);
  expect(topo.waypoint!.mesh.current.waypoint.name).toBe('waypoint');
});

test('two Host headers are refused with 400 and never forwarded', async () => {
  const socket = await openEntry(topo);
  socket.end('GET /dup-host HTTP/1.1\r\nhost: a\r\nhost: b\r\nconnection: close\r\n\r\n');
  const res = parseHttpResponse(await readAll(socket));
  expect(res.status).toBe(400);
  expect(received.some((r) => r.url === '/dup-host')).toBe(false);
});

test('an absolute-form request target goes upstream in origin form with its authority as Host', async () => {
  const socket = await openEntry(topo);
  const res = await exchange(socket, 'http://echo.demo.svc.cluster.local/abs?q=1');
  socket.destroy();
  expect(res).toEqual({ status: 200, body: 'ok /abs?q=1' });
  expect(received.find((r) => r.url === '/abs?q=1')?.host).toBe('echo.demo.svc.cluster.local');
});

test('CONNECT inside a tunnel is answered 405', async () => {
  const socket = await openEntry(topo);
  socket.write('CONNECT 127.0.0.1:22 HTTP/1.1\r\nhost: 127.0.0.1:22\r\n\r\n');
  const res = parseHttpResponse(await readAll(socket));
  expect(res.status).toBe(405);
});

test("a mesh change that would rename the waypoint's identity is refused; the last good state stays", async () => {
  const before = topo.waypoint!.mesh.current;
  fs.writeFileSync(topo.meshFile, fs.readFileSync(topo.meshFile, 'utf8').replace('metadata: { name: waypoint, namespace: demo }', 'metadata: { name: renamed, namespace: demo }').replace('istio.io/use-waypoint: waypoint', 'istio.io/use-waypoint: renamed'));
  await new Promise((r) => setTimeout(r, 600));
  expect(topo.waypoint!.mesh.current).toBe(before);
  expect(topo.waypoint!.mesh.current.waypoint.identity).toBe('spiffe://cluster.local/ns/demo/sa/waypoint');
});
