/**
 * A service port declared TCP: the waypoint relays bytes HBONE-in → HBONE-out without parsing,
 * honouring half-close, and opens the upstream tunnel before answering the CONNECT (so an
 * unreachable endpoint is a CONNECT 503). Addresses: 127.0.24.x.
 */
import net from 'node:net';
import { afterAll, beforeAll, expect, test } from 'vitest';
import { connect, hboneSession, readAll, type ClientIdentity } from '../helpers/hbone-client.ts';
import { identityFrom } from '../helpers/identity.ts';
import { startTestTopology, type TestTopology } from '../helpers/topology.ts';

let topo: TestTopology;
let client: ClientIdentity;
let tcpServers: net.Server[] = [];

beforeAll(async () => {
  topo = await startTestTopology(24, { portName: 'tcp', backends: false });
  // TCP "applications" on the pod IPs: answer each line with an uppercase copy and FIN after the client's FIN.
  tcpServers = await Promise.all(
    ['127.0.24.11', '127.0.24.12'].map(
      (ip) =>
        new Promise<net.Server>((resolve) => {
          const s = net.createServer({ allowHalfOpen: true }, (sock) => {
            sock.on('data', (c) => sock.write(c.toString().toUpperCase()));
            sock.on('end', () => sock.end('BYE\n'));
          });
          s.listen(8080, ip, () => resolve(s));
        }),
    ),
  );
  client = await identityFrom(topo.caDir);
});
afterAll(async () => {
  for (const s of tcpServers) s.close();
  await topo?.close();
});

test('bytes flow both ways and half-close is forwarded (pitfall B1)', async () => {
  const socket = net.connect({ port: topo.entry.port, host: topo.entry.host, allowHalfOpen: true });
  await new Promise((r) => socket.once('connect', r));
  socket.write('hello\n');
  socket.end('world\n');
  const got = (await readAll(socket)).toString();
  expect(got).toBe('HELLO\nWORLD\nBYE\n');
});

test('an unreachable endpoint on a TCP port is a CONNECT 503', async () => {
  for (const s of tcpServers) s.close();
  const session = await hboneSession('127.0.24.1', topo.waypoint!.addresses.hbone.port, client);
  try {
    expect((await connect(session, '127.0.24.100:80')).status).toBe(503);
  } finally {
    session.close();
  }
});
