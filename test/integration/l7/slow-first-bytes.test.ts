/**
 * Protocol detection waits for a client's first bytes as long as Istio's waypoint does (Envoy's
 * default listener-filter timeout, 15 s; see waypoint-listener.ts): on an undeclared port without
 * any L7 policy, a client that sends its HTTP request 150 ms or 3 s after the CONNECT is served as
 * HTTP (the waypoint's connection manager adds `x-request-id`), not relayed as TCP, which it was
 * past 100 ms. Addresses: 127.0.13.x.
 */
import type { ClientHttp2Session } from 'node:http2';
import { afterAll, beforeAll, expect, test } from 'vitest';
import { connect, hboneSession, parseHttpResponse, readAll } from '../../helpers/hbone-client.ts';
import { identityFrom } from '../../helpers/identity.ts';
import { startTestTopology, type TestTopology } from '../../helpers/topology.ts';

const NET = 13;
let topo: TestTopology;
let session: ClientHttp2Session;

beforeAll(async () => {
  // Port name `foo`: no protocol declared, so the first bytes decide.
  topo = await startTestTopology(NET, { portName: 'foo' });
  session = await hboneSession(`127.0.${NET}.1`, topo.waypoint!.addresses.hbone.port, await identityFrom(topo.caDir));
});
afterAll(async () => {
  session?.destroy();
  await topo?.close();
});

test.each([150, 3000])('an HTTP request sent %i ms after the CONNECT is served as HTTP', async (delayMs) => {
  const { status, stream } = await connect(session, `127.0.${NET}.100:80`);
  expect(status).toBe(200);
  const all = readAll(stream);
  await new Promise((r) => setTimeout(r, delayMs));
  stream.end(`GET /late-${delayMs} HTTP/1.1\r\nhost: echo\r\nconnection: close\r\n\r\n`);
  const res = parseHttpResponse(await all);
  expect(res.status).toBe(200);
  const echoed = JSON.parse(res.body.toString()) as { url: string; headers: Record<string, string> };
  expect(echoed.url).toBe(`/late-${delayMs}`);
  // Added by the waypoint's HTTP connection manager: relayed as TCP, the request would arrive as sent.
  expect(echoed.headers['x-request-id']).toMatch(/^[0-9a-f-]{36}$/);
}, 15_000);
